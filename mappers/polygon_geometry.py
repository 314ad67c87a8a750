"""Plane geometry of flat polygons (x0, y0, x1, y1, ...): area and clipping to a rectangle.

Used by :class:`~mappers.structures.PolygonMasks` (rasterizing far-out polygons) and by
``CropTransform`` (cropping polygons), so both clip the same way.

Example:
    >>> polygon_area(clip_polygon(np.array([-2.0, 0, 2, 0, 2, 2, -2, 2]), 0, 0, 5, 5))
    4.0
"""

from __future__ import annotations

import numpy as np

__all__ = ["clip_points", "clip_polygon", "polygon_area"]


def polygon_area(polygon: np.ndarray) -> float:
    """Area of one flat polygon by the shoelace formula (absolute value).

    Example:
        >>> polygon_area(np.array([0.0, 0, 2, 0, 2, 2, 0, 2]))
        4.0
    """
    x, y = polygon[0::2], polygon[1::2]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _clip_axis(points: np.ndarray, axis: int, bound: float, keep_above: bool) -> np.ndarray:
    """One Sutherland-Hodgman pass of an Nx2 closed polygon against x or y = bound."""
    if len(points) == 0:
        return points
    values = points[:, axis]
    inside = values >= bound if keep_above else values <= bound
    if inside.all() or not inside.any():
        return points if inside.all() else points[:0]
    nxt = np.roll(points, -1, axis=0)
    crosses = inside != np.roll(inside, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(crosses, (bound - values) / (nxt[:, axis] - values), 0.0)
    crossing = points + t[:, None] * (nxt - points)
    crossing[:, axis] = bound
    stacked = np.stack([points, crossing], axis=1).reshape(-1, 2)
    return stacked[np.stack([inside, crosses], axis=1).reshape(-1)]


def clip_points(points: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Clip an Nx2 closed polygon to the rectangle [x0, x1] x [y0, y1] (Sutherland-Hodgman).

    Returns ``points`` itself when nothing is cut off, and an empty 0x2 array when nothing is
    left. A polygon cut into several pieces stays one polygon whose pieces are joined along
    the rectangle's border (the same mask).

    Example:
        >>> square = np.array([[0.0, 0], [2, 0], [2, 2], [0, 2]])
        >>> clip_points(square, 0, 0, 5, 5) is square, clip_points(square, 3, 3, 5, 5).shape
        (True, (0, 2))
    """
    for axis, bound, above in ((0, x0, True), (0, x1, False), (1, y0, True), (1, y1, False)):
        points = _clip_axis(points, axis, bound, above)
        if len(points) == 0:
            break
    return points


def clip_polygon(polygon: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Clip a flat polygon to the rectangle [x0, x1] x [y0, y1]; may return an empty array.

    The part of the polygon inside the rectangle is unchanged, so a rasterization inside the
    rectangle is the same.

    Example:
        >>> clip_polygon(np.array([-2.0, 0, 2, 0, 2, 2, -2, 2]), 0, 0, 5, 5).tolist()
        [0.0, 0.0, 2.0, 0.0, 2.0, 2.0, 0.0, 2.0]
    """
    return clip_points(polygon.reshape(-1, 2), x0, y0, x1, y1).reshape(-1)
