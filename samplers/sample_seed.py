"""Global stream positions, and the dataset wrapper that maps each sample in its own scope.

A training sampler defines one endless *global stream* of indices, sharded over ranks: rank
``r`` of ``world_size`` takes global positions ``r, r + world_size, ...``. The catmap batch
samplers count the global position of every index they draw (:class:`StreamPositions`), and
the loader sends each index with its sample seed, ``sample_seed(seed, position)``. The dataset
wrapper :class:`SampleSeededDataset` maps the sample inside
``mappers.random_state.sample_scope(seed)``.

Where a sample's randomness comes from (the derivation seed -> (global position, attempt) ->
generator, MapDataset's replacements, augmentations, the global RNGs) is documented and
implemented in one place, :mod:`mappers.random_state`; ``sample_seed`` is re-exported here.
Because nothing depends on the worker, the number of workers or the rank, the mapped sample is
the same with 0 or N workers, with persistent workers, after a restore from ``state_dict()``,
and after re-sharding to another world size.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from typing import Any

from mappers.random_state import sample_scope, sample_seed

from .state_fields import MAX_POSITION, check_int

__all__ = ["SampleSeededDataset", "StreamPositions", "sample_seed"]

def _sampler_rank_and_world(sampler: Any) -> tuple[int, int]:
    rank = getattr(sampler, "rank", None)
    world = getattr(sampler, "world_size", None)
    if isinstance(rank, int) and isinstance(world, int) and world >= 1 and 0 <= rank < world:
        return rank, world
    return 0, 1


class StreamPositions:
    """Counts the global stream position of each index one rank draws from a sampler.

    ``cursor`` is the global position of rank 0's next draw (the sampler's cursor, summed over
    passes); this rank's ``k``-th draw from there lies at ``cursor + rank + k * world_size``.
    ``cursor`` is saved in batch-sampler states and re-shards with the sampler: loaded with
    another world size, the new ranks continue counting from the same global position. A
    sampler without ``rank`` / ``world_size`` attributes counts as rank 0 of 1.

    Args:
        sampler: the index sampler drawn from (its ``rank`` / ``world_size`` are read).

    Example:
        >>> from samplers import TrainingSampler
        >>> counter = StreamPositions(TrainingSampler(10, seed=0, rank=1, world_size=2))
        >>> list(counter.draw([7, 3, 5]))
        [(7, 1), (3, 3), (5, 5)]
        >>> counter.cursor
        6
    """

    def __init__(self, sampler: Any) -> None:
        self.rank, self.world_size = _sampler_rank_and_world(sampler)
        self.cursor = 0

    def draw(self, indices: Iterable[int]) -> Iterator[tuple[int, int]]:
        """Yield ``(index, global position)`` for each index, counting as it goes."""
        rank, world = self.rank, self.world_size
        for index in indices:
            position = self.cursor + rank
            self.cursor += world
            yield index, position

    def load(self, value: Any, owner: str) -> None:
        """Set ``cursor`` from a saved state.

        Raises:
            SamplerStateError: ``value`` is not an int in ``[0, 2**62)``.
        """
        self.cursor = check_int(value, "position", owner, 0, MAX_POSITION)


class SampleSeededDataset:
    """Maps ``(index, seed)`` keys, each inside ``sample_scope(seed)`` (its own randomness).

    ``ds[(i, s)]`` returns ``dataset[i]`` computed inside
    ``mappers.random_state.sample_scope(s)``: augmentations draw from the sample's generator,
    a ``MapDataset`` underneath draws its replacements from the sample's attempts, and (with
    ``seed_globals``) ``random`` / ``numpy.random`` / torch's CPU generator are seeded from
    each attempt. A plain int key is passed through unchanged. The catmap loaders send
    ``(index, sample_seed(seed, position))`` keys, so a sample does not depend on which
    worker maps it.

    Args:
        dataset: a map-style dataset.
        seed_globals: seed the global RNGs for each sample (for mappers that draw from them).

    Example:
        >>> from mappers.random_state import get_generator
        >>> class Noisy:
        ...     def __len__(self):
        ...         return 3
        ...     def __getitem__(self, index):
        ...         return float(get_generator().random())
        >>> ds = SampleSeededDataset(Noisy())
        >>> ds[(0, 7)] == ds[(2, 7)] != ds[(0, 8)]
        True
    """

    def __init__(self, dataset: Any, *, seed_globals: bool = True) -> None:
        self.dataset = dataset
        self.seed_globals = bool(seed_globals)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        if len(key) != 2:
            raise TypeError(
                f"SampleSeededDataset: a key is an index or an (index, seed) pair, got {key!r}"
            )
        index, seed = operator.index(key[0]), operator.index(key[1])
        with sample_scope(seed, seed_globals=self.seed_globals):
            return self.dataset[index]

    def __repr__(self) -> str:
        return f"SampleSeededDataset({self.dataset!r})"
