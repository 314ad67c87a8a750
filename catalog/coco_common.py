"""What the COCO decoding paths (msgspec structs, orjson/json dicts) share: the limits every
value is checked against, the counts of skipped items, and the construction of an image's
record, of an RLE dict and of shifted keypoints.

The limits are part of the loader's documented policy (see
:func:`catalog.coco.load_coco_json`); both paths check exactly these.
"""

from __future__ import annotations

import os
import posixpath
import reprlib
from typing import Any

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "MAX_IMAGE_SIDE",
    "MAX_RLE_RUN",
    "MAX_NUM_KEYPOINTS",
    "MAX_EXTRA_DEPTH",
    "MAX_JSON_DEPTH",
    "RLE_CHARS",
    "SkipCounts",
    "image_record",
    "rle_dict",
    "shift_keypoints",
    "keypoints_problem",
    "extra_value_problem",
    "short_repr",
]

#: Ids (image, annotation, category) are JSON integers in the signed 64-bit range.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Largest accepted image height or width, and RLE size entry, in pixels (2**20 = 1,048,576).
MAX_IMAGE_SIDE = 2**20
#: Largest run length in an uncompressed RLE ``counts`` list (the pixels of the largest image).
MAX_RLE_RUN = MAX_IMAGE_SIDE * MAX_IMAGE_SIDE
#: Largest ``num_keypoints``.
MAX_NUM_KEYPOINTS = 2**31 - 1
#: Deepest nesting of a value copied through ``extra_annotation_keys`` (the value itself is 1).
MAX_EXTRA_DEPTH = 32
#: Deepest nesting of JSON arrays and objects accepted anywhere in the file (the top level is 1).
MAX_JSON_DEPTH = 1024
#: The characters of a compressed RLE ``counts`` string (pycocotools' encoding uses 48..111).
RLE_CHARS = r"\A[0-o]*\Z"

#: How many example ids each warning lists.
MAX_EXAMPLES = 5

_POSIX = os.path is posixpath
_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = _repr.maxdict = 8


def short_repr(value: Any) -> str:
    """A bounded repr for error messages (deeply nested or huge values stay short).

    Example:
        >>> short_repr([[[[[1]]]]])
        '[[[[...]]]]'
    """
    return _repr.repr(value)


class SkipCounts:
    """Counts of skipped or repaired items, reported in one warning per kind.

    Example:
        >>> counts = SkipCounts()
        >>> counts.drop_invalid_polygons([[0, 0, 1, 0, 1, 1], [0, 0]], ann_id=7)
        [[0, 0, 1, 0, 1, 1]]
        >>> counts.bad_polygons
        1
    """

    __slots__ = (
        "orphans",
        "orphan_examples",
        "degenerate",
        "degenerate_examples",
        "negative_area",
        "negative_area_examples",
        "bad_polygons",
        "no_valid_polygon",
        "no_valid_polygon_examples",
        "ignored",
        "missing_size",
    )

    def __init__(self) -> None:
        self.orphans = 0
        self.orphan_examples: list[Any] = []
        self.degenerate = 0
        self.degenerate_examples: list[Any] = []
        self.negative_area = 0
        self.negative_area_examples: list[Any] = []
        self.bad_polygons = 0
        self.no_valid_polygon = 0
        self.no_valid_polygon_examples: list[Any] = []
        self.ignored = 0
        self.missing_size = 0

    def as_tuple(self) -> tuple[Any, ...]:
        """Every count and example list, in slot order (to compare two loads)."""
        return tuple(getattr(self, name) for name in self.__slots__)

    def total(self) -> int:
        """How many items were skipped, dropped or counted in all."""
        return (
            self.orphans + self.degenerate + self.negative_area + self.bad_polygons
            + self.no_valid_polygon + self.ignored + self.missing_size
        )

    def skip_orphan(self, ann_id: Any, image_id: Any) -> None:
        """Count an annotation whose image_id is not among the images."""
        self.orphans += 1
        if len(self.orphan_examples) < MAX_EXAMPLES:
            self.orphan_examples.append((ann_id, image_id))

    def skip_degenerate(self, ann_id: Any, bbox: Any) -> None:
        """Count an annotation with an empty or negative bbox."""
        self.degenerate += 1
        if len(self.degenerate_examples) < MAX_EXAMPLES:
            self.degenerate_examples.append((ann_id, bbox))

    def skip_negative_area(self, ann_id: Any, area: Any) -> None:
        """Count an annotation with a negative ``area``."""
        self.negative_area += 1
        if len(self.negative_area_examples) < MAX_EXAMPLES:
            self.negative_area_examples.append((ann_id, area))

    def drop_invalid_polygons(self, segm: list[Any], ann_id: Any) -> list[Any] | None:
        """The polygons of ``segm`` with at least 6 coordinates and an even count, counting the
        others; None (the instance is skipped, and counted) when none is valid. Called only
        once a caller has seen an invalid polygon, so the common case costs nothing."""
        valid = [p for p in segm if len(p) >= 6 and not len(p) & 1]
        self.bad_polygons += len(segm) - len(valid)
        if valid:
            return valid
        self.no_valid_polygon += 1
        if len(self.no_valid_polygon_examples) < MAX_EXAMPLES:
            self.no_valid_polygon_examples.append(ann_id)
        return None


