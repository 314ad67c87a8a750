"""Affine warps (OpenCV when installed, else numpy); resizing and flips live in ``transform``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .transform import (  # noqa: F401 (re-exported: the resampling helpers' old home)
    _CV2_DTYPES,
    _CV2_FLAGS,
    CV2_INTERP_NAMES,
    INTERP_NAMES,
    TransformError,
    as_contiguous,
    flip_array,
    get_cv2,
    normalize_interp,
    resize_array,
)


# warpAffine has no area mode: OpenCV itself falls back to linear
_CV2_WARP_FLAGS = {**_CV2_FLAGS, "box": "LINEAR"}
#: Largest output a warp may produce (pixels, all channels counted once).
MAX_OUTPUT_PIXELS = 1 << 28


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
