"""Per-sample augmentation seeds: a sample's randomness follows its place in the global stream.

A training sampler defines one endless *global stream* of indices, sharded over ranks: rank
``r`` of ``world_size`` takes global positions ``r, r + world_size, ...``. The catmap batch
samplers count the global position of every index they draw (:class:`StreamPositions`), and
the loader turns each position into a seed, ``sample_seed(seed, position)``. The dataset
wrapper :class:`SampleSeededDataset` then maps the sample with the augmentation generator of
:mod:`mappers.random_state` seeded from it. Because the seed depends only on (seed, global
position) and not on the worker, the number of workers or the rank, the mapped sample is the
same with 0 or N workers, after a restore from ``state_dict()``, and after re-sharding to
another world size.

Only randomness drawn through ``mappers.random_state.get_generator()`` (every catmap
augmentation) follows the sample; a mapper calling ``numpy.random`` / ``random`` / ``torch``
global functions draws from the per-worker seeding of :class:`samplers.WorkerSeeder`.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from catalog.seeding import derive_seed
from mappers.random_state import use_generator

from .errors import SamplerStateError

__all__ = ["SampleSeededDataset", "StreamPositions", "sample_seed"]

logger = logging.getLogger(__name__)

#: Separates the per-sample seeds from other seeds derived from the same base seed.
_SAMPLE_STREAM_TAG = 0x5A3D


def sample_seed(seed: int, position: int) -> int:
    """The augmentation seed of the sample at global stream ``position``.

    Args:
        seed: the loader's (shared) seed.
        position: the sample's position in the global stream (rank-independent).

    Returns:
        A non-negative 63-bit int.

    Example:
        >>> sample_seed(0, 5) == sample_seed(0, 5) != sample_seed(0, 6)
        True
    """
    return derive_seed(seed, _SAMPLE_STREAM_TAG, position)


def _sampler_rank_and_world(sampler: Any) -> tuple[int, int]:
    rank = getattr(sampler, "rank", None)
    world = getattr(sampler, "world_size", None)
    if isinstance(rank, int) and isinstance(world, int) and world >= 1 and 0 <= rank < world:
        return rank, world
    return 0, 1


class StreamPositions:
    """Counts the global stream position of each index one rank draws from a sampler.

    ``next`` is the global position of rank 0's next draw (the sampler's cursor, summed over
    passes); this rank's ``k``-th draw from there lies at ``next + rank + k * world_size``.
    ``next`` is saved in batch-sampler states and re-shards with the sampler: loaded with
    another world size, the new ranks continue counting from the same global position. A
    sampler without ``rank`` / ``world_size`` attributes counts as rank 0 of 1.

    Args:
        sampler: the index sampler drawn from (its ``rank`` / ``world_size`` are read).

    Example:
        >>> from samplers import TrainingSampler
        >>> counter = StreamPositions(TrainingSampler(10, seed=0, rank=1, world_size=2))
        >>> list(counter.draw([7, 3, 5]))
        [(7, 1), (3, 3), (5, 5)]
        >>> counter.next
        6
    """

    def __init__(self, sampler: Any) -> None:
        self.rank, self.world_size = _sampler_rank_and_world(sampler)
        self.next = 0

    def draw(self, indices: Iterable[int]) -> Iterator[tuple[int, int]]:
        """Yield ``(index, global position)`` for each index, counting as it goes."""
        rank, world = self.rank, self.world_size
        for index in indices:
            position = self.next + rank
            self.next += world
            yield index, position

    def load(self, value: Any, owner: str) -> None:
        """Set ``next`` from a saved state.

        Raises:
            SamplerStateError: ``value`` is not a non-negative int.
        """
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise SamplerStateError(
                f"{owner}.load_state_dict: 'position' must be a non-negative int, got {value!r}"
            )
        self.next = int(value)


class SampleSeededDataset:
    """Maps ``(index, seed)`` keys with the augmentation generator seeded from ``seed``.

    ``ds[(i, s)]`` returns ``dataset[i]`` computed inside
    ``mappers.random_state.use_generator(np.random.default_rng(s))``; a plain int key is passed
    through unchanged. The catmap loaders send ``(index, sample_seed(seed, position))`` keys,
    so a sample's augmentations do not depend on which worker maps it. ``MapDataset``'s
    refetch keeps its own per-worker generator; a refetched record is mapped with the
    requested sample's generator.

    Args:
        dataset: a map-style dataset.

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

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

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
        with use_generator(np.random.default_rng(seed)):
            return self.dataset[index]

    def __repr__(self) -> str:
        return f"SampleSeededDataset({self.dataset!r})"
