"""Rotated boxes through transforms: ``Transform.apply_rotated_box`` is implemented here.

A rotated box is a row ``(cx, cy, w, h, angle)`` in absolute pixels, ``angle`` in degrees,
counter-clockwise as seen on the image (detectron2's ``BoxMode.XYWHA_ABS``): at angle θ the
box's width runs along ``(cos θ, -sin θ)`` and its height along ``(sin θ, cos θ)`` in image
coordinates (y pointing down).

How each transform moves them:

* colour transforms and the identity: unchanged (the very object given back);
* a :class:`~mappers.transforms.TransformList`: each transform in turn, with its own rule;
* horizontal / vertical flip: the centre is mirrored and the angle negated; w, h are kept;
* resize: detectron2's rule (that of ``RotatedBoxes.scale``): the centre is scaled; the
  width and height are the lengths of the scaled width and height axes, and the new angle
  is the direction of the scaled height axis. Exact for a uniform scale (and for angles
  that are multiples of 90 degrees); for a non-uniform scale a rotated rectangle becomes a
  parallelogram, and this is the usual approximation of it;
* rotations (``RotationTransform``): exact, with their own method (angle increased);
* anything else: the same construction as resize, done through ``apply_coords``: the centre
  is mapped, and the two half-axes by central differences (exact for any affine map, a
  first-order approximation otherwise); the new angle is picked among its 360-degree
  equivalents as the one nearest the old angle, so a crop or pad leaves angles untouched.

Example:
    >>> import numpy as np
    >>> from mappers.transforms import HFlipTransform
    >>> HFlipTransform(100).apply_rotated_box(np.array([[30.0, 40.0, 20.0, 10.0, 30.0]])).tolist()
    [[70.0, 40.0, 20.0, 10.0, -30.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .transform import (
    GeometryPreservingTransform,
    ResizeTransform,
    Transform,
    TransformError,
    TransformList,
    _AxisFlipTransform,
)

__all__ = ["transform_rotated_boxes", "as_rotated_boxes"]


def as_rotated_boxes(rotated_boxes: Any) -> np.ndarray:
    """Return a float copy of ``rotated_boxes`` as an Nx5 array (a single row is accepted).

    Raises:
        TransformError: the input is not Nx5.

    Example:
        >>> as_rotated_boxes([1, 2, 3, 4, 5]).shape
        (1, 5)
    """
    arr = np.asarray(rotated_boxes)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    else:
        arr = arr.copy()
    if arr.ndim == 1 and arr.shape[0] == 5:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != 5:
        if arr.size == 0:
            return arr.reshape(0, 5)
        raise TransformError(
            f"rotated boxes must be an Nx5 array of (cx, cy, w, h, angle), got shape {arr.shape}"
        )
    return arr


def _axes(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Half-width and half-height vectors (each Nx2) of rotated boxes."""
    theta = np.deg2rad(boxes[:, 4])
    c, s = np.cos(theta), np.sin(theta)
    half_w = 0.5 * boxes[:, 2:3] * np.stack([c, -s], axis=1)
    half_h = 0.5 * boxes[:, 3:4] * np.stack([s, c], axis=1)
    return half_w, half_h


def _flip(t: _AxisFlipTransform, boxes: np.ndarray) -> np.ndarray:
    out = boxes.copy()
    out[:, :2] = t.apply_coords(boxes[:, :2])
    out[:, 4] = -boxes[:, 4]
    return out


def _resize(t: ResizeTransform, boxes: np.ndarray) -> np.ndarray:
    sx, sy = t.new_w / t.w, t.new_h / t.h
    out = boxes.copy()
    out[:, 0] *= sx
    out[:, 1] *= sy
    theta = np.deg2rad(boxes[:, 4])
    c, s = np.cos(theta), np.sin(theta)
    out[:, 2] = boxes[:, 2] * np.hypot(sx * c, sy * s)
    out[:, 3] = boxes[:, 3] * np.hypot(sx * s, sy * c)
    out[:, 4] = np.rad2deg(np.arctan2(sx * s, sy * c))
    return out


def _generic(t: Transform, boxes: np.ndarray) -> np.ndarray:
    n = len(boxes)
    centers = boxes[:, :2]
    half_w, half_h = _axes(boxes)
    points = np.concatenate(
        [centers, centers + half_w, centers - half_w, centers + half_h, centers - half_h]
    )
    mapped = np.asarray(t.apply_coords(points), dtype=np.float64).reshape(5, n, 2)
    new_half_w = 0.5 * (mapped[1] - mapped[2])
    new_half_h = 0.5 * (mapped[3] - mapped[4])
    out = np.empty_like(boxes, dtype=np.float64)
    out[:, :2] = mapped[0]
    out[:, 2] = 2.0 * np.hypot(new_half_w[:, 0], new_half_w[:, 1])
    out[:, 3] = 2.0 * np.hypot(new_half_h[:, 0], new_half_h[:, 1])
    # The height axis (sin a, cos a) gives the angle a; keep the representative nearest the
    # old angle so translations and crops leave the angle as it was.
    angle = np.rad2deg(np.arctan2(new_half_h[:, 0], new_half_h[:, 1]))
    delta = np.mod(angle - boxes[:, 4] + 180.0, 360.0) - 180.0
    out[:, 4] = boxes[:, 4] + delta
    # A degenerate height axis (h == 0) has no direction: take the width axis (cos a, -sin a).
    flat = out[:, 3] == 0
    if flat.any():
        angle_w = np.rad2deg(np.arctan2(-new_half_w[flat, 1], new_half_w[flat, 0]))
        delta_w = np.mod(angle_w - boxes[flat, 4] + 180.0, 360.0) - 180.0
        out[flat, 4] = boxes[flat, 4] + delta_w
    return out.astype(boxes.dtype, copy=False)


def transform_rotated_boxes(transform: Transform, rotated_boxes: Any) -> Any:
    """Move Nx5 rotated boxes ``(cx, cy, w, h, angle_degrees)`` through ``transform``.

    This is what ``Transform.apply_rotated_box`` calls; a transform class can override that
    method (or use ``register_type("rotated_box", fn)``) for an exact rule of its own.

    Args:
        transform: any Transform.
        rotated_boxes: Nx5 array-like (a single 5-vector is taken as one box).

    Returns:
        An Nx5 float array (a new array; the input is not modified). Colour transforms and
        the identity return the input object as it is.

    Raises:
        TransformError: the boxes are not Nx5.

    Example:
        >>> from mappers.transforms import ResizeTransform
        >>> t = ResizeTransform(100, 100, 200, 200)
        >>> transform_rotated_boxes(t, [[10.0, 20.0, 4.0, 2.0, 45.0]]).round(6).tolist()
        [[20.0, 40.0, 8.0, 4.0, 45.0]]
    """
    if isinstance(transform, GeometryPreservingTransform):
        return rotated_boxes
    if isinstance(transform, TransformList):
        out = as_rotated_boxes(rotated_boxes)
        for t in transform.transforms:
            out = t.apply_rotated_box(out)
        return out
    boxes = as_rotated_boxes(rotated_boxes)
    if len(boxes) == 0:
        return boxes
    if isinstance(transform, _AxisFlipTransform):
        return _flip(transform, boxes)
    if isinstance(transform, ResizeTransform):
        return _resize(transform, boxes)
    return _generic(transform, boxes)
