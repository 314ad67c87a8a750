"""Transform record annotations with the image and turn them into :class:`Instances`.

The annotation format is detectron2's: ``bbox`` + ``bbox_mode``, ``category_id``, optional
``segmentation`` (a list of flat polygons ``[x0, y0, x1, y1, ...]``, a COCO RLE dict, or an
HxW mask array), optional ``keypoints`` (flat ``[x, y, v] * K``), ``iscrowd``.

RLE masks need pycocotools (``pip install 'catmap[coco]'``); without it a
:class:`MissingDependencyError` says so.

Example:
    >>> import numpy as np
    >>> from catalog import BoxMode
    >>> from mappers.transforms import HFlipTransform
    >>> anno = {"bbox": [10, 10, 190, 290], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0,
    ...         "segmentation": [[10, 10, 100, 100, 100, 10]]}
    >>> anno = transform_instance_annotations(anno, [HFlipTransform(400)], (300, 400))
    >>> anno["bbox"].tolist(), anno["segmentation"][0].tolist()
    ([200.0, 10.0, 390.0, 300.0], [390.0, 10.0, 300.0, 100.0, 300.0, 10.0])
    >>> annotations_to_instances([anno], (300, 400)).gt_boxes.tolist()
    [[200.0, 10.0, 390.0, 300.0]]
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from catalog.box_mode import BoxMode
from catalog.errors import CatmapError, RecordFormatError

from .geometry_checks import (
    check_keypoints,
    check_polygons,
    check_rle,
    coordinate_bound,
    input_size_of,
)
from .instances import Instances
from .transforms.transform import HFlipTransform, Transform, TransformList

__all__ = [
    "MissingDependencyError",
    "KeypointFlipError",
    "transform_annotations",
    "transform_instance_annotations",
    "transform_keypoint_annotations",
    "annotations_to_instances",
    "filter_empty_instances",
    "create_keypoint_hflip_indices",
    "polygons_to_bitmask",
    "rle_to_bitmask",
]

logger = logging.getLogger(__name__)


class MissingDependencyError(CatmapError, ImportError):
    """An optional dependency is needed for this input; the message names the extra to install."""


class KeypointFlipError(CatmapError, ValueError):
    """Keypoint flip indices are missing, malformed, or cannot be built from the metadata."""


def _where(context: str | None, annotation: Mapping[str, Any] | None = None) -> str:
    parts = [context] if context else []
    if annotation is not None and isinstance(annotation, Mapping) and "id" in annotation:
        parts.append(f"annotation id {annotation['id']}")
    return ", ".join(parts) if parts else "annotation"


def _mask_utils(purpose: str) -> Any:
    try:
        from pycocotools import mask as mask_utils
    except ImportError:
        raise MissingDependencyError(
            f"{purpose} needs pycocotools, which is not installed: pip install 'catmap[coco]' "
            "(or pip install pycocotools)"
        ) from None
    return mask_utils


def rle_to_bitmask(
    rle: Mapping[str, Any],
    *,
    context: str | None = None,
    image_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Decode a COCO RLE dict (compressed or uncompressed counts) to an HxW uint8 mask.

    The dict is checked before pycocotools sees it (see :mod:`mappers.geometry_checks`):
    ``size`` against ``image_size`` (when given) and the pixel limit, the runs adding up to
    height * width.

    Raises:
        MissingDependencyError: pycocotools is not installed.
        RecordFormatError: the dict lacks ``size`` / ``counts``, its size differs from
            ``image_size``, or its counts are malformed.

    Example:
        >>> rle_to_bitmask({"size": [2, 2], "counts": [1, 2, 1]}).tolist()
        [[0, 1], [1, 0]]
    """
    mask_utils = _mask_utils("decoding an RLE segmentation")
    where = _where(context, rle)
    height, width, counts = check_rle(rle, where, image_size)
    try:
        if isinstance(counts, list):
            encoded = mask_utils.frPyObjects(
                {"size": [height, width], "counts": counts}, height, width
            )
        else:
            encoded = {"size": [height, width], "counts": counts}
        mask = mask_utils.decode(encoded)
    except (TypeError, ValueError) as exc:
        raise RecordFormatError(f"{where}: cannot decode RLE segmentation ({exc})") from exc
    return np.ascontiguousarray(mask, dtype=np.uint8)


