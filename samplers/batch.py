"""ResumableBatchSampler: fixed-size batches of a sampler's indices, with the sampler's state."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from .errors import NotResumableError
from .sample_seed import StreamPositions
from .state import check_state, is_stateful, make_state

__all__ = ["ResumableBatchSampler", "check_batch_size"]

logger = logging.getLogger(__name__)


def check_batch_size(batch_size: Any, owner: str) -> int:
    """Validate a batch size (a positive int)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"{owner}: batch_size must be an int, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"{owner}: batch_size must be >= 1, got {batch_size}")
    return batch_size


class ResumableBatchSampler(Sampler[list[int]]):
    """Groups a sampler's indices into lists of ``batch_size``; resumable when the sampler is.

    Unlike ``torch.utils.data.BatchSampler`` it never pulls an index it does not deliver in an
    infinite stream, so its state is the sampler's state after the last delivered batch. It
    also counts the global stream position of every index (:meth:`iter_with_positions`), from
    which the loaders seed each sample's augmentations.

    Args:
        sampler: yields indices (a catmap training sampler for exact resume).
        batch_size: indices per batch.
        drop_last: drop the final incomplete batch of a finite sampler.

    Example:
        >>> from samplers import TrainingSampler
        >>> b = ResumableBatchSampler(TrainingSampler(5, shuffle=False, rank=0, world_size=1), 2)
        >>> it = iter(b); next(it), next(it), next(it)
        ([0, 1], [2, 3], [4, 0])
    """

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool = False) -> None:
        self.sampler = sampler
        self.batch_size = check_batch_size(batch_size, "ResumableBatchSampler")
        self.drop_last = bool(drop_last)
        self._positions = StreamPositions(sampler)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.iter_with_positions():
            yield [index for index, _ in batch]

    def iter_with_positions(self) -> Iterator[list[tuple[int, int]]]:
        """Batches of ``(index, global stream position)`` pairs; ``iter()`` without positions.

        Example:
            >>> from samplers import TrainingSampler
            >>> s = TrainingSampler(5, shuffle=False, rank=1, world_size=2)
            >>> next(ResumableBatchSampler(s, 2).iter_with_positions())
            [(1, 1), (3, 3)]
        """
        batch: list[tuple[int, int]] = []
        size = self.batch_size
        for pair in self._positions.draw(self.sampler):
            batch.append(pair)
            if len(batch) == size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch
        elif batch:
            logger.debug("dropped a last batch of %d indices (drop_last=True)", len(batch))

    def __len__(self) -> int:
        n = len(self.sampler)  # TypeError for endless samplers, as for any unsized sampler
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped sampler's state and the global position of the next draw, valid
        between batches."""
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"ResumableBatchSampler: {type(self.sampler).__name__} has no state_dict(); use a "
                "catmap training sampler for exact resume"
            )
        return make_state(
            "ResumableBatchSampler",
            batch_size=self.batch_size,
            position=self._positions.next,
            sampler=self.sampler.state_dict(),
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the wrapped sampler and the position count; the batch size may differ (e.g.
        another world size).

        Raises:
            SamplerStateError: malformed state (e.g. a missing or negative ``position``).
            NotResumableError: the wrapped sampler has no ``load_state_dict``.
        """
        state = check_state(state_dict, "ResumableBatchSampler", ["sampler", "position"])
        if not is_stateful(self.sampler):
            raise NotResumableError(
                f"ResumableBatchSampler: {type(self.sampler).__name__} has no load_state_dict()"
            )
        if state.get("batch_size", self.batch_size) != self.batch_size:
            logger.info(
                "ResumableBatchSampler: saved with batch size %s, continuing with %d",
                state["batch_size"],
                self.batch_size,
            )
        positions = StreamPositions(self.sampler)
        positions.load(state["position"], "ResumableBatchSampler")
        self.sampler.load_state_dict(state["sampler"])
        self._positions = positions
