"""Small parts of :mod:`samplers.stream`: the seed check, the chunk being yielded, the iterator error."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

from catalog import validation

from .errors import SamplerConfigError, SamplerError

__all__ = ["ChunkBeingYielded", "SupersededIteratorError", "check_seed", "restore_nothing"]


class SupersededIteratorError(SamplerError, RuntimeError):
    """``next()`` on a sampler iterator after a newer ``iter()`` of the same sampler began."""


def check_seed(seed: Any, what: str, owner: str) -> int | None:
    """Validate an optional seed (None or an int in ``[0, 2**64)``).

    Raises:
        SamplerConfigError: (a TypeError and ValueError) not None nor an int in range.
    """
    return validation.check_seed(seed, what, error=SamplerConfigError, where=owner)


def restore_nothing() -> None:
    """The restore step of a state part that has nothing to restore."""


class ChunkBeingYielded:
    """The chunk an iterator is yielding from, to read the exact position at any time."""

    __slots__ = ("iterator", "length", "pass_index", "offset")

    def __init__(self, iterator: Iterator[int], length: int, pass_index: int, offset: int) -> None:
        self.iterator = iterator
        self.length = length
        self.pass_index = pass_index
        self.offset = offset

    def consumed(self) -> int:
        return self.length - operator.length_hint(self.iterator)