def image_record(
    file_name: str,
    image_root: str,
    height: Any,
    width: Any,
    image_id: Any,
    annos: list[dict],
    counts: SkipCounts,
) -> dict[str, Any]:
    """The record of one COCO image, keys in the record format's order; an image without
    height or width is kept without those keys (and counted).

    Example:
        >>> image_record("a.jpg", "imgs", 4, 6, 1, [], SkipCounts())["file_name"]
        'imgs/a.jpg'
    """
    if not image_root:
        path = file_name
    elif _POSIX:  # os.path.join(image_root, file_name) without its per-call overhead
        if file_name.startswith("/"):
            path = file_name
        elif image_root.endswith("/"):
            path = image_root + file_name
        else:
            path = image_root + "/" + file_name
    else:  # pragma: no cover - exercised only on Windows
        path = os.path.join(image_root, file_name)
    if height is None or width is None:
        counts.missing_size += 1
        record: dict[str, Any] = {"file_name": path}
        if height is not None:
            record["height"] = height
        if width is not None:
            record["width"] = width
        record["image_id"] = image_id
        record["annotations"] = annos
        return record
    return {
        "file_name": path,
        "height": height,
        "width": width,
        "image_id": image_id,
        "annotations": annos,
    }


def rle_dict(size: list[int], counts: Any) -> dict[str, Any]:
    """The record form of an RLE segmentation: ``{"size": [h, w], "counts": ...}`` (any other
    key of the file's RLE dict is dropped, on every path).

    Example:
        >>> rle_dict([2, 3], [1, 5])
        {'size': [2, 3], 'counts': [1, 5]}
    """
    return {"size": size, "counts": counts}


def shift_keypoints(keypoints: list[Any]) -> list[Any]:
    """Keypoints as records hold them: 0.5 added to every x and y (detectron2's convention).

    Example:
        >>> shift_keypoints([1, 2, 2, 3, 4, 0])
        [1.5, 2.5, 2, 3.5, 4.5, 0]
    """
    return [v if i % 3 == 2 else v + 0.5 for i, v in enumerate(keypoints)]


_VISIBILITY = frozenset((0, 1, 2))
_INF = float("inf")


def keypoints_problem(keypoints: list[Any], expected: int | None) -> str | None:
    """Why a non-empty list of numbers is not valid keypoints, or None: its length must be a
    multiple of 3 (and 3 * ``expected`` when the category names its keypoints) and every third
    value (the visibility) 0, 1 or 2.

    Example:
        >>> keypoints_problem([1, 2, 2, 3, 4, 5], None)
        'a visibility is not 0, 1 or 2 (got [2, 5])'
        >>> keypoints_problem([1, 2, 2], 17)
        'has 1 keypoints, the category names 17'
    """
    if len(keypoints) % 3:
        return f"has {len(keypoints)} values, not a multiple of 3 (x, y, visibility)"
    if expected is not None and len(keypoints) != 3 * expected:
        return f"has {len(keypoints) // 3} keypoints, the category names {expected}"
    visibility = keypoints[2::3]
    if not _VISIBILITY.issuperset(visibility):
        return f"a visibility is not 0, 1 or 2 (got {short_repr(visibility)})"
    return None


def _scalar_ok(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return INT64_MIN <= value <= INT64_MAX
    if kind is float:
        return -_INF < value < _INF
    return kind is str or kind is bool or value is None


def extra_value_problem(value: Any) -> str | None:
    """Why a value copied through ``extra_annotation_keys`` is refused, or None: it must be
    JSON nested at most :data:`MAX_EXTRA_DEPTH` deep, its ints within 64 bits and its floats
    finite. Iterative: no recursion, whatever the value.

    Example:
        >>> extra_value_problem({"a": [1, 2.5, "x", None]}) is None
        True
        >>> extra_value_problem(2**70)
        'holds a number out of range'
    """
    if _scalar_ok(value):
        return None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is list:
            children: Any = item
        elif type(item) is dict:
            children = item.values()
        elif _scalar_ok(item):
            continue
        elif type(item) in (int, float):
            return "holds a number out of range"
        else:
            return f"holds a {type(item).__name__}"
        if depth >= MAX_EXTRA_DEPTH:
            return f"is nested deeper than {MAX_EXTRA_DEPTH}"
        stack.extend((child, depth + 1) for child in children)
    return None