def polygons_to_bitmask(
    polygons: Sequence[Any], height: int, width: int, *, context: str | None = None
) -> np.ndarray:
    """Rasterize polygons (flat ``[x0, y0, ...]`` lists/arrays) into one HxW uint8 mask.

    Uses pycocotools, so masks match COCO's. An empty list gives an all-zero mask. The
    coordinates are checked first: finite and within
    :func:`~mappers.geometry_checks.coordinate_bound` of the image (pycocotools' rasterizer
    crashes the process on huge values).

    Raises:
        MissingDependencyError: pycocotools is not installed.
        RecordFormatError: malformed polygons, a non-finite or out-of-bound coordinate
            (``context`` starts the message).

    Example:
        >>> int(polygons_to_bitmask([[0, 0, 4, 0, 4, 4, 0, 4]], 6, 6).sum())
        16
    """
    height, width = int(height), int(width)
    if height <= 0 or width <= 0:
        raise ValueError(f"polygons_to_bitmask: the mask size must be positive, got {height}x{width}")
    if len(polygons) == 0:
        return np.zeros((height, width), dtype=np.uint8)
    mask_utils = _mask_utils("rasterizing polygons into a bitmask")
    arrays = _polygons_as_arrays(
        polygons, context or "polygons_to_bitmask", bound=coordinate_bound(height, width)
    )
    rles = mask_utils.frPyObjects([p.tolist() for p in arrays], height, width)
    return np.ascontiguousarray(mask_utils.decode(mask_utils.merge(rles)), dtype=np.uint8)


def _as_transform(transforms: Transform | Sequence[Transform]) -> TransformList:
    if isinstance(transforms, TransformList):
        return transforms
    if isinstance(transforms, Transform):
        return TransformList([transforms])
    return TransformList(list(transforms))


def _polygons_as_arrays(
    segm: Sequence[Any], where: str | Callable[[], str], bound: float | None = None
) -> list[np.ndarray]:
    """Validate polygons and return them as flat float64 arrays (``where`` names the source).

    Every coordinate must be finite, and at most ``bound`` in absolute value when given.
    """
    arrays = []
    for j, polygon in enumerate(segm):
        if (
            type(polygon) is np.ndarray
            and polygon.dtype == np.float64
            and polygon.ndim == 1
            and polygon.size >= 6
            and polygon.size % 2 == 0
        ):
            arrays.append(polygon)  # already transformed / validated
            continue
        try:
            arr = np.asarray(polygon, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} is not a flat list of numbers"
            ) from None
        if arr.size % 2 != 0 or arr.size < 6:
            label = where() if callable(where) else where
            raise RecordFormatError(
                f"{label}: key 'segmentation', polygon {j} has {arr.size} numbers; a polygon "
                "needs an even count of at least 6 (x, y pairs)"
            )
        arrays.append(arr)
    try:
        check_polygons(arrays, "", bound)
    except RecordFormatError as exc:
        label = where() if callable(where) else where
        raise RecordFormatError(f"{label}{exc}") from None
    return arrays


def _keypoints_as_array(keypoints: Any, where: str) -> np.ndarray:
    try:
        arr = np.array(keypoints, dtype=np.float64)
    except (TypeError, ValueError):
        raise RecordFormatError(f"{where}: key 'keypoints' is not a list of numbers") from None
    if arr.size % 3 != 0:
        raise RecordFormatError(
            f"{where}: key 'keypoints' has {arr.size} numbers, not a multiple of 3 (x, y, v)"
        )
    check_keypoints(arr, where)
    return arr.reshape(-1, 3)


def _odd_hflips(transforms: TransformList) -> bool:
    return sum(isinstance(t, HFlipTransform) for t in transforms.transforms) % 2 == 1


