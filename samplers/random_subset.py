"""RandomSubsetTrainingSampler: train on a fixed random subset, reshuffled each pass.

The subset is the first ``k`` positions of the keyed permutation
``KeyedPermutation(size, "subset", seed_subset)``, and pass ``p`` visits subset positions in
the order of ``KeyedPermutation(k, "shuffle", seed, p)``: neither the subset nor a pass is ever
materialized (the :attr:`~RandomSubsetTrainingSampler.subset` property computes the subset on
demand), so memory does not grow with ``size`` and resume is constant time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from catalog.validation import check_float, check_positive_size

from .distributed import shared_random_seed
from .keyed_permutation import KeyedPermutation
from .pass_order import ComposedOrder, PassOrder, PermutedOrder, RangeOrder
from .state_fields import MAX_SEED, LoadNotes, check_int
from .stream import EndlessPassStream, check_seed

__all__ = ["RandomSubsetTrainingSampler"]

logger = logging.getLogger(__name__)


class RandomSubsetTrainingSampler(EndlessPassStream):
    """Endless passes over a fixed random subset of ``int(size * subset_ratio)`` records.

    Args:
        size: the number of records (a positive int).
        subset_ratio: the fraction kept, in (0, 1].
        shuffle: reshuffle the subset each pass (pass ``p`` keyed by ``(seed_shuffle, p)``);
            without shuffling every pass visits the subset in its own (random) order.
        seed_shuffle: the shared seed of the pass order (None: drawn and shared, as in
            :class:`TrainingSampler`).
        seed_subset: the shared seed choosing the subset (None: drawn and shared).
        rank: this process's rank (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Raises:
        TypeError: ``size`` is not an int or ``subset_ratio`` not a number.
        ValueError: ``subset_ratio`` outside (0, 1], or the subset would be empty.

    Example:
        >>> import itertools
        >>> s = RandomSubsetTrainingSampler(10, 0.5, seed_shuffle=1, seed_subset=2,
        ...                                 rank=0, world_size=1)
        >>> len(set(itertools.islice(s, 50)))
        5
    """

    def __init__(
        self,
        size: int,
        subset_ratio: float,
        shuffle: bool = True,
        seed_shuffle: int | None = None,
        seed_subset: int | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        owner = "RandomSubsetTrainingSampler"
        self._size = check_positive_size(size, where=owner)
        ratio = check_float(subset_ratio, "subset_ratio", above=0, maximum=1, where=owner)
        self._ratio = ratio
        self._subset_size = int(self._size * ratio)
        if self._subset_size < 1:
            raise ValueError(
                f"{owner}: int({self._size} * {ratio}) = 0 records; choose a larger subset_ratio"
            )
        self._shuffle = bool(shuffle)
        seed_subset = check_seed(seed_subset, "seed_subset", owner)
        super().__init__(seed=seed_shuffle, rank=rank, world_size=world_size)
        self._seed_subset = shared_random_seed() if seed_subset is None else seed_subset
        self._subset = self._choose_subset(self._seed_subset)
        logger.info(
            "%s: training on %d of %d records (ratio %.3f)",
            owner,
            self._subset_size,
            self._size,
            ratio,
        )

    def _choose_subset(self, seed: int) -> PermutedOrder:
        """The subset as an order: position ``j < k`` of the subset's keyed permutation."""
        return PermutedOrder(KeyedPermutation(self._size, "subset", seed))

    @property
    def dataset_size(self) -> int:
        """The number of records indices are drawn from."""
        return self._size

    @property
    def subset(self) -> np.ndarray:
        """The chosen record indices, in the subset's own order (an int64 array computed on
        each call: O(k))."""
        return self._subset.slice(0, self._subset_size)

    @property
    def seed_subset(self) -> int:
        """The seed the subset was chosen with."""
        return self._seed_subset

    def _make_pass(self, pass_index: int) -> PassOrder:
        if not self._shuffle:
            return ComposedOrder(RangeOrder(self._subset_size), self._subset)
        shuffle = KeyedPermutation(self._subset_size, "shuffle", self._seed, pass_index)
        return ComposedOrder(PermutedOrder(shuffle), self._subset)

    def _extra_state(self) -> dict[str, Any]:
        return {"seed_subset": self._seed_subset}

    def _config(self) -> dict[str, Any]:
        return {
            "size": self._size,
            "subset_ratio": self._ratio,
            "subset_size": self._subset_size,
            "shuffle": self._shuffle,
        }

    def _legacy_config(self) -> dict[str, Any]:
        return {"size": self._size, "subset_ratio": self._ratio, "shuffle": self._shuffle}

    def _pass_length(self, seed: int, pass_index: int, extra: Any) -> int:
        return self._subset_size

    def _constant_pass_length(self) -> int | None:
        return self._subset_size

    def _prepare_extra(self, state: Mapping[str, Any], *, strict: bool, notes: LoadNotes) -> Any:
        saved = state.get("seed_subset", self._seed_subset)
        seed = check_int(saved, "seed_subset", "RandomSubsetTrainingSampler", 0, MAX_SEED)
        return seed, (self._subset if seed == self._seed_subset else self._choose_subset(seed))

    def _apply_extra(self, extra: Any) -> None:
        self._seed_subset, self._subset = extra
