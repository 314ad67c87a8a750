"""Rank, world size and shared seeds, from torch.distributed when it is initialized."""

from __future__ import annotations

import torch
import torch.distributed as dist

from catalog._common import check_int

from .state import MAX_WORLD_SIZE


def get_rank() -> int:
    """This process's rank (0 when not distributed)."""
    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    """The default process group's size (1 when not distributed)."""
    return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1


def resolve_rank_and_world_size(rank: int | None, world_size: int | None,
                                owner: str = "sampler") -> tuple[int, int]:
    """Missing values from torch.distributed; TypeError / ValueError when out of range."""
    world_size = get_world_size() if world_size is None else world_size
    rank = get_rank() if rank is None else rank
    world_size = check_int(world_size, "world_size", minimum=1, maximum=MAX_WORLD_SIZE, where=owner)
    rank = check_int(rank, "rank", minimum=0, maximum=world_size - 1, where=owner)
    return rank, world_size


def shared_random_seed() -> int:
    """A seed in ``[0, 2**31)`` every rank agrees on: drawn from torch's default generator
    (``torch.manual_seed`` makes it reproducible) and broadcast from rank 0."""
    seed = int(torch.randint(2**31, (1,)).item())
    if dist.is_available() and dist.is_initialized():
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        seed = int(box[0])
    return seed
