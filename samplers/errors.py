"""Typed errors raised by the samplers package.

Every message names the sampler and, where known, the state key, option or index involved.
"""

from __future__ import annotations

import logging

from catalog.errors import CatmapError

__all__ = [
    "SamplerError",
    "SamplerStateError",
    "ReshardError",
    "SamplerConfigError",
    "NotResumableError",
    "StateMismatchError",
    "LoaderTimeoutError",
]

logger = logging.getLogger(__name__)


class SamplerError(CatmapError):
    """Base class of the errors raised on purpose by the samplers package."""


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


class StateMismatchError(SamplerStateError):
    """A saved state was made by a differently configured sampler or loader.

    ``key`` names the field that differs (e.g. ``"repeat_factors"``, ``"batch_size"``);
    ``saved`` and ``current`` hold short descriptions of both sides. ``load_state_dict(...,
    strict=False)`` loads the state anyway.
    """

    def __init__(
        self, message: str, *, key: str | None = None, saved: object = None, current: object = None
    ) -> None:
        super().__init__(message)
        self.key = key
        self.saved = saved
        self.current = current


class LoaderTimeoutError(SamplerError, TimeoutError):
    """A loader worker produced nothing within the loader's ``timeout``.

    ``worker_id`` and ``index`` name the worker and the dataset index it was working on,
    where known; ``timeout`` is the limit in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        worker_id: int | None = None,
        index: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(message)
        self.worker_id = worker_id
        self.index = index
        self.timeout = timeout
