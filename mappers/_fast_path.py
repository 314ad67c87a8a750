"""Fast paths of DatasetMapper: plan transforms from the image shape, batch the boxes.

Used by :class:`~mappers.dataset_mapper.DatasetMapper` when they apply; every function here
gives the same result as the general path (bit-identical boxes; pixels equal up to rounding
where noted), or declines (returns None) so that the general path runs.

* :func:`plan_transforms` runs shape-only augmentations (Resize, ResizeShortestEdge,
  RandomFlip) against the image's shape, so the transforms are known before decoding;
* :func:`apply_planned` executes such a plan with the flip on the smaller decoded image,
  calling OpenCV directly;
* :func:`box_only_instances` gathers the boxes of an image in one pass and transforms them
  in a few numpy steps;
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
from .transforms._backend import normalize_interp

__all__ = [
    "SHAPE_ONLY_AUGMENTATIONS",
    "OwnedImageAugInput",
    "Plan",
    "apply_planned",
    "box_only_instances",
    "flatten_transforms",
    "flip_in_place",
    "is_plannable",
    "plan_transforms",
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


#: Augmentations whose get_transform reads only the image's shape.
SHAPE_ONLY_AUGMENTATIONS = (T.Resize, T.ResizeShortestEdge, T.RandomFlip)


def is_plannable(augmentations: T.AugmentationList) -> bool:
    """Whether every augmentation is one of :data:`SHAPE_ONLY_AUGMENTATIONS` (exact types)."""
    return all(type(aug) in SHAPE_ONLY_AUGMENTATIONS for aug in augmentations.augs)


class _ShapeOnly:
    """Stands in for the image in ``get_transform`` of the shape-only augmentations.

    Their ``get_transform`` reads ``image.shape[:2]`` and nothing else (checked by exact
    type in :func:`is_plannable`), so a tuple is enough: no stub array to build per image.
    """

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


class Plan:
    """The transforms drawn for one image before decoding it.

    Attributes:
        planned: the transforms in drawing order (resizes, flips, no-ops only).
        transforms: the same as a TransformList (what the annotations go through).
        shape: the output image shape.
    """

    __slots__ = ("planned", "transforms", "shape")

    def __init__(self, planned: list[T.Transform], shape: tuple[int, ...]) -> None:
        self.planned = planned
        self.transforms = T.TransformList(planned)
        self.shape = shape


_FLIPS_AND_NOOP = (T.HFlipTransform, T.VFlipTransform, T.NoOpTransform)


def plan_transforms(augs: Sequence[T.Augmentation], shape: tuple[int, ...]) -> Plan | None:
    """Draw the transforms of shape-only augmentations for an image of ``shape``.

    The augmentations draw from the current generator exactly as ``AugmentationList`` would
    (same calls, same order), so the transforms are the ones the general path draws.

    Returns:
        The plan, or None when a drawn transform is not a resize, flip or no-op, or a resize
        does not start from the current size (the general path then runs; the generator has
        advanced, which is harmless).

    Example:
        >>> plan = plan_transforms([T.Resize((20, 30)), T.RandomFlip(prob=1.0)], (10, 15, 3))
        >>> plan.shape, [type(t).__name__ for t in plan.planned]
        ((20, 30, 3), ['ResizeTransform', 'HFlipTransform'])
    """
    height, width = int(shape[0]), int(shape[1])
    rest = tuple(shape[2:])
    stand_in = _ShapeOnly((height, width, *rest))
    drawn: list[T.Transform] = []
    for aug in augs:
        tfm = aug.get_transform(stand_in)
        cls = type(tfm)
        if cls is T.ResizeTransform:
            if tfm.h != height or tfm.w != width:
                return None
            height, width = tfm.new_h, tfm.new_w
            stand_in = _ShapeOnly((height, width, *rest))
        elif cls not in _FLIPS_AND_NOOP:
            return None
        drawn.append(tfm)
    return Plan(drawn, stand_in.shape)


_BILINEAR_CACHE: dict[tuple[type, Any], bool] = {}


def _is_bilinear(interp: Any) -> bool:
    """``normalize_interp(interp) == "bilinear"``, memoized for hashable values."""
    try:
        key = (type(interp), interp)
        cached = _BILINEAR_CACHE.get(key)
    except TypeError:  # unhashable: not memoized
        return normalize_interp(interp) == "bilinear"
    if cached is None:
        cached = normalize_interp(interp) == "bilinear"
        if len(_BILINEAR_CACHE) < 64:
            _BILINEAR_CACHE[key] = cached
    return cached


def _fast_image(image: np.ndarray) -> bool:
    """A C-contiguous uint8 HxWxC image (C <= 4) that cv2.flip / cv2.resize take as is."""
    return (
        image.dtype == np.uint8
        and image.ndim == 3
        and 1 <= image.shape[2] <= 4
        and image.size > 0
        and image.flags.c_contiguous
    )


def apply_planned(image: np.ndarray, planned: Sequence[T.Transform]) -> np.ndarray:
    """Flips first (on the smaller decoded image), then the resizes in order.

    A flip commutes with a bilinear resize (the sampling grid is symmetric), so the result
    equals resize-then-flip up to rounding (at most 1 level on about 0.1% of pixels), while
    the flip moves 2-3x fewer bytes and needs no second full-size output buffer.

    ``image`` may be smaller than the first resize expects (a reduced JPEG decode): with a
    single resize, it then resizes from the decoded size to the planned output size.

    For a C-contiguous uint8 image with OpenCV installed, the flip is one ``cv2.flip`` and
    each bilinear resize one ``cv2.resize`` call (the very calls the transforms' generic
    ``apply_image`` path ends in, so the pixels are identical), without the generic
    per-call dispatch.
    """
    horizontal = vertical = False
    resizes: list[T.ResizeTransform] = []
    for tfm in planned:
        if isinstance(tfm, T.HFlipTransform):
            horizontal = not horizontal
        elif isinstance(tfm, T.VFlipTransform):
            vertical = not vertical
        elif isinstance(tfm, T.ResizeTransform):
            resizes.append(tfm)
    cv2 = get_cv2()
    fast = cv2 is not None and _fast_image(image)
    if horizontal or vertical:
        if fast:
            image = cv2.flip(image, -1 if horizontal and vertical else 1 if horizontal else 0)
            if image.ndim == 2:  # cv2 drops a channel axis of size 1
                image = image[:, :, None]
        else:
            # Out of place: OpenCV's in-place horizontal flip is about 3x slower than a
            # copy of this size. Views here; the resize (or the tensor) makes them dense.
            if horizontal:
                image = T.HFlipTransform(image.shape[1]).apply_image(image)
            if vertical:
                image = T.VFlipTransform(image.shape[0]).apply_image(image)
    if len(resizes) == 1 and image.shape[:2] != (resizes[0].h, resizes[0].w):
        # decoded at reduced scale: one resize from there to the planned output size
        only = resizes[0]
        resizes = [
            T.ResizeTransform(image.shape[0], image.shape[1], only.new_h, only.new_w, only.interp)
        ]
    for tfm in resizes:
        if not (fast and _is_bilinear(tfm.interp) and image.shape[:2] == (tfm.h, tfm.w)):
            image = tfm.apply_image(image)  # the generic path (and its size check)
            fast = cv2 is not None and _fast_image(image)
            continue
        if (tfm.new_h, tfm.new_w) == (tfm.h, tfm.w):
            continue  # resize_array returns the image itself for an unchanged size
        image = cv2.resize(image, (tfm.new_w, tfm.new_h), interpolation=cv2.INTER_LINEAR)
        if image.ndim == 2:
            image = image[:, :, None]
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
    the result is bit-identical. ``boxes`` is not modified.
    """
    return _transform_boxes_flat(boxes.copy(), flatten_transforms(transforms))


