"""Build :class:`Instances` (training targets) from transformed annotations; drop empty ones.

Example:
    >>> anno = {"bbox": [200.0, 10.0, 390.0, 300.0], "bbox_mode": 0, "category_id": 0}
    >>> annotations_to_instances([anno], (300, 400)).gt_boxes.tensor.tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog.errors import RecordFormatError

from ._annotation_fields import boxes_xyxy as _boxes_xyxy
from ._annotation_fields import polygons_as_arrays as _polygons_as_arrays
from ._annotation_fields import where as _where
from .geometry_checks import check_keypoints, coordinate_bound
from .instances import Instances
from .mask_rasterize import polygons_to_bitmask, rle_to_bitmask
from .structures.boxes import Boxes, RotatedBoxes
from .structures.keypoints import Keypoints
from .structures.masks import BitMasks, PolygonMasks

__all__ = [
    "annotations_to_instances",
    "annotations_to_instances_rotated",
    "filter_empty_instances",
]


def _all_or_none_have(
    annos: Sequence[Mapping[str, Any]], key: str, prefix: str, pronoun: str
) -> bool:
    """Whether the annotations have ``key``: all of them (True) or none (False).

    Args:
        annos: the annotations of one image.
        key: the optional key, e.g. "segmentation".
        prefix: context for the error message ("" or ending in ", ").
        pronoun: what the others have, in the error message ("one" or "them").

    Raises:
        RecordFormatError: some annotations have ``key`` and others do not; names the first
            instance without it.

    Example:
        >>> _all_or_none_have([{"keypoints": []}], "keypoints", "", "them")
        True
    """
    present = [(key in obj) for obj in annos]
    if not any(present):
        return False
    if not all(present):
        missing = present.index(False)
        raise RecordFormatError(
            f"{prefix}instance {missing}: missing key {key!r} while other instances of the "
            f"image have {pronoun}"
        )
    return True


def annotations_to_instances(
    annos: Sequence[Mapping[str, Any]],
    image_size: tuple[int, int],
    mask_format: str = "polygon",
    *,
    context: str | None = None,
) -> Instances:
    """Build the training targets of one image from its (transformed) annotations.

    Fields, as detectron2 fills them: ``gt_boxes`` a :class:`~mappers.structures.Boxes`
    (float32 Nx4 XYXY_ABS), ``gt_classes`` an int64 tensor; when the annotations have
    ``segmentation``: ``gt_masks``, a :class:`~mappers.structures.PolygonMasks` (flat float64
    polygon arrays per instance) for ``mask_format="polygon"``, or a
    :class:`~mappers.structures.BitMasks` (NxHxW bool) for ``"bitmask"``; when they have
    ``keypoints``: ``gt_keypoints``, a :class:`~mappers.structures.Keypoints` (float32 NxKx3).
    An empty list gives empty ``gt_boxes`` (0x4) and ``gt_classes`` (and, for
    ``"bitmask"``, empty 0xHxW ``gt_masks``).

    Args:
        annos: annotation dicts (usually after :func:`transform_instance_annotations`).
        image_size: (h, w) of the image.
        mask_format: "polygon" or "bitmask".
        context: prefix for error messages, e.g. the image file name.

    Raises:
        ValueError: unknown mask_format.
        RecordFormatError: a missing or malformed key; some annotations have a segmentation
            or keypoints and others do not; an RLE/mask with ``mask_format="polygon"``.
        MissingDependencyError: bitmasks from polygons or RLE without pycocotools.

    Example:
        >>> inst = annotations_to_instances([], (10, 20))
        >>> tuple(inst.gt_boxes.tensor.shape), inst.gt_classes.dtype
        ((0, 4), torch.int64)
    """
    if mask_format not in ("polygon", "bitmask"):
        raise ValueError(f"mask_format must be 'polygon' or 'bitmask', got {mask_format!r}")
    h, w = int(image_size[0]), int(image_size[1])
    prefix = f"{context}, " if context else ""
    instances = Instances((h, w))
    boxes = _boxes_xyxy(annos, lambda i: _where(f"{prefix}instance {i}", annos[i]))
    instances.gt_boxes = Boxes(torch.from_numpy(boxes.astype(np.float32)))
    classes = np.empty(len(annos), dtype=np.int64)
    for i, obj in enumerate(annos):
        if "category_id" not in obj:
            raise RecordFormatError(
                f"{_where(prefix + f'instance {i}', obj)}: missing key 'category_id'"
            )
        try:
            classes[i] = int(obj["category_id"])
        except (TypeError, ValueError):
            raise RecordFormatError(
                f"{_where(prefix + f'instance {i}', obj)}: key 'category_id' must be an "
                f"integer, got {obj['category_id']!r}"
            ) from None
    instances.gt_classes = torch.from_numpy(classes)

    if _all_or_none_have(annos, "segmentation", prefix, "one"):
        instances.gt_masks = _masks(annos, (h, w), mask_format, prefix)
    elif mask_format == "bitmask" and len(annos) == 0:
        instances.gt_masks = BitMasks(torch.zeros((0, h, w), dtype=torch.bool))

    if _all_or_none_have(annos, "keypoints", prefix, "them"):
        kps = []
        for i, obj in enumerate(annos):
            try:
                kp = np.asarray(obj["keypoints"], dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise RecordFormatError(
                    f"{_where(prefix + f'instance {i}', obj)}: key 'keypoints' is not a list "
                    "of numbers"
                ) from None
            check_keypoints(kp, _where(prefix + f"instance {i}", obj))
            kps.append(kp.astype(np.float32))
        sizes = {k.size for k in kps}
        if len(sizes) != 1 or kps[0].size % 3 != 0:
            raise RecordFormatError(
                f"{prefix}key 'keypoints': instances have {sorted(sizes)} numbers; all must have "
                "the same multiple of 3"
            )
        instances.gt_keypoints = Keypoints(
            torch.from_numpy(np.stack(kps).reshape(len(annos), -1, 3))
        )
    return instances


def annotations_to_instances_rotated(
    annos: Sequence[Mapping[str, Any]],
    image_size: tuple[int, int],
    *,
    context: str | None = None,
) -> Instances:
    """Build targets for rotated-box detection: ``gt_boxes`` RotatedBoxes, ``gt_classes``.

    Each annotation's ``bbox`` is read as XYWHA_ABS (cx, cy, w, h, angle in degrees), whatever
    its ``bbox_mode``, as detectron2 does; the boxes are then clipped to the image (only the
    nearly horizontal ones change, see :meth:`RotatedBoxes.clip`).

    Raises:
        RecordFormatError: a missing ``bbox`` / ``category_id``, or a bbox that is not 5
            finite numbers (the message names the instance).

    Example:
        >>> anno = {"bbox": [5, 5, 20, 4, 0], "bbox_mode": 4, "category_id": 2}
        >>> inst = annotations_to_instances_rotated([anno], (10, 10))
        >>> inst.gt_boxes.tensor.tolist(), inst.gt_classes.tolist()
        ([[5.0, 5.0, 10.0, 4.0, 0.0]], [2])
    """
    h, w = int(image_size[0]), int(image_size[1])
    prefix = f"{context}, " if context else ""
    boxes = np.zeros((len(annos), 5), dtype=np.float32)
    classes = np.empty(len(annos), dtype=np.int64)
    for i, obj in enumerate(annos):
        where = _where(prefix + f"instance {i}", obj)
        for key in ("bbox", "category_id"):
            if not isinstance(obj, Mapping) or key not in obj:
                raise RecordFormatError(f"{where}: missing key {key!r}")
        try:
            box = np.asarray(obj["bbox"], dtype=np.float64).reshape(-1)
            classes[i] = int(obj["category_id"])
        except (TypeError, ValueError):
            raise RecordFormatError(
                f"{where}: key 'bbox' must be 5 numbers and 'category_id' an integer"
            ) from None
        if box.size != 5 or not np.isfinite(box).all():
            raise RecordFormatError(
                f"{where}: key 'bbox' must be 5 finite numbers (cx, cy, w, h, angle), got "
                f"{obj['bbox']!r}"
            )
        boxes[i] = box
    instances = Instances((h, w))
    gt_boxes = RotatedBoxes(torch.from_numpy(boxes))
    gt_boxes.clip((h, w))
    instances.gt_boxes = gt_boxes
    instances.gt_classes = torch.from_numpy(classes)
    return instances


def _masks(
    annos: Sequence[Mapping[str, Any]], image_size: tuple[int, int], mask_format: str, prefix: str
) -> Any:
    h, w = image_size
    if mask_format == "polygon":
        masks = []
        for i, obj in enumerate(annos):
            segm = obj["segmentation"]
            if not isinstance(segm, (list, tuple)):
                where = _where(prefix + f"instance {i}", obj)
                raise RecordFormatError(
                    f"{where}: key 'segmentation' is a {type(segm).__name__} (RLE or mask), "
                    "which mask_format='polygon' cannot hold; use mask_format='bitmask'"
                )
            masks.append(
                _polygons_as_arrays(
                    segm,
                    functools.partial(_where, prefix + f"instance {i}", obj),
                    coordinate_bound(h, w),
                )
            )
        return PolygonMasks.from_validated(masks)  # checked by _polygons_as_arrays above
    bitmasks = np.empty((len(annos), h, w), dtype=bool)
    for i, obj in enumerate(annos):
        segm = obj["segmentation"]
        where = _where(prefix + f"instance {i}", obj)
        if isinstance(segm, (list, tuple)):
            bitmasks[i] = polygons_to_bitmask(segm, h, w, context=where)
        elif isinstance(segm, Mapping):
            mask = rle_to_bitmask(segm, context=where, image_size=(h, w))
            if mask.shape != (h, w):
                raise RecordFormatError(
                    f"{where}: key 'segmentation' RLE has size {mask.shape}, image is {(h, w)}"
                )
            bitmasks[i] = mask
        elif isinstance(segm, np.ndarray):
            if segm.shape != (h, w):
                raise RecordFormatError(
                    f"{where}: key 'segmentation' mask has shape {segm.shape}, image is {(h, w)}"
                )
            bitmasks[i] = segm != 0
        else:
            raise RecordFormatError(
                f"{where}: key 'segmentation' must be polygons, an RLE dict or an HxW mask, got "
                f"{type(segm).__name__}"
            )
    return BitMasks(torch.from_numpy(bitmasks))


def filter_empty_instances(
    instances: Instances,
    by_box: bool = True,
    by_mask: bool = True,
    box_threshold: float = 1e-5,
    return_mask: bool = False,
) -> Any:
    """Drop instances whose box or mask is empty.

    A box is empty when its width or height is at most ``box_threshold``; a polygon mask
    when it has no polygon left (e.g. cropped away); a bitmask when no pixel is set. Fields
    that are absent are not used.

    Returns:
        The kept instances, and with ``return_mask=True`` also the bool keep mask.

    Example:
        >>> inst = Instances((10, 10), gt_boxes=Boxes([[0., 0., 5., 5.], [3., 3., 3., 8.]]))
        >>> len(filter_empty_instances(inst))
        1
    """
    keep = np.ones(len(instances), dtype=bool)
    if by_box and instances.has("gt_boxes"):
        boxes = instances.gt_boxes
        if isinstance(boxes, Boxes):  # RotatedBoxes too: their own width/height test
            keep &= boxes.nonempty(threshold=box_threshold).cpu().numpy()
        else:
            if isinstance(boxes, torch.Tensor):
                boxes = boxes.detach().cpu().numpy()
            boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
            keep &= (boxes[:, 2] - boxes[:, 0] > box_threshold) & (
                boxes[:, 3] - boxes[:, 1] > box_threshold
            )
    if by_mask and instances.has("gt_masks"):
        masks = instances.gt_masks
        if isinstance(masks, torch.Tensor):
            if len(masks):
                keep &= (masks.flatten(1) != 0).any(dim=1).cpu().numpy()
        elif hasattr(masks, "nonempty"):
            nonempty = masks.nonempty()
            if isinstance(nonempty, torch.Tensor):
                nonempty = nonempty.cpu().numpy()
            keep &= np.asarray(nonempty, dtype=bool)
        else:
            keep &= np.fromiter((len(polys) > 0 for polys in masks), dtype=bool, count=len(masks))
    keep_mask = torch.from_numpy(keep)
    result = instances if keep.all() else instances[keep_mask]
    return (result, keep_mask) if return_mask else result
