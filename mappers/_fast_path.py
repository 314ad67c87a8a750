"""Fast paths of DatasetMapper: plan transforms from the image shape, batch the boxes.

Used by :class:`~mappers.dataset_mapper.DatasetMapper` when they apply; every function here
gives the same result as the general path (bit-identical boxes; pixels equal up to rounding
where noted), or declines (returns None / raises NotPlannable) so that the general path runs.

* :class:`ShapeOnlyAugInput` runs shape-only augmentations (Resize, ResizeShortestEdge,
  RandomFlip) against a stand-in image, so the transforms are known before decoding;
* :func:`apply_planned` executes such a plan with the flip on the smaller decoded image;
* :func:`box_only_instances` transforms all boxes of an image in one numpy step;
* :class:`OwnedImageAugInput` flips images it owns in place.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from catalog.box_mode import BoxMode

from . import transforms as T
from .instances import Instances
from .opencv_threads import get_cv2

__all__ = [
    "SHAPE_ONLY_AUGMENTATIONS",
    "NotPlannable",
    "OwnedImageAugInput",
    "ShapeOnlyAugInput",
    "apply_planned",
    "box_only_instances",
    "flatten_transforms",
    "flip_in_place",
    "is_plannable",
    "transform_boxes",
]

logger = logging.getLogger(__name__)


def flip_in_place(image: np.ndarray, horizontal: bool) -> bool:
    """Flip a C-contiguous image in place with OpenCV; False when that is not possible."""
    if not (
        image.flags.c_contiguous
        and image.flags.writeable
        and image.size > 0
        and image.dtype in (np.uint8, np.float32)
        and (image.ndim == 2 or (image.ndim == 3 and image.shape[2] <= 4))
    ):
        return False
    cv2 = get_cv2()
    if cv2 is None:
        return False
    result = cv2.flip(image, 1 if horizontal else 0, dst=image)
    return result is image or np.shares_memory(result, image)


class OwnedImageAugInput(T.AugInput):
    """An AugInput whose image belongs to the caller alone, so flips may happen in place.

    DatasetMapper decodes a fresh image for every record; flipping it (or the fresh output
    of a resize) in place avoids allocating and page-faulting another full-size buffer,
    which costs more than the flip itself. The pixels are the same as
    ``HFlipTransform.apply_image`` / ``VFlipTransform.apply_image`` give.

    Example:
        >>> aug_input = OwnedImageAugInput(np.arange(6, dtype=np.uint8).reshape(1, 6))
        >>> aug_input.transform(T.HFlipTransform(6)); aug_input.image.tolist()
        [[5, 4, 3, 2, 1, 0]]
    """

    def transform(self, tfm: T.Transform) -> None:
        """Apply ``tfm`` like AugInput.transform, flipping the image in place when possible."""
        if isinstance(tfm, T.TransformList):
            for inner in tfm.transforms:
                self.transform(inner)
            return
        if isinstance(tfm, (T.HFlipTransform, T.VFlipTransform)) and flip_in_place(
            self.image, horizontal=isinstance(tfm, T.HFlipTransform)
        ):
            if self.boxes is not None:
                self.boxes = tfm.apply_box(self.boxes)
            if self.sem_seg is not None:
                self.sem_seg = tfm.apply_segmentation(self.sem_seg)
            return
        super().transform(tfm)


class NotPlannable(Exception):
    """A transform whose effect on the image shape is not known without running it."""


#: Augmentations whose get_transform reads only the image's shape.
SHAPE_ONLY_AUGMENTATIONS = (T.Resize, T.ResizeShortestEdge, T.RandomFlip)


class ShapeOnlyAugInput(T.AugInput):
    """Runs augmentations against the image's shape only and records their transforms."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self._pixel = np.zeros(1, dtype=dtype)
        super().__init__(self._stub(shape))
        self.planned: list[T.Transform] = []
        self.transforms: T.TransformList | None = None

    def _stub(self, shape: tuple[int, ...]) -> np.ndarray:
        """A read-only array of ``shape`` backed by one element (all strides 0)."""
        stub = np.ndarray(shape, dtype=self._pixel.dtype, buffer=self._pixel, strides=(0,) * len(shape))
        stub.flags.writeable = False
        return stub

    def transform(self, tfm: T.Transform) -> None:
        if isinstance(tfm, T.TransformList):
            for inner in tfm.transforms:
                self.transform(inner)
            return
        shape = self.image.shape
        if isinstance(tfm, T.ResizeTransform):
            if (tfm.h, tfm.w) != shape[:2]:
                raise NotPlannable(f"{tfm!r} on an image of shape {shape}")
            shape = (tfm.new_h, tfm.new_w) + shape[2:]
        elif not isinstance(tfm, (T.HFlipTransform, T.VFlipTransform, T.NoOpTransform)):
            raise NotPlannable(repr(tfm))
        self.image = self._stub(shape)
        self.planned.append(tfm)


def is_plannable(augmentations: T.AugmentationList) -> bool:
    return all(type(aug) in SHAPE_ONLY_AUGMENTATIONS for aug in augmentations.augs)


