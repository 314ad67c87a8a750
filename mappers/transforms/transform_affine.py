"""Affine transforms: rotation about a point and extraction of a (scaled) sub-rectangle.

Both move coordinates with a 2x3 matrix in continuous pixel coordinates (the image spans
``[0, w] x [0, h]``) and warp images with the same matrix (:mod:`._warp`); segmentation maps
and bitmasks use nearest neighbour.

Example:
    >>> import numpy as np
    >>> t = RotationTransform(20, 40, 90)
    >>> (t.bound_h, t.bound_w), t.apply_image(np.zeros((20, 40), np.uint8)).shape
    ((40, 20), (40, 20))
    >>> t.apply_coords(np.array([[40.0, 0.0]])).round(6).tolist()
    [[0.0, 0.0]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._backend import normalize_interp
from ._warp import affine_coords, warp_affine
from .rotated_boxes import as_rotated_boxes
from .transform import (
    CropTransform,
    Transform,
    TransformList,
    _as_float_coords,
    check_input_size,
)

__all__ = ["RotationTransform", "ExtentTransform"]

_BILINEAR = 2  # PIL.Image.BILINEAR


def _positive_int(owner: str, name: str, value: Any) -> int:
    try:
        ok = int(value) == value and int(value) > 0
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


def _finite(owner: str, name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return number


def _cos_sin(degrees: float) -> tuple[float, float]:
    """cos and sin of an angle in degrees, exact for multiples of 90 degrees."""
    if degrees % 90 == 0:
        return ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))[int(degrees // 90) % 4]
    rad = math.radians(degrees)
    return math.cos(rad), math.sin(rad)


def _seg_fill(segmentation: np.ndarray, value: Any) -> Any:
    """The fill for a segmentation map; a bool bitmask is filled with False (nothing there)."""
    return False if segmentation.dtype == np.bool_ else value


class RotationTransform(Transform):
    """Rotate an image of size (h, w) by ``angle`` degrees counter-clockwise about a point.

    Args:
        h, w: the input image size.
        angle: degrees, counter-clockwise as seen on the image.
        expand: make the output large enough to hold the whole rotated image (size
            ``bound_h x bound_w``, the rounded bounding box of the rotated image, with the
            image centre at its centre); otherwise the output has the input size.
        center: (x, y) absolute rotation centre; default the image centre. With ``expand``
            it only changes a translation that expand then removes, so it has no effect.
        interp: OpenCV interpolation flag as in detectron2 (``cv2.INTER_LINEAR`` = 1, the
            default) or a name ("nearest", "bilinear", "bicubic", ...).
        pad_value: fill for image pixels from outside the input; seg_pad_value: the same
            for segmentation maps and integer masks (both 0 by default, as in detectron2).
            Bool bitmasks are always filled with False.

    Raises:
        ValueError: non-positive sizes, a non-finite angle or centre, unknown interp.

    Example:
        >>> RotationTransform(10, 10, 180).apply_coords(np.array([[1.0, 2.0]])).round(6).tolist()
        [[9.0, 8.0]]
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
        self.h = _positive_int("RotationTransform", "h", h)
        self.w = _positive_int("RotationTransform", "w", w)
        self.angle = _finite("RotationTransform", "angle", angle)
        self.expand = bool(expand)
        if center is not None:
            if len(center) != 2:
                raise ValueError(f"RotationTransform: center must be (x, y), got {center!r}")
            center = (
                _finite("RotationTransform", "center", center[0]),
                _finite("RotationTransform", "center", center[1]),
            )
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
            [
                [cos, sin, cx - cos * cx - sin * cy],
                [-sin, cos, cy + sin * cx - cos * cy],
            ]
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
        """Exact: the centre moves with the image, w and h stay, the angle grows by ``angle``.

        Example:
            >>> t = RotationTransform(10, 10, 90, expand=False)
            >>> t.apply_rotated_box([[5.0, 5.0, 4.0, 2.0, 0.0]]).round(6).tolist()
            [[5.0, 5.0, 4.0, 2.0, 90.0]]
        """
        boxes = as_rotated_boxes(rotated_boxes)
        if len(boxes) == 0 or self._is_identity():
            return boxes
        boxes[:, :2] = self.apply_coords(boxes[:, :2])
        boxes[:, 4] += self.angle
        return boxes

    def inverse(self) -> Transform:
        """Rotate back (with expand) and cut the original image size out of the centre.

        The cut is a :class:`CropTransform` when its offset is whole, else an
        :class:`ExtentTransform` with the fractional offset, so coordinates round-trip
        exactly either way.

        Raises:
            NotImplementedError: ``expand`` is False (the corners cut off are lost).
        """
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
    """ExtentTransform's ``output_size``: the (h, w) pair given (detectron2's attribute) that,
    called with an input size, also answers the transforms' ``output_size(height, width)``
    protocol (the output size does not depend on the input's)."""

    __slots__ = ()

    def __call__(self, height: int, width: int) -> tuple[int, int]:
        return int(self[0]), int(self[1])


class ExtentTransform(Transform):
    """Take the rectangle ``src_rect`` of the input and scale it to ``output_size``.

    Parts of the rectangle outside the input image are filled with ``fill``. Coordinates map
    ``(x0, y0)`` to ``(0, 0)`` and ``(x1, y1)`` to ``(w, h)`` of the output.

    Args:
        src_rect: (x0, y0, x1, y1) in input coordinates (may extend past the image).
        output_size: (h, w) of the output.
        interp: Pillow interpolation constant or name (default bilinear).
        fill: fill value for images; seg_fill: for segmentation maps and integer masks
            (default 0, as detectron2's fill). Bool bitmasks are always filled with False.

    Raises:
        ValueError: an empty or non-finite rectangle, a non-positive output size, unknown
            interpolation.

    Example:
        >>> t = ExtentTransform((10, 10, 30, 20), (20, 40))
        >>> t.apply_coords(np.array([[10.0, 10.0], [30.0, 20.0]])).tolist()
        [[0.0, 0.0], [40.0, 20.0]]
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
        rect = tuple(src_rect)
        if len(rect) != 4:
            raise ValueError(
                f"ExtentTransform: src_rect must be (x0, y0, x1, y1), got {src_rect!r}"
            )
        x0, y0, x1, y1 = (_finite("ExtentTransform", "src_rect", v) for v in rect)
        if not (x1 > x0 and y1 > y0):
            raise ValueError(f"ExtentTransform: src_rect {rect!r} is empty (need x1 > x0, y1 > y0)")
        size = tuple(output_size)
        if len(size) != 2:
            raise ValueError(f"ExtentTransform: output_size must be (h, w), got {output_size!r}")
        out_h = _positive_int("ExtentTransform", "output_size", size[0])
        out_w = _positive_int("ExtentTransform", "output_size", size[1])
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
