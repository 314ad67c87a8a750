"""Resampling of image arrays: resize with detectron2's pixels (Pillow's filters; torch's
antialiased interpolate where it equals them) or OpenCV's, and flips as views.

Example:
    >>> resize_array(np.zeros((4, 6, 3), np.uint8), 2, 3, "bilinear").shape
    (2, 3, 3)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..image_io import get_cv2  # one thread per process (see there)

#: Pillow's resampling constants, by value.
INTERP_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_NAME_TO_PIL = {name: value for value, name in INTERP_NAMES.items()}
_NAME_ALIASES = {"linear": "bilinear", "cubic": "bicubic", "area": "box", "antialias": "lanczos"}
#: OpenCV's interpolation flags, by value.
CV2_INTERP_NAMES = {0: "nearest", 1: "bilinear", 2: "bicubic", 3: "box", 4: "lanczos"}
_CV2_FLAGS = {"bilinear": "LINEAR", "bicubic": "CUBIC", "lanczos": "LANCZOS4", "box": "AREA"}
_CV2_DTYPES = (np.uint8, np.uint16, np.int16, np.float32, np.float64)  # cv2.resize's dtypes
#: ``backend`` of :func:`resize_array` / ResizeTransform: "pil" gives detectron2's pixels,
#: "opencv" OpenCV's (faster; no antialiasing when shrinking: up to ~30 levels apart).
RESIZE_BACKENDS = ("pil", "opencv")


@functools.lru_cache(maxsize=1)
def _get_pil_image() -> Any | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def normalize_interp(
    interp: int | str | None, default: str = "bilinear", *, opencv: bool = False
) -> str:
    """The name of an interpolation given as a name or a Pillow (or, with ``opencv``, an
    OpenCV) constant."""
    if interp is None:
        return default
    codes = CV2_INTERP_NAMES if opencv else INTERP_NAMES
    if isinstance(interp, str):
        name = _NAME_ALIASES.get(interp.lower(), interp.lower())
        if name in _NAME_TO_PIL:
            return name
    else:
        try:
            value = int(interp)
        except (TypeError, ValueError):
            value = -1
        if value in codes:
            return codes[value]
    pil = "a Pillow constant (0 NEAREST, 1 LANCZOS, 2 BILINEAR, 3 BICUBIC, 4 BOX, 5 HAMMING)"
    cv = "an OpenCV flag (0 NEAREST, 1 LINEAR, 2 CUBIC, 3 AREA, 4 LANCZOS4)"
    raise ValueError(
        f"unknown interpolation {interp!r}; use {cv if opencv else pil} or one of "
        f"{sorted(_NAME_TO_PIL)}"
    )


def _nearest_indices(old: int, new: int, torch_rule: bool = False) -> np.ndarray:
    if torch_rule:  # torch's (detectron2's for float images): floor(i * (old / new)), float32
        positions = np.arange(new, dtype=np.float32) * np.float32(old / new)
        return np.minimum(positions.astype(np.intp), old - 1)
    # Pillow's rule: output pixel i samples input (i + 0.5) * old / new, the position summed
    # step by step in float64 as Pillow does (a closed form differs at exact integers).
    steps = np.full(new, old / new)
    steps[0] *= 0.5
    return np.minimum(np.cumsum(steps).astype(np.intp), old - 1)


def _resize_cv2(
    img: np.ndarray, new_h: int, new_w: int, name: str, dst: np.ndarray | None = None
) -> np.ndarray:
    cv2 = get_cv2()
    flag = getattr(cv2, "INTER_" + _CV2_FLAGS[name])
    out = cv2.resize(as_contiguous(img), (new_w, new_h), dst=dst, interpolation=flag)
    return out[:, :, None] if img.ndim == 3 and out.ndim == 2 else out  # cv2 drops C=1


def _resize_pil(img: np.ndarray, new_h: int, new_w: int, name: str) -> np.ndarray:
    squeeze = img.ndim == 3 and img.shape[2] == 1
    pil = _get_pil_image().fromarray(np.ascontiguousarray(img[:, :, 0] if squeeze else img))
    out = np.asarray(pil.resize((new_w, new_h), resample=_NAME_TO_PIL[name]))
    return out[:, :, None] if squeeze else out


def _resize_torch(
    img: np.ndarray, new_h: int, new_w: int, name: str, antialias: bool
) -> np.ndarray:
    """torch.interpolate; ``antialias`` on uint8 is Pillow's filter (within 1 level)."""
    modes = {"bilinear": "bilinear", "bicubic": "bicubic", "box": "area"}
    if name not in modes:
        raise ValueError(
            f"interpolation {name!r} needs OpenCV or Pillow (pip install opencv-python-headless)"
        )
    x = torch.from_numpy(img if img.flags.c_contiguous else as_contiguous(img))
    if not (x.is_floating_point() or (antialias and x.dtype == torch.uint8)):
        x = x.float()
    x = x.reshape(img.shape[0], img.shape[1], -1).permute(2, 0, 1)[None]
    kwargs = {} if name == "box" else {"align_corners": False, "antialias": antialias}
    y = F.interpolate(x, size=(new_h, new_w), mode=modes[name], **kwargs)[0].permute(1, 2, 0)
    out = y.numpy()
    if np.issubdtype(img.dtype, np.integer) and out.dtype != img.dtype:
        info = np.iinfo(img.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(img.dtype, copy=False).reshape((new_h, new_w) + img.shape[2:])


def resize_array(
    img: np.ndarray, new_h: int, new_w: int, interp: int | str | None, backend: str = "pil",
    *, output_space: Callable[[tuple[int, ...], np.dtype], np.ndarray | None] | None = None,
) -> np.ndarray:
    """Resize an HxW / HxWxC array keeping dtype and channel axis.

    ``backend="pil"``: detectron2's pixels (Pillow's resize for uint8, within 1 level where
    torch or OpenCV compute it faster; torch.interpolate for float images; nearest for other
    dtypes by Pillow's rule). ``"opencv"``: cv2.resize where the dtype allows (nearest always
    by Pillow's rule). ``output_space``: ``(shape, dtype) -> array or None``, the memory the
    result goes to (a loader's shared slab): OpenCV resizes straight into it, other paths copy.

    Example:
        >>> resize_array(np.zeros((4, 6, 3), np.uint8), 2, 3, "bilinear").shape
        (2, 3, 3)
    """
    if img.ndim not in (2, 3):
        raise ValueError(f"resize expects an HxW or HxWxC array, got shape {img.shape}")
    name = INTERP_NAMES.get(interp) if type(interp) is int else None  # the usual Pillow int
    name = name or normalize_interp(interp)
    if output_space is not None and (
            img.dtype == np.uint8 and img.ndim == 3 and 2 <= img.shape[2] <= 4
            and name == "bilinear" and get_cv2() is not None
            and (backend == "opencv" or (new_h >= img.shape[0] and new_w >= img.shape[1]))):
        out = output_space((new_h, new_w, img.shape[2]), img.dtype)  # OpenCV's path below
        if out is not None:
            return _resize_cv2(img, new_h, new_w, name, dst=out)
    elif output_space is not None and img.ndim == 3:  # copied there: no batch of images left
        result = resize_array(img, new_h, new_w, name, backend)  # on the heap to free
        out = output_space(result.shape, result.dtype)
        if out is not None:
            np.copyto(out, result)
            return out
        return result
    if img.shape[0] == new_h and img.shape[1] == new_w:
        return img
    if name == "nearest":
        torch_rule = img.dtype.kind == "f" and backend == "pil"
        rows = _nearest_indices(img.shape[0], new_h, torch_rule)
        cols = _nearest_indices(img.shape[1], new_w, torch_rule)
        return np.take(np.take(img, rows, axis=0), cols, axis=1)
    if img.dtype == np.bool_:
        return resize_array(img.astype(np.uint8), new_h, new_w, name, backend) > 0
    channels = 1 if img.ndim == 2 else img.shape[2]
    cv_ok = get_cv2() is not None and name != "hamming" and img.dtype.type in _CV2_DTYPES
    if cv_ok and channels <= 512 and backend == "opencv":
        return _resize_cv2(img, new_h, new_w, name)
    if img.dtype == np.uint8 and name == "bilinear":
        if cv_ok and new_h >= img.shape[0] and new_w >= img.shape[1]:
            return _resize_cv2(img, new_h, new_w, name)  # enlarging: Pillow's result to 1 level
        return _resize_torch(img, new_h, new_w, name, antialias=True)
    pil_ok = _get_pil_image() is not None and (
        (img.dtype == np.uint8 and channels in (1, 3, 4))
        or (img.dtype == np.float32 and channels == 1 and name not in ("bilinear", "bicubic"))
    )
    if pil_ok:
        return _resize_pil(img, new_h, new_w, name)
    if img.dtype.kind == "f" and name in ("bilinear", "bicubic"):
        return _resize_torch(img, new_h, new_w, name, antialias=False)  # detectron2's path
    if cv_ok and channels <= 512:
        return _resize_cv2(img, new_h, new_w, name)
    if name == "hamming":
        raise ValueError(
            f"hamming interpolation (Pillow only) needs a uint8 image with 1, 3 or 4 "
            f"channels, got dtype {img.dtype} with {channels} channels"
        )
    return _resize_torch(img, new_h, new_w, name, antialias=False)


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
                return out[:, :, None] if img.ndim == 3 and out.ndim == 2 else out
    return np.ascontiguousarray(img)
