"""The DataLoader options every loader builder takes, defined once.

:class:`WorkerOptions` names the options (``num_workers``, ``collate_fn``, ``pin_memory`` ...)
with their defaults; :func:`takes_worker_options` gives a builder each of them as a
keyword-only argument, so ``build_batch_data_loader``, ``build_detection_train_loader`` and
``build_detection_test_loader`` keep detectron2's keyword names and defaults (``help`` and
``inspect.signature`` show them) without repeating the list.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["WorkerOptions", "takes_worker_options"]

R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """The DataLoader options a loader builder passes through unchanged.

    Documented on :func:`samplers.loader.build_batch_data_loader`.

    Example:
        >>> WorkerOptions(num_workers=2).as_kwargs()["num_workers"]
        2
    """

    num_workers: int = 0
    collate_fn: Callable[[list[Any]], Any] | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    multiprocessing_context: Any = None
    timeout: float | None = None
    worker_init_fn: Callable[[int], Any] | None = None
    transport: str = "auto"

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments (the values themselves, not copies).

        Example:
            >>> sorted(WorkerOptions().as_kwargs())[:2]
            ['collate_fn', 'multiprocessing_context']
        """
        return {name: getattr(self, name) for name in _NAMES}


_FIELDS = dataclasses.fields(WorkerOptions)
_NAMES = frozenset(field.name for field in _FIELDS)


def takes_worker_options(fn: Callable[..., R]) -> Callable[..., R]:
    """Let ``fn(..., *, options: WorkerOptions)`` be called with each option as a keyword.

    The returned function's signature is ``fn``'s without ``options`` and with every
    :class:`WorkerOptions` field as a keyword-only argument with its default; other arguments
    go to ``fn`` as they are (an unknown keyword raises ``fn``'s own ``TypeError``).

    Example:
        >>> @takes_worker_options
        ... def build(size, *, options):
        ...     return size, options.num_workers, options.transport
        >>> build(3, num_workers=2)
        (3, 2, 'auto')
        >>> "timeout" in inspect.signature(build).parameters
        True
    """
    signature = inspect.signature(fn)
    kept = [param for param in signature.parameters.values() if param.name != "options"]
    added = [
        inspect.Parameter(
            field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
            annotation=field.type,
        )
        for field in _FIELDS
    ]
    # a ``**kwargs`` parameter, if any, stays last
    tail = [param for param in kept if param.kind is inspect.Parameter.VAR_KEYWORD]
    head = [param for param in kept if param.kind is not inspect.Parameter.VAR_KEYWORD]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        chosen = {name: kwargs.pop(name) for name in _NAMES & kwargs.keys()}
        return fn(*args, options=WorkerOptions(**chosen), **kwargs)

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=head + added + tail
    )
    return wrapper
