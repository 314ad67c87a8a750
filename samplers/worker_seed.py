"""Seeding DataLoader workers: numpy, random, torch and the augmentation generator.

This is the *worker-level* seeding, done once when a worker starts. It serves what runs
outside a sample: a ``worker_init_fn``, a ``collate_fn``, and the samples of loaders without
sample seeds (``build_detection_test_loader``, a batch sampler without positions). In the
catmap training loaders each sample is mapped inside ``mappers.random_state.sample_scope``,
which seeds the same global RNGs again from the sample's own seed at every attempt: what a
mapper draws from ``random`` / ``numpy.random`` / ``torch`` therefore follows the sample, also
with ``persistent_workers=True`` (where a worker started in pass 0 serves every later pass and
never sees the pass number :class:`WorkerSeeder` holds after that).
"""

from __future__ import annotations

import logging

import torch

from catalog.seeding import derive_seed

__all__ = ["WorkerSeeder", "worker_init_reset_seed", "seed_this_process"]

logger = logging.getLogger(__name__)


def seed_this_process(seed: int) -> None:
    """Seed python ``random``, numpy's global state, torch (all devices) and the augmentation
    generator of this process (``mappers.random_state.seed_generator``) from one seed.

    Each library gets its own derived seed, so the streams are independent
    (``mappers.random_state.seed_global_rngs``).

    Example::

        seed_this_process(5)  # in a worker: random, numpy, torch and augmentations now repeat
    """
    from mappers.random_state import seed_generator, seed_global_rngs

    seed_global_rngs(derive_seed(seed, 0), all_torch_devices=True)
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
    next pass see the new value; persistent workers keep the seeding of the pass they started
    in). Inside the catmap training loaders each sample's augmentations and global-RNG draws
    come from its own seed instead (:mod:`mappers.random_state`); the per-worker seeding here
    serves everything else.

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