_BOX_TRANSFORMS = (T.ResizeTransform, T.HFlipTransform, T.VFlipTransform, T.NoOpTransform)


def _transform_boxes_flat(
    boxes: np.ndarray, flat: Sequence[T.Transform], *, nan_boxes_dropped: bool = False
) -> np.ndarray | None:
    """:func:`transform_boxes` on a flat transform list, modifying float64 ``boxes`` in place.

    Columns 0 and 2 get the x operations, 1 and 3 the y operations (elementwise, the same
    float operations as on the corners); then each box becomes (min x, min y, max x, max y)
    of its corners (unless every transform is a no-op: then the boxes stay as they are, as
    ``apply_box`` leaves them). With ``nan_boxes_dropped`` (the caller drops boxes with a NaN
    coordinate) that is an in-place sort of each coordinate pair, which differs from the
    min / max only where a NaN is involved.
    """
    if any(type(tfm) not in _BOX_TRANSFORMS for tfm in flat):
        return None  # checked first: ``boxes`` is left untouched
    for tfm in flat:
        cls = type(tfm)
        if cls is T.ResizeTransform:
            sx, sy = tfm.new_w / tfm.w, tfm.new_h / tfm.h
            np.multiply(boxes, (sx, sy, sx, sy), out=boxes)
        elif cls is T.HFlipTransform:
            xs = boxes[:, 0::2]
            np.subtract(tfm.width, xs, out=xs)
        elif cls is T.VFlipTransform:
            ys = boxes[:, 1::2]
            np.subtract(tfm.height, ys, out=ys)
    if all(type(tfm) is T.NoOpTransform for tfm in flat):
        return boxes  # NoOpTransform.apply_box returns the boxes as they are, unordered
    pairs = boxes.reshape(-1, 2, 2)  # (x0, y0), (x1, y1) per box
    if nan_boxes_dropped:
        pairs.sort(axis=1)
        return boxes
    return np.concatenate((pairs.min(axis=1), pairs.max(axis=1)), axis=1)


