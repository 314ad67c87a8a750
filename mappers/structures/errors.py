"""Typed errors of :mod:`mappers.structures`.

Example:
    >>> from mappers.structures import Boxes
    >>> try:
    ...     Boxes([[1.0, 2.0, 3.0]])
    ... except StructureShapeError as exc:
    ...     print(type(exc).__name__)
    StructureShapeError
"""

from __future__ import annotations

from catalog.errors import CatmapError

__all__ = ["StructureIndexError", "StructureShapeError"]


class StructureShapeError(CatmapError, ValueError):
    """A structure (boxes, masks, keypoints, images) got data of the wrong shape, dtype or
    type; the message names the structure and the shape it needs."""


class StructureIndexError(CatmapError, IndexError):
    """A structure was indexed with something it cannot be indexed by, or out of range."""
