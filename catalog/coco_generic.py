"""The generic path of the COCO loader: records from the parsed JSON (dicts and lists, from
orjson or json), every value the loader reads checked by type and range.

It applies exactly the rules of the typed path (:mod:`catalog.coco_typed`), which checks the
same ranges while msgspec decodes; the fuzz tests (``tests/test_fuzz_coco.py``) hold both to
the same records, skip counts and error class on any input. This path also produces the
precise error message when the typed path meets bad data (it then falls back to this one).
"""

from __future__ import annotations

import re
from typing import Any

from .box_mode import BoxMode
from .coco_common import (
    INT64_MAX,
    INT64_MIN,
    MAX_IMAGE_SIDE,
    MAX_NUM_KEYPOINTS,
    MAX_RLE_RUN,
    RLE_CHARS,
    SkipCounts,
    extra_value_problem,
    image_record,
    keypoints_problem,
    rle_dict,
    shift_keypoints,
    short_repr,
)
from .errors import AnnotationFormatError

__all__ = ["convert_generic", "RECORD_KEYS", "VALIDATED_KEYS"]

#: Annotation keys the record sets itself; as ``extra_annotation_keys`` they change nothing.
RECORD_KEYS = frozenset(
    ("bbox", "bbox_mode", "category_id", "iscrowd", "segmentation", "keypoints")
)
#: Annotation keys read and checked by the loader; as extra keys their checked value is copied.
VALIDATED_KEYS = frozenset(("id", "image_id", "area", "num_keypoints", "ignore"))

_NUMBER_TYPES = frozenset((int, float))
_INF = float("inf")
_RLE_CHARS = re.compile(RLE_CHARS)


