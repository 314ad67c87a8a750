"""Image resampling: resize, flip and affine warp; OpenCV when installed, else Pillow/numpy/torch.

Nearest neighbour is numpy indexing at pixel centres for every dtype, so segmentation maps are
identical whichever backend is installed.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from catalog._common import CatmapError

from ..image_io import get_cv2 as _configured_cv2


class TransformError(CatmapError, ValueError):
    """A transform was given input it cannot handle (wrong image size, malformed coordinates)."""


#: Pillow's resampling constants, by value.
INTERP_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_NAME_TO_PIL = {name: value for value, name in INTERP_NAMES.items()}
_NAME_ALIASES = {"linear": "bilinear", "cubic": "bicubic", "area": "box", "antialias": "lanczos"}

# dtypes cv2.resize handles for the interpolating modes.
_CV2_DTYPES = (np.uint8, np.uint16, np.int16, np.float32, np.float64)


@functools.lru_cache(maxsize=1)
def get_cv2() -> Any | None:
    """``cv2`` set to one thread (see ``mappers.image_io``), or None without OpenCV."""
    return _configured_cv2()


@functools.lru_cache(maxsize=1)
def _get_pil_image() -> Any | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


_PIL_CODES = "a Pillow constant (0 NEAREST, 1 LANCZOS, 2 BILINEAR, 3 BICUBIC, 4 BOX, 5 HAMMING)"
_CV2_CODES = (
    "an OpenCV flag (0 INTER_NEAREST, 1 INTER_LINEAR, 2 INTER_CUBIC, 3 INTER_AREA, "
    "4 INTER_LANCZOS4)"
)
#: OpenCV's interpolation flags, by value.
CV2_INTERP_NAMES = {0: "nearest", 1: "bilinear", 2: "bicubic", 3: "box", 4: "lanczos"}


def normalize_interp(
    interp: int | str | None, default: str = "bilinear", *, opencv: bool = False
) -> str:
    """The name of an interpolation given as a name or a Pillow (or, with ``opencv``, an
    OpenCV) constant."""
    if interp is None:
        return default
    codes = CV2_INTERP_NAMES if opencv else INTERP_NAMES
    if isinstance(interp, str):
        name = interp.lower()
        name = _NAME_ALIASES.get(name, name)
        if name in _NAME_TO_PIL:
            return name
    else:
        try:
            value = int(interp)
        except (TypeError, ValueError):
            value = -1
        if value in codes:
            return codes[value]
    raise ValueError(
        f"unknown interpolation {interp!r}; use {_CV2_CODES if opencv else _PIL_CODES} or one "
        f"of {sorted(_NAME_TO_PIL)}"
    )


def _nearest_indices(old: int, new: int) -> np.ndarray:
    # Pixel-centre sampling: output pixel i covers input coordinate (i + 0.5) * old / new.
    idx = ((np.arange(new, dtype=np.float64) + 0.5) * (old / new)).astype(np.intp)
    return np.minimum(idx, old - 1)


def _resize_nearest(img: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    h, w = img.shape[:2]
    rows = _nearest_indices(h, new_h)
    cols = _nearest_indices(w, new_w)
    return np.take(np.take(img, rows, axis=0), cols, axis=1)


_CV2_FLAGS = {"bilinear": "LINEAR", "bicubic": "CUBIC", "lanczos": "LANCZOS4", "box": "AREA"}


def _resize_cv2(cv2: Any, img: np.ndarray, new_h: int, new_w: int, name: str) -> np.ndarray:
    src = as_contiguous(img)  # e.g. a flipped view with negative strides
    out = cv2.resize(src, (new_w, new_h), interpolation=getattr(cv2, "INTER_" + _CV2_FLAGS[name]))
    if img.ndim == 3 and out.ndim == 2:  # cv2 drops a trailing channel axis of size 1
        out = out[:, :, None]
    return out


def _resize_pil(image_mod: Any, img: np.ndarray, new_h: int, new_w: int, name: str) -> np.ndarray:
    squeeze = img.ndim == 3 and img.shape[2] == 1
    src = img[:, :, 0] if squeeze else img
    pil = image_mod.fromarray(np.ascontiguousarray(src))
    out = np.asarray(pil.resize((new_w, new_h), resample=_NAME_TO_PIL[name]))
    return out[:, :, None] if squeeze else out


def _resize_torch(img: np.ndarray, new_h: int, new_w: int, name: str) -> np.ndarray:
    modes = {"bilinear": "bilinear", "bicubic": "bicubic", "box": "area"}
    if name not in modes:
        raise ValueError(
            f"interpolation {name!r} needs OpenCV or Pillow (pip install opencv-python-headless)"
        )
    shape = img.shape
    x = torch.from_numpy(np.ascontiguousarray(img).astype(np.float32, copy=False))
    x = x.reshape(shape[0], shape[1], -1).permute(2, 0, 1)[None]
    kwargs = {} if modes[name] == "area" else {"align_corners": False}
    y = F.interpolate(x, size=(new_h, new_w), mode=modes[name], **kwargs)[0].permute(1, 2, 0)
    out = y.numpy()
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    out = out.astype(img.dtype, copy=False)
    return out.reshape((new_h, new_w) + shape[2:])


def resize_array(img: np.ndarray, new_h: int, new_w: int, interp: int | str | None) -> np.ndarray:
    """Resize an HxW / HxWxC array keeping dtype and channel axis: OpenCV when the dtype
    allows, else Pillow (uint8 with 1, 3, 4 channels; float32 gray), else torch."""
    if img.ndim not in (2, 3):
        raise ValueError(f"resize expects an HxW or HxWxC array, got shape {img.shape}")
    name = normalize_interp(interp)
    if img.shape[0] == new_h and img.shape[1] == new_w:
        return img
    if name == "nearest":
        return _resize_nearest(img, new_h, new_w)
    if img.dtype == np.bool_:
        return resize_array(img.astype(np.uint8), new_h, new_w, name).astype(np.bool_)
    channels = 1 if img.ndim == 2 else img.shape[2]
    cv2 = get_cv2()
    if cv2 is not None and name != "hamming" and img.dtype.type in _CV2_DTYPES and channels <= 512:
        return _resize_cv2(cv2, img, new_h, new_w, name)
    image_mod = _get_pil_image()
    if image_mod is not None:
        if (img.dtype == np.uint8 and channels in (1, 3, 4)) or (
            img.dtype == np.float32 and channels == 1
        ):
            return _resize_pil(image_mod, img, new_h, new_w, name)
        if name == "hamming":
            raise ValueError(
                f"hamming interpolation (Pillow only) needs a uint8 image with 1, 3 or 4 "
                f"channels, got dtype {img.dtype} with {channels} channels"
            )
    return _resize_torch(img, new_h, new_w, name)


def flip_array(img: np.ndarray, horizontal: bool) -> np.ndarray:
    """Flip an HxW, HxWxC or NxHxWxC array as a view (no copy; a later resize or the CHW
    copy of the model input makes it contiguous for free)."""
    if img.ndim <= 3:
        return img[:, ::-1] if horizontal else img[::-1]
    return img[..., ::-1, :] if horizontal else img[..., ::-1, :, :]


def as_contiguous(img: np.ndarray) -> np.ndarray:
    """``img`` C-contiguous; a flipped view of a contiguous array goes through ``cv2.flip``
    (about 20x faster than numpy's strided copy)."""
    if img.flags.c_contiguous:
        return img
    cv2 = get_cv2()
    if (
        cv2 is not None
        and img.ndim in (2, 3)
        and img.size > 0
        and img.dtype.type in _CV2_DTYPES
        and (img.ndim == 2 or img.shape[2] <= 512)
    ):
        for flip_code, base in ((1, img[:, ::-1]), (0, img[::-1]), (-1, img[::-1, ::-1])):
            if base.flags.c_contiguous:
                out = cv2.flip(base, flip_code)
                if img.ndim == 3 and out.ndim == 2:
                    out = out[:, :, None]
                return out
    return np.ascontiguousarray(img)


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
