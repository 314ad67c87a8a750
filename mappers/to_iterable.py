"""ToIterableDataset: run a sampler inside the DataLoader over a map-style dataset.

This is detectron2's API, kept so that code which builds its loaders around it moves over
unchanged. catmap's own loader builders do not use it: they run the sampler in the main
process through :class:`samplers.ResumableLoader`, which knows the position after every
delivered batch and so can save and restore it for any ``num_workers``. Here every worker
iterates its own copy of the sampler and keeps its share, so no process holds the position and
there is nothing to save; the two paths share no code because they share no step (one is an
IterableDataset over a sampler, the other a batch sampler plus a state queue).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils import data

from catalog.validation import check_int

__all__ = ["ToIterableDataset"]


def _shard_chunks(
    indices: Iterable[int], worker: int, num_workers: int, chunk: int
) -> Iterator[int]:
    """Yield chunks ``worker, worker + num_workers, ...`` of ``chunk`` consecutive indices."""
    it = iter(indices)
    skip_before = worker * chunk
    skip_after = (num_workers - 1 - worker) * chunk
    consume = collections.deque(maxlen=0).extend
    consume(itertools.islice(it, skip_before))
    while True:
        taken = list(itertools.islice(it, chunk))
        if not taken:
            return
        yield from taken
        if len(taken) < chunk:
            return
        consume(itertools.islice(it, skip_after + skip_before))


class ToIterableDataset(data.IterableDataset):
    """Run a sampler inside the DataLoader: an IterableDataset over ``dataset[i]`` for i in it.

    With ``num_workers = N`` each worker iterates the whole sampler and keeps every N-th chunk
    of ``shard_chunk_size`` indices, so the DataLoader, which takes batches from its workers
    in turn, yields exactly the sequence of 0 workers when its ``batch_size`` equals
    ``shard_chunk_size`` (use 1 with ``batch_size=1`` or ``batch_size=None``). The sampler
    must yield the same sequence in every worker (seeded, not drawing from global state).

    Args:
        dataset: a map-style dataset.
        sampler: an iterable of indices (finite or infinite).
        shard_sampler: shard the indices over the DataLoader's workers as described above
            (True, as in detectron2); False when the sampler already yields each worker's
            own indices.
        shard_chunk_size: how many consecutive indices a worker takes at a time.

    Example:
        >>> ds = ToIterableDataset(["a", "b", "c"], [2, 0, 1])
        >>> list(ds)
        ['c', 'a', 'b']
    """

    def __init__(
        self,
        dataset: Any,
        sampler: Iterable[int],
        shard_sampler: bool = True,
        shard_chunk_size: int = 1,
    ) -> None:
        if isinstance(dataset, data.IterableDataset):
            raise TypeError("ToIterableDataset: dataset must be map-style, got an IterableDataset")
        shard_chunk_size = check_int(shard_chunk_size, "shard_chunk_size", minimum=1,
                                     error=ValueError, where="ToIterableDataset")
        if not isinstance(sampler, Iterable):
            raise TypeError(
                f"ToIterableDataset: sampler must be an iterable of indices, got "
                f"{type(sampler).__name__}"
            )
        self.dataset = dataset
        self.sampler = sampler
        self.shard_sampler = bool(shard_sampler)
        self.shard_chunk_size = shard_chunk_size

    def __iter__(self) -> Iterator[Any]:
        info = data.get_worker_info()
        indices: Iterable[int] = iter(self.sampler)
        if self.shard_sampler and info is not None and info.num_workers > 1:
            indices = _shard_chunks(indices, info.id, info.num_workers, self.shard_chunk_size)
        dataset = self.dataset
        for index in indices:
            yield dataset[index]

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"ToIterableDataset({self.dataset!r}, sampler={self.sampler!r}, "
            f"shard_chunk_size={self.shard_chunk_size})"
        )
