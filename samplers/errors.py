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

    A subclass names its fields in ``field_names``: they are its keyword arguments, each
    None by default; the message stays the only positional argument, as torch's worker
    re-raise (``cls(message)``) needs.

    Example:
        >>> err = LoaderTimeoutError("no batch in 5 s", worker_id=1, timeout=5.0)
        >>> err.worker_id, err.index, err.timeout
        (1, None, 5.0)
    """



class SamplerStateError(SamplerError, ValueError):
    """A state dict cannot be loaded: wrong sampler type, missing key, or a different dataset."""


class ReshardError(SamplerStateError):
    """A state saved with one rank / world size cannot be continued with another.

    Raised only where the saved state holds per-rank data (e.g. the indices a
    ``GroupedBatchSampler`` has drawn but not yet batched); plain sampler states re-shard.
    """


class SamplerConfigError(SamplerError, ValueError, TypeError):
    """A sampler chosen by name from a config has an unknown option or an option of a wrong
    type or value. It is both a ``ValueError`` and a ``TypeError``."""


class NotResumableError(SamplerError, TypeError):
    """``state_dict`` was asked of a loader whose sampler does not implement it."""


class StateMismatchError(SamplerStateError, SamplerErrorWithFields):
    """A saved state was made by a differently configured sampler or loader.

    ``key`` names the field that differs (e.g. ``"repeat_factors"``, ``"batch_size"``);
    ``saved`` and ``current`` hold short descriptions of both sides. ``load_state_dict(...,
    strict=False)`` loads the state anyway.
    """

    field_names = ("key", "saved", "current")


class LoaderTimeoutError(SamplerErrorWithFields, TimeoutError):
    """A loader worker produced nothing within the loader's ``timeout``.

    ``worker_id`` and ``index`` name the worker and the dataset index it was working on,
    where known; ``timeout`` is the limit in seconds.
    """

    field_names = ("worker_id", "index", "timeout")
