"""Crop and pad (axis-aligned windows), and affine transforms (a 2x3 matrix in continuous
pixel coordinates): rotation and extent, with the warp behind them (OpenCV when installed,
else numpy).

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

from ..structure_common import clip_points, polygon_area
from .transform import (
    Transform, TransformError, TransformList, _apply_box_by_edges, _as_float_coords,
    as_rotated_boxes, check_input_size, finite_floats, positive_ints
)
from .resample import _CV2_DTYPES, _CV2_FLAGS, as_contiguous, get_cv2, normalize_interp

# ------------------------------------------------------------------ warping (OpenCV or numpy)
# warpAffine has no area mode: OpenCV itself falls back to linear
_CV2_WARP_FLAGS = {**_CV2_FLAGS, "box": "LINEAR"}
#: Largest output a warp may produce (pixels, all channels counted once).
MAX_OUTPUT_PIXELS = 1 << 28


class CropTransform(Transform):
    """Crop the window at (x0, y0) of size (w, h); polygons are clipped to it and dropped when
    no area is left. ``orig_w, orig_h`` serve ``inverse()``.
    """

    def __init__(
        self, x0: int, y0: int, w: int, h: int, orig_w: int | None = None, orig_h: int | None = None
    ) -> None:
        if w <= 0 or h <= 0 or x0 < 0 or y0 < 0:
            raise ValueError(f"CropTransform: invalid window x0={x0}, y0={y0}, w={w}, h={h}")
        self.x0, self.y0, self.w, self.h = int(x0), int(y0), int(w), int(h)
        self.orig_w = orig_w
        self.orig_h = orig_h

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        ys = slice(self.y0, self.y0 + self.h)
        xs = slice(self.x0, self.x0 + self.w)
        if img.ndim <= 3:
            return img[ys, xs]
        return img[..., ys, xs, :]

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] -= self.x0
        out[:, 1] -= self.y0
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        boxes[:, 0::2] -= self.x0
        boxes[:, 1::2] -= self.y0

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        if self.x0 + self.w > int(width) or self.y0 + self.h > int(height):
            return None
        return self.h, self.w

    def apply_polygons(self, polygons: Sequence[np.ndarray]) -> list[np.ndarray]:
        x1, y1 = self.x0 + self.w, self.y0 + self.h
        result = []
        for polygon in polygons:
            pts = _as_float_coords(polygon, "polygon")
            clipped = clip_points(pts, self.x0, self.y0, x1, y1)
            if len(clipped) < 3 or (clipped is not pts and polygon_area(clipped.reshape(-1)) <= 0):
                continue
            result.append(self.apply_coords(clipped))
        return result

    def inverse(self) -> Transform:
        if self.orig_w is None or self.orig_h is None:
            raise NotImplementedError(
                "CropTransform.inverse() needs orig_w and orig_h (the size before cropping)"
            )
        pad_x1 = self.orig_w - self.x0 - self.w
        pad_y1 = self.orig_h - self.y0 - self.h
        return PadTransform(self.x0, self.y0, pad_x1, pad_y1, orig_w=self.w, orig_h=self.h)


class PadTransform(Transform):
    """Pad by x0/y0 pixels before and x1/y1 after with ``pad_value`` (segmentation maps:
    ``seg_pad_value``; bool masks: False). ``orig_w, orig_h`` serve ``inverse()``.
    """

    def __init__(
        self,
        x0: int,
        y0: int,
        x1: int,
        y1: int,
        orig_w: int | None = None,
        orig_h: int | None = None,
        pad_value: float = 0,
        seg_pad_value: int = 0,
    ) -> None:
        if min(x0, y0, x1, y1) < 0:
            raise ValueError(f"PadTransform: negative padding ({x0}, {y0}, {x1}, {y1})")
        self.x0, self.y0, self.x1, self.y1 = int(x0), int(y0), int(x1), int(y1)
        self.orig_w, self.orig_h = orig_w, orig_h
        self.pad_value, self.seg_pad_value = pad_value, seg_pad_value

    def _pad(self, img: np.ndarray, value: float) -> np.ndarray:
        widths = [(self.y0, self.y1), (self.x0, self.x1)] + [(0, 0)] * (img.ndim - 2)
        return np.pad(img, widths, mode="constant", constant_values=value)

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._pad(img, self.pad_value)

    def apply_segmentation(self, segmentation: np.ndarray) -> np.ndarray:
        fill = False if segmentation.dtype == bool else self.seg_pad_value
        return self._pad(segmentation, fill)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        out = _as_float_coords(coords)
        out[:, 0] += self.x0
        out[:, 1] += self.y0
        return out

    def move_box_edges(self, boxes: np.ndarray) -> None:
        boxes[:, 0::2] += self.x0
        boxes[:, 1::2] += self.y0

    def apply_box(self, box: Any) -> np.ndarray:
        return _apply_box_by_edges(self, box)

    def output_size(self, height: int, width: int) -> tuple[int, int] | None:
        return int(height) + self.y0 + self.y1, int(width) + self.x0 + self.x1

    def inverse(self) -> Transform:
        if self.orig_w is None or self.orig_h is None:
            raise NotImplementedError(
                "PadTransform.inverse() needs orig_w and orig_h (the size before padding)"
            )
        new_w = self.orig_w + self.x0 + self.x1
        new_h = self.orig_h + self.y0 + self.y1
        return CropTransform(self.x0, self.y0, self.orig_w, self.orig_h, new_w, new_h)


def affine_coords(matrix: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Apply a 2x3 affine matrix to an Nx2 float array of (x, y)."""
    return coords @ matrix[:, :2].T + matrix[:, 2]