def _is_id(value: Any) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def _number_ok(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return -_INF < value < _INF
    return kind is int and INT64_MIN <= value <= INT64_MAX


def _side_ok(value: Any) -> bool:
    return type(value) is int and 1 <= value <= MAX_IMAGE_SIDE


def _numbers_problem(
    values: Any, low: float | None = None, high: float | None = None
) -> str | None:
    """Why ``values`` is not a list of numbers (bool excluded): finite floats and ints within
    the 64-bit range, or within [low, high] when given; None when it is one."""
    if type(values) is not list:
        return f"is a {type(values).__name__}, not a list of numbers"
    if not values:
        return None
    if not _NUMBER_TYPES.issuperset(map(type, values)):
        bad = next(v for v in values if type(v) not in _NUMBER_TYPES)
        return f"holds {short_repr(bad)}, not a number"
    smallest, largest = min(values), max(values)
    if low is not None and (smallest < low or largest > high):
        return f"holds a number outside [{low}, {high}]"
    if largest == _INF or smallest == -_INF:
        return "holds a number too large for a double"
    if (smallest < INT64_MIN or largest > INT64_MAX) and any(
        type(v) is int and not INT64_MIN <= v <= INT64_MAX for v in values
    ):
        return "holds an int outside the 64-bit range"
    return None


def _rle_problem(segm: dict) -> str | None:
    size, counts = segm.get("size"), segm.get("counts")
    if type(size) is not list or len(size) != 2 or not all(map(_side_ok, size)):
        return f"an RLE 'size' must be [height, width] of ints in [1, {MAX_IMAGE_SIDE}]"
    if type(counts) is str:
        return None if _RLE_CHARS.match(counts) else "a compressed RLE holds invalid characters"
    problem = _numbers_problem(counts, 0, MAX_RLE_RUN)
    if problem or not all(type(c) is int for c in counts):
        return "RLE 'counts' must be a string or a list of non-negative ints"
    return rle_sum_problem(size, counts)


def rle_sum_problem(size: list[int], counts: Any) -> str | None:
    """Why an uncompressed RLE does not cover its ``size`` exactly, or None."""
    if type(counts) is list and sum(counts) != size[0] * size[1]:
        return f"RLE counts sum to {sum(counts)}, not height * width = {size[0] * size[1]}"
    return None


def _malformed(json_file: str, ann: Any, index: int, key: str, problem: str) -> None:
    ann_id = ann.get("id") if type(ann) is dict else None
    raise AnnotationFormatError(
        f"{json_file}: annotation {short_repr(ann_id)} (index {index}) is malformed: "
        f"{key!r} {problem}"
    )


def convert_generic(
    data: Any,
    json_file: str,
    image_root: str,
    extra_keys: tuple[str, ...],
    counts: SkipCounts,
) -> tuple[list[dict], list[dict]]:
    """Records and sorted categories (``{"id", "name"}``) of a parsed COCO file.

    Raises:
        AnnotationFormatError: see the policy table of :func:`catalog.coco.load_coco_json`.

    Example:
        >>> data = {"images": [{"id": 1, "file_name": "a.jpg", "height": 2, "width": 2}]}
        >>> convert_generic(data, "x.json", "", (), SkipCounts())[0][0]["image_id"]
        1
    """
    if isinstance(data, list):
        raise AnnotationFormatError(
            f"{json_file} holds a JSON list: it looks like a COCO *results* file (detections), "
            "not an instances file with 'images', 'annotations' and 'categories'"
        )
    if type(data) is not dict or type(data.get("images")) is not list:
        found = sorted(data) if type(data) is dict else type(data).__name__
        raise AnnotationFormatError(
            f"{json_file} is not a COCO instances file: expected a dict with an 'images' list, "
            f"found {short_repr(found)}"
        )
    annotations = data.get("annotations")
    categories = data.get("categories")
    annotations = [] if annotations is None else annotations
    categories = [] if categories is None else categories
    if type(annotations) is not list or type(categories) is not list:
        raise AnnotationFormatError(
            f"{json_file}: 'annotations' and 'categories' must be lists, got "
            f"{type(annotations).__name__} and {type(categories).__name__}"
        )
    sorted_categories, keypoint_counts = _categories(categories, json_file)
    id_map = {c["id"]: i for i, c in enumerate(sorted_categories)}
    records, annos_of_image = _image_records(data["images"], json_file, image_root, counts)
    _check_annotation_ids(annotations, json_file)
    _attach(annotations, annos_of_image, id_map, keypoint_counts, json_file, extra_keys, counts)
    return records, sorted_categories


def _categories(categories: list[Any], json_file: str) -> tuple[list[dict], list[int | None]]:
    by_id: dict[int, tuple[Any, int | None]] = {}
    for index, cat in enumerate(categories):
        if type(cat) is not dict or cat.get("id") is None:
            raise AnnotationFormatError(
                f"{json_file}: category {index} has no 'id' (got {short_repr(cat)})"
            )
        cat_id, name, names = cat["id"], cat.get("name"), cat.get("keypoints")
        problem = None
        if not _is_id(cat_id):
            problem = f"'id' {short_repr(cat_id)} is not an int in the 64-bit range"
        elif name is not None and type(name) is not str:
            problem = f"'name' is a {type(name).__name__}, not a str"
        elif names is not None and (
            type(names) is not list or not all(type(n) is str for n in names)
        ):
            problem = "'keypoints' must be a list of keypoint names (str)"
        elif cat_id in by_id:
            problem = f"category id {cat_id} appears more than once"
        if problem:
            raise AnnotationFormatError(f"{json_file}: category {index}: {problem}")
        by_id[cat_id] = (name, len(names) if names else None)
    ordered = sorted(by_id)
    return [{"id": i, "name": by_id[i][0]} for i in ordered], [by_id[i][1] for i in ordered]


def _image_records(
    images: list[Any], json_file: str, image_root: str, counts: SkipCounts
) -> tuple[list[dict], dict[int, list[dict]]]:
    records: list[dict] = []
    annos_of_image: dict[int, list[dict]] = {}
    for index, img in enumerate(images):
        if type(img) is not dict or "id" not in img or "file_name" not in img:
            raise AnnotationFormatError(
                f"{json_file}: image {index} has no 'id' or 'file_name' (got {short_repr(img)})"
            )
        image_id, file_name = img["id"], img["file_name"]
        height, width = img.get("height"), img.get("width")
        where = f"{json_file}: image {short_repr(image_id)} (index {index})"
        if not _is_id(image_id):
            raise AnnotationFormatError(f"{where}: 'id' is not an int in the 64-bit range")
        if type(file_name) is not str:
            raise AnnotationFormatError(
                f"{where} has a file_name of type {type(file_name).__name__}, not a str"
            )
        if not file_name or "\x00" in file_name:
            raise AnnotationFormatError(f"{where}: 'file_name' is empty or holds a NUL character")
        for key, side in (("height", height), ("width", width)):
            if side is not None and not _side_ok(side):
                raise AnnotationFormatError(
                    f"{where}: {key!r} is {short_repr(side)}, not an int in [1, {MAX_IMAGE_SIDE}]"
                )
        if image_id in annos_of_image:
            raise AnnotationFormatError(
                f"{json_file}: image id {image_id} appears more than once (index {index})"
            )
        annos: list[dict] = []
        annos_of_image[image_id] = annos
        records.append(image_record(file_name, image_root, height, width, image_id, annos, counts))
    return records, annos_of_image


def _check_annotation_ids(annotations: list[Any], json_file: str) -> None:
    seen: set[int] = set()
    for index, ann in enumerate(annotations):
        if type(ann) is not dict:
            raise AnnotationFormatError(
                f"{json_file}: annotation {index} is a {type(ann).__name__}, not a dict"
            )
        ann_id = ann.get("id")
        if ann_id is None:
            continue
        if not _is_id(ann_id):
            _malformed(json_file, ann, index, "id", "is not an int in the 64-bit range")
        if ann_id in seen:
            raise AnnotationFormatError(
                f"{json_file}: annotation id {ann_id} appears more than once "
                f"(second time at index {index}); annotation ids must be unique"
            )
        seen.add(ann_id)


def _check_fields(ann: dict, index: int, json_file: str) -> None:
    """Type and range of every key the loader reads (the typed path's schema, in Python)."""
    for key in ("image_id", "category_id"):
        if key not in ann:
            _malformed(json_file, ann, index, key, "is missing")
        if not _is_id(ann[key]):
            _malformed(json_file, ann, index, key, "is not an int in the 64-bit range")
    bbox = ann.get("bbox")
    if bbox is None:
        _malformed(json_file, ann, index, "bbox", "is missing")
    problem = _numbers_problem(bbox)
    if problem:
        _malformed(json_file, ann, index, "bbox", problem)
    if len(bbox) != 4:
        raise AnnotationFormatError(
            f"{json_file}: annotation {short_repr(ann.get('id'))} (index {index}) has bbox "
            f"{short_repr(bbox)}; a COCO bbox is [x, y, width, height]"
        )
    iscrowd = ann.get("iscrowd", 0)
    if type(iscrowd) is not int or iscrowd not in (0, 1):
        _malformed(json_file, ann, index, "iscrowd", "must be 0 or 1")
    ignore = ann.get("ignore", 0)
    if type(ignore) is not bool and (type(ignore) is not int or ignore not in (0, 1)):
        _malformed(json_file, ann, index, "ignore", "must be 0, 1, true or false")
    if "area" in ann and not _number_ok(ann["area"]):
        _malformed(json_file, ann, index, "area", "must be a finite number")
    if "num_keypoints" in ann:
        value = ann["num_keypoints"]
        if type(value) is not int or not 0 <= value <= MAX_NUM_KEYPOINTS:
            _malformed(json_file, ann, index, "num_keypoints", "must be a non-negative int")
    segm = ann.get("segmentation")
    if type(segm) is list:
        numbers_only = _NUMBER_TYPES.issuperset
        for polygon in segm:
            if (  # the common case inline: numbers within the 64-bit range (so finite)
                type(polygon) is list
                and numbers_only(map(type, polygon))
                and (not polygon or INT64_MIN <= min(polygon) and max(polygon) <= INT64_MAX)
            ):
                continue
            problem = _numbers_problem(polygon)
            if problem:
                _malformed(json_file, ann, index, "segmentation", "polygon " + problem)
    elif type(segm) is dict:
        problem = _rle_problem(segm)
        if problem:
            _malformed(json_file, ann, index, "segmentation", problem)
    elif segm is not None:
        raise AnnotationFormatError(
            f"{json_file}: annotation {short_repr(ann.get('id'))} (index {index}) has a "
            f"segmentation of type {type(segm).__name__}; expected a list of polygons or an "
            "RLE dict"
        )
    keypoints = ann.get("keypoints")
    if keypoints is not None:
        problem = _numbers_problem(keypoints)
        if not problem and keypoints:
            problem = keypoints_problem(keypoints, None)
        if problem:
            _malformed(json_file, ann, index, "keypoints", problem)


def _attach(
    annotations: list[dict],
    annos_of_image: dict[int, list[dict]],
    id_map: dict[int, int],
    keypoint_counts: list[int | None],
    json_file: str,
    extra_keys: tuple[str, ...],
    counts: SkipCounts,
) -> None:
    xywh = BoxMode.XYWH_ABS
    copied = tuple(k for k in extra_keys if k not in RECORD_KEYS)
    for index, ann in enumerate(annotations):
        _check_fields(ann, index, json_file)
        extra: dict[str, Any] = {}
        for key in copied:
            value = ann.get(key)
            if key not in ann or (value is None and key in VALIDATED_KEYS):
                continue
            if key not in VALIDATED_KEYS:
                problem = extra_value_problem(value)
                if problem:
                    _malformed(json_file, ann, index, key, f"(an extra key) {problem}")
            extra[key] = value
        ann_id = ann.get("id")
        target = annos_of_image.get(ann["image_id"])
        if target is None:
            counts.skip_orphan(ann_id, ann["image_id"])
            continue
        category = id_map.get(ann["category_id"])
        if category is None:
            raise AnnotationFormatError(
                f"{json_file}: annotation {short_repr(ann_id)} (index {index}) has category_id "
                f"{ann['category_id']}, which is not among the file's categories "
                f"{sorted(id_map)[:20]}"
            )
        keypoints = ann.get("keypoints")
        if keypoints and keypoint_counts[category] is not None:
            problem = keypoints_problem(keypoints, keypoint_counts[category])
            if problem:
                _malformed(json_file, ann, index, "keypoints", problem)
        bbox = ann["bbox"]
        if not (bbox[2] > 0 and bbox[3] > 0):
            counts.skip_degenerate(ann_id, bbox)
            continue
        if ann.get("area", 0) < 0:
            counts.skip_negative_area(ann_id, ann["area"])
            continue
        if ann.get("ignore", 0):
            counts.ignored += 1
            continue
        obj = {"iscrowd": ann.get("iscrowd", 0), "bbox": bbox, "category_id": category,
               "bbox_mode": xywh}
        segm = ann.get("segmentation")
        if segm:
            if type(segm) is list:
                if any(len(p) < 6 or len(p) & 1 for p in segm):
                    segm = counts.drop_invalid_polygons(segm, ann_id)
                    if segm is None:
                        continue
                obj["segmentation"] = segm
            else:
                obj["segmentation"] = rle_dict(segm["size"], segm["counts"])
        if keypoints:
            obj["keypoints"] = shift_keypoints(keypoints)
        obj.update(extra)
        target.append(obj)