def _finish_keypoints(
    kps: np.ndarray,
    image_size: tuple[int, int],
    flip_indices: np.ndarray | None,
    flipped: bool,
    where: str,
) -> np.ndarray:
    """Hide points outside the image, swap left/right after a flip, zero hidden points."""
    h, w = image_size
    inside = (kps[:, 0] >= 0) & (kps[:, 0] <= w) & (kps[:, 1] >= 0) & (kps[:, 1] <= h)
    kps[~inside, 2] = 0
    if flipped:
        if flip_indices is None:
            raise KeypointFlipError(
                f"{where}: the keypoints were flipped horizontally, so keypoint_hflip_indices "
                "is needed to swap left and right (build it with "
                "create_keypoint_hflip_indices(dataset_names) from metadata 'keypoint_flip_map')"
            )
        if flip_indices.ndim != 1 or len(flip_indices) != len(kps):
            raise KeypointFlipError(
                f"{where}: keypoint_hflip_indices has {flip_indices.size} entries but the "
                f"annotation has {len(kps)} keypoints"
            )
        kps = kps[flip_indices]
    kps[kps[:, 2] == 0] = 0
    return kps


def transform_keypoint_annotations(
    keypoints: Any,
    transforms: Transform | Sequence[Transform],
    image_size: tuple[int, int],
    keypoint_hflip_indices: np.ndarray | None = None,
    *,
    context: str | None = None,
) -> np.ndarray:
    """Transform flat ``[x, y, v] * K`` keypoints; return a float64 Kx3 array.

    Points that land outside the image ``[0, w] x [0, h]`` get ``v = 0``; after an odd
    number of horizontal flips, left/right keypoints are swapped with
    ``keypoint_hflip_indices``; points with ``v == 0`` are set to (0, 0, 0) (COCO convention).

    Raises:
        RecordFormatError: the count is not a multiple of 3.
        KeypointFlipError: flip indices are needed but missing or of the wrong length.

    Example:
        >>> transform_keypoint_annotations([1, 2, 2, 9, 9, 2], [HFlipTransform(8)], (8, 8),
        ...                                np.array([1, 0])).tolist()
        [[0.0, 0.0, 0.0], [7.0, 2.0, 2.0]]
    """
    transforms = _as_transform(transforms)
    where = context or "annotation"
    kps = _keypoints_as_array(keypoints, where)
    kps[:, :2] = transforms.apply_coords(kps[:, :2])
    indices = None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
    return _finish_keypoints(kps, image_size, indices, _odd_hflips(transforms), where)


