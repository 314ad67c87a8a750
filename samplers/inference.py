"""InferenceSampler: each index exactly once across ranks, in contiguous shards."""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import Sampler

from catalog.validation import check_positive_size

from .distributed import resolve_rank_and_world_size

__all__ = ["InferenceSampler", "shard_bounds"]


def shard_bounds(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank's contiguous shard; the first ``size % world_size`` ranks get
    one index more than the others.

    Example:
        >>> [shard_bounds(42, r, 4) for r in range(4)]
        [(0, 11), (11, 22), (22, 32), (32, 42)]
    """
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return start, stop


class InferenceSampler(Sampler[int]):
    """Yields this rank's contiguous shard of ``range(size)``, once: no padding, no duplicates.

    Args:
        size: the number of records (an int >= 0; 0 gives empty shards).
        rank: this process's rank (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Example:
        >>> [len(InferenceSampler(2, rank=r, world_size=3)) for r in range(3)]
        [1, 1, 0]
        >>> list(InferenceSampler(5, rank=1, world_size=2))
        [3, 4]
    """

    def __init__(
        self, size: int, *, rank: int | None = None, world_size: int | None = None
    ) -> None:
        self._size = check_positive_size(size, allow_zero=True, where="InferenceSampler")
        self._rank, self._world_size = resolve_rank_and_world_size(
            rank, world_size, "InferenceSampler"
        )
        self._start, self._stop = shard_bounds(self._size, self._rank, self._world_size)

    @property
    def dataset_size(self) -> int:
        """The number of records over all ranks."""
        return self._size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._start, self._stop))

    def __len__(self) -> int:
        return self._stop - self._start

    def __repr__(self) -> str:
        return (
            f"InferenceSampler(size={self._size}, rank={self._rank}, "
            f"world_size={self._world_size}, shard=[{self._start}, {self._stop}))"
        )
