"""Typed errors of :mod:`mappers.structures` (defined in :mod:`mappers.errors`).

Example:
    >>> from mappers.structures import Boxes
    >>> try:
    ...     Boxes([[1.0, 2.0, 3.0]])
    ... except StructureShapeError as exc:
    ...     print(type(exc).__name__)
    StructureShapeError
"""

from __future__ import annotations

from ..errors import StructureIndexError, StructureShapeError

__all__ = ["StructureIndexError", "StructureShapeError"]
