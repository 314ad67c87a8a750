"""Typed errors raised by the samplers package.

Every message names the sampler and, where known, the state key, option or index involved.
"""

from __future__ import annotations

from catalog.errors import CatmapError, CatmapErrorWithFields

__all__ = [
    "SamplerError",
    "SamplerErrorWithFields",
    "SamplerStateError",
    "ReshardError",
    "SamplerConfigError",
    "NotResumableError",
    "StateMismatchError",
    "LoaderTimeoutError",
]


class SamplerError(CatmapError):
    """Base class of the errors raised on purpose by the samplers package."""


class SamplerErrorWithFields(SamplerError, CatmapErrorWithFields):
    """A SamplerError with keyword fields (:class:`catalog.errors.CatmapErrorWithFields`).


    Example:
        >>> err = LoaderTimeoutError("no batch in 5 s", worker_id=1, timeout=5.0)
        >>> err.worker_id, err.index, err.timeout
        (1, None, 5.0)
    """



class SamplerStateError(SamplerError, ValueError):
    """A state dict cannot be loaded: wrong sampler type, missing key, or a different dataset."""


class ReshardError(SamplerStateError):
    """A state saved with one rank / world size cannot be continued with another."""


class SamplerConfigError(SamplerError, ValueError, TypeError):
    """A sampler chosen by name from a config has an unknown option or an option of a wrong
    type or value. It is both a ``ValueError`` and a ``TypeError``.
    """


class NotResumableError(SamplerError, TypeError):
    """``state_dict`` was asked of a loader whose sampler does not implement it."""


class StateMismatchError(SamplerStateError, SamplerErrorWithFields):
    """A saved state was made by a differently configured sampler or loader."""

    field_names = ("key", "saved", "current")


class LoaderTimeoutError(SamplerErrorWithFields, TimeoutError):
    """A loader worker produced nothing within the loader's ``timeout``."""

    field_names = ("worker_id", "index", "timeout")
