"""TrainingSampler: an endless stream of shuffled passes over ``range(size)``, sharded by rank.

Pass ``p`` is the keyed permutation ``KeyedPermutation(size, "shuffle", seed, p)``: any
position's index is computed from the pass's round keys, so the sampler holds no index array
and resumes at any depth in constant time.
"""

from __future__ import annotations

from typing import Any

from catalog.validation import check_positive_size

from .keyed_permutation import KeyedPermutation
from .pass_order import PassOrder, PermutedOrder, RangeOrder
from .stream import EndlessPassStream

__all__ = ["TrainingSampler"]


class TrainingSampler(EndlessPassStream):
    """Endless training indices: each pass is a permutation of ``range(size)`` (or ``arange``
    without shuffling); rank ``r`` takes every ``world_size``-th index of the global stream.

    Args:
        size: the number of records (a positive int).
        shuffle: shuffle each pass (pass ``p`` is a keyed permutation of ``(seed, p)``).
        seed: the shared seed; None draws one from torch's default generator on rank 0 and
            broadcasts it, so every rank uses the same permutation.
        rank: this process's rank (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Raises:
        TypeError: ``size`` is not an int.
        ValueError: ``size`` is not positive.

    Example:
        >>> import itertools
        >>> s = TrainingSampler(4, shuffle=False, rank=1, world_size=2)
        >>> list(itertools.islice(s, 4))
        [1, 3, 1, 3]
    """

    def __init__(
        self,
        size: int,
        shuffle: bool = True,
        seed: int | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._size = check_positive_size(size, where="TrainingSampler")
        self._shuffle = bool(shuffle)
        super().__init__(seed=seed, rank=rank, world_size=world_size)

    @property
    def dataset_size(self) -> int:
        """The number of records indices are drawn from."""
        return self._size

    def _make_pass(self, pass_index: int) -> PassOrder:
        if not self._shuffle:
            return RangeOrder(self._size)
        return PermutedOrder(KeyedPermutation(self._size, "shuffle", self._seed, pass_index))

    def _config(self) -> dict[str, Any]:
        return {"size": self._size, "shuffle": self._shuffle}

    def _legacy_config(self) -> dict[str, Any]:
        return self._config()

    def _pass_length(self, seed: int, pass_index: int, extra: Any) -> int:
        return self._size

    def _constant_pass_length(self) -> int | None:
        return self._size

    def __repr__(self) -> str:
        return (
            f"TrainingSampler(size={self._size}, shuffle={self._shuffle}, seed={self._seed}, "
            f"rank={self._rank}, world_size={self._world_size})"
        )
