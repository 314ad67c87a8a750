"""Scale augmentations: ResizeScale and FixedSizeCrop (large-scale jitter, LSJ), RandomResize.

The LSJ recipe of detectron2's new baselines is ``ResizeScale`` (fit the image into a target
box scaled by a random factor) followed by ``FixedSizeCrop`` (random crop to the target size,
then pad right and bottom up to it).

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput, AugmentationList
    >>> lsj = AugmentationList([ResizeScale(0.1, 2.0, 64, 64), FixedSizeCrop((64, 64))])
    >>> aug_input = AugInput(np.zeros((30, 40, 3), np.uint8))
    >>> _ = lsj(aug_input, rng=np.random.default_rng(0))
    >>> aug_input.image.shape
    (64, 64, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._backend import normalize_interp
from .augmentation import Augmentation
from .transform import CropTransform, PadTransform, ResizeTransform, Transform, TransformList

__all__ = ["ResizeScale", "FixedSizeCrop", "RandomResize"]

_BILINEAR = 2  # PIL.Image.BILINEAR


def _size_pair(owner: str, what: str, value: Any) -> tuple[int, int]:
    """(h, w) from an int or a pair of positive integers."""
    if isinstance(value, (int, np.integer)):
        value = (value, value)
    try:
        pair = tuple(value)
        ok = len(pair) == 2 and all(int(v) == v and int(v) > 0 for v in pair)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: {what} must be a positive int or (h, w) pair, got {value!r}")
    return int(pair[0]), int(pair[1])


class ResizeScale(Augmentation):
    """Resize to fit a target box scaled by a random factor, keeping the aspect ratio.

    A factor ``s`` is drawn uniformly in [min_scale, max_scale); the image is resized by
    ``min(s * target_height / h, s * target_width / w)``, sizes rounded half to even (as
    ``numpy.round``) and at least 1.

    Args:
        min_scale, max_scale: range of the factor (positive, min <= max).
        target_height, target_width: the target box.
        interp: Pillow interpolation constant or name (default bilinear).

    Raises:
        ValueError: non-positive or inverted scales, non-positive target, unknown interp.

    Example:
        >>> ResizeScale(0.1, 2.0, 1024, 1024)
        ResizeScale(min_scale=0.1, max_scale=2.0, target_height=1024, target_width=1024)
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self,
        min_scale: float,
        max_scale: float,
        target_height: int,
        target_width: int,
        interp: int | str = _BILINEAR,
    ) -> None:
        lo, hi = float(min_scale), float(max_scale)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ValueError(
                f"ResizeScale: need 0 < min_scale <= max_scale, got ({min_scale!r}, {max_scale!r})"
            )
        _size_pair("ResizeScale", "target size", (target_height, target_width))
        normalize_interp(interp)
        self.min_scale, self.max_scale = min_scale, max_scale
        self.target_height, self.target_width = int(target_height), int(target_width)
        self.interp = interp

    def _get_resize(self, image: np.ndarray, scale: float) -> Transform:
        h, w = image.shape[:2]
        factor = min(scale * self.target_height / h, scale * self.target_width / w)
        new_h, new_w = (max(1, int(v)) for v in np.round(np.array([h, w]) * factor))
        return ResizeTransform(h, w, new_h, new_w, self.interp)

    def get_transform(self, image: np.ndarray) -> Transform:
        return self._get_resize(image, float(self._rand_range(self.min_scale, self.max_scale)))


class FixedSizeCrop(Augmentation):
    """Crop a random window of ``crop_size`` where the image is larger, pad where smaller.

    One uniform draw ``u`` places the window: its offset is ``round(u * (size - crop))`` on
    each axis where the image is larger than the crop. With ``pad`` the result is then padded
    on the right and bottom to exactly ``crop_size``: images with ``pad_value``,
    segmentation maps with ``seg_pad_value`` (255, the usual "ignore" label). The transform
    is a TransformList ``[CropTransform, PadTransform]`` and has an inverse.

    Note: masks transformed with ``apply_segmentation`` are padded with ``seg_pad_value``
    too; transform instance masks as polygons, or pad them with 0 yourself.

    Args:
        crop_size: (h, w) of the output (an int for a square).
        pad: pad images smaller than crop_size up to it.
        pad_value: image fill; seg_pad_value: segmentation fill.

    Raises:
        ValueError: crop_size not positive.

    Example:
        >>> FixedSizeCrop((1024, 1024))
        FixedSizeCrop(crop_size=(1024, 1024))
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self,
        crop_size: int | Sequence[int],
        pad: bool = True,
        pad_value: float = 128.0,
        seg_pad_value: int = 255,
    ) -> None:
        self.crop_size = _size_pair("FixedSizeCrop", "crop_size", crop_size)
        self.pad = bool(pad)
        self.pad_value = pad_value
        self.seg_pad_value = seg_pad_value

    def _get_crop(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        crop_h, crop_w = min(h, self.crop_size[0]), min(w, self.crop_size[1])
        u = float(self._rand_range(0.0, 1.0))
        y0 = int(np.round((h - crop_h) * u))
        x0 = int(np.round((w - crop_w) * u))
        return CropTransform(x0, y0, crop_w, crop_h, orig_w=w, orig_h=h)

    def _get_pad(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        crop_h, crop_w = min(h, self.crop_size[0]), min(w, self.crop_size[1])
        return PadTransform(
            0,
            0,
            self.crop_size[1] - crop_w,
            self.crop_size[0] - crop_h,
            orig_w=crop_w,
            orig_h=crop_h,
            pad_value=self.pad_value,
            seg_pad_value=self.seg_pad_value,
        )

    def get_transform(self, image: np.ndarray) -> TransformList:
        transforms = [self._get_crop(image)]
        if self.pad:
            transforms.append(self._get_pad(image))
        return TransformList(transforms)


class RandomResize(Augmentation):
    """Resize to an (h, w) drawn uniformly from ``shape_list``.

    Args:
        shape_list: (h, w) pairs (an int means a square).
        interp: Pillow interpolation constant or name (default bilinear).

    Raises:
        ValueError: an empty list, a non-positive size, unknown interp.

    Example:
        >>> RandomResize([(32, 48), (64, 96)])
        RandomResize(shape_list=[(32, 48), (64, 96)])
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self, shape_list: Sequence[int | Sequence[int]], interp: int | str = _BILINEAR
    ) -> None:
        shapes = [_size_pair("RandomResize", "each shape", s) for s in shape_list]
        if not shapes:
            raise ValueError("RandomResize: shape_list is empty")
        normalize_interp(interp)
        self.shape_list = shapes
        self.interp = interp

    def get_transform(self, image: np.ndarray) -> Transform:
        new_h, new_w = self.shape_list[int(self.rng.integers(len(self.shape_list)))]
        return ResizeTransform(image.shape[0], image.shape[1], new_h, new_w, self.interp)
