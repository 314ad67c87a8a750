"""Affine transforms (a 2x3 matrix in continuous pixel coordinates): rotation and extent.

Example:
    >>> import numpy as np
    >>> t = RotationTransform(20, 40, 90)
    >>> (t.bound_h, t.bound_w), t.apply_coords(np.array([[40.0, 0.0]])).round(6).tolist()
    ((40, 20), [[0.0, 0.0]])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._backend import affine_coords, warp_affine
from .transform import (
    normalize_interp,
    CropTransform,
    Transform,
    TransformList,
    _as_float_coords,
    as_rotated_boxes,
    check_input_size,
    finite_floats,
    positive_ints,
)


_BILINEAR = 2  # PIL.Image.BILINEAR


def _cos_sin(degrees: float) -> tuple[float, float]:
    """cos and sin of an angle in degrees, exact for multiples of 90 degrees."""
    if degrees % 90 == 0:
        return ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))[int(degrees // 90) % 4]
    rad = math.radians(degrees)
    return math.cos(rad), math.sin(rad)


def _seg_fill(segmentation: np.ndarray, value: Any) -> Any:
    """A bool bitmask is filled with False."""
    return False if segmentation.dtype == np.bool_ else value


class RotationTransform(Transform):
    """Rotate an image of (h, w) by ``angle`` degrees counter-clockwise about ``center``
    (absolute (x, y), default the image centre); ``expand`` makes the output the rounded
    bounding box of the rotated image, ``bound_h x bound_w``. ``interp`` is an OpenCV flag.
    """

    def __init__(
        self,
        h: int,
        w: int,
        angle: float,
        expand: bool = True,
        center: Sequence[float] | None = None,
        interp: int | str | None = None,
        *,
        pad_value: float = 0,
        seg_pad_value: int = 0,
    ) -> None:
        self.h, self.w = positive_ints("RotationTransform", "(h, w)", (h, w))
        (self.angle,) = finite_floats("RotationTransform", "angle", (angle,))
        self.expand = bool(expand)
        if center is not None:
            center = finite_floats("RotationTransform", "center (x, y)", center, 2)
        self.center = center
        normalize_interp(interp, opencv=True)
        self.interp = interp
        self.pad_value = pad_value
        self.seg_pad_value = seg_pad_value
        cos, sin = _cos_sin(self.angle)
        if self.expand:
            self.bound_w = int(np.rint(self.h * abs(sin) + self.w * abs(cos)))
            self.bound_h = int(np.rint(self.h * abs(cos) + self.w * abs(sin)))
        else:
            self.bound_w, self.bound_h = self.w, self.h
        self.bound_w, self.bound_h = max(self.bound_w, 1), max(self.bound_h, 1)
        self.matrix = self._rotation_matrix(cos, sin)

    def _rotation_matrix(self, cos: float, sin: float) -> np.ndarray:
        cx, cy = self.center if self.center is not None else (self.w / 2, self.h / 2)
        # x' = cos*(x-cx) + sin*(y-cy) + cx ; y' = -sin*(x-cx) + cos*(y-cy) + cy
        matrix = np.array(
            [[cos, sin, cx - cos * cx - sin * cy], [-sin, cos, cy + sin * cx - cos * cy]]
        )
        if self.expand:
            # Move the image centre to the centre of the enlarged output.
            moved = affine_coords(matrix, np.array([[self.w / 2, self.h / 2]]))[0]
            matrix[:, 2] += np.array([self.bound_w / 2, self.bound_h / 2]) - moved
        return matrix

    def _is_identity(self) -> bool:
        return self.angle % 360 == 0

    def apply_image(self, img: np.ndarray, interp: int | str | None = None) -> np.ndarray:
        if self._is_identity() or len(img) == 0:
            return img
        check_input_size(self, img, "image")
        name = normalize_interp(interp if interp is not None else self.interp, opencv=True)
        return warp_affine(img, self.matrix, self.bound_h, self.bound_w, name, self.pad_value)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        if self._is_identity() or len(segmentation) == 0:
            return segmentation
        check_input_size(self, segmentation, "segmentation map")
        fill = _seg_fill(segmentation, self.seg_pad_value)
        return warp_affine(segmentation, self.matrix, self.bound_h, self.bound_w, "nearest", fill)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        if self._is_identity() or len(out) == 0:
            return out
        return affine_coords(self.matrix, out)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        """(bound_h, bound_w) for an input of size (h, w); None for any other size."""
        if self._is_identity():
            return int(height), int(width)
        if (int(height), int(width)) != (self.h, self.w):
            return None
        return self.bound_h, self.bound_w

    def apply_rotated_box(self, rotated_boxes: Any) -> np.ndarray:
        """Exact: the centre moves with the image, w and h stay, the angle grows by ``angle``."""
        boxes = as_rotated_boxes(rotated_boxes)
        if len(boxes) == 0 or self._is_identity():
            return boxes
        boxes[:, :2] = self.apply_coords(boxes[:, :2])
        boxes[:, 4] += self.angle
        return boxes

    def inverse(self) -> Transform:
        """Rotate back and cut the original size out of the centre (a crop when the offset
        is whole, else an ExtentTransform); needs ``expand``."""
        if not self.expand:
            raise NotImplementedError(
                "RotationTransform.inverse() needs expand=True: without it the corners "
                "rotated out of the image are lost"
            )
        back = RotationTransform(
            self.bound_h,
            self.bound_w,
            -self.angle,
            True,
            None,
            self.interp,
            pad_value=self.pad_value,
            seg_pad_value=self.seg_pad_value,
        )
        x0 = (back.bound_w - self.w) / 2
        y0 = (back.bound_h - self.h) / 2
        if x0 == int(x0) and y0 == int(y0) and x0 >= 0 and y0 >= 0:
            cut: Transform = CropTransform(
                int(x0), int(y0), self.w, self.h, orig_w=back.bound_w, orig_h=back.bound_h
            )
        else:
            cut = ExtentTransform(
                (x0, y0, x0 + self.w, y0 + self.h),
                (self.h, self.w),
                interp=_BILINEAR,
                fill=self.pad_value,
                seg_fill=self.seg_pad_value,
            )
        return TransformList([back, cut])


class _OutputSize(tuple):
    """The (h, w) attribute of detectron2 that, called, also answers ``output_size(h, w)``."""

    __slots__ = ()

    def __call__(self, height: int, width: int) -> tuple[int, int]:
        return int(self[0]), int(self[1])


class ExtentTransform(Transform):
    """Scale the rectangle ``src_rect`` (x0, y0, x1, y1; may reach past the image, filled
    with ``fill`` / ``seg_fill``) to ``output_size`` (h, w).
    """

    def __init__(
        self,
        src_rect: Sequence[float],
        output_size: Sequence[int],
        interp: int | str = _BILINEAR,
        fill: float = 0,
        *,
        seg_fill: int = 0,
    ) -> None:
        x0, y0, x1, y1 = finite_floats("ExtentTransform", "src_rect (x0, y0, x1, y1)", src_rect, 4)
        if not (x1 > x0 and y1 > y0):
            raise ValueError(
                f"ExtentTransform: src_rect {src_rect!r} is empty (need x1 > x0, y1 > y0)"
            )
        out_h, out_w = positive_ints("ExtentTransform", "output_size (h, w)", output_size)
        normalize_interp(interp)
        self.src_rect = (x0, y0, x1, y1)
        self.output_size = _OutputSize((out_h, out_w))
        self.interp = interp
        self.fill = fill
        self.seg_fill = seg_fill
        sx, sy = out_w / (x1 - x0), out_h / (y1 - y0)
        self.matrix = np.array([[sx, 0.0, -x0 * sx], [0.0, sy, -y0 * sy]])

    def apply_image(self, img: np.ndarray, interp: int | str | None = None) -> np.ndarray:
        h, w = self.output_size
        name = normalize_interp(interp if interp is not None else self.interp)
        return warp_affine(img, self.matrix, h, w, name, self.fill)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        h, w = self.output_size
        fill = _seg_fill(segmentation, self.seg_fill)
        return warp_affine(segmentation, self.matrix, h, w, "nearest", fill)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        if len(out) == 0:
            return out
        return affine_coords(self.matrix, out)
