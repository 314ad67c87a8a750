"""Where a sample's randomness comes from: the one module that derives every random generator
a sample is mapped with.

**The derivation.** A training loader (``samplers.build_detection_train_loader`` and every
catmap loader over a positioned batch sampler) gives each sample a *sample seed* from the
loader's seed and the sample's **global stream position** (rank-independent: rank ``r`` of
``w`` draws positions ``r, r + w, ...``, see ``samplers.StreamPositions``)::

    sample seed   s   = sample_seed(seed, position)          # derive_seed(seed, TAG, position)
    attempt seed  s_a = attempt_seed(s, a)                   # s for a = 0, else derive_seed(s, TAG', a)
    generator     g_a = numpy.random.default_rng(s_a)

Attempt 0 maps the requested record. When ``MapDataset``'s mapper returns None ("use another
record"), attempt ``a >= 1`` draws the replacement index from ``g_a`` (``g_a.integers(n)``)
and maps that record with the same ``g_a``. Every augmentation draw made while mapping (all
catmap augmentations draw from :func:`get_generator`) comes from the current ``g_a``; the
global RNGs (``random``, ``numpy.random``, torch's CPU generator) are seeded from ``s_a`` at
the start of each attempt too, for user code that draws from them. So which record a sample
ends up as, and how it is augmented, depends only on (seed, position, attempt): not on the
worker, the number of workers, persistent workers, what failed earlier in the process, or a
restore from ``state_dict()``. In the main process (``num_workers=0``) the global RNG states
are saved before and restored after each sample, so the training loop's own draws are not
disturbed. (The global RNGs are per process: when several threads of one process map samples
at once, e.g. a thread-pool pipeline, only catmap's generators stay exact per sample.)

``MapDataset`` used without such a loader (direct indexing, a plain ``DataLoader``) derives the
sample seed from ``(MapDataset.seed, index)`` instead (:func:`index_sample_seed`): the
replacement sequence of an index is then fixed; augmentations keep drawing from the process
generator below, so a plain DataLoader still sees new augmentations in every epoch.

**Outside a sample** (code not run by a sample-seeded loader), :func:`get_generator` returns,
in order of precedence:

1. inside ``with use_generator(rng):`` (also what ``aug(aug_input, rng=rng)`` and
   ``AugmentationList(...)(aug_input, rng=rng)`` do), the generator given there (this holds
   inside a sample too: an explicit ``rng`` wins);
2. inside :func:`sample_scope`, the current attempt's generator ``g_a``;
3. otherwise this process's generator. It is created lazily; unless :func:`seed_generator` was
   called in this process, its seed is ``derive_seed(torch.initial_seed())``. Inside a
   DataLoader worker ``torch.initial_seed()`` differs per worker (base seed + worker id), and
   ``torch.manual_seed(s)`` in the main process makes the whole run reproducible. When
   ``torch.initial_seed()`` changes (``torch.manual_seed`` was called with another seed), the
   generator is re-created from the new seed (calling ``torch.manual_seed`` again with the
   same seed is not detectable and does not restart it: use :func:`seed_generator`). After a
   ``fork`` the child re-creates its generator (the process id is tracked), so forked workers
   never replay the parent's sequence.

The loader's ``worker_init_fn`` (``samplers.WorkerSeeder``) seeds the global RNGs and the
process generator once per worker start, from (seed, rank, worker, pass): that serves code
that runs outside samples (a ``worker_init_fn``, a ``collate_fn`` before the first sample) and
loaders without sample seeds (the test loader).

Example:
    >>> from mappers.random_state import get_generator, sample_scope, seed_generator
    >>> seed_generator(7)
    >>> a = get_generator().random()
    >>> seed_generator(7)
    >>> a == get_generator().random()
    True
    >>> with sample_scope(sample_seed(0, 5)):
    ...     b = get_generator().random()
    >>> with sample_scope(sample_seed(0, 5)):
    ...     b == get_generator().random()
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from catalog.seeding import derive_seed
from catalog.validation import check_int, check_seed

__all__ = [
    "SampleRandomness",
    "attempt_generator",
    "attempt_seed",
    "current_sample",
    "get_generator",
    "index_sample_seed",
    "sample_scope",
    "sample_seed",
    "seed_generator",
    "seed_global_rngs",
    "use_generator",
]

logger = logging.getLogger(__name__)

_override: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "catmap_augmentation_generator", default=None
)
_sample: contextvars.ContextVar[SampleRandomness | None] = contextvars.ContextVar(
    "catmap_sample_randomness", default=None
)

#: Tags that keep the seeds derived for different purposes from one base seed apart.
_SAMPLE_STREAM_TAG = 0x5A3D
_INDEX_TAG = 0x1DE7
_ATTEMPT_TAG = 0xA77E
_MASK64 = (1 << 64) - 1


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
        The ``use_generator`` override when one is active, else the current sample's attempt
        generator inside :func:`sample_scope`, else this process's generator.

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
    sample = _sample.get()
    if sample is not None:
        return sample.generator
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
    seed = check_int(seed, "seed", minimum=0, where="seed_generator")
    _state.generator = np.random.default_rng(seed)
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


# ----------------------------------------------------------------------- per-sample derivation


def sample_seed(seed: int, position: int) -> int:
    """The seed of the sample at global stream ``position`` of a loader seeded with ``seed``.

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


def index_sample_seed(seed: int, index: int) -> int:
    """The sample seed ``MapDataset`` uses for ``ds[index]`` outside a sample-seeded loader.

    Example:
        >>> index_sample_seed(0, 3) == index_sample_seed(0, 3) != sample_seed(0, 3)
        True
    """
    return derive_seed(seed, _INDEX_TAG, index)


