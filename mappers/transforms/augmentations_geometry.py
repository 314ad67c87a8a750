"""Geometric augmentations: flips, resizes and crops.

Arguments follow detectron2 (sizes are (h, w), interpolation is a Pillow constant; the
default ``2`` is ``PIL.Image.BILINEAR``).

Example:
    >>> import numpy as np
    >>> from mappers.transforms import AugInput
    >>> aug_input = AugInput(np.zeros((480, 640, 3), np.uint8))
    >>> ResizeShortestEdge(800, max_size=1333)(aug_input)
    ResizeTransform(h=480, w=640, new_h=800, new_w=1067, interp=2)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from catalog.validation import check_float

from ._backend import normalize_interp
from .augmentation import Augmentation
from .augmentation_checks import SAMPLE_STYLES, check_one_of
from .transform import (
    CropTransform,
    HFlipTransform,
    NoOpTransform,
    ResizeTransform,
    Transform,
    VFlipTransform,
)

__all__ = ["RandomFlip", "Resize", "ResizeShortestEdge", "RandomCrop"]


_BILINEAR = 2  # PIL.Image.BILINEAR


def _check_prob(owner: str, prob: float) -> None:
    try:
        ok = 0.0 <= float(prob) <= 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: prob must be a number in [0, 1], got {prob!r}")


class RandomFlip(Augmentation):
    """Flip the image horizontally or vertically with probability ``prob``.

    Args:
        prob: probability of flipping, in [0, 1].
        horizontal: flip left-right (default).
        vertical: flip top-bottom; exactly one of horizontal / vertical must be True.

    Raises:
        ValueError: prob outside [0, 1], or not exactly one direction chosen.

    Example:
        >>> RandomFlip(prob=0.5)
        RandomFlip(prob=0.5)
        >>> RandomFlip(1.0, horizontal=False, vertical=True)
        RandomFlip(prob=1.0, horizontal=False, vertical=True)
    """

    shape_only = True

    def __init__(
        self, prob: float = 0.5, *, horizontal: bool = True, vertical: bool = False
    ) -> None:
        _check_prob("RandomFlip", prob)
        if horizontal == vertical:
            raise ValueError(
                "RandomFlip: choose exactly one of horizontal=True or vertical=True "
                f"(got horizontal={horizontal}, vertical={vertical})"
            )
        self.prob = prob
        self.horizontal = horizontal
        self.vertical = vertical

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        if self._rand_range() < self.prob:
            return HFlipTransform(w) if self.horizontal else VFlipTransform(h)
        return NoOpTransform()


def _pair(value: int | Sequence[int], owner: str, what: str) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    values = tuple(value)
    if len(values) != 2:
        raise ValueError(f"{owner}: {what} must be an int or a pair (h, w), got {value!r}")
    return int(values[0]), int(values[1])


class Resize(Augmentation):
    """Resize the image to a fixed (h, w).

    Args:
        shape: (h, w) or an int for a square.
        interp: Pillow interpolation constant or name (default bilinear).

    Raises:
        ValueError: a non-positive size or an unknown interpolation.

    Example:
        >>> Resize((200, 300))
        Resize(shape=(200, 300))
    """

    shape_only = True

    def __init__(self, shape: int | Sequence[int], interp: int | str = _BILINEAR) -> None:
        self.shape = _pair(shape, "Resize", "shape")
        if min(self.shape) <= 0:
            raise ValueError(f"Resize: shape must be positive, got {shape!r}")
        normalize_interp(interp)
        self.interp = interp

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        return ResizeTransform(h, w, self.shape[0], self.shape[1], self.interp)


class ResizeShortestEdge(Augmentation):
    """Resize so the shorter edge has a sampled length, capping the longer edge at max_size.

    Args:
        short_edge_length: with ``sample_style="range"`` a (min, max) pair, the length drawn
            uniformly from the integers in it; with ``"choice"`` a list of lengths to draw
            from. An int means that length. A drawn length of 0 means no resize.
        max_size: maximum length of the longer edge.
        sample_style: "range" or "choice".
        interp: Pillow interpolation constant or name (default bilinear).

    Raises:
        ValueError: unknown sample_style, a "range" that is not a pair, negative lengths.

    Example:
        >>> ResizeShortestEdge.get_output_shape(480, 640, 800, 1333)
        (800, 1067)
    """

    shape_only = True

    def __init__(
        self,
        short_edge_length: int | Sequence[int],
        max_size: int = sys.maxsize,
        sample_style: str = "range",
        interp: int | str = _BILINEAR,
    ) -> None:
        check_one_of(sample_style, SAMPLE_STYLES, "sample_style", "ResizeShortestEdge")
        if isinstance(short_edge_length, (int, np.integer)):
            short_edge_length = (int(short_edge_length), int(short_edge_length))
        lengths = tuple(int(v) for v in short_edge_length)
        if not lengths:
            raise ValueError("ResizeShortestEdge: short_edge_length is empty")
        if sample_style == "range":
            if len(lengths) != 2:
                raise ValueError(
                    "ResizeShortestEdge: sample_style='range' needs short_edge_length=(min, max), "
                    f"got {short_edge_length!r}"
                )
            if lengths[0] > lengths[1]:
                raise ValueError(f"ResizeShortestEdge: range {lengths} has min > max")
        if min(lengths) < 0:
            raise ValueError(f"ResizeShortestEdge: negative length in {short_edge_length!r}")
        check_float(max_size, "max_size", above=0, finite=False, where="ResizeShortestEdge")
        normalize_interp(interp)
        self.short_edge_length = lengths
        self.max_size = max_size
        self.sample_style = sample_style
        self.interp = interp

    @staticmethod
    def get_output_shape(
        oldh: int, oldw: int, short_edge_length: int, max_size: int
    ) -> tuple[int, int]:
        """Return (new_h, new_w) for the given input size and target lengths (rounded)."""
        scale = short_edge_length / min(oldh, oldw)
        if oldh < oldw:
            newh, neww = float(short_edge_length), scale * oldw
        else:
            newh, neww = scale * oldh, float(short_edge_length)
        if max(newh, neww) > max_size:
            shrink = max_size / max(newh, neww)
            newh, neww = newh * shrink, neww * shrink
        return int(newh + 0.5), int(neww + 0.5)

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        if self.sample_style == "range":
            size = int(self.rng.integers(self.short_edge_length[0], self.short_edge_length[1] + 1))
        else:
            size = int(self.short_edge_length[int(self.rng.integers(len(self.short_edge_length)))])
        if size == 0:
            return NoOpTransform()
        newh, neww = self.get_output_shape(h, w, size, self.max_size)
        return ResizeTransform(h, w, max(newh, 1), max(neww, 1), self.interp)


_CROP_TYPES = ("relative", "relative_range", "absolute", "absolute_range")


class RandomCrop(Augmentation):
    """Crop a random window of the image.

    Args:
        crop_type: how ``crop_size`` is read:
            "relative": (h, w) fractions of the image size;
            "relative_range": fractions drawn uniformly in [crop_size, 1];
            "absolute": (h, w) pixels (capped at the image size);
            "absolute_range": h and w drawn uniformly in [crop_size[0], crop_size[1]] pixels.
        crop_size: a pair as described above.

    Raises:
        ValueError: unknown crop_type or crop_size out of range.

    Example:
        >>> RandomCrop("absolute", (100, 200))
        RandomCrop(crop_type='absolute', crop_size=(100, 200))
    """

    shape_only = True

    def __init__(self, crop_type: str, crop_size: Sequence[float]) -> None:
        if crop_type not in _CROP_TYPES:
            raise ValueError(
                f"RandomCrop: crop_type must be one of {_CROP_TYPES}, got {crop_type!r}"
            )
        size = tuple(crop_size)
        if len(size) != 2:
            raise ValueError(f"RandomCrop: crop_size must be a pair, got {crop_size!r}")
        if crop_type.startswith("relative"):
            if not all(0.0 < float(v) <= 1.0 for v in size):
                raise ValueError(
                    f"RandomCrop({crop_type!r}): crop_size fractions must be in (0, 1], got {crop_size!r}"
                )
        else:
            if not all(int(v) == v and v > 0 for v in size):
                raise ValueError(
                    f"RandomCrop({crop_type!r}): crop_size must be positive integers, got {crop_size!r}"
                )
            if crop_type == "absolute_range" and size[0] > size[1]:
                raise ValueError(
                    f"RandomCrop('absolute_range'): crop_size (min, max) has min > max: {crop_size!r}"
                )
        self.crop_type = crop_type
        self.crop_size = size

    def get_crop_size(self, image_size: tuple[int, int]) -> tuple[int, int]:
        """Return the (crop_h, crop_w) for an image of size (h, w), drawing where needed."""
        h, w = image_size
        if self.crop_type == "relative":
            ch, cw = self.crop_size
            return max(1, int(h * ch + 0.5)), max(1, int(w * cw + 0.5))
        if self.crop_type == "relative_range":
            low = np.asarray(self.crop_size, dtype=np.float64)
            ch, cw = low + self.rng.random(2) * (1.0 - low)
            return max(1, int(h * ch + 0.5)), max(1, int(w * cw + 0.5))
        if self.crop_type == "absolute":
            return min(int(self.crop_size[0]), h), min(int(self.crop_size[1]), w)
        lo, hi = int(self.crop_size[0]), int(self.crop_size[1])
        ch = int(self.rng.integers(min(h, lo), min(h, hi) + 1))
        cw = int(self.rng.integers(min(w, lo), min(w, hi) + 1))
        return ch, cw

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        croph, cropw = self.get_crop_size((h, w))
        y0 = int(self.rng.integers(h - croph + 1))
        x0 = int(self.rng.integers(w - cropw + 1))
        return CropTransform(x0, y0, cropw, croph, orig_w=w, orig_h=h)
