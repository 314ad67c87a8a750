"""A record's annotations, transformed with its image, as training :class:`Instances`.

Example:
    >>> from mappers.transforms import HFlipTransform
    >>> anno = {"bbox": [10, 10, 190, 290], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0}
    >>> anno = transform_instance_annotations(anno, [HFlipTransform(400)], (300, 400))
    >>> annotations_to_instances([anno], (300, 400)).gt_boxes.tensor.tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError

from .geometry_checks import (
    boxes_xyxy, check_keypoints, check_mask_budget, coordinate_bound, input_size_of,
    polygons_as_arrays, polygons_to_bitmask, rle_to_bitmask
)
from .geometry_checks import where as _where
from .instances import Instances
from .keypoint_annotations import finish_keypoints, keypoints_as_array, odd_hflips
from .structures import BitMasks, Boxes, Keypoints, PolygonMasks, RotatedBoxes
from .transforms.transform import (
    GeometryPreservingTransform,
    HFlipTransform,  # noqa: F401 (the doctests use it)
    Transform,
    TransformList,
    as_transform_list,
)

__all__ = [
    "InstanceOptions", "annotations_to_instances", "annotations_to_instances_rotated",
    "annotations_to_training_instances", "filter_empty_instances", "transform_annotations",
    "transform_instance_annotations"
]

def transform_instance_annotations(
    annotation: dict[str, Any],
    transforms: Transform | Sequence[Transform],
    image_size: tuple[int, int],
    *,
    keypoint_hflip_indices: np.ndarray | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """Apply ``transforms`` to one annotation dict, in place, and return it.

    ``bbox`` becomes a clipped XYXY_ABS float array; polygons are moved (a crop may drop them);
    RLE dicts and masks are decoded to HxW masks and moved; keypoints as
    :func:`transform_keypoint_annotations`. ``image_size`` is (h, w) after the transforms;
    ``context`` (e.g. the file name) starts error messages.
    """
    _transform_many(
        [annotation],
        as_transform_list(transforms),
        image_size,
        keypoint_hflip_indices,
        lambda i: _where(context, annotation),
        context or "annotation",
    )
    return annotation


def transform_annotations(
    annotations: Sequence[dict[str, Any]],
    transforms: Transform | Sequence[Transform],
    image_size: tuple[int, int],
    *,
    keypoint_hflip_indices: np.ndarray | None = None,
    context: str | None = None,
) -> list[dict[str, Any]]:
    """All the annotations of one image, as :func:`transform_instance_annotations` but in
    one vectorized call per kind (about 5x faster for a COCO image).

    Example:
        >>> annos = [{"bbox": [0, 0, 10, 10], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}]
        >>> transform_annotations(annos, [HFlipTransform(20)], (20, 20))[0]["bbox"].tolist()
        [10.0, 0.0, 20.0, 10.0]
    """
    annotations = list(annotations)
    prefix = f"{context}, " if context else ""

    def where(i: int) -> str:
        return _where(f"{prefix}annotation {i}", annotations[i])

    _transform_many(
        annotations, as_transform_list(transforms), image_size, keypoint_hflip_indices, where,
        context or "image",
    )
    return annotations


def _transform_many(
    annotations: Sequence[dict[str, Any]],
    transforms: TransformList,
    image_size: tuple[int, int],
    keypoint_hflip_indices: Any,
    where: Callable[[int], str],
    context: str,
) -> None:
    if len(annotations) == 0:
        return
    h, w = int(image_size[0]), int(image_size[1])
    boxes = transforms.apply_box(boxes_xyxy(annotations, where))
    boxes = np.minimum(np.maximum(boxes, 0.0), np.array([w, h, w, h], dtype=np.float64))
    for i, obj in enumerate(annotations):
        obj["bbox"] = boxes[i]
        obj["bbox_mode"] = BoxMode.XYXY_ABS

    polygon_owners: list[int] = []
    polygon_groups: list[list[np.ndarray]] = []
    keypoint_owners: list[int] = []
    keypoint_arrays: list[np.ndarray] = []
    # The image size before the transforms (None when a transform hides it): RLE sizes must
    # equal it and polygons must lie near it, checked before pycocotools or a transform runs.
    input_size = bound = None
    for obj in annotations:
        if "segmentation" in obj:
            input_size = input_size_of(transforms, (h, w))
            bound = None if input_size is None else coordinate_bound(*input_size)
            rles = [o for o in annotations if isinstance(o.get("segmentation"), Mapping)]
            check_mask_budget(rles, *(input_size or (h, w)), context)  # before decoding any
            break
    for i, obj in enumerate(annotations):
        if "segmentation" in obj:
            segm = obj["segmentation"]
            if isinstance(segm, (list, tuple)):
                polygon_owners.append(i)
                arrays = polygons_as_arrays(segm, functools.partial(where, i), bound)
                polygon_groups.append(list(map(np.reshape, arrays, [(-1, 2)] * len(arrays))))
            elif isinstance(segm, Mapping):
                # bool, so that no transform treats the mask as a semantic map (a pad fills
                # an instance mask with False, not with seg_pad_value)
                mask = rle_to_bitmask(segm, context=where(i), image_size=input_size)
                obj["segmentation"] = transforms.apply_segmentation(mask.astype(bool))
            elif isinstance(segm, np.ndarray) and segm.ndim == 2:
                obj["segmentation"] = transforms.apply_segmentation(segm.astype(bool))
            else:
                raise RecordFormatError(
                    f"{where(i)}: key 'segmentation' must be a list of polygons, an RLE dict or "
                    f"an HxW mask array, got {type(segm).__name__}"
                )
        if "keypoints" in obj:
            keypoint_owners.append(i)
            keypoint_arrays.append(keypoints_as_array(obj["keypoints"], where(i)))

    if polygon_groups:  # pointwise transforms move all points of the image in one call each
        moving, pointwise = [], True
        for t in transforms.transforms:
            if not isinstance(t, GeometryPreservingTransform):  # those move nothing
                moving.append(t)
                pointwise = pointwise and type(t).apply_polygons is Transform.apply_polygons
        if pointwise:
            flat = list(itertools.chain.from_iterable(polygon_groups))
            points = np.concatenate(flat) if flat else np.zeros((0, 2))
            for t in moving:
                points = t.apply_coords(points)
            pieces = np.split(points, np.cumsum(list(map(len, flat)))[:-1])
            regrouped, start = [], 0
            for group in polygon_groups:
                regrouped.append(pieces[start : start + len(group)])
                start += len(group)
            polygon_groups = regrouped
        else:  # e.g. crops clip (and may drop) polygons
            for t in moving:
                polygon_groups = [list(t.apply_polygons(group)) for group in polygon_groups]
        for i, group in zip(polygon_owners, polygon_groups, strict=True):
            annotations[i]["segmentation"] = list(map(np.ravel, group))

    if keypoint_arrays:
        stacked = np.concatenate(keypoint_arrays, axis=0)
        stacked[:, :2] = transforms.apply_coords(stacked[:, :2])
        flipped = odd_hflips(transforms)
        indices = None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
        start = 0
        for i, arr in zip(keypoint_owners, keypoint_arrays, strict=True):
            kps = stacked[start : start + len(arr)]
            start += len(arr)
            annotations[i]["keypoints"] = finish_keypoints(
                kps.copy(), (h, w), indices, flipped, where(i)
            )


def _all_or_none_have(
    annos: Sequence[Mapping[str, Any]], key: str, prefix: str, pronoun: str
) -> bool:
    """Whether all annotations have ``key`` (True) or none (False); a mix is a
    RecordFormatError naming the first instance without it.
    """
    found, missing = False, None
    for index, obj in enumerate(annos):
        if key in obj:
            found = True
        elif missing is None:
            missing = index
    if not found:
        return False
    if missing is not None:
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
    """The training targets of one image from its (transformed) annotations.

    ``gt_boxes`` (Boxes, float32 XYXY_ABS), ``gt_classes`` (int64), with segmentations
    ``gt_masks`` (PolygonMasks for ``mask_format="polygon"``, BitMasks for ``"bitmask"``), with
    keypoints ``gt_keypoints`` (Keypoints), as detectron2 fills them.

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
    boxes = boxes_xyxy(annos, lambda i: _where(f"{prefix}instance {i}", annos[i]))
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
    annos: Sequence[Mapping[str, Any]], image_size: tuple[int, int], *, context: str | None = None
) -> Instances:
    """Targets for rotated boxes: ``bbox`` read as XYWHA_ABS (whatever its
    ``bbox_mode``, as detectron2), clipped; ``gt_boxes`` RotatedBoxes and ``gt_classes``.
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
                polygons_as_arrays(
                    segm,
                    functools.partial(_where, prefix + f"instance {i}", obj),
                    coordinate_bound(h, w),
                )
            )
        return PolygonMasks.from_validated(masks)  # checked by _polygons_as_arrays above
    check_mask_budget(annos, h, w, prefix + "image")  # before any allocation or rasterization
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
    """Drop instances whose box (a side <= ``box_threshold``) or mask (no polygon,
    no pixel) is empty; with ``return_mask`` also return the bool keep mask.

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