def invert_affine(matrix: np.ndarray) -> np.ndarray:
    """The 2x3 matrix of the inverse map (TransformError when singular)."""
    linear = matrix[:, :2]
    det = float(np.linalg.det(linear))
    if not np.isfinite(det) or abs(det) < 1e-12:
        raise TransformError(f"affine matrix {matrix.tolist()} is singular")
    inv = np.linalg.inv(linear)
    return np.concatenate([inv, 0.0 - (inv @ matrix[:, 2])[:, None]], axis=1)


def _source_points(matrix: np.ndarray, out_h: int, out_w: int) -> tuple[np.ndarray, np.ndarray]:
    """Continuous input coordinates (x, y) of every output pixel centre, each out_h x out_w."""
    inv = invert_affine(matrix)
    xs = np.arange(out_w, dtype=np.float64) + 0.5
    ys = np.arange(out_h, dtype=np.float64) + 0.5
    src_x = inv[0, 0] * xs[None, :] + inv[0, 1] * ys[:, None] + inv[0, 2]
    src_y = inv[1, 0] * xs[None, :] + inv[1, 1] * ys[:, None] + inv[1, 2]
    return src_x, src_y


def _filled(img: np.ndarray, out_h: int, out_w: int, fill: Any) -> np.ndarray:
    out = np.empty((out_h, out_w) + img.shape[2:], dtype=img.dtype)
    out[...] = np.asarray(fill).astype(img.dtype)
    return out


