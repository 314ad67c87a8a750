"""Writing a registered dataset as a COCO instances file (for COCO evaluation, or to share).

:func:`convert_to_coco_dict` turns the records of a registered dataset into a COCO dict the
way detectron2 does: boxes as XYWH_ABS rounded to 3 decimals, ``area`` from the mask
(polygons: the shoelace area; RLE: the pixel count) or else from the box, keypoints shifted
back by 0.5 with ``num_keypoints``, category ids mapped back through
``thing_dataset_id_to_contiguous_id``, annotation ids from 1. :func:`convert_to_coco_json`
writes it atomically under a file lock.

Differences from detectron2, on purpose: the records are never modified (detectron2 shifts
their keypoints in place); RLE areas are counted without pycocotools; every record error is a
:class:`CocoExportError` naming the dataset, the record index and the key.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .box_mode import BoxMode
from .dataset_catalog import DatasetCatalog
from .format_errors import CocoExportError
from .metadata import MetadataCatalog
from .validation import is_int

__all__ = ["convert_to_coco_dict", "convert_to_coco_json", "rle_area", "polygons_area"]

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """``value`` as plain Python (lists, ints, floats) for json: arrays and tensors too."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def polygons_area(polygons: Sequence[Sequence[float]]) -> float:
    """The summed shoelace area of polygons given as flat ``[x0, y0, x1, y1, ...]`` lists.

    Example:
        >>> polygons_area([[0, 0, 4, 0, 4, 2, 0, 2]])
        8.0
    """
    total = 0.0
    for polygon in polygons:
        xy = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        x, y = xy[:, 0], xy[:, 1]
        total += 0.5 * abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))
    return total