def attempt_seed(sample_seed: int, attempt: int) -> int:
    """The seed of attempt ``attempt`` of a sample (0: the requested record; ``a >= 1``: the
    ``a``-th replacement after the mapper returned None).

    Example:
        >>> attempt_seed(11, 0), attempt_seed(11, 1) == attempt_seed(11, 1) != 11
        (11, True)
    """
    return sample_seed if attempt == 0 else derive_seed(sample_seed, _ATTEMPT_TAG, attempt)


def attempt_generator(sample_seed: int, attempt: int) -> np.random.Generator:
    """``numpy.random.default_rng(attempt_seed(sample_seed, attempt))``.

    Example:
        >>> attempt_generator(3, 2).random() == attempt_generator(3, 2).random()
        True
    """
    return np.random.default_rng(attempt_seed(sample_seed, attempt))


def _mix64(value: int) -> int:
    """splitmix64's finalizer: a cheap bijective mix of a 64-bit int."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK64
    return value ^ (value >> 31)


def seed_global_rngs(seed: int, *, all_torch_devices: bool = False) -> None:
    """Seed ``random``, numpy's global state and torch's CPU generator from one seed.

    Each library gets its own mixed seed, so the three streams are unrelated.

    Args:
        seed: an int in ``[0, 2**64)``.
        all_torch_devices: also seed the accelerators (``torch.manual_seed``; about 0.5 ms).
            The default seeds only ``torch.default_generator`` (a few µs), so seeding in the
            training process never resets its GPU generators.

    Example:
        >>> seed_global_rngs(4); a = random.random(); seed_global_rngs(4)
        >>> a == random.random()
        True
    """
    seed = check_seed(seed, optional=False, where="seed_global_rngs")
    random.seed(_mix64(seed ^ 0x52414E44))
    np.random.seed(_mix64(seed ^ 0x4E554D50) & 0xFFFFFFFF)
    import torch

    torch_seed = _mix64(seed ^ 0x544F5243) & 0x7FFFFFFFFFFFFFFF
    if all_torch_devices:
        torch.manual_seed(torch_seed)
    else:
        torch.default_generator.manual_seed(torch_seed)


def _in_loader_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


def _save_global_rngs() -> tuple[Any, Any, Any]:
    import torch

    return random.getstate(), np.random.get_state(), torch.default_generator.get_state()


def _restore_global_rngs(saved: tuple[Any, Any, Any]) -> None:
    import torch

    random.setstate(saved[0])
    np.random.set_state(saved[1])
    torch.default_generator.set_state(saved[2])


class SampleRandomness:
    """The randomness of one sample: its seed, the current attempt and that attempt's generator.

    Created by :func:`sample_scope` at attempt 0; ``MapDataset`` calls :meth:`next_attempt`
    before each replacement. Read it with :func:`current_sample`.

    Attributes:
        seed: the sample seed.
        attempt: the current attempt (0 for the requested record).
        generator: the current attempt's generator (what :func:`get_generator` returns).
        seed_globals: whether each attempt also seeds the global RNGs.

    Example:
        >>> sample = SampleRandomness(5, seed_globals=False)
        >>> sample.attempt, sample.next_attempt() is sample.generator, sample.attempt
        (0, True, 1)
    """

    __slots__ = ("seed", "attempt", "generator", "seed_globals")

    def __init__(self, seed: int, *, seed_globals: bool = True) -> None:
        self.seed = check_seed(seed, optional=False, where="SampleRandomness")
        self.seed_globals = bool(seed_globals)
        self.attempt = -1
        self.generator: np.random.Generator = self.next_attempt()

    def next_attempt(self) -> np.random.Generator:
        """Start the next attempt: a new generator (and global RNG seeds) from
        ``attempt_seed(seed, attempt)``; returns the generator."""
        self.attempt += 1
        seed = attempt_seed(self.seed, self.attempt)
        self.generator = np.random.default_rng(seed)
        if self.seed_globals:
            seed_global_rngs(seed)
        return self.generator

    def __repr__(self) -> str:
        return f"SampleRandomness(seed={self.seed}, attempt={self.attempt})"


def current_sample() -> SampleRandomness | None:
    """The sample being mapped in this thread (inside :func:`sample_scope`), else None."""
    return _sample.get()


@contextlib.contextmanager
def sample_scope(seed: int, *, seed_globals: bool = True) -> Iterator[SampleRandomness]:
    """Map one sample with the randomness derived from its sample seed (module docstring).

    Inside the block :func:`get_generator` returns the sample's current attempt generator
    (an enclosing ``use_generator`` is set aside; one opened inside wins), and ``MapDataset``
    draws its replacements from the sample's attempts. With ``seed_globals`` the global RNGs
    are seeded from each attempt's seed; in a process that is not a DataLoader worker their
    states are restored when the block ends.

    Args:
        seed: the sample seed, e.g. ``sample_seed(loader_seed, position)``.
        seed_globals: also seed ``random``, ``numpy.random`` and torch's CPU generator.

    Raises:
        TypeError / ValueError: ``seed`` is not an int in ``[0, 2**64)``.

    Example:
        >>> with sample_scope(9, seed_globals=False) as sample:
        ...     get_generator() is sample.generator
        True
    """
    saved = _save_global_rngs() if seed_globals and not _in_loader_worker() else None
    try:
        sample = SampleRandomness(seed, seed_globals=seed_globals)
        token_sample = _sample.set(sample)
        token_override = _override.set(None)
        try:
            yield sample
        finally:
            _override.reset(token_override)
            _sample.reset(token_sample)
    finally:
        if saved is not None:
            _restore_global_rngs(saved)
