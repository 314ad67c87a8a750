"""The builtin augmentations (detectron2's names and arguments; sizes are (h, w), ``interp``
a Pillow constant or name, default ``2`` = bilinear).

Example:
    >>> from mappers.transforms import AugInput
    >>> ResizeShortestEdge(800, max_size=1333)(AugInput(np.zeros((480, 640, 3), np.uint8)))
    ResizeTransform(h=480, w=640, new_h=800, new_w=1067, interp=2)
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from catalog.box_mode import BoxMode
from catalog._common import check_float

from ..random_state import get_generator
from .augmentation import (
    COLOR_FORMATS, SAMPLE_STYLES, Augmentation, check_color_image, check_one_of, check_prob
)
from .transform import (
    HFlipTransform, NoOpTransform, ResizeTransform, Transform, TransformError, TransformList,
    VFlipTransform, finite_floats, positive_ints
)
from .resample import INTERP_NAMES, RESIZE_BACKENDS, normalize_interp
from .transform_affine import CropTransform, ExtentTransform, PadTransform, RotationTransform
from .transform_color import BlendTransform


logger = logging.getLogger(__name__)

_BILINEAR = 2  # PIL.Image.BILINEAR


class RandomFlip(Augmentation):
    """Flip the image horizontally or vertically with probability ``prob``."""

    shape_only = True

    def __init__(
        self, prob: float = 0.5, *, horizontal: bool = True, vertical: bool = False
    ) -> None:
        check_prob("RandomFlip", prob)
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
        if get_generator().uniform(0.0, 1.0) < self.prob:  # self._rand_range(), one call less
            return HFlipTransform(w) if self.horizontal else VFlipTransform(h)
        return NoOpTransform()


class Resize(Augmentation):
    """Resize the image to a fixed (h, w)."""

    shape_only = True

    def __init__(
        self, shape: int | Sequence[int], interp: int | str = _BILINEAR, backend: str = "pil"
    ) -> None:
        self.shape = positive_ints("Resize", "shape", shape)
        ResizeTransform(1, 1, 1, 1, interp, backend)  # checks interp and backend
        self.interp = interp
        self.backend = backend

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        return ResizeTransform(h, w, self.shape[0], self.shape[1], self.interp, self.backend)


class ResizeShortestEdge(Augmentation):
    """Resize so the shorter edge has a drawn length (0: no resize), the longer edge capped at
    ``max_size``. ``backend="opencv"``: faster resizing, not detectron2's pixels (see
    :class:`ResizeTransform`).
    """

    shape_only = True

    @torch.jit.unused  # get_output_shape stays scriptable, as in detectron2
    def __init__(
        self,
        short_edge_length: int | Sequence[int],
        max_size: int = sys.maxsize,
        sample_style: str = "range",
        interp: int | str = _BILINEAR,
        backend: str = "pil",
    ) -> None:
        check_one_of(sample_style, SAMPLE_STYLES, "sample_style", "ResizeShortestEdge")
        check_one_of(backend, RESIZE_BACKENDS, "backend", "ResizeShortestEdge")
        if isinstance(short_edge_length, (int, np.integer)):
            short_edge_length = (int(short_edge_length), int(short_edge_length))
        lengths = tuple(map(int, short_edge_length))
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
        if type(interp) is not int or interp not in INTERP_NAMES:
            normalize_interp(interp)
        self.short_edge_length = lengths
        self.max_size = max_size
        self.sample_style = sample_style
        self.interp = interp
        self.backend = backend

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

    @torch.jit.unused
    def get_transform(self, image: np.ndarray) -> Any:  # Any: torch.jit resolves this signature
        h, w = image.shape[:2]
        lengths = self.short_edge_length  # drawn from get_generator(), as self.rng
        if self.sample_style == "range":
            size = int(get_generator().integers(lengths[0], lengths[1] + 1))
        else:
            size = int(lengths[int(get_generator().integers(len(lengths)))])
        if size == 0:
            return NoOpTransform()
        newh, neww = self.get_output_shape(h, w, size, self.max_size)
        return ResizeTransform(h, w, max(newh, 1), max(neww, 1), self.interp, self.backend)


_CROP_TYPES = ("relative", "relative_range", "absolute", "absolute_range")


class RandomCrop(Augmentation):
    """Crop a random window of the image."""

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
            # detectron2 takes any size here; one larger than the image fails when applied
            if not all(0.0 < float(v) < math.inf for v in size):
                raise ValueError(
                    f"RandomCrop({crop_type!r}): crop_size must be positive, got {crop_size!r}"
                )
        else:
            if not all(int(v) == v and v > 0 for v in size):
                raise ValueError(
                    f"RandomCrop({crop_type!r}): crop_size must be positive integers, "
                    f"got {crop_size!r}"
                )
            if crop_type == "absolute_range" and size[0] > size[1]:
                raise ValueError(
                    f"RandomCrop('absolute_range'): crop_size (min, max) has min > max: "
                    f"{crop_size!r}"
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
        if croph > h or cropw > w:
            raise ValueError(f"{self}: crop size {(croph, cropw)} exceeds the image size {(h, w)}")
        y0 = int(self.rng.integers(h - croph + 1))
        x0 = int(self.rng.integers(w - cropw + 1))
        return CropTransform(x0, y0, cropw, croph, orig_w=w, orig_h=h)


def gen_crop_transform_with_instance(
    crop_size: Sequence[int], image_size: Sequence[int], instance: dict[str, Any]
) -> CropTransform:
    """A random ``crop_size`` window (h, w) of an image of ``image_size`` that contains the
    centre of ``instance``'s box (an annotation dict), as detectron2's.
    """
    crop = np.asarray(crop_size, dtype=np.int64)
    x0, y0, x1, y1 = BoxMode.convert(instance["bbox"], instance["bbox_mode"], BoxMode.XYXY_ABS)
    center_yx = np.array([(y0 + y1) * 0.5, (x0 + x1) * 0.5])
    size = np.asarray(image_size, dtype=np.int64)
    if (center_yx < 0).any() or (center_yx > size).any():
        raise TransformError(f"box {instance['bbox']}: its centre is outside image {image_size}")
    if (crop > size).any():
        raise TransformError(f"crop size {tuple(crop_size)} is larger than the image {image_size}")
    low = np.maximum(np.floor(center_yx).astype(np.int64) - crop, 0)
    high = np.minimum(size - crop, np.ceil(center_yx).astype(np.int64))
    rng = get_generator()
    top, left = (int(rng.integers(lo, hi + 1)) for lo, hi in zip(low, high, strict=True))
    return CropTransform(left, top, int(crop[1]), int(crop[0]))


#: Windows RandomCrop_CategoryAreaConstraint tries before keeping the last one.
CATEGORY_AREA_TRIES = 10


class RandomCrop_CategoryAreaConstraint(Augmentation):  # noqa: N801 (detectron2's name)
    """A RandomCrop whose window no single category dominates in ``sem_seg``: the first of
    up to 10 windows with two or more categories (``ignored_category`` not counted), none
    covering ``single_category_max_area`` of the pixels, else the last one drawn.
    """

    def __init__(
        self,
        crop_type: str,
        crop_size: Sequence[float],
        single_category_max_area: float = 1.0,
        ignored_category: int | None = None,
    ) -> None:
        self.crop_aug = RandomCrop(crop_type, crop_size)
        area = float(single_category_max_area)
        if not (math.isfinite(area) and area > 0.0):
            raise ValueError(
                "RandomCrop_CategoryAreaConstraint: single_category_max_area must be a number "
                f"> 0 (1 or more disables the constraint), got {single_category_max_area!r}"
            )
        self.crop_type = crop_type
        self.crop_size = self.crop_aug.crop_size
        self.single_category_max_area = single_category_max_area
        self.ignored_category = ignored_category

    def _acceptable(self, window: np.ndarray) -> bool:
        labels, counts = np.unique(window, return_counts=True)
        if self.ignored_category is not None:
            counts = counts[labels != self.ignored_category]
        return len(counts) > 1 and counts.max() < counts.sum() * self.single_category_max_area

    def get_transform(self, image: np.ndarray, sem_seg: np.ndarray | None) -> Transform:
        if self.single_category_max_area >= 1.0:
            return self.crop_aug.get_transform(image)
        if sem_seg is None:
            raise ValueError(
                "RandomCrop_CategoryAreaConstraint needs the input's sem_seg (a semantic "
                "segmentation map); this AugInput has none"
            )
        h, w = image.shape[:2]
        if tuple(sem_seg.shape[:2]) != (h, w):
            raise ValueError(
                f"RandomCrop_CategoryAreaConstraint: sem_seg size {sem_seg.shape[:2]} differs "
                f"from the image size {(h, w)}"
            )
        for _ in range(CATEGORY_AREA_TRIES):
            crop_h, crop_w = self.crop_aug.get_crop_size((h, w))
            y0 = int(self.rng.integers(h - crop_h + 1))
            x0 = int(self.rng.integers(w - crop_w + 1))
            if self._acceptable(sem_seg[y0 : y0 + crop_h, x0 : x0 + crop_w]):
                break
        return CropTransform(x0, y0, crop_w, crop_h, orig_w=w, orig_h=h)


def _iou_one_to_many(patch: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one XYXY box with each of N XYXY boxes (0 where the union is empty)."""
    iw = np.clip(np.minimum(patch[2], boxes[:, 2]) - np.maximum(patch[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(patch[3], boxes[:, 3]) - np.maximum(patch[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    area_patch = (patch[2] - patch[0]) * (patch[3] - patch[1])
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(
        boxes[:, 3] - boxes[:, 1], 0, None
    )
    union = area_patch + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


class MinIoURandomCrop(Augmentation):
    """Random crop whose IoU with every box is at least a threshold drawn from ``min_ious``
    (SSD): each round draws a mode from (1: no crop, *min_ious, 0) and up to ``crop_trials``
    windows that must also contain a box centre. No boxes in the input: no crop (warned once).
    """

    def __init__(
        self,
        min_ious: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
        min_crop_size: float = 0.3,
        mode_trials: int = 1000,
        crop_trials: int = 50,
    ) -> None:
        ious = tuple(float(v) for v in min_ious)
        if not all(0.0 <= v <= 1.0 for v in ious):
            raise ValueError(f"MinIoURandomCrop: min_ious must lie in [0, 1], got {min_ious!r}")
        if not 0.0 < float(min_crop_size) <= 1.0:
            raise ValueError(
                f"MinIoURandomCrop: min_crop_size must be in (0, 1], got {min_crop_size!r}"
            )
        for name, value in (("mode_trials", mode_trials), ("crop_trials", crop_trials)):
            if int(value) != value or value < 1:
                raise ValueError(f"MinIoURandomCrop: {name} must be an integer >= 1, got {value!r}")
        self.min_ious = tuple(min_ious)
        self.sample_mode = (1.0, *ious, 0.0)
        self.min_crop_size = float(min_crop_size)
        self.mode_trials = int(mode_trials)
        self.crop_trials = int(crop_trials)
        self._warned_no_boxes = False

    def _try_crop(self, h: int, w: int, boxes: np.ndarray, min_iou: float) -> Transform | None:
        rng = self.rng
        for _ in range(self.crop_trials):
            new_w = rng.uniform(self.min_crop_size * w, w)
            new_h = rng.uniform(self.min_crop_size * h, h)
            if not 0.5 <= new_h / new_w <= 2.0:
                continue
            left = rng.uniform(0.0, w - new_w)
            top = rng.uniform(0.0, h - new_h)
            patch = np.array([int(left), int(top), int(left + new_w), int(top + new_h)], float)
            if patch[2] == patch[0] or patch[3] == patch[1] or int(new_w) < 1 or int(new_h) < 1:
                continue
            if len(boxes):
                if _iou_one_to_many(patch, boxes).min() < min_iou:
                    continue
                centers = (boxes[:, :2] + boxes[:, 2:]) / 2
                inside = (
                    (centers[:, 0] > patch[0])
                    & (centers[:, 1] > patch[1])
                    & (centers[:, 0] < patch[2])
                    & (centers[:, 1] < patch[3])
                )
                if not inside.any():
                    continue
            return CropTransform(int(left), int(top), int(new_w), int(new_h), orig_w=w, orig_h=h)
        return None

    def get_transform(self, image: np.ndarray, boxes: np.ndarray | None) -> Transform:
        if boxes is None:
            if not self._warned_no_boxes:
                self._warned_no_boxes = True
                logger.warning(
                    "MinIoURandomCrop: the input has no boxes (AugInput.boxes is None), so it "
                    "never crops; pass boxes=... to AugInput to use it"
                )
            return NoOpTransform()
        arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        h, w = image.shape[:2]
        for _ in range(self.mode_trials):
            mode = self.sample_mode[int(self.rng.integers(len(self.sample_mode)))]
            if mode == 1.0:
                return NoOpTransform()
            tfm = self._try_crop(h, w, arr, mode)
            if tfm is not None:
                return tfm
        return NoOpTransform()


class ResizeScale(Augmentation):
    """Resize by ``min(s * target_height / h, s * target_width / w)``, s uniform in
    [min_scale, max_scale), sizes rounded half to even (LSJ).
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
        positive_ints("ResizeScale", "target size", (target_height, target_width))
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
    """Crop a random ``crop_size`` window where the image is larger (offset round(u * (size -
    crop)), one draw u) and, with ``pad``, pad right and bottom up to it (LSJ). Segmentation
    maps, instance masks included, are padded with ``seg_pad_value``.
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self,
        crop_size: int | Sequence[int],
        pad: bool = True,
        pad_value: float = 128.0,
        seg_pad_value: int = 255,
    ) -> None:
        self.crop_size = positive_ints("FixedSizeCrop", "crop_size", crop_size)
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
    """Resize to an (h, w) drawn uniformly from ``shape_list``."""

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self, shape_list: Sequence[int | Sequence[int]], interp: int | str = _BILINEAR
    ) -> None:
        shapes = [positive_ints("RandomResize", "each shape", s) for s in shape_list]
        if not shapes:
            raise ValueError("RandomResize: shape_list is empty")
        normalize_interp(interp)
        self.shape_list = shapes
        self.interp = interp

    def get_transform(self, image: np.ndarray) -> Transform:
        new_h, new_w = self.shape_list[int(self.rng.integers(len(self.shape_list)))]
        return ResizeTransform(image.shape[0], image.shape[1], new_h, new_w, self.interp)


class RandomRotation(Augmentation):
    """Rotate by a random angle (degrees, counter-clockwise) about a random or fixed centre.

    Angles that are multiples of 360 give a NoOpTransform."""

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(
        self,
        angle: float | Sequence[float],
        expand: bool = True,
        center: Sequence[Any] | None = None,
        sample_style: str = "range",
        interp: int | str | None = None,
    ) -> None:
        check_one_of(sample_style, SAMPLE_STYLES, "sample_style", "RandomRotation")
        if isinstance(angle, (int, float, np.number)):
            angle = (angle, angle)
        angles = finite_floats("RandomRotation", "angle", angle)
        if sample_style == "range" and (len(angles) != 2 or angles[0] > angles[1]):
            raise ValueError(
                f"RandomRotation: sample_style='range' needs angle=(min, max), got {angle!r}"
            )
        centers = None
        if center is not None:
            if len(center) and isinstance(center[0], (int, float, np.number)):
                center = (center, center)
            centers = tuple(finite_floats("RandomRotation", "center", c, 2) for c in center)
            if sample_style == "range" and len(centers) != 2:
                raise ValueError(
                    "RandomRotation: sample_style='range' needs center=[[min_x, min_y], "
                    f"[max_x, max_y]], got {center!r}"
                )
        normalize_interp(interp, opencv=True)
        self.angle = angles
        self.expand = bool(expand)
        self.center = centers
        self.sample_style = sample_style
        self.interp = interp

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        center = None
        if self.sample_style == "range":
            angle = float(self._rand_range(self.angle[0], self.angle[1]))
            if self.center is not None:
                (x_lo, y_lo), (x_hi, y_hi) = self.center
                center = (self._rand_range(x_lo, x_hi), self._rand_range(y_lo, y_hi))
        else:
            angle = self.angle[int(self.rng.integers(len(self.angle)))]
            if self.center is not None:
                center = self.center[int(self.rng.integers(len(self.center)))]
        if angle % 360 == 0:
            return NoOpTransform()
        absolute = None if center is None else (w * float(center[0]), h * float(center[1]))
        return RotationTransform(
            h, w, angle, expand=self.expand, center=absolute, interp=self.interp
        )


class RandomExtent(Augmentation):
    """A random sub-rectangle of the image (may reach outside; filled with 0): the whole image
    scaled by a factor in ``scale_range`` and shifted by up to ``shift_range`` / 2 of its size;
    the output keeps the rectangle's size in pixels.
    """

    shape_only = True  # reads only the image's shape (can be planned before decoding)

    def __init__(self, scale_range: Sequence[float], shift_range: Sequence[float]) -> None:
        scales = finite_floats("RandomExtent", "scale_range", scale_range, 2)
        if not 0 < scales[0] <= scales[1]:
            raise ValueError(
                f"RandomExtent: scale_range must be (low, high) with 0 < low <= high, "
                f"got {scale_range!r}"
            )
        self.scale_range = scales
        self.shift_range = finite_floats("RandomExtent", "shift_range", shift_range, 2)

    def get_transform(self, image: np.ndarray) -> Transform:
        h, w = image.shape[:2]
        rect = np.array([-0.5 * w, -0.5 * h, 0.5 * w, 0.5 * h])
        rect *= float(self._rand_range(self.scale_range[0], self.scale_range[1]))
        rect[0::2] += self.shift_range[0] * w * (float(self._rand_range()) - 0.5)
        rect[1::2] += self.shift_range[1] * h * (float(self._rand_range()) - 0.5)
        rect[0::2] += 0.5 * w
        rect[1::2] += 0.5 * h
        out_h = max(1, int(rect[3] - rect[1]))
        out_w = max(1, int(rect[2] - rect[0]))
        return ExtentTransform(src_rect=tuple(float(v) for v in rect), output_size=(out_h, out_w))


class _RandomIntensity(Augmentation):
    def __init__(self, intensity_min: float, intensity_max: float) -> None:
        if not float(intensity_min) <= float(intensity_max):
            raise ValueError(
                f"{type(self).__name__}: intensity_min ({intensity_min}) must not exceed "
                f"intensity_max ({intensity_max})"
            )
        if float(intensity_min) < 0:
            raise ValueError(
                f"{type(self).__name__}: intensities must be non-negative, got {intensity_min}"
            )
        self.intensity_min = intensity_min
        self.intensity_max = intensity_max

    def _blend_with(self, reference: Any) -> BlendTransform:
        """Draw a weight ``w`` and blend the image with ``reference``: ``(1 - w) * ref + w * img``.
        """
        w = float(self._rand_range(self.intensity_min, self.intensity_max))
        return BlendTransform(src_image=reference, src_weight=1 - w, dst_weight=w)


class RandomBrightness(_RandomIntensity):
    """Scale brightness by a factor drawn in [intensity_min, intensity_max) (blend with black)."""

    shape_only = True  # draws a factor; never reads the pixels

    def get_transform(self, image: np.ndarray) -> Transform:
        return self._blend_with(0)


class RandomContrast(_RandomIntensity):
    """Scale contrast by a factor drawn in [intensity_min, intensity_max) (blend with the mean)."""

    def get_transform(self, image: np.ndarray) -> Transform:
        return self._blend_with(float(image.mean()))


_GRAY_WEIGHTS = {
    "RGB": np.array([0.299, 0.587, 0.114], dtype=np.float32),
    "BGR": np.array([0.114, 0.587, 0.299], dtype=np.float32),
}


class RandomSaturation(_RandomIntensity):
    """Scale saturation by a factor drawn in [intensity_min, intensity_max) (blend with gray)."""

    def __init__(
        self, intensity_min: float, intensity_max: float, *, image_format: str = "RGB"
    ) -> None:
        super().__init__(intensity_min, intensity_max)
        self.image_format = check_one_of(
            image_format, COLOR_FORMATS, "image_format", "RandomSaturation"
        )

    def get_transform(self, image: np.ndarray) -> Transform:
        check_color_image(image, self.image_format, "RandomSaturation")
        gray = image.astype(np.float32, copy=False) @ _GRAY_WEIGHTS[self.image_format]
        return self._blend_with(gray[:, :, None])


#: Principal components (columns) and eigenvalues of ImageNet RGB pixels, as published with
#: AlexNet (Krizhevsky et al., 2012) and used by detectron2.
IMAGENET_EIGEN_VECS = np.array(
    [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
)
IMAGENET_EIGEN_VALS = np.array([0.2175, 0.0188, 0.0045])


class RandomLighting(Augmentation):
    """AlexNet's PCA colour noise: add ``eigen_vecs @ (alpha * eigen_vals)``, alpha ~ N(0, scale),
    on the image's own value scale, as detectron2.
    """

    shape_only = True  # draws weights; reads only the image's shape

    def __init__(self, scale: float, *, image_format: str = "RGB") -> None:
        value = float(scale)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"RandomLighting: scale must be a finite number >= 0, got {scale!r}")
        self.scale = scale
        self.image_format = check_one_of(
            image_format, COLOR_FORMATS, "image_format", "RandomLighting"
        )
        self.eigen_vecs = IMAGENET_EIGEN_VECS
        self.eigen_vals = IMAGENET_EIGEN_VALS

    def get_transform(self, image: np.ndarray) -> Transform:
        check_color_image(image, self.image_format, "RandomLighting")
        weights = self.rng.normal(0.0, float(self.scale), size=3)
        offset = self.eigen_vecs @ (weights * self.eigen_vals)
        if self.image_format == "BGR":
            offset = offset[::-1].copy()
        return BlendTransform(src_image=offset, src_weight=1.0, dst_weight=1.0)
