"""Seeding DataLoader workers: numpy, random, torch and the augmentation generator."""

from __future__ import annotations

import logging
import random

import numpy as np
import torch

from catalog.seeding import derive_seed

__all__ = ["WorkerSeeder", "worker_init_reset_seed", "seed_this_process"]

logger = logging.getLogger(__name__)


def seed_this_process(seed: int) -> None:
    """Seed python ``random``, numpy's global state, torch and the augmentation generator of
    this process (``mappers.random_state.seed_generator``) from one seed.

    Each library gets its own derived seed, so the streams are independent.

    Example::

        seed_this_process(5)  # in a worker: random, numpy, torch and augmentations now repeat
    """
    from mappers.random_state import seed_generator

    random.seed(derive_seed(seed, 0))
    np.random.seed(derive_seed(seed, 1) % 2**32)
    torch.manual_seed(derive_seed(seed, 2))
    seed_generator(derive_seed(seed, 3))


def worker_init_reset_seed(worker_id: int) -> None:
    """A ``worker_init_fn`` that reseeds the worker from the seed torch gave it.

    torch seeds each worker with ``base_seed + worker_id``, where ``base_seed`` comes from the
    DataLoader's ``generator`` (pass one seeded with ``catalog.seeding.torch_generator`` so no
    global state is involved). This function spreads that seed to numpy, ``random`` and the
    augmentation generator. The loaders built here use :class:`WorkerSeeder`, which derives the
    seed from (seed, rank, worker id, pass) instead.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> from catalog.seeding import torch_generator
        >>> loader = DataLoader(range(4), num_workers=0, worker_init_fn=worker_init_reset_seed,
        ...                     generator=torch_generator(0))
    """
    seed_this_process(derive_seed(torch.initial_seed(), worker_id))


class WorkerSeeder:
    """A picklable ``worker_init_fn`` seeding worker ``w`` from ``(seed, rank, w, pass_index)``.

    ``pass_index`` is updated by the loader before each ``iter()`` (workers started for the
    next pass see the new value). Inside the catmap loaders, augmentations of each sample draw
    from a generator seeded from the sample's stream position instead
    (:mod:`samplers.sample_seed`); the per-worker generator seeded here serves everything else.

    Example:
        >>> seeder = WorkerSeeder(seed=1, rank=0)
        >>> seeder.worker_seed(0) == WorkerSeeder(seed=1, rank=0).worker_seed(0)
        True
        >>> seeder.worker_seed(0) != seeder.worker_seed(1)
        True
    """

    def __init__(self, seed: int, rank: int, pass_index: int = 0) -> None:
        self.seed = int(seed)
        self.rank = int(rank)
        self.pass_index = int(pass_index)

    def worker_seed(self, worker_id: int) -> int:
        """The seed worker ``worker_id`` gets."""
        return derive_seed(self.seed, self.rank, worker_id, self.pass_index)

    def __call__(self, worker_id: int) -> None:
        seed_this_process(self.worker_seed(worker_id))
        logger.debug(
            "worker %d of rank %d seeded for pass %d", worker_id, self.rank, self.pass_index
        )

    def __repr__(self) -> str:
        return f"WorkerSeeder(seed={self.seed}, rank={self.rank}, pass_index={self.pass_index})"
