"""Pickle functions by value when they cannot be pickled by reference.

DataLoader workers started with ``spawn`` / ``forkserver`` receive the dataset pickled. The
standard pickler stores functions by reference (module + qualified name), which fails for a
lambda, a closure or a function defined inside another function. Such functions are pickled
by value with ``cloudpickle`` (an optional dependency: ``pip install cloudpickle``); every
other object is left to the outer pickler, so tensors and shared record buffers keep the
multiprocessing reducers of torch (shared memory instead of copies).
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

from .errors import MapFuncPickleError

__all__ = ["needs_by_value", "ByValueCallable", "wrap_for_pickling", "unwrap"]

logger = logging.getLogger(__name__)


def _resolves_to(fn: Callable[..., Any]) -> bool:
    """True when ``module.qualname`` imports back to ``fn`` itself (pickle by reference works)."""
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module_name or "<" in qualname:
        return False
    module = sys.modules.get(module_name)
    if module is None:
        return False
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return False
    return target is fn


def needs_by_value(fn: Any) -> bool:
    """True when ``fn`` is a function (or a partial of one) that pickle cannot store by name.

    Example:
        >>> needs_by_value(len), needs_by_value(lambda x: x)
        (False, True)
    """
    if isinstance(fn, functools.partial):
        return (
            needs_by_value(fn.func)
            or any(needs_by_value(a) for a in fn.args)
            or any(needs_by_value(v) for v in fn.keywords.values())
        )
    if isinstance(fn, types.MethodType):
        return needs_by_value(fn.__func__)
    if isinstance(fn, types.FunctionType):
        return not _resolves_to(fn)
    return False


def _load_by_value(payload: bytes) -> Callable[..., Any]:
    import pickle

    return pickle.loads(payload)


class ByValueCallable:
    """Wraps a callable so that pickling stores it by value (with cloudpickle) when needed.

    Calling the wrapper calls the function. Objects that pickle by reference are handed to
    the outer pickler unchanged.

    Example:
        >>> import pickle
        >>> f = ByValueCallable(lambda x: x + 1)
        >>> pickle.loads(pickle.dumps(f))(1)  # needs cloudpickle installed
        2
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.fn)

    def __reduce__(self) -> tuple[Any, ...]:
        if not needs_by_value(self.fn):
            return (ByValueCallable, (self.fn,))
        try:
            import cloudpickle
        except ImportError:
            raise MapFuncPickleError(
                f"cannot pickle {self.fn!r}: it is a lambda, closure or nested function, which "
                "the standard pickler cannot send to DataLoader workers under spawn/forkserver. "
                "Install cloudpickle (pip install cloudpickle) or use a module-level function "
                "or a callable class."
            ) from None
        try:
            payload = cloudpickle.dumps(self.fn)
        except Exception as exc:  # report which function failed, keep the cause
            raise MapFuncPickleError(f"cloudpickle could not pickle {self.fn!r}: {exc}") from exc
        return (_rebuild_by_value, (payload,))


def _rebuild_by_value(payload: bytes) -> ByValueCallable:
    return ByValueCallable(_load_by_value(payload))


def wrap_for_pickling(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``fn`` wrapped in ByValueCallable when it needs by-value pickling, else ``fn``."""
    if needs_by_value(fn):
        return ByValueCallable(fn)
    return fn


def unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable inside a ByValueCallable (or ``fn`` itself)."""
    return fn.fn if isinstance(fn, ByValueCallable) else fn
