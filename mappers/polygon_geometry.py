"""Flat polygons (x0, y0, x1, y1, ...): shoelace area and Sutherland-Hodgman clipping, shared
by PolygonMasks and CropTransform so both clip the same way.

Example:
    >>> polygon_area(clip_polygon(np.array([-2.0, 0, 2, 0, 2, 2, -2, 2]), 0, 0, 5, 5))
    4.0
"""

from __future__ import annotations

import numpy as np

__all__ = ["clip_points", "clip_polygon", "polygon_area"]


def polygon_area(polygon: np.ndarray) -> float:
    """Area of one flat polygon by the shoelace formula (absolute value)."""
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
    """Clip an Nx2 closed polygon to [x0, x1] x [y0, y1]: ``points`` itself when nothing is cut,
    0x2 when nothing is left; pieces stay one polygon joined along the border (same mask).
    """
    for axis, bound, above in ((0, x0, True), (0, x1, False), (1, y0, True), (1, y1, False)):
        points = _clip_axis(points, axis, bound, above)
        if len(points) == 0:
            break
    return points


def clip_polygon(polygon: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Clip a flat polygon to [x0, x1] x [y0, y1]; may return an empty array."""
    return clip_points(polygon.reshape(-1, 2), x0, y0, x1, y1).reshape(-1)
