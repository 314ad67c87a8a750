"""Lambdas, closures and nested functions sent to spawn / forkserver DataLoader workers.

pickle stores a function by name, which fails for those; :func:`wrap_for_pickling` wraps them
in a :class:`PicklableCallable` that pickles them by value with ``cloudpickle`` (the extra
``catmap[spawn]``). Anything else is left to the outer pickler, so tensors and record buffers
keep torch's shared-memory reducers.
"""

from __future__ import annotations

import functools
import pickle
import types
from collections.abc import Callable
from typing import Any

from .errors import MapFuncPickleError

__all__ = ["needs_by_value", "PicklableCallable", "wrap_for_pickling", "unwrap"]


def needs_by_value(fn: Any) -> bool:
    """Whether ``fn`` is a function (or a partial / bound method of one) pickle cannot store
    by name.

    Example:
        >>> needs_by_value(len), needs_by_value(lambda x: x)
        (False, True)
    """
    if isinstance(fn, functools.partial):
        return any(map(needs_by_value, (fn.func, *fn.args, *fn.keywords.values())))
    if isinstance(fn, types.MethodType):
        return needs_by_value(fn.__func__)
    if not isinstance(fn, types.FunctionType):
        return False
    try:  # a function pickles by module + qualified name: cheap, and fails for these
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, ImportError, TypeError):
        return True
    return False


class PicklableCallable:
    """A callable wrapper that makes ``fn`` picklable: calls ``fn``, and pickles it by value
    with cloudpickle when :func:`needs_by_value` says plain pickle cannot store it by name.

    Example:
        >>> import pickle
        >>> pickle.loads(pickle.dumps(PicklableCallable(lambda x: x + 1)))(1)
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
            return (PicklableCallable, (self.fn,))
        try:
            import cloudpickle
        except ImportError:
            raise MapFuncPickleError(
                f"cannot send {self.fn!r} to spawn/forkserver DataLoader workers: a lambda, "
                'closure or nested function needs cloudpickle: pip install "catmap[spawn]" '
                "(or use a module-level function or a callable class)"
            ) from None
        try:
            return (_loads, (cloudpickle.dumps(self.fn),))
        except Exception as exc:  # name the function, keep the cause
            raise MapFuncPickleError(f"cloudpickle could not pickle {self.fn!r}: {exc}") from exc


def _loads(payload: bytes) -> PicklableCallable:
    return PicklableCallable(pickle.loads(payload))  # our own bytes, inside the outer pickle


def wrap_for_pickling(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped in a :class:`PicklableCallable` when it needs by-value pickling, else ``fn``."""
    return PicklableCallable(fn) if needs_by_value(fn) else fn


def unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable inside a :class:`PicklableCallable` (or ``fn`` itself)."""
    return fn.fn if isinstance(fn, PicklableCallable) else fn
