"""Small slotted records that cross process boundaries, declared by their fields only.

The batch transport sends a few such records with every batch (array references in a batch
skeleton, slab tickets and handles, worker failures). :func:`value_class` makes one from
annotated fields: a slotted dataclass with identity equality (as a plain object) that pickles
compactly as ``(cls, field values)``, the smallest form pickle writes for a class, unless the
class defines its own ``__reduce__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

__all__ = ["value_class"]

T = TypeVar("T")


def value_class(cls: type[T]) -> type[T]:
    """A slotted dataclass of ``cls`` (``eq=False``) that pickles as ``(cls, field values)``.


    Example:
        >>> import copy
        >>> @value_class
        ... class Point:
        ...     x: int
        ...     y: int = 0
        >>> Point(1, 2).__reduce__()[1], copy.copy(Point(1, 2))
        ((1, 2), Point(x=1, y=2))
        >>> Point.__slots__, Point(1) == Point(1)
        (('x', 'y'), False)
    """
    own_reduce = "__reduce__" in cls.__dict__
    made: Any = dataclasses.dataclass(slots=True, eq=False)(cls)
    if not own_reduce:
        made.__reduce__ = _field_reduce(made, tuple(f.name for f in dataclasses.fields(made)))
    return made


def _field_reduce(cls: type, names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        raise TypeError(f"value_class {cls.__name__} has no fields")
    values = attrgetter(*names)  # a tuple for two names or more (C speed: per array, per batch)
    single = len(names) == 1

    def __reduce__(self: Any) -> tuple[Any, ...]:
        got = values(self)
        return (cls, (got,) if single else got)

    return __reduce__
