"""Photometric transforms wrapping a user function: ColorTransform and PILColorTransform.

They change pixel values only: coordinates, boxes, rotated boxes, polygons, segmentation maps
and masks come back unchanged, and ``inverse()`` is the identity (colours are not undone),
as in detectron2.

Example:
    >>> import numpy as np
    >>> t = ColorTransform(lambda img: 255 - img)
    >>> t.apply_image(np.array([[0, 55]], np.uint8)).tolist()
    [[255, 200]]
    >>> t.apply_box([[1, 2, 3, 4]])
    [[1, 2, 3, 4]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .transform import GeometryPreservingTransform, NoOpTransform, Transform, TransformError

__all__ = ["ColorTransform", "PILColorTransform"]


def _describe(op: Any) -> str:
    return getattr(op, "__qualname__", None) or type(op).__name__


class ColorTransform(GeometryPreservingTransform):
    """Apply ``op`` (ndarray -> ndarray) to images; leave every annotation as it is.

    ``op`` must keep the image size; a result of another height or width raises, since the
    annotations would no longer match it.

    Args:
        op: callable taking and returning an HxW or HxWxC numpy array.

    Raises:
        ValueError: ``op`` is not callable.

    Example:
        >>> ColorTransform(np.sqrt).apply_image(np.array([[4.0, 9.0]])).tolist()
        [[2.0, 3.0]]
    """

    def __init__(self, op: Callable[[np.ndarray], np.ndarray]) -> None:
        if not callable(op):
            raise ValueError(f"{type(self).__name__}: op must be callable, got {type(op).__name__}")
        self.op = op

    def _run(self, img: np.ndarray, arg: Any) -> np.ndarray:
        out = np.asarray(self.op(arg))
        if out.shape[:2] != img.shape[:2]:
            raise TransformError(
                f"{type(self).__name__}: op {_describe(self.op)} changed the image size from "
                f"{img.shape[:2]} to {out.shape[:2]}; a colour transform must keep it"
            )
        return out

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._run(img, img)

    def inverse(self) -> Transform:
        return NoOpTransform()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(op={_describe(self.op)})"


class PILColorTransform(ColorTransform):
    """Apply ``op`` (PIL.Image -> PIL.Image) to images; leave every annotation as it is.

    The image is handed to ``op`` as a Pillow image (so it must be a uint8 HxW, HxWx3 or
    HxWx4 array; HxWx1 is passed as a gray image and given back with its channel axis) and
    the result comes back as a numpy array. Needs Pillow.

    Args:
        op: callable taking and returning a ``PIL.Image.Image``, e.g.
            ``lambda im: ImageEnhance.Sharpness(im).enhance(2.0)``.

    Raises:
        ValueError: ``op`` is not callable.
        TransformError: (when applied) the image is not uint8 with 1, 3 or 4 channels.
        ImportError: (when applied) Pillow is not installed.

    Example:
        >>> from PIL import ImageOps
        >>> PILColorTransform(ImageOps.invert).apply_image(np.zeros((1, 2, 3), np.uint8))[0, 0].tolist()
        [255, 255, 255]
    """

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        try:
            from PIL import Image
        except ImportError as exc:  # pragma: no cover - Pillow is in the images extra
            raise ImportError(
                "PILColorTransform needs Pillow: pip install 'catmap[images]'"
            ) from exc
        channels = 1 if img.ndim == 2 else img.shape[2]
        if img.dtype != np.uint8 or img.ndim not in (2, 3) or channels not in (1, 3, 4):
            raise TransformError(
                "PILColorTransform needs a uint8 HxW or HxWx{1,3,4} image, got dtype "
                f"{img.dtype} and shape {img.shape}"
            )
        squeeze = img.ndim == 3 and channels == 1
        pil = Image.fromarray(np.ascontiguousarray(img[:, :, 0] if squeeze else img))
        out = self._run(img, pil)
        return out[:, :, None] if squeeze and out.ndim == 2 else out