_MASK_FORMATS = ("polygon", "bitmask")
_XYXY = BoxMode.XYXY_ABS
_XYWH = BoxMode.XYWH_ABS


def _gather_boxes(annotations: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(Nx4 float64 XYXY boxes, N int64 classes) of the non-crowd annotations; None for
    anything unusual (the general path then raises the precise errors).
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
    transforms: Transform,
    image_size: tuple[int, int],
    filter_empty: bool,
) -> Instances | None:
    """Boxes and classes of the non-crowd annotations in one batch (or None): the same
    arithmetic and empty test as the general path, so the result is bit-identical.
    """
    gathered = _gather_boxes(annotations)
    if gathered is None:
        return None
    boxes, classes = gathered
    height, width = int(image_size[0]), int(image_size[1])
    if len(classes):
        if not (  # ``boxes`` is a new float64 array of our own: moved in place if possible
            isinstance(transforms, TransformList) and transforms.apply_box_inplace(boxes)
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


class InstanceOptions:
    """The checked options that turn a record's annotations into training Instances (shared
    by DatasetMapper and the ``AnnotationsToInstances`` step; ``owner`` is named in errors).

    Segmentation is dropped unless ``use_instance_mask``, keypoints unless ``use_keypoint``;
    ``recompute_boxes`` replaces the boxes by the tight boxes of the transformed masks.
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
        transforms: Transform,
        image_size: tuple[int, int],
        *,
        file_name: str | None,
        filter_empty: bool = True,
    ) -> Instances:
        """Transform the non-crowd ``annotations`` (modified: pass copies) and build the
        image's Instances; RecordFormatError / KeypointFlipError name the file and annotation."""
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
        transforms = as_transform_list(transforms)
        _transform_many(  # transform_annotations on ``kept`` itself
            kept, transforms, image_size, self.keypoint_hflip_indices,
            lambda i: _where(f"{source}, annotation {i}", kept[i]), source,
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


def annotations_to_training_instances(
    annotations: Sequence[dict[str, Any]],
    transforms: Transform,
    image_size: tuple[int, int],
    *,
    filter_empty: bool = True,
    file_name: str | None = None,
    **options: Any,
) -> Instances:
    """:meth:`InstanceOptions.instances` with the options given as keywords.

    Example:
        >>> annos = [{"bbox": [0, 0, 4, 4], "bbox_mode": 0, "category_id": 2}]
        >>> inst = annotations_to_training_instances(annos, HFlipTransform(10), (10, 10))
        >>> inst.gt_boxes.tensor.tolist(), inst.gt_classes.tolist()
        ([[6.0, 0.0, 10.0, 4.0]], [2])
    """
    return InstanceOptions("annotations_to_training_instances", **options).instances(
        annotations, transforms, image_size, file_name=file_name, filter_empty=filter_empty
    )
