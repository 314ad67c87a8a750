"""An independent reference of the COCO loader's bad-data policy, for the fuzzers.

Written from the policy table of :func:`catalog.formats.coco.load_coco_json` in plain Python (the json
module, no speed concerns, no code shared with the loader): given a file's bytes it says
whether the loader must raise :class:`~catalog._common.AnnotationFormatError`, and otherwise
which skip counts it must report and how many instances each image keeps. The fuzzers
(``tests/test_fuzz_coco.py``, ``tools/fuzz_loaders.py``) compare every loader path with it.

Example:
    >>> reference_outcome(b'{"images": [{"id": 1, "file_name": "a.jpg"}]}', ())
    ('ok', {'missing_size': 1}, [0])
"""

from __future__ import annotations

import json
import math
import posixpath
import sys
from typing import Any

__all__ = ["reference_outcome", "Invalid"]

_DEPTH = 1024
_SIDE = 2**20
_I64 = (-(2**63), 2**63 - 1)
_RECORD = {"bbox", "bbox_mode", "category_id", "iscrowd", "segmentation", "keypoints"}
_CHECKED = {"id", "image_id", "area", "num_keypoints", "ignore"}


class Invalid(Exception):
    """The loader must raise AnnotationFormatError for this input."""


def _int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _I64[0] <= v <= _I64[1]


def _number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return _int64(v) if isinstance(v, int) else math.isfinite(v)


def _numbers(v: Any) -> bool:
    return isinstance(v, list) and all(_number(x) for x in v)


def _parse(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("not UTF-8") from None

    def constant(name: str) -> Any:
        raise Invalid(f"{name} is not JSON")

    def parse_int(s: str) -> Any:
        return int(s) if len(s) <= 4300 else math.inf

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + 2 * _DEPTH)
    try:
        value = json.loads(text, parse_constant=constant, parse_int=parse_int)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"JSON: {exc}") from None
    finally:
        sys.setrecursionlimit(old)
    stack = [(value, 1)]
    while stack:  # every string (keys too) without surrogates, nesting at most _DEPTH
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > _DEPTH:
                raise Invalid("too deep")
            children = list(item.items()) if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)
        elif isinstance(item, tuple):
            stack.extend((c, depth) for c in item)
        elif isinstance(item, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in item):
            raise Invalid("lone surrogate")
    return value