def _gather_boxes(
    annotations: Sequence[dict[str, Any]],
) -> tuple[np.ndarray, np.ndarray] | None:
    """(Nx4 float64 XYXY boxes, N int64 classes) of the non-crowd annotations, in one pass.

    None for anything unusual (a box mode other than XYXY_ABS / XYWH_ABS, a missing key, a
    malformed value): the per-annotation path then handles it with its precise errors.
    """
    bboxes: list[Any] = []
    classes: list[Any] = []
    xywh_rows: list[int] = []
    try:
        for anno in annotations:
            if anno.get("iscrowd", 0) != 0:
                continue
            mode = anno["bbox_mode"]
            if mode == _XYWH:
                xywh_rows.append(len(bboxes))
            elif mode != _XYXY:
                return None
            bboxes.append(anno["bbox"])
            classes.append(anno["category_id"])
        count = len(bboxes)
        boxes = np.array(bboxes, dtype=np.float64).reshape(count, 4)
        labels = np.array(classes, dtype=np.int64).reshape(count)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if xywh_rows:
        rows = boxes if len(xywh_rows) == count else boxes[xywh_rows]
        rows[:, 2:] += rows[:, :2]
        if rows is not boxes:
            boxes[xywh_rows] = rows
    return boxes, labels


_XYXY = BoxMode.XYXY_ABS
_XYWH = BoxMode.XYWH_ABS


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
    above 1e-5) in numpy. Returns None for anything unusual (other box modes, malformed
    values), so that the per-annotation path handles it and raises its precise errors.
    """
    gathered = _gather_boxes(annotations)
    if gathered is None:
        return None
    boxes, classes = gathered
    count = len(classes)
    height, width = int(image_size[0]), int(image_size[1])
    if count:
        moved = _transform_boxes_flat(
            boxes, flatten_transforms(transforms), nan_boxes_dropped=filter_empty
        )
        if moved is None:  # another transform type; ``boxes`` is untouched
            moved = np.asarray(transforms.apply_box(boxes), np.float64)
            if moved.shape != (count, 4):
                return None
        boxes = moved
        np.maximum(boxes, 0.0, out=boxes)
        np.minimum(boxes, (width, height, width, height), out=boxes)
    boxes32 = boxes.astype(np.float32)
    if filter_empty and count:
        # the same test filter_empty_instances applies to the float32 boxes (a NaN
        # coordinate fails it)
        sizes = boxes32[:, 2:] - boxes32[:, :2]
        if not sizes.min() > 1e-5:  # some box is empty (or has a NaN): drop those
            keep = (sizes > 1e-5).all(axis=1)
            boxes32 = boxes32[keep]
            classes = classes[keep]
    instances = Instances((height, width))
    fields = instances.get_fields()  # lengths are equal by construction
    fields["gt_boxes"] = torch.from_numpy(boxes32)
    fields["gt_classes"] = torch.from_numpy(classes)
    return instances
