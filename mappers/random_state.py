"""Where a sample's randomness comes from: every generator a sample is mapped with.

Attempt ``a`` of a sample draws from ``default_rng(attempt_seed(sample_seed(seed, position),
a))`` (augmentations, the refetch index and the seeded global RNGs), so a sample depends only
on (seed, position, attempt), never on workers, failures or resume. Outside a sample,
:func:`get_generator` is the ``use_generator`` override, else this process's generator.

Example:
    >>> with sample_scope(sample_seed(0, 5), seed_globals=False):
    ...     a = get_generator().random()
    >>> with sample_scope(sample_seed(0, 5), seed_globals=False):
    ...     a == get_generator().random()
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import get_worker_info

from catalog._common import check_int, check_seed, derive_seed

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

_override: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "catmap_augmentation_generator", default=None
)
_sample: contextvars.ContextVar[SampleRandomness | None] = contextvars.ContextVar(
    "catmap_sample_randomness", default=None
)
# tags keeping the seeds derived for different purposes apart
_SAMPLE_STREAM_TAG, _INDEX_TAG, _ATTEMPT_TAG = 0x5A3D, 0x1DE7, 0xA77E
_MASK64 = (1 << 64) - 1
# this process's generator: [generator, pid, torch.initial_seed() it follows]
_process: list = [None, -1, -1]


def get_generator() -> np.random.Generator:
    """The generator augmentations draw from now: the ``use_generator`` override, else the
    current sample's attempt generator, else this process's generator."""
    override = _override.get()
    if override is not None:
        return override
    sample = _sample.get()
    if sample is not None:
        return sample.generator
    torch_seed = torch.initial_seed()
    if _process[0] is None or _process[1] != os.getpid() or _process[2] != torch_seed:
        _process[:] = [np.random.default_rng(derive_seed(torch_seed)), os.getpid(), torch_seed]
    return _process[0]


def seed_generator(seed: int) -> None:
    """Seed this process's augmentation generator (until the next call or ``torch.manual_seed``).

    Example:
        >>> seed_generator(3); x = get_generator().integers(100)
        >>> seed_generator(3); bool(x == get_generator().integers(100))
        True
    """
    seed = check_int(seed, "seed", minimum=0, where="seed_generator")
    _process[:] = [np.random.default_rng(seed), os.getpid(), torch.initial_seed()]


@contextlib.contextmanager
def use_generator(rng: np.random.Generator | None) -> Iterator[np.random.Generator]:
    """Make augmentations draw from ``rng`` inside the block (None: no change); thread-local."""
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


def sample_seed(seed: int, position: int) -> int:
    """The seed of the sample at global stream ``position`` of a loader seeded with ``seed``."""
    return derive_seed(seed, _SAMPLE_STREAM_TAG, position)


def index_sample_seed(seed: int, index: int) -> int:
    """The sample seed ``MapDataset`` uses for ``ds[index]`` outside a sample-seeded loader."""
    return derive_seed(seed, _INDEX_TAG, index)


def attempt_seed(sample_seed: int, attempt: int) -> int:
    """The seed of attempt ``attempt`` of a sample (attempt 0 keeps the sample seed)."""
    return sample_seed if attempt == 0 else derive_seed(sample_seed, _ATTEMPT_TAG, attempt)


def attempt_generator(sample_seed: int, attempt: int) -> np.random.Generator:
    """``numpy.random.default_rng(attempt_seed(sample_seed, attempt))``."""
    return np.random.default_rng(attempt_seed(sample_seed, attempt))


def seed_global_rngs(seed: int, *, all_torch_devices: bool = False) -> None:
    """Seed ``random``, numpy's global state and torch's CPU generator (or, with
    ``all_torch_devices``, every torch device) from one seed in ``[0, 2**64)``."""
    seed = check_seed(seed, optional=False, where="seed_global_rngs")
    mixed = []
    for salt in (0x52414E44, 0x4E554D50, 0x544F5243):  # splitmix64's finalizer of seed ^ salt
        value = seed ^ salt
        value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
        value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK64
        mixed.append(value ^ (value >> 31))
    random.seed(mixed[0])
    np.random.seed(mixed[1] & 0xFFFFFFFF)
    torch_seed = mixed[2] & 0x7FFFFFFFFFFFFFFF
    if all_torch_devices:
        torch.manual_seed(torch_seed)
    else:
        torch.default_generator.manual_seed(torch_seed)


class SampleRandomness:
    """One sample's seed, current attempt and that attempt's generator.

    Example:
        >>> sample = SampleRandomness(5, seed_globals=False)
        >>> sample.attempt, sample.next_attempt() is sample.generator, sample.attempt
        (0, True, 1)
    """

    __slots__ = ("seed", "attempt", "generator", "seed_globals")

    def __init__(self, seed: int, *, seed_globals: bool = True) -> None:
        self.seed = check_seed(seed, optional=False, where="SampleRandomness")
        self.seed_globals = bool(seed_globals)
        self.attempt = 0  # attempt 0 keeps the sample seed (see attempt_seed)
        # default_rng(seed) is Generator(PCG64(seed)): the same stream, built without a hop
        self.generator: np.random.Generator = np.random.Generator(np.random.PCG64(self.seed))
        if self.seed_globals:
            seed_global_rngs(self.seed)

    def next_attempt(self) -> np.random.Generator:
        """Start the next attempt (new generator, global RNGs reseeded); return its generator."""
        self.attempt += 1
        seed = attempt_seed(self.seed, self.attempt)
        self.generator = np.random.Generator(np.random.PCG64(seed))
        if self.seed_globals:
            seed_global_rngs(seed)
        return self.generator

    def __repr__(self) -> str:
        return f"SampleRandomness(seed={self.seed}, attempt={self.attempt})"


def current_sample() -> SampleRandomness | None:
    """The sample being mapped in this thread (inside :func:`sample_scope`), else None."""
    return _sample.get()


# numpy's legacy global state is MT19937: its key and position (624 uint32 + an int) are
# copied raw, 200x faster than get_state()/set_state(), which convert them element by element.
# (The legacy normal() cache of the main process is not kept: a sample reseeds it.)
_MT19937_STATE_BYTES = 624 * 4 + 4


@contextlib.contextmanager
def sample_scope(
    seed: int | SampleRandomness, *, seed_globals: bool = True
) -> Iterator[SampleRandomness]:
    """Map one sample with the randomness of its seed (or of a ``SampleRandomness`` made with
    ``seed_globals=False`` ahead of time); outside a DataLoader worker the global RNG states are
    restored when the block ends."""
    saved = None
    if seed_globals and get_worker_info() is None:  # save the global RNG states
        bit_generator = np.random.mtrand._rand._bit_generator
        numpy_state: bytes | tuple = (
            ctypes.string_at(bit_generator.ctypes.state_address, _MT19937_STATE_BYTES)
            if type(bit_generator) is np.random.MT19937 else np.random.get_state()
        )
        saved = random.getstate(), numpy_state, torch.default_generator.get_state()
    try:
        if type(seed) is SampleRandomness:  # made ahead: its globals are seeded now
            sample = seed
            sample.seed_globals = seed_globals
            if seed_globals:
                seed_global_rngs(attempt_seed(sample.seed, sample.attempt))
        else:
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
            random.setstate(saved[0])
            if isinstance(saved[1], bytes):
                address = np.random.mtrand._rand._bit_generator.ctypes.state_address
                ctypes.memmove(address, saved[1], _MT19937_STATE_BYTES)
            else:
                np.random.set_state(saved[1])
            torch.default_generator.set_state(saved[2])
