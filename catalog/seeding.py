"""Seed derivation: every random choice in catmap comes from a generator seeded here."""

from __future__ import annotations

import numpy as np

# numpy >= 2 imports numpy.random lazily, on first attribute access. Import it here, at module
# import time: a first access on a background thread (a torchdata.nodes prefetcher) while
# another thread forks a worker leaves the child holding the import lock forever.
import numpy.random  # noqa: F401

__all__ = ["derive_seed", "numpy_generator", "torch_generator"]


def derive_seed(*parts: int | None) -> int:
    """Derive a 63-bit seed from integer parts such as (seed, epoch, rank, worker).

    Different tuples give statistically independent seeds (numpy's SeedSequence hashing);
    the same tuple always gives the same seed. ``None`` parts count as -1.

    Example:
        >>> derive_seed(42, 0, 1) == derive_seed(42, 0, 1)
        True
        >>> derive_seed(42, 0, 1) != derive_seed(42, 1, 0)
        True
    """
    entropy = [int(p) + 1 if p is not None else 0 for p in parts]
    if any(e < 0 for e in entropy):
        entropy = [e & 0xFFFFFFFFFFFFFFFF for e in entropy]
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFFFFFFFFFFFFFF


def numpy_generator(*parts: int | None) -> np.random.Generator:
    """Return a numpy Generator seeded from ``derive_seed(*parts)``."""
    return np.random.default_rng(derive_seed(*parts))


def torch_generator(*parts: int | None):  # -> torch.Generator
    """Return a torch.Generator seeded from ``derive_seed(*parts)``."""
    import torch

    g = torch.Generator()
    g.manual_seed(derive_seed(*parts))
    return g
