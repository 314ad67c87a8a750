"""An independent oracle for OpenMMLab 2.0 annotation files, written from the loader's
documented policy (catalog.formats.validate), not from its code: what the loader must
return for a document, or that it must refuse it. Used by the fuzz tests."""

from __future__ import annotations

import collections
import math
from typing import Any

MAX_DEPTH = 100
MAX_SIDE = 1 << 16
MAX_PATH = 4096
RESERVED = {"name", "ann_file", "get", "set", "as_dict"}
# A 40x60 mask encoded by pycocotools (compressed COCO RLE).
RLE_40x60 = "]6i0?00000000000000000000000000000000000000000000000[=]OXC000000000000000000000000000X5"


def valid_doc() -> dict:
    return {
        "metainfo": {
            "classes": ["cat", "dog", "bird"],
            "dataset_type": "toy",
            "palette": [[220, 20, 60], [119, 11, 32], [0, 0, 142]],
        },
        "data_list": [
            {
                "img_path": "a.jpg",
                "img_id": 1,
                "height": 40,
                "width": 60,
                "seg_map_path": "a.png",
                "instances": [
                    {
                        "bbox": [1, 2, 10, 20.5],
                        "bbox_label": 0,
                        "ignore_flag": 0,
                        "mask": [[1, 2, 10, 2, 10, 20], [3.5, 4, 6, 4, 6, 8, 3, 8]],
                    },
                    {
                        "bbox": [5, 5, 30, 30],
                        "bbox_label": 2,
                        "ignore_flag": 1,
                        "mask": {"size": [40, 60], "counts": RLE_40x60},
                    },
                    {
                        "bbox": [0, 0, 5, 5],
                        "bbox_label": 1,
                        "keypoints": [1, 1, 2, 3.5, 3, 0],
                        "extra_anns": {"a": [1, "x"], "b": None},
                    },
                ],
            },
            {
                "img_path": "sub/b.jpg",
                "img_id": "b",
                "height": 8,
                "width": 6,
                "instances": [
                    {"bbox": [0, 0, 1, 1], "bbox_label": 1,
                     "mask": {"size": [8, 6], "counts": [10, 20, 18]}},
                ],
            },
            {"img_path": "c.jpg", "instances": [], "tags": ["night", 3]},
        ],
    }


# ------------------------------------------------------------------ the oracle
class Invalid(Exception):
    """The oracle's verdict: the loader must raise AnnotationFormatError."""


def cdepth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((cdepth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((cdepth(v) for v in value), default=0)
    return 0


def has_nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_nonfinite(v) for v in value.values())
    if isinstance(value, list):
        return any(has_nonfinite(v) for v in value)
    return False


def is_int(v: Any) -> bool:
    return type(v) is int


def is_num(v: Any) -> bool:
    if type(v) not in (int, float):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def need(condition: bool) -> None:
    if not condition:
        raise Invalid


def rle_total(s: str) -> int | None:
    """Pixel total of a compressed COCO RLE string (written from the format's description)."""
    out: list[int] = []
    i = 0
    while i < len(s):
        value, shift = 0, 0
        while True:
            if i == len(s) or shift >= 35:
                return None
            c = ord(s[i]) - 48
            if c < 0 or c > 63:
                return None
            i += 1
            value |= (c & 31) << shift
            shift += 5
            if c & 32 == 0:
                if c & 16:
                    value -= 1 << shift
                break
        if len(out) > 2:
            value += out[-2]
        if value < 0 or value >= 2**32:
            return None
        out.append(value)
    return sum(out)


def check_rle(mask: dict, hw: tuple | None) -> None:
    size, counts = mask.get("size"), mask.get("counts")
    need(isinstance(size, list) and len(size) == 2)
    need(all(is_int(s) and 1 <= s <= MAX_SIDE for s in size))
    need(hw is None or tuple(size) == hw)
    if isinstance(counts, str):
        total = rle_total(counts)
    else:
        need(isinstance(counts, list) and all(is_int(c) and c >= 0 for c in counts))
        total = sum(counts)
    need(total == size[0] * size[1])


def expect(doc: Any, fmt: str) -> tuple[dict, list, dict]:
    """(metainfo, records, counts of what raw mode keeps but conversion would refuse or
    drop) the loader must return in raw mode (record_format="openmmlab"), or raise Invalid."""
    if fmt == "json":
        need(not has_nonfinite(doc))
    need(isinstance(doc, dict) and "metainfo" in doc and "data_list" in doc)
    if fmt == "yaml":
        need(cdepth(doc) <= MAX_DEPTH)
    meta, data_list = doc["metainfo"], doc["data_list"]
    need(isinstance(meta, dict) and isinstance(data_list, list))
    for key, value in meta.items():
        need(not key.startswith("_") and key not in RESERVED)
        need(cdepth(value) <= MAX_DEPTH - 2)
        if key == "classes":
            need(isinstance(value, list) and all(isinstance(c, str) for c in value))
    ncls = len(meta["classes"]) if "classes" in meta else None
    skips = collections.Counter()
    records = []
    for info in data_list:
        need(isinstance(info, dict))
        if "img_id" in info:
            v = info["img_id"]
            need(is_int(v) or (isinstance(v, str) and len(v) <= MAX_PATH))
        for key, v in info.items():
            if key in ("img_path", "seg_map_path"):
                need(isinstance(v, str) and 0 < len(v) <= MAX_PATH and "\0" not in v)
            elif key in ("height", "width"):
                need(is_int(v) and 1 <= v <= MAX_SIDE)
            elif key not in ("instances", "img_id"):
                need(cdepth(v) <= MAX_DEPTH - 3)
        hw = (info["height"], info["width"]) if "height" in info and "width" in info else None
        if "instances" not in info:
            records.append(info)
            continue
        need(isinstance(info["instances"], list))
        kept = []
        for inst in info["instances"]:
            need(isinstance(inst, dict))
            degenerate, good = False, None
            for key, v in inst.items():
                if key == "bbox":
                    need(isinstance(v, list) and len(v) == 4 and all(map(is_num, v)))
                    degenerate = v[2] <= v[0] or v[3] <= v[1]
                elif key == "bbox_label":
                    need(is_int(v) and 0 <= v < 2**31)
                    skips["unknown_labels"] += ncls is not None and v >= ncls
                elif key == "ignore_flag":
                    need(type(v) in (int, bool) and v in (0, 1))
                elif key == "keypoints":
                    need(isinstance(v, list) and len(v) % 3 == 0 and all(map(is_num, v)))
                elif key == "mask":
                    if isinstance(v, dict):
                        check_rle(v, hw)
                    else:
                        need(isinstance(v, list))
                        for poly in v:
                            need(isinstance(poly, list) and all(map(is_num, poly)))
                        good = [p for p in v if len(p) >= 6 and len(p) % 2 == 0]
                else:
                    need(cdepth(v) <= MAX_DEPTH - 5)
            skips["degenerate_boxes"] += degenerate
            if not degenerate and good is not None and len(good) < len(inst["mask"]):
                skips["dropped_polygons"] += len(inst["mask"]) - len(good)
                skips["no_valid_polygon"] += not good
            kept.append(inst)  # kept as it is, as mmengine keeps it
        records.append({**info, "instances": kept})
    return meta, records, {k: v for k, v in skips.items() if v}
