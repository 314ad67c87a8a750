"""Pixel-value transforms (geometry untouched): blending with a source image or value, and
colour operations on arrays or on Pillow images.

Example:
    >>> import numpy as np
    >>> BlendTransform(0.0, 0.5, 0.5).apply_image(np.full((1, 1), 8.0, np.float32)).item()
    4.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .transform import GeometryPreservingTransform, NoOpTransform, Transform, TransformError


class BlendTransform(GeometryPreservingTransform):
    """``src_weight * src_image + dst_weight * img``; uint8 images are clipped and truncated
    (a lookup table for a scalar ``src_image``).
    """

    def __init__(self, src_image: Any, src_weight: float, dst_weight: float) -> None:
        self.src_image = src_image
        self.src_weight = src_weight
        self.dst_weight = dst_weight

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if img.dtype == np.uint8:
            if np.ndim(self.src_image) == 0:
                levels = np.arange(256, dtype=np.float32)
                lut = (
                    np.float32(self.src_weight) * np.float32(self.src_image)
                    + np.float32(self.dst_weight) * levels
                )
                lut = np.clip(lut, 0, 255).astype(np.uint8)
                return lut[img]
            blended = self.src_weight * np.asarray(
                self.src_image, dtype=np.float32
            ) + self.dst_weight * img.astype(np.float32)
            return np.clip(blended, 0, 255).astype(np.uint8)
        return self.src_weight * self.src_image + self.dst_weight * img

    def inverse(self) -> Transform:
        return NoOpTransform()

    def __repr__(self) -> str:
        src = self.src_image
        src_text = f"{float(src):.4g}" if np.ndim(src) == 0 else f"<array {np.shape(src)}>"
        return (
            f"BlendTransform(src_image={src_text}, src_weight={self.src_weight:.4g}, "
            f"dst_weight={self.dst_weight:.4g})"
        )


def _describe(op: Any) -> str:
    return getattr(op, "__qualname__", None) or type(op).__name__


class ColorTransform(GeometryPreservingTransform):
    """Apply ``op`` (ndarray -> ndarray of the same size) to images; annotations unchanged."""

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
    """Apply ``op`` (PIL.Image -> PIL.Image) to uint8 HxW / HxWx{1,3,4} images (needs Pillow)."""

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
