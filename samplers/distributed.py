"""Rank, world size and shared seeds, taken from torch.distributed when it is initialized."""

from __future__ import annotations

import logging

from catalog.validation import check_int

__all__ = [
    "is_distributed",
    "get_rank",
    "get_world_size",
    "resolve_rank_and_world_size",
    "shared_random_seed",
    "MAX_WORLD_SIZE",
]

logger = logging.getLogger(__name__)

#: Seeds drawn by :func:`shared_random_seed` lie in ``[0, SEED_RANGE)``.
SEED_RANGE = 2**31

#: The largest world size catmap accepts (from a constructor or a saved state): 2**20 ranks.
MAX_WORLD_SIZE = 2**20


def is_distributed() -> bool:
    """True when torch.distributed is available and a default process group is initialized."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank in the default process group (0 when not distributed)."""
    import torch.distributed as dist

    return int(dist.get_rank()) if is_distributed() else 0


def get_world_size() -> int:
    """The size of the default process group (1 when not distributed)."""
    import torch.distributed as dist

    return int(dist.get_world_size()) if is_distributed() else 1


def resolve_rank_and_world_size(
    rank: int | None, world_size: int | None, owner: str = "sampler"
) -> tuple[int, int]:
    """Fill in a missing rank / world size from torch.distributed and validate both.

    Args:
        rank: this process's rank, or None to take it from torch.distributed (else 0).
        world_size: the number of ranks, or None to take it from torch.distributed (else 1).
        owner: the name used in error messages.

    Returns:
        ``(rank, world_size)`` with ``0 <= rank < world_size``.

    Raises:
        TypeError: a value is not an int.
        ValueError: ``world_size`` is outside ``[1, MAX_WORLD_SIZE]`` or ``rank`` is outside
            ``[0, world_size)``.

    Example:
        >>> resolve_rank_and_world_size(1, 4)
        (1, 4)
    """
    world_size = get_world_size() if world_size is None else world_size
    rank = get_rank() if rank is None else rank
    world_size = check_int(world_size, "world_size", minimum=1, maximum=MAX_WORLD_SIZE, where=owner)
    rank = check_int(rank, "rank", minimum=0, maximum=world_size - 1, where=owner)
    return rank, world_size


def shared_random_seed() -> int:
    """A random seed that every rank agrees on.

    Each rank draws from torch's default generator (so ``torch.manual_seed`` makes a run
    reproducible and every rank consumes the same amount of randomness); when distributed,
    rank 0's draw is broadcast to all ranks through torch.distributed.

    Returns:
        An int in ``[0, 2**31)``.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> a = shared_random_seed()
        >>> _ = torch.manual_seed(0)
        >>> a == shared_random_seed()
        True
    """
    import torch

    seed = int(torch.randint(SEED_RANGE, (1,)).item())
    if is_distributed():
        import torch.distributed as dist

        box = [seed]
        dist.broadcast_object_list(box, src=0)
        seed = int(box[0])
        logger.debug("shared seed %d broadcast from rank 0", seed)
    return seed
