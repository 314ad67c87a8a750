"""Typed errors of the samplers package; messages name the sampler, state key, option, worker
or dataset index involved."""

from __future__ import annotations

from catalog._common import CatmapError, CatmapErrorWithFields


class SamplerError(CatmapError):
    """Base class of the errors raised on purpose by the samplers package."""


class SamplerErrorWithFields(SamplerError, CatmapErrorWithFields):
    """A SamplerError with keyword fields (:class:`catalog._common.CatmapErrorWithFields`)."""


class SamplerStateError(SamplerError, ValueError):
    """A state dict cannot be loaded: wrong sampler type, missing key, or a different dataset."""


class ReshardError(SamplerStateError):
    """A state saved with one rank / world size cannot be continued with another."""


class SamplerConfigError(SamplerError, ValueError, TypeError):
    """An unknown option, or an option of a wrong type or value (ValueError and TypeError)."""


class NotResumableError(SamplerError, TypeError):
    """``state_dict`` was asked of a loader whose sampler does not implement it."""


class StateMismatchError(SamplerStateError, SamplerErrorWithFields):
    """A saved state was made by a differently configured sampler or loader."""

    field_names = ("key", "saved", "current")


class LoaderTimeoutError(SamplerErrorWithFields, TimeoutError):
    """A loader worker produced nothing within the loader's ``timeout``."""

    field_names = ("worker_id", "index", "timeout")


class SupersededIteratorError(SamplerError, RuntimeError):
    """``next()`` on a sampler iterator after a newer ``iter()`` of the same sampler began."""


class ImageSizeKeyError(SamplerError, KeyError):
    """An item grouped by aspect ratio has no usable ``width`` / ``height``."""

    def __init__(self, message: str, *, position: int | None = None, key: str = "") -> None:
        super().__init__(message)
        self.position, self.key = position, key

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class LoaderCallError(SamplerConfigError):
    """A loader builder got a missing, unknown or malformed argument (``argument`` names it)."""

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


class TransportError(SamplerError, RuntimeError):
    """A batch handle cannot be turned into a batch (its loader was closed, or it is stale)."""


class LoaderWorkerError(SamplerErrorWithFields, RuntimeError):
    """An exception raised in a loader worker that could not be sent whole (not picklable)."""

    field_names = ("worker_id", "index", "exc_type")

    def __init__(self, message: str, *, worker_id: int | None = None, index: int | None = None,
                 exc_type: str | None = None) -> None:
        super().__init__(message, worker_id=worker_id, index=index, exc_type=exc_type)


class BatchPickleError(SamplerErrorWithFields, TypeError):
    """A worker's batch holds a value that cannot be pickled (a lambda, lock, open file...):
    it cannot reach the main process. ``key`` is the path of the first such value."""

    field_names = ("worker_id", "index", "key")


class WorkerExitedError(SamplerErrorWithFields, RuntimeError):
    """A loader worker process died (killed, out of memory, crashed in native code)."""

    field_names = ("worker_id", "pid", "index")

    def __init__(self, message: str, *, worker_id: int | None = None, pid: int | None = None,
                 index: int | None = None) -> None:
        super().__init__(message, worker_id=worker_id, pid=pid, index=index)