def transform_instance_annotations(
    annotation: dict[str, Any],
    transforms: Transform | Sequence[Transform],
    image_size: tuple[int, int],
    *,
    keypoint_hflip_indices: np.ndarray | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """Apply ``transforms`` to one annotation dict, in place, and return it.

    * ``bbox`` is converted to XYXY_ABS, transformed (through its 4 corners), clipped to the
      output image and stored as a float numpy array; ``bbox_mode`` becomes XYXY_ABS.
    * polygons are transformed (and clipped by crops; a polygon left with no area is
      dropped, so a segmentation may become ``[]``); RLE dicts and mask arrays are decoded to
      an HxW uint8 mask and transformed like a segmentation map.
    * keypoints: see :func:`transform_keypoint_annotations`.

    For all the annotations of an image, :func:`transform_annotations` gives the same result
    several times faster.

    Args:
        annotation: one entry of a record's ``annotations``.
        transforms: a Transform, TransformList or list of transforms.
        image_size: (h, w) of the image after the transforms.
        keypoint_hflip_indices: from :func:`create_keypoint_hflip_indices`.
        context: where the annotation comes from (e.g. "file a.jpg, annotation 3"), put at
            the start of error messages.

    Raises:
        RecordFormatError: a missing or malformed key (named in the message).
        MissingDependencyError: an RLE segmentation and no pycocotools.
        KeypointFlipError: see :func:`transform_keypoint_annotations`.

    Example:
        >>> anno = {"bbox": [10, 10, 200, 300], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0}
        >>> transform_instance_annotations(anno, [HFlipTransform(400)], (300, 400))["bbox"].tolist()
        [200.0, 10.0, 390.0, 300.0]
    """
    _transform_many(
        [annotation],
        _as_transform(transforms),
        image_size,
        keypoint_hflip_indices,
        lambda i: _where(context, annotation),
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
    """Apply ``transforms`` to all the annotations of one image, in place; return them.

    Same result as :func:`transform_instance_annotations` on each annotation, but the boxes,
    the polygon points and the keypoints of all annotations each go through the transforms
    in one vectorized call (about 5x faster for a typical COCO image).

    Args:
        annotations: the annotation dicts (e.g. the non-crowd ones of a record).
        transforms: a Transform, TransformList or list of transforms.
        image_size: (h, w) of the image after the transforms.
        keypoint_hflip_indices: from :func:`create_keypoint_hflip_indices`.
        context: where the annotations come from (e.g. the image file name); error messages
            name it and the annotation's position.

    Raises:
        RecordFormatError, MissingDependencyError, KeypointFlipError: as
        :func:`transform_instance_annotations`.

    Example:
        >>> annos = [{"bbox": [0, 0, 10, 10], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0},
        ...          {"bbox": [5, 5, 10, 10], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1}]
        >>> [a["bbox"].tolist() for a in transform_annotations(annos, [HFlipTransform(20)], (20, 20))]
        [[10.0, 0.0, 20.0, 10.0], [5.0, 5.0, 15.0, 15.0]]
    """
    annotations = list(annotations)
    prefix = f"{context}, " if context else ""

    def where(i: int) -> str:
        return _where(f"{prefix}annotation {i}", annotations[i])

    _transform_many(
        annotations, _as_transform(transforms), image_size, keypoint_hflip_indices, where
    )
    return annotations


def _boxes_xyxy(
    annotations: Sequence[Mapping[str, Any]], where: Callable[[int], str]
) -> np.ndarray:
    """Stack the annotations' boxes as an Nx4 float64 XYXY_ABS array."""
    n = len(annotations)
    try:  # fast path: every box is 4 numbers in XYXY_ABS or XYWH_ABS
        modes = np.fromiter((obj["bbox_mode"] for obj in annotations), dtype=np.int64, count=n)
        if np.all((modes == BoxMode.XYXY_ABS) | (modes == BoxMode.XYWH_ABS)):
            boxes = np.array([obj["bbox"] for obj in annotations], dtype=np.float64)
            if boxes.shape == (n, 4):
                xywh = modes == BoxMode.XYWH_ABS
                boxes[xywh, 2:] += boxes[xywh, :2]
                return boxes
    except (KeyError, TypeError, ValueError):
        pass  # the loop below finds the culprit and names it
    boxes = np.empty((n, 4), dtype=np.float64)
    for i, obj in enumerate(annotations):
        try:
            bbox, mode = obj["bbox"], obj["bbox_mode"]
        except KeyError as exc:
            raise RecordFormatError(f"{where(i)}: missing key {exc.args[0]!r}") from None
        except TypeError:
            raise RecordFormatError(
                f"{where(i)}: an annotation must be a dict, got {type(obj).__name__}"
            ) from None
        try:
            boxes[i] = BoxMode.convert(np.asarray(bbox, dtype=np.float64), mode, BoxMode.XYXY_ABS)
        except (TypeError, ValueError) as exc:
            raise RecordFormatError(
                f"{where(i)}: key 'bbox' {bbox!r} with bbox_mode {mode!r} is not a box of 4 "
                f"numbers ({exc})"
            ) from None
    return boxes


def _transform_polygon_groups(
    groups: list[list[np.ndarray]], transforms: TransformList
) -> list[list[np.ndarray]]:
    """Transform lists of Nx2 polygons; pointwise transforms see all points in one call."""
    for t in transforms.transforms:
        if type(t).apply_polygons is Transform.apply_polygons:
            flat = [p for group in groups for p in group]
            if not flat:
                continue
            moved = t.apply_coords(np.concatenate(flat, axis=0))
            pieces, offset = [], 0
            for p in flat:
                pieces.append(moved[offset : offset + len(p)])
                offset += len(p)
            regrouped, start = [], 0
            for group in groups:
                regrouped.append(pieces[start : start + len(group)])
                start += len(group)
            groups = regrouped
        else:  # e.g. crops clip (and may drop) polygons
            groups = [list(t.apply_polygons(group)) for group in groups]
    return groups


def _transform_many(
    annotations: Sequence[dict[str, Any]],
    transforms: TransformList,
    image_size: tuple[int, int],
    keypoint_hflip_indices: Any,
    where: Callable[[int], str],
) -> None:
    if len(annotations) == 0:
        return
    h, w = int(image_size[0]), int(image_size[1])
    boxes = transforms.apply_box(_boxes_xyxy(annotations, where))
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
    if any("segmentation" in obj for obj in annotations):
        input_size = input_size_of(transforms, (h, w))
        bound = None if input_size is None else coordinate_bound(*input_size)
    for i, obj in enumerate(annotations):
        if "segmentation" in obj:
            segm = obj["segmentation"]
            if isinstance(segm, (list, tuple)):
                polygon_owners.append(i)
                polygon_groups.append(
                    [
                        p.reshape(-1, 2)
                        for p in _polygons_as_arrays(segm, functools.partial(where, i), bound)
                    ]
                )
            elif isinstance(segm, Mapping):
                obj["segmentation"] = transforms.apply_segmentation(
                    rle_to_bitmask(segm, context=where(i), image_size=input_size)
                )
            elif isinstance(segm, np.ndarray) and segm.ndim == 2:
                obj["segmentation"] = transforms.apply_segmentation(segm)
            else:
                raise RecordFormatError(
                    f"{where(i)}: key 'segmentation' must be a list of polygons, an RLE dict or "
                    f"an HxW mask array, got {type(segm).__name__}"
                )
        if "keypoints" in obj:
            keypoint_owners.append(i)
            keypoint_arrays.append(_keypoints_as_array(obj["keypoints"], where(i)))

    if polygon_groups:
        for i, group in zip(
            polygon_owners, _transform_polygon_groups(polygon_groups, transforms), strict=True
        ):
            annotations[i]["segmentation"] = [p.reshape(-1) for p in group]

    if keypoint_arrays:
        stacked = np.concatenate(keypoint_arrays, axis=0)
        stacked[:, :2] = transforms.apply_coords(stacked[:, :2])
        flipped = _odd_hflips(transforms)
        indices = None if keypoint_hflip_indices is None else np.asarray(keypoint_hflip_indices)
        start = 0
        for i, arr in zip(keypoint_owners, keypoint_arrays, strict=True):
            kps = stacked[start : start + len(arr)]
            start += len(arr)
            annotations[i]["keypoints"] = _finish_keypoints(
                kps.copy(), (h, w), indices, flipped, where(i)
            )


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

    Fields: ``gt_boxes`` float32 Nx4 XYXY_ABS tensor, ``gt_classes`` int64 tensor; when the
    annotations have ``segmentation``: ``gt_masks``, a list (one entry per instance) of
    lists of flat float64 polygon arrays for ``mask_format="polygon"``, or a uint8 NxHxW
    tensor for ``"bitmask"``; when they have ``keypoints``: ``gt_keypoints`` float32 NxKx3.
    An empty list gives empty ``gt_boxes`` (0x4) and ``gt_classes``.

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
        >>> tuple(inst.gt_boxes.shape), inst.gt_classes.dtype
        ((0, 4), torch.int64)
    """
    if mask_format not in ("polygon", "bitmask"):
        raise ValueError(f"mask_format must be 'polygon' or 'bitmask', got {mask_format!r}")
    h, w = int(image_size[0]), int(image_size[1])
    prefix = f"{context}, " if context else ""
    instances = Instances((h, w))
    boxes = _boxes_xyxy(annos, lambda i: _where(f"{prefix}instance {i}", annos[i]))
    instances.gt_boxes = torch.from_numpy(boxes.astype(np.float32))
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
        instances.gt_masks = torch.zeros((0, h, w), dtype=torch.uint8)

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
        instances.gt_keypoints = torch.from_numpy(np.stack(kps).reshape(len(annos), -1, 3))
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
        return masks
    bitmasks = np.empty((len(annos), h, w), dtype=np.uint8)
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
    return torch.from_numpy(bitmasks)


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
        >>> inst = Instances((10, 10), gt_boxes=torch.tensor([[0., 0., 5., 5.], [3., 3., 3., 8.]]))
        >>> len(filter_empty_instances(inst))
        1
    """
    keep = np.ones(len(instances), dtype=bool)
    if by_box and instances.has("gt_boxes"):
        boxes = instances.gt_boxes
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
            keep &= np.asarray(masks.nonempty(), dtype=bool)
        else:
            keep &= np.fromiter((len(polys) > 0 for polys in masks), dtype=bool, count=len(masks))
    keep_mask = torch.from_numpy(keep)
    result = instances if keep.all() else instances[keep_mask]
    return (result, keep_mask) if return_mask else result


def create_keypoint_hflip_indices(dataset_names_or_metadata: Any) -> np.ndarray:
    """Indices that swap left/right keypoints, from metadata ``keypoint_names`` and ``keypoint_flip_map``.

    Args:
        dataset_names_or_metadata: a dataset name, a Metadata (or mapping with those keys),
            or a list of them; all must describe the same keypoints.

    Returns:
        int64 array: ``flipped = keypoints[indices]``.

    Raises:
        KeypointFlipError: a key is missing, the flip map names an unknown keypoint, or the
            datasets disagree (the message names the dataset and key).

    Example:
        >>> meta = {"keypoint_names": ["nose", "left_eye", "right_eye"],
        ...         "keypoint_flip_map": [("left_eye", "right_eye")]}
        >>> create_keypoint_hflip_indices(meta).tolist()
        [0, 2, 1]
    """
    items = dataset_names_or_metadata
    if isinstance(items, (str, Mapping)) or not isinstance(items, (list, tuple)):
        items = [items]
    if len(items) == 0:
        raise KeypointFlipError("create_keypoint_hflip_indices: no dataset given")
    result: np.ndarray | None = None
    first_label = ""
    for item in items:
        label, names, flip_map = _keypoint_metadata(item)
        indices = _flip_indices(label, names, flip_map)
        if result is None:
            result, first_label = indices, label
        elif not np.array_equal(result, indices):
            raise KeypointFlipError(
                f"datasets {first_label} and {label} have different keypoint_names / "
                "keypoint_flip_map; they cannot share keypoint flip indices"
            )
    return result  # type: ignore[return-value]


def _keypoint_metadata(item: Any) -> tuple[str, Any, Any]:
    if isinstance(item, str):
        from catalog.metadata import MetadataCatalog

        meta: Any = MetadataCatalog.get(item)
        label = repr(item)
    else:
        meta = item
        name = meta.get("name", None) if hasattr(meta, "get") else None
        label = repr(name) if name else f"<{type(item).__name__}>"
    if not hasattr(meta, "get"):
        raise KeypointFlipError(
            f"create_keypoint_hflip_indices: expected a dataset name or metadata, got {type(item).__name__}"
        )
    names = meta.get("keypoint_names", None)
    flip_map = meta.get("keypoint_flip_map", None)
    for key, value in (("keypoint_names", names), ("keypoint_flip_map", flip_map)):
        if value is None:
            raise KeypointFlipError(f"metadata of dataset {label} has no key {key!r}")
    return label, names, flip_map


def _flip_indices(label: str, names: Sequence[str], flip_map: Any) -> np.ndarray:
    names = list(names)
    pairs = list(flip_map.items()) if isinstance(flip_map, Mapping) else list(flip_map)
    swap: dict[str, str] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise KeypointFlipError(
                f"metadata of dataset {label}: key 'keypoint_flip_map' entry {pair!r} is not a pair"
            )
        a, b = pair
        for n in (a, b):
            if n not in names:
                raise KeypointFlipError(
                    f"metadata of dataset {label}: key 'keypoint_flip_map' names {n!r}, which is "
                    f"not in keypoint_names {names}"
                )
        swap[a], swap[b] = b, a
    position = {n: i for i, n in enumerate(names)}
    return np.array([position[swap.get(n, n)] for n in names], dtype=np.int64)