def _gather(img: np.ndarray, col: np.ndarray, row: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Write ``img[row, col]`` into ``out`` wherever (row, col) lies inside ``img``."""
    h, w = img.shape[:2]
    inside = (col >= 0) & (col < w) & (row >= 0) & (row < h)
    out[inside] = img[row[inside].astype(np.intp), col[inside].astype(np.intp)]
    return out


def _warp_nearest(
    img: np.ndarray, matrix: np.ndarray, out_h: int, out_w: int, fill: Any
) -> np.ndarray:
    src_x, src_y = _source_points(matrix, out_h, out_w)
    return _gather(img, np.floor(src_x), np.floor(src_y), _filled(img, out_h, out_w, fill))


def _warp_bilinear_numpy(
    img: np.ndarray, matrix: np.ndarray, out_h: int, out_w: int, fill: Any
) -> np.ndarray:
    src_x, src_y = _source_points(matrix, out_h, out_w)
    # Index coordinates: pixel centres sit at integers.
    fx, fy = src_x - 0.5, src_y - 0.5
    x0, y0 = np.floor(fx), np.floor(fy)
    wx, wy = fx - x0, fy - y0
    channels = img.shape[2:]
    src = img.astype(np.float64, copy=False)
    background = _filled(src, out_h, out_w, fill)
    acc = np.zeros((out_h, out_w) + channels, dtype=np.float64)
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        weight = (wx if dx else 1.0 - wx) * (wy if dy else 1.0 - wy)
        values = _gather(src, x0 + dx, y0 + dy, background.copy())
        if channels:
            weight = weight.reshape(weight.shape + (1,) * len(channels))
        acc += weight * values
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        acc = np.clip(np.rint(acc), info.min, info.max)
    return acc.astype(img.dtype)


def _warp_cv2(
    cv2: Any, img: np.ndarray, matrix: np.ndarray, out_h: int, out_w: int, name: str, fill: Any
) -> np.ndarray:
    # cv2 works on pixel indices (centres at integers): shift in by +0.5, out by -0.5.
    index_matrix = matrix.astype(np.float64).copy()
    index_matrix[:, 2] += matrix[:, :2].sum(axis=1) * 0.5 - 0.5
    channels = 1 if img.ndim == 2 else img.shape[2]
    border = tuple(float(v) for v in np.broadcast_to(np.asarray(fill, np.float64), (channels,)))
    border = (border + (0.0,) * 4)[:4] if channels <= 4 else border
    out = cv2.warpAffine(
        as_contiguous(img),
        index_matrix,
        (out_w, out_h),
        flags=getattr(cv2, "INTER_" + _CV2_WARP_FLAGS[name]),
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=border,
    )
    if img.ndim == 3 and out.ndim == 2:
        out = out[:, :, None]
    return out


def warp_affine(
    img: np.ndarray,
    matrix: np.ndarray,
    out_h: int,
    out_w: int,
    interp: int | str | None,
    fill: Any = 0,
) -> np.ndarray:
    """Warp an HxW or HxWxC array with a 2x3 matrix; outside pixels take ``fill``."""
    if img.ndim not in (2, 3):
        raise TransformError(f"warp expects an HxW or HxWxC array, got shape {img.shape}")
    out_h, out_w = int(out_h), int(out_w)
    if out_h <= 0 or out_w <= 0 or out_h * out_w > MAX_OUTPUT_PIXELS:
        raise TransformError(
            f"warp output size ({out_h}, {out_w}) must be positive and at most "
            f"{MAX_OUTPUT_PIXELS} pixels"
        )
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (2, 3) or not np.isfinite(matrix).all():
        raise TransformError(f"warp matrix must be a finite 2x3 array, got {matrix!r}")
    name = normalize_interp(interp)
    if name == "nearest" or img.dtype == np.bool_ or img.size == 0:
        if img.size == 0:
            return _filled(img, out_h, out_w, fill)
        return _warp_nearest(img, matrix, out_h, out_w, fill)
    channels = 1 if img.ndim == 2 else img.shape[2]
    cv2 = get_cv2()
    if cv2 is not None and img.dtype.type in _CV2_DTYPES and channels <= 4:
        return _warp_cv2(cv2, img, matrix, out_h, out_w, name, fill)
    if name == "bilinear":
        return _warp_bilinear_numpy(img, matrix, out_h, out_w, fill)
    raise TransformError(
        f"{name} interpolation for a warp needs OpenCV (pip install opencv-python-headless) "
        f"and an image of dtype uint8/uint16/int16/float32/float64 with at most 4 channels; "
        f"got dtype {img.dtype} with {channels} channels"
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