def _decode_rle_string(counts: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' LEB128-like encoding)."""
    runs: list[int] = []
    p, n = 0, len(counts)
    while p < n:
        value, shift = 0, 0
        while True:
            if p >= n or shift >= 35:
                raise ValueError("truncated or overlong RLE value")
            c = ord(counts[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"character {counts[p]!r} is not an RLE character")
            value |= (c & 0x1F) << shift
            p += 1
            shift += 5
            if not c & 0x20:
                if c & 0x10:
                    value |= -1 << shift
                break
        if len(runs) > 2:
            value += runs[-2]
        if value < 0:
            raise ValueError("negative RLE run")
        runs.append(value)
    return runs


def rle_area(rle: Mapping[str, Any]) -> int:
    """The number of foreground pixels of an RLE dict (``counts`` compressed or not).

    Example:
        >>> rle_area({"size": [2, 3], "counts": [1, 4, 1]})
        4
    """
    counts = rle["counts"]
    if isinstance(counts, bytes):
        counts = counts.decode("ascii")
    runs = _decode_rle_string(counts) if isinstance(counts, str) else [int(c) for c in counts]
    return int(sum(runs[1::2]))


def _reverse_id_map(dataset_name: str, metadata: Any) -> dict[int, int] | None:
    id_map = metadata.get("thing_dataset_id_to_contiguous_id")
    if id_map is None:
        return None
    reverse = {int(v): int(k) for k, v in id_map.items()}
    if len(reverse) != len(id_map):
        raise CocoExportError(
            f"dataset {dataset_name!r}: thing_dataset_id_to_contiguous_id maps two dataset ids "
            "to one contiguous id; the mapping cannot be reversed",
            dataset=dataset_name,
            key="thing_dataset_id_to_contiguous_id",
        )
    return reverse


def _area(annotation: Mapping[str, Any], xywh: list[float], fail: Any) -> float:
    segmentation = annotation.get("segmentation")
    if segmentation is None:
        return float(xywh[2] * xywh[3])  # XYWH_ABS and XYWHA_ABS both hold w, h at 2, 3
    if isinstance(segmentation, Mapping):
        try:
            return float(rle_area(segmentation))
        except (KeyError, TypeError, ValueError) as exc:
            raise fail("segmentation", f"is not a valid RLE dict ({exc})") from None
    if isinstance(segmentation, (list, tuple)):
        try:
            return polygons_area(segmentation)
        except (TypeError, ValueError) as exc:
            raise fail("segmentation", f"is not a list of flat polygons ({exc})") from None
    raise fail("segmentation", f"must be polygons or an RLE dict, got {type(segmentation)}")


def _annotation(
    annotation: Any, image_id: Any, reverse: dict[int, int] | None, fail: Any
) -> dict[str, Any]:
    if not isinstance(annotation, Mapping):
        raise fail("annotations", f"an annotation must be a dict, got {type(annotation)}")
    if "bbox" not in annotation or "bbox_mode" not in annotation:
        raise fail("bbox", "an annotation needs 'bbox' and 'bbox_mode'")
    bbox = _plain(annotation["bbox"])
    if not isinstance(bbox, list) or len(bbox) not in (4, 5):
        raise fail("bbox", f"must be 4 (or 5, rotated) numbers, got {bbox!r}")
    to_mode = BoxMode.XYWH_ABS if len(bbox) == 4 else BoxMode.XYWHA_ABS
    try:
        xywh = [float(v) for v in BoxMode.convert(bbox, annotation["bbox_mode"], to_mode)]
    except (TypeError, ValueError) as exc:
        raise fail("bbox", f"cannot be converted to {to_mode.name}: {exc}") from None
    if not all(map(math.isfinite, xywh)):
        raise fail("bbox", f"holds a value that is not finite: {bbox!r}")
    category = annotation.get("category_id")
    if not is_int(category):
        raise fail("category_id", f"must be an int, got {category!r}")
    if reverse is not None:
        if int(category) not in reverse:
            raise fail("category_id", f"contiguous id {category} is not in the metadata's "
                       "thing_dataset_id_to_contiguous_id")
        category = reverse[int(category)]
    out: dict[str, Any] = {
        "image_id": image_id,
        "bbox": [round(v, 3) for v in xywh],
        "area": _area(annotation, xywh, fail),
        "iscrowd": int(annotation.get("iscrowd", 0)),
        "category_id": int(category),
    }
    if "keypoints" in annotation:
        keypoints = [float(v) for v in _plain(annotation["keypoints"])]
        if len(keypoints) % 3:
            raise fail("keypoints", "must hold 3 values (x, y, visibility) per keypoint")
        keypoints = [v if i % 3 == 2 else v - 0.5 for i, v in enumerate(keypoints)]
        out["keypoints"] = [int(v) if v.is_integer() else v for v in keypoints]
        out["num_keypoints"] = int(annotation.get(
            "num_keypoints", sum(1 for v in keypoints[2::3] if v > 0)))
    if "segmentation" in annotation and annotation["segmentation"] is not None:
        segmentation = annotation["segmentation"]
        if isinstance(segmentation, Mapping):
            counts = segmentation["counts"]
            segmentation = {
                "size": _plain(segmentation["size"]),
                "counts": counts.decode("ascii") if isinstance(counts, bytes) else _plain(counts),
            }
        else:
            segmentation = _plain(segmentation)
        out["segmentation"] = segmentation
    return out


def convert_to_coco_dict(dataset_name: str) -> dict[str, Any]:
    """The records of a registered dataset as a COCO instances dict.

    Images get ``id`` (the record's ``image_id``, else its index), ``width``, ``height`` and
    ``file_name``; categories come from ``thing_classes`` with the dataset ids of
    ``thing_dataset_id_to_contiguous_id`` (the contiguous id itself when there is none);
    annotations are numbered from 1. ``annotations`` is left out when there is none, as
    detectron2 does (pycocotools then treats the file as a test split).

    Args:
        dataset_name: a name registered in DatasetCatalog whose metadata has ``thing_classes``.

    Returns:
        A dict with ``info``, ``images``, ``categories``, ``licenses`` and ``annotations``.

    Raises:
        DatasetNotRegisteredError: the name is unknown.
        CocoExportError: no ``thing_classes``; a record without ``width``/``height`` or
            ``file_name``; an annotation without ``bbox``/``bbox_mode``, with a category
            outside the id map, a malformed segmentation or keypoints (names the dataset,
            record index and key).

    Example:
        >>> coco = convert_to_coco_dict("my_val")  # doctest: +SKIP
        >>> coco["annotations"][0]["bbox"]  # XYWH_ABS  # doctest: +SKIP
        [10.0, 20.0, 30.0, 40.0]
    """
    records = DatasetCatalog.get(dataset_name)
    metadata = MetadataCatalog.get(dataset_name)
    classes = metadata.get("thing_classes")
    if classes is None:
        raise CocoExportError(
            f"dataset {dataset_name!r} has no 'thing_classes' in its metadata; COCO categories "
            "are made from them",
            dataset=dataset_name,
            key="thing_classes",
        )
    reverse = _reverse_id_map(dataset_name, metadata)
    categories = [
        {"id": reverse.get(i, i) if reverse is not None else i, "name": str(name)}
        for i, name in enumerate(classes)
    ]
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index, record in enumerate(records):

        def fail(key: str, problem: str, index: int = index) -> CocoExportError:
            return CocoExportError(
                f"dataset {dataset_name!r}, record {index}: key {key!r} {problem}",
                dataset=dataset_name,
                index=index,
                key=key,
            )

        for key in ("width", "height", "file_name"):
            if key not in record:
                raise fail(key, "is missing (COCO images need width, height and file_name)")
        image_id = _plain(record.get("image_id", index))
        images.append({
            "id": image_id,
            "width": int(record["width"]),
            "height": int(record["height"]),
            "file_name": str(record["file_name"]),
        })
        for annotation in record.get("annotations") or []:
            out = _annotation(annotation, image_id, reverse, fail)
            annotations.append({"id": len(annotations) + 1, **out})
    logger.info("converted dataset %r: %d images, %d annotations", dataset_name, len(images),
                len(annotations))
    coco: dict[str, Any] = {
        "info": {
            "date_created": datetime.datetime.now().isoformat(),
            "description": f"COCO file written by catmap from dataset {dataset_name!r}",
        },
        "images": images,
        "categories": categories,
        "licenses": None,
    }
    if annotations:
        coco["annotations"] = annotations
    return coco


def convert_to_coco_json(
    dataset_name: str, output_file: str | os.PathLike, allow_cached: bool = True
) -> None:
    """Write :func:`convert_to_coco_dict` of ``dataset_name`` to ``output_file``.

    The file is written to a temporary file in the same directory and renamed (readers never
    see half a file), under a lock file so that concurrent ranks convert only once.

    Args:
        dataset_name: the registered dataset.
        output_file: the json file to write (its directory is created).
        allow_cached: keep an existing ``output_file`` as it is (it is not checked against the
            dataset; delete it when the dataset changed).

    Raises:
        CocoExportError, DatasetNotRegisteredError: see :func:`convert_to_coco_dict`.

    Example:
        >>> convert_to_coco_json("my_val", "out/my_val_coco.json")  # doctest: +SKIP
    """
    from filelock import FileLock

    output_file = os.fspath(output_file)
    directory = os.path.dirname(os.path.abspath(output_file))
    os.makedirs(directory, exist_ok=True)
    with FileLock(output_file + ".lock"):
        if allow_cached and os.path.exists(output_file):
            logger.warning(
                "using the COCO file already at %r for dataset %r; delete it if the dataset "
                "changed", output_file, dataset_name,
            )
            return
        coco = convert_to_coco_dict(dataset_name)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(output_file) + ".", suffix=".tmp",
                                   dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(coco, f, allow_nan=False)
            os.chmod(tmp, 0o644)
            os.replace(tmp, output_file)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        logger.info("wrote dataset %r as COCO json to %r", dataset_name, output_file)
