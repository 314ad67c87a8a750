"""Small parts of :mod:`samplers.stream`: the seed check, the live chunk, the iterator error."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import SamplerConfigError, SamplerError
from .state_fields import MAX_SEED

__all__ = ["LiveChunk", "SupersededIteratorError", "check_seed", "nothing"]


class SupersededIteratorError(SamplerError, RuntimeError):
    """``next()`` on a sampler iterator after a newer ``iter()`` of the same sampler began."""


def check_seed(seed: Any, what: str, owner: str) -> int | None:
    """Validate an optional seed (None or an int in ``[0, 2**64)``)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise SamplerConfigError(
            f"{owner}: {what} must be an int or None, got {type(seed).__name__}"
        )
    if not 0 <= seed < MAX_SEED:
        raise SamplerConfigError(f"{owner}: {what} must be in [0, 2**64), got {seed}")
    return int(seed)


def nothing() -> None:
    """The restore step of a state part that has nothing to restore."""


class LiveChunk:
    """The chunk an iterator is yielding from, to read the exact position at any time."""

    __slots__ = ("iterator", "length", "pass_index", "offset")

    def __init__(self, iterator: Iterator[int], length: int, pass_index: int, offset: int) -> None:
        self.iterator = iterator
        self.length = length
        self.pass_index = pass_index
        self.offset = offset

    def consumed(self) -> int:
        return self.length - operator.length_hint(self.iterator)
