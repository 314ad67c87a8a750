"""A record's annotations, transformed with its image, as training :class:`Instances`.

One path, :meth:`InstanceOptions.instances` (also as
:func:`annotations_to_training_instances`), used by the Compose step
``AnnotationsToInstances`` and so by :class:`~mappers.dataset_mapper.DatasetMapper`:

* boxes only (no masks, no keypoints): the boxes of all non-crowd annotations are gathered
  in one pass and moved by the transforms' own vectorized ``apply_box`` (bit-identical to
  the per-annotation path), clipped, and the empty ones dropped in numpy;
* otherwise, or for anything unusual in the boxes (another box mode, a malformed value):
  :func:`~mappers.annotations.transform_annotations` then
  :func:`~mappers.instances_from_annotations.annotations_to_instances`, which raise the
  precise errors.

``gt_boxes`` is always a :class:`~mappers.structures.Boxes`, whichever path ran.

Example:
    >>> from mappers import transforms as T
    >>> annos = [{"bbox": [0, 0, 4, 4], "bbox_mode": 0, "category_id": 2}]
    >>> inst = annotations_to_training_instances(annos, T.HFlipTransform(10), (10, 10))
    >>> inst.gt_boxes.tensor.tolist(), inst.gt_classes.tolist()
    ([[6.0, 0.0, 10.0, 4.0]], [2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

import numpy as np
import torch

from catalog.box_mode import BoxMode

from . import transforms as T
from .annotations import transform_annotations
from .instances import Instances
from .instances_from_annotations import annotations_to_instances, filter_empty_instances
from .structures import Boxes

__all__ = ["InstanceOptionValues", "InstanceOptions", "annotations_to_training_instances"]

_MASK_FORMATS = ("polygon", "bitmask")
_XYXY = BoxMode.XYXY_ABS
_XYWH = BoxMode.XYWH_ABS


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


def _box_only_instances(
    annotations: Sequence[dict[str, Any]],
    transforms: T.Transform,
    image_size: tuple[int, int],
    filter_empty: bool,
) -> Instances | None:
    """Boxes and classes of the non-crowd annotations, transformed in one batch (or None).

    The same arithmetic as the per-annotation path (XYXY_ABS in float64, moved by
    ``apply_box``, clipped, then float32) and the empty-box test of
    :func:`filter_empty_instances` (width and height above 1e-5; a NaN fails it).
    """
    gathered = _gather_boxes(annotations)
    if gathered is None:
        return None
    boxes, classes = gathered
    height, width = int(image_size[0]), int(image_size[1])
    if len(classes):
        if not (  # ``boxes`` is a new float64 array of our own: moved in place if possible
            isinstance(transforms, T.TransformList) and transforms.apply_box_inplace(boxes)
        ):
            boxes = np.array(transforms.apply_box(boxes), dtype=np.float64)
            if boxes.shape != (len(classes), 4):
                return None
        np.maximum(boxes, 0.0, out=boxes)
        np.minimum(boxes, np.array((width, height, width, height), np.float64), out=boxes)
    boxes32 = boxes.astype(np.float32)
    if filter_empty and len(classes):
        sizes = boxes32[:, 2:] - boxes32[:, :2]
        if not sizes.min() > 1e-5:  # some box is empty (or has a NaN): drop those
            keep = (sizes > 1e-5).all(axis=1)
            boxes32 = boxes32[keep]
            classes = classes[keep]
    instances = Instances((height, width))
    fields = instances.get_fields()  # lengths are equal by construction
    fields["gt_boxes"] = Boxes(torch.from_numpy(boxes32))
    fields["gt_classes"] = torch.from_numpy(classes)
    return instances


class InstanceOptionValues(TypedDict, total=False):
    """The options that turn annotations into training Instances, as keyword arguments (the
    defaults and checks are :class:`InstanceOptions`')."""

    use_instance_mask: bool
    use_keypoint: bool
    instance_mask_format: str
    keypoint_hflip_indices: Sequence[int] | None
    recompute_boxes: bool


def annotations_to_training_instances(
    annotations: Sequence[dict[str, Any]],
    transforms: T.Transform,
    image_size: tuple[int, int],
    *,
    filter_empty: bool = True,
    file_name: str | None = None,
    **options: Unpack[InstanceOptionValues],
) -> Instances:
    """Transform the non-crowd annotations of one image and build its training Instances.

    Args:
        annotations: the record's annotation dicts (they may be modified: pass copies).
        transforms: the transforms applied to the image.
        image_size: (height, width) of the transformed image.
        filter_empty: drop empty instances.
        file_name: named in error messages.
        **options: the options of :class:`InstanceOptions`: segmentation is dropped unless
            ``use_instance_mask``, keypoints unless ``use_keypoint``; ``recompute_boxes``
            replaces the boxes by the tight boxes of the transformed masks (useful after a
            crop).

    Raises:
        RecordFormatError: a missing or malformed annotation key (named, with the file and
            the annotation's position).
        KeypointFlipError: keypoints flipped without (valid) flip indices.
        ValueError: invalid options (see :class:`InstanceOptions`).
    """
    return InstanceOptions("annotations_to_training_instances", **options).instances(
        annotations, transforms, image_size, file_name=file_name, filter_empty=filter_empty
    )


class InstanceOptions:
    """The validated options that turn a record's annotations into training Instances.

    The one place these options are defined and checked: :class:`DatasetMapper`, the Compose
    step ``AnnotationsToInstances`` and :func:`annotations_to_training_instances` take them
    as keyword arguments and build one of these.

    Args:
        owner: the class named in error messages.
        use_instance_mask: build ``gt_masks`` from the annotations' ``segmentation``.
        use_keypoint: build ``gt_keypoints`` from the annotations' ``keypoints``.
        instance_mask_format: "polygon" (PolygonMasks) or "bitmask" (BitMasks).
        keypoint_hflip_indices: the keypoint permutation applied after a horizontal flip.
        recompute_boxes: replace the boxes by the tight boxes of the transformed masks.

    Raises:
        ValueError: an unknown mask format, or ``recompute_boxes`` without masks.

    Example:
        >>> opts = InstanceOptions("Example", instance_mask_format="bitmask")
        >>> opts.instance_mask_format
        'bitmask'
    """

    def __init__(
        self,
        owner: str,
        *,
        use_instance_mask: bool = False,
        use_keypoint: bool = False,
        instance_mask_format: str = "polygon",
        keypoint_hflip_indices: Sequence[int] | None = None,
        recompute_boxes: bool = False,
    ) -> None:
        if instance_mask_format not in _MASK_FORMATS:
            raise ValueError(
                f"{owner}: instance_mask_format must be one of {_MASK_FORMATS}, "
                f"got {instance_mask_format!r}"
            )
        if recompute_boxes and not use_instance_mask:
            raise ValueError(f"{owner}: recompute_boxes=True needs use_instance_mask=True")
        self.use_instance_mask = bool(use_instance_mask)
        self.use_keypoint = bool(use_keypoint)
        self.instance_mask_format = instance_mask_format
        self.keypoint_hflip_indices = (
            None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
        )
        self.recompute_boxes = bool(recompute_boxes)

    def instances(
        self,
        annotations: Sequence[dict[str, Any]],
        transforms: T.Transform,
        image_size: tuple[int, int],
        *,
        file_name: str | None,
        filter_empty: bool = True,
    ) -> Instances:
        """The training Instances of ``annotations`` with these options; see
        :func:`annotations_to_training_instances`."""
        if not self.use_instance_mask and not self.use_keypoint:
            fast = _box_only_instances(annotations, transforms, image_size, filter_empty)
            if fast is not None:
                return fast
        kept = []
        for anno in annotations:
            if anno.get("iscrowd", 0) != 0:
                continue
            if not self.use_instance_mask:
                anno.pop("segmentation", None)
            if not self.use_keypoint:
                anno.pop("keypoints", None)
            kept.append(anno)
        source = f"file {file_name!r}" if file_name is not None else "image"
        transform_annotations(
            kept,
            transforms,
            image_size,
            keypoint_hflip_indices=self.keypoint_hflip_indices,
            context=source,
        )
        instances = annotations_to_instances(
            kept, image_size, mask_format=self.instance_mask_format, context=source
        )
        if self.recompute_boxes and instances.has("gt_masks"):  # PolygonMasks or BitMasks
            instances.gt_boxes = instances.gt_masks.get_bounding_boxes()
        if filter_empty:
            instances = filter_empty_instances(instances)
        if not isinstance(instances.gt_boxes, Boxes):
            instances.gt_boxes = Boxes(instances.gt_boxes)
        return instances
