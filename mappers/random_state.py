"""The per-process random generator that augmentations draw from.

Every random choice an augmentation makes comes from a ``numpy.random.Generator`` returned by
:func:`get_generator`. Which generator that is, in order of precedence:

1. inside ``with use_generator(rng):`` (also what ``aug(aug_input, rng=rng)`` and
   ``AugmentationList(...)(aug_input, rng=rng)`` do), the generator given there;
2. otherwise this process's generator. It is created lazily; unless :func:`seed_generator` was
   called in this process, its seed is ``derive_seed(torch.initial_seed())``. Inside a
   DataLoader worker ``torch.initial_seed()`` differs per worker (base seed + worker id), and
   ``torch.manual_seed(s)`` in the main process makes the whole run reproducible. When
   ``torch.initial_seed()`` changes (``torch.manual_seed`` was called with another seed), the
   generator is re-created from the new seed (calling ``torch.manual_seed`` again with the
   same seed is not detectable and does not restart it: use :func:`seed_generator`). After a ``fork`` the child re-creates its generator (the
   process id is tracked), so forked workers never replay the parent's sequence.

The loader's ``worker_init_fn`` calls :func:`seed_generator` with a seed derived from
(seed, rank, worker, pass); an explicit seed then holds in that process until the next call,
a fork, or a later ``torch.manual_seed`` (the most recent seeding wins).

Example:
    >>> from mappers.random_state import get_generator, seed_generator
    >>> seed_generator(7)
    >>> a = get_generator().random()
    >>> seed_generator(7)
    >>> a == get_generator().random()
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterator

import numpy as np

from catalog.seeding import derive_seed

__all__ = ["get_generator", "seed_generator", "use_generator"]

logger = logging.getLogger(__name__)

_override: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "catmap_augmentation_generator", default=None
)


class _ProcessGenerator:
    """The lazily created generator of one process, with where its seed came from."""

    __slots__ = ("generator", "pid", "torch_seed")

    def __init__(self) -> None:
        self.generator: np.random.Generator | None = None
        self.pid: int = -1
        # torch.initial_seed() when the generator was (re)seeded; a later change means
        # torch.manual_seed was called since, and the generator follows it.
        self.torch_seed: int = -1


_state = _ProcessGenerator()


def _torch_initial_seed() -> int:
    import torch

    return int(torch.initial_seed())


def get_generator() -> np.random.Generator:
    """Return the generator augmentations draw from now (see the module docstring).

    Returns:
        The ``use_generator`` override when one is active, else this process's generator.

    Example:
        >>> import numpy as np
        >>> g = np.random.default_rng(0)
        >>> with use_generator(g):
        ...     get_generator() is g
        True
    """
    override = _override.get()
    if override is not None:
        return override
    pid = os.getpid()
    if _state.generator is None or _state.pid != pid:
        _reseed_from_torch(pid)
    else:
        torch_seed = _torch_initial_seed()
        if torch_seed != _state.torch_seed:
            _reseed_from_torch(pid, torch_seed)
    return _state.generator  # type: ignore[return-value]


def _reseed_from_torch(pid: int, torch_seed: int | None = None) -> None:
    if torch_seed is None:
        torch_seed = _torch_initial_seed()
    _state.generator = np.random.default_rng(derive_seed(torch_seed))
    _state.pid = pid
    _state.torch_seed = torch_seed
    logger.debug("augmentation generator of process %d seeded from torch seed %d", pid, torch_seed)


def seed_generator(seed: int) -> None:
    """Seed this process's augmentation generator explicitly.

    The seed holds in this process until the next call or a later ``torch.manual_seed``; a
    forked child re-creates its own generator from ``torch.initial_seed()`` unless it calls
    this function too.

    Args:
        seed: a non-negative integer, e.g. ``derive_seed(seed, rank, worker_id, pass_index)``.

    Raises:
        TypeError: ``seed`` is not an integer.
        ValueError: ``seed`` is negative.

    Example:
        >>> seed_generator(3)
        >>> x = get_generator().integers(100)
        >>> seed_generator(3)
        >>> bool(x == get_generator().integers(100))
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed_generator: seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed_generator: seed must be non-negative, got {seed}")
    _state.generator = np.random.default_rng(int(seed))
    _state.pid = os.getpid()
    _state.torch_seed = _torch_initial_seed()


@contextlib.contextmanager
def use_generator(rng: np.random.Generator | None) -> Iterator[np.random.Generator]:
    """Make augmentations draw from ``rng`` inside the ``with`` block (``None``: no change).

    The override is a context variable, so it is local to the current thread / task.

    Args:
        rng: the generator to draw from, or None to keep the current one.

    Raises:
        TypeError: ``rng`` is neither None nor a ``numpy.random.Generator``.

    Example:
        >>> import numpy as np
        >>> with use_generator(np.random.default_rng(1)) as g:
        ...     v = g.random()
    """
    if rng is None:
        yield get_generator()
        return
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    token = _override.set(rng)
    try:
        yield rng
    finally:
        _override.reset(token)