def _extra_ok(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= 32:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        elif isinstance(item, int):
            if not _int64(item):
                return False
        elif isinstance(item, float):
            if not math.isfinite(item):
                return False
        else:
            return False
    return True


def _check_annotation(ann: Any, extra_keys: tuple[str, ...]) -> None:
    if not isinstance(ann, dict):
        raise Invalid("annotation not a dict")
    if ann.get("id") is not None and not _int64(ann["id"]):
        raise Invalid("annotation id")
    for key in ("image_id", "category_id"):
        if not _int64(ann.get(key)):
            raise Invalid(key)
    bbox = ann.get("bbox")
    if not (_numbers(bbox) and len(bbox) == 4):
        raise Invalid("bbox")
    iscrowd = ann.get("iscrowd", 0)
    if isinstance(iscrowd, bool) or iscrowd not in (0, 1) or not isinstance(iscrowd, int):
        raise Invalid("iscrowd")
    ignore = ann.get("ignore", 0)
    if not (isinstance(ignore, bool) or (isinstance(ignore, int) and ignore in (0, 1))):
        raise Invalid("ignore")
    if "area" in ann and not _number(ann["area"]):
        raise Invalid("area")
    if "num_keypoints" in ann:
        n = ann["num_keypoints"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2**31 - 1:
            raise Invalid("num_keypoints")
    segm = ann.get("segmentation")
    if isinstance(segm, list):
        if not all(_numbers(p) for p in segm):
            raise Invalid("polygon")
    elif isinstance(segm, dict):
        size, counts = segm.get("size"), segm.get("counts")
        if not (isinstance(size, list) and len(size) == 2 and all(
            _int64(s) and 1 <= s <= _SIDE for s in size
        )):
            raise Invalid("rle size")
        if isinstance(counts, str):
            if any(not "0" <= ch <= "o" for ch in counts):
                raise Invalid("rle string")
        elif isinstance(counts, list):
            if not all(_int64(c) and 0 <= c <= _SIDE * _SIDE for c in counts):
                raise Invalid("rle counts")
            if sum(counts) != size[0] * size[1]:
                raise Invalid("rle sum")
        else:
            raise Invalid("rle counts type")
    elif segm is not None:
        raise Invalid("segmentation type")
    kps = ann.get("keypoints")
    if kps is not None:
        if not _numbers(kps):
            raise Invalid("keypoints")
        if kps and (len(kps) % 3 or any(v not in (0, 1, 2) for v in kps[2::3])):
            raise Invalid("keypoints shape")
    for key in extra_keys:
        if key in ann and key not in _RECORD and key not in _CHECKED and not _extra_ok(ann[key]):
            raise Invalid(f"extra {key}")


def reference_outcome(
    raw: bytes, extra_keys: tuple[str, ...]
) -> tuple[str, dict[str, int], list[int]] | tuple[str, str]:
    """``("ok", nonzero skip counts, instances kept per image)`` or ``("error", reason)``."""
    try:
        return _outcome(_parse(raw), extra_keys)
    except Invalid as exc:
        return ("error", str(exc))


def _outcome(doc: Any, extra_keys: tuple[str, ...]) -> tuple[str, dict[str, int], list[int]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise Invalid("top level")
    anns = doc.get("annotations")
    cats = doc.get("categories")
    anns = [] if anns is None else anns
    cats = [] if cats is None else cats
    if not isinstance(anns, list) or not isinstance(cats, list):
        raise Invalid("sections")
    counts = dict.fromkeys(
        ("orphans", "degenerate", "negative_area", "bad_polygons", "no_valid_polygon",
         "ignored", "missing_size"), 0,
    )
    kp_of: dict[int, int | None] = {}
    for cat in cats:
        if not isinstance(cat, dict) or not _int64(cat.get("id")) or cat["id"] in kp_of:
            raise Invalid("category")
        name, names = cat.get("name"), cat.get("keypoints")
        if name is not None and not isinstance(name, str):
            raise Invalid("category name")
        if names is not None and not (
            isinstance(names, list) and all(isinstance(n, str) for n in names)
        ):
            raise Invalid("category keypoints")
        kp_of[cat["id"]] = len(names) if names else None
    kept: dict[int, int] = {}
    for img in doc["images"]:
        if not isinstance(img, dict) or not _int64(img.get("id")) or img["id"] in kept:
            raise Invalid("image id")
        name = img.get("file_name")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise Invalid("file_name")
        if name.startswith(("/", "\\")) or posixpath.normpath(
                name.replace("\\", "/")).split("/")[0] == "..":
            raise Invalid("file_name outside image_root")
        for key in ("height", "width"):
            v = img.get(key)
            if v is not None and not (_int64(v) and 1 <= v <= _SIDE):
                raise Invalid(key)
        if img.get("height") is None or img.get("width") is None:
            counts["missing_size"] += 1
        kept[img["id"]] = 0
    seen: set[int] = set()
    for ann in anns:
        _check_annotation(ann, extra_keys)
        if ann.get("id") is not None:
            if ann["id"] in seen:
                raise Invalid("duplicate annotation id")
            seen.add(ann["id"])
    for ann in anns:
        if ann["image_id"] not in kept:
            counts["orphans"] += 1
            continue
        if ann["category_id"] not in kp_of:
            raise Invalid("unknown category")
        k, kps = kp_of[ann["category_id"]], ann.get("keypoints")
        if k is not None and kps and len(kps) != 3 * k:
            raise Invalid("keypoint count")
        if not (ann["bbox"][2] > 0 and ann["bbox"][3] > 0):
            counts["degenerate"] += 1
            continue
        if ann.get("area", 0) < 0:
            counts["negative_area"] += 1
            continue
        if ann.get("ignore", 0):
            counts["ignored"] += 1
            continue
        segm = ann.get("segmentation")
        if isinstance(segm, list) and segm:
            good = [p for p in segm if len(p) >= 6 and len(p) % 2 == 0]
            counts["bad_polygons"] += len(segm) - len(good)
            if not good:
                counts["no_valid_polygon"] += 1
                continue
        kept[ann["image_id"]] += 1
    # records come sorted by image id, as detectron2 orders them
    return ("ok", {k: v for k, v in counts.items() if v}, [kept[i] for i in sorted(kept)])