def apply_planned(image: np.ndarray, planned: Sequence[T.Transform]) -> np.ndarray:
    """Flips first (on the smaller decoded image), then the resizes in order.

    A flip commutes with a bilinear resize (the sampling grid is symmetric), so the result
    equals resize-then-flip up to rounding (at most 1 level on about 0.1% of pixels), while
    the flip moves 2-3x fewer bytes and needs no second full-size output buffer.
    """
    horizontal = sum(isinstance(t, T.HFlipTransform) for t in planned) % 2 == 1
    vertical = sum(isinstance(t, T.VFlipTransform) for t in planned) % 2 == 1
    # Out of place: OpenCV's in-place horizontal flip is about 3x slower than a copy of
    # this size.
    if horizontal:
        image = T.HFlipTransform(image.shape[1]).apply_image(image)
    if vertical:
        image = T.VFlipTransform(image.shape[0]).apply_image(image)
    resizes = [tfm for tfm in planned if isinstance(tfm, T.ResizeTransform)]
    if len(resizes) == 1 and image.shape[:2] != (resizes[0].h, resizes[0].w):
        # decoded at reduced scale: one resize from there to the planned output size
        only = resizes[0]
        reduced = T.ResizeTransform(image.shape[0], image.shape[1], only.new_h, only.new_w, only.interp)
        return reduced.apply_image(image)
    for tfm in resizes:
        image = tfm.apply_image(image)
    return image


def flatten_transforms(transforms: T.Transform) -> list[T.Transform]:
    if isinstance(transforms, T.TransformList):
        out: list[T.Transform] = []
        for inner in transforms.transforms:
            out.extend(flatten_transforms(inner))
        return out
    return [transforms]


def transform_boxes(boxes: np.ndarray, transforms: T.Transform) -> np.ndarray | None:
    """Nx4 XYXY boxes through resizes and flips, vectorized; None for other transforms.

    The same float operations, in the same order, as the transforms' ``apply_box`` through
    the 4 corners (for an axis-aligned map the corners' extremes are the mapped edges), so
    the result is bit-identical.
    """
    xs = boxes[:, [0, 2]].copy()
    ys = boxes[:, [1, 3]].copy()
    for tfm in flatten_transforms(transforms):
        if isinstance(tfm, T.ResizeTransform):
            xs *= tfm.new_w / tfm.w
            ys *= tfm.new_h / tfm.h
        elif isinstance(tfm, T.HFlipTransform):
            xs = tfm.width - xs
        elif isinstance(tfm, T.VFlipTransform):
            ys = tfm.height - ys
        elif not isinstance(tfm, T.NoOpTransform):
            return None
    out = np.empty_like(boxes)
    np.minimum(xs[:, 0], xs[:, 1], out=out[:, 0])
    np.minimum(ys[:, 0], ys[:, 1], out=out[:, 1])
    np.maximum(xs[:, 0], xs[:, 1], out=out[:, 2])
    np.maximum(ys[:, 0], ys[:, 1], out=out[:, 3])
    return out


def box_only_instances(
    annotations: Sequence[dict[str, Any]],
    transforms: T.Transform,
    image_size: tuple[int, int],
    filter_empty: bool,
) -> Instances | None:
    """Boxes and classes of the non-crowd annotations, transformed in one batch.

    The same arithmetic as :func:`transform_instance_annotations` + ``annotations_to_instances``
    (XYXY_ABS in float64, transformed through the corners, clipped, then float32), done once
    for all boxes, and the empty-box filter of ``filter_empty_instances`` (width and height
    above 1e-5) in numpy. Returns None for anything unusual (other box modes, malformed values), so
    that the per-annotation path handles it and raises its precise errors.
    """
    non_crowd = [a for a in annotations if a.get("iscrowd", 0) == 0]
    count = len(non_crowd)
    try:
        modes = {a["bbox_mode"] for a in non_crowd}
        boxes = np.array([a["bbox"] for a in non_crowd], dtype=np.float64).reshape(count, 4)
        classes = np.array([a["category_id"] for a in non_crowd], dtype=np.int64).reshape(count)
    except (KeyError, TypeError, ValueError):
        return None
    if modes - {BoxMode.XYXY_ABS, BoxMode.XYWH_ABS}:
        return None
    if BoxMode.XYWH_ABS in modes:
        xywh = np.array([a["bbox_mode"] == BoxMode.XYWH_ABS for a in non_crowd], dtype=bool)
        boxes[xywh, 2:] += boxes[xywh, :2]
    height, width = int(image_size[0]), int(image_size[1])
    if count:
        moved = transform_boxes(boxes, transforms)
        boxes = np.asarray(transforms.apply_box(boxes) if moved is None else moved, np.float64)
        if boxes.shape != (count, 4):
            return None
        boxes = np.minimum(np.maximum(boxes, 0.0), np.array([width, height, width, height], float))
    boxes32 = boxes.astype(np.float32)
    if filter_empty and count:
        # the same test filter_empty_instances applies to the float32 boxes
        keep = ((boxes32[:, 2] - boxes32[:, 0]) > 1e-5) & ((boxes32[:, 3] - boxes32[:, 1]) > 1e-5)
        if not keep.all():
            boxes32 = boxes32[keep]
            classes = classes[keep]
    instances = Instances((height, width))
    instances.gt_boxes = torch.from_numpy(boxes32)
    instances.gt_classes = torch.from_numpy(classes)
    return instances
