"""Validation of annotations for every format in one place: the typed errors, the limits,
the COCO value checks, the OpenMMLab 2.0 ``data_list`` validator and the
COCO panoptic segment checks. Errors name the file, the item (id and index) and the key.
"""

from __future__ import annotations

import logging
import math
import numbers
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from .._common import AnnotationFormatError, CatmapErrorWithFields, is_int
from .files import outside_root_problem

class SemSegPairingError(CatmapErrorWithFields, ValueError):
    """Images and label maps of a semantic-segmentation dataset cannot be paired."""

    field_names = ("gt_root", "image_root", "unpaired")

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.unpaired = list(self.unpaired or [])


class PanopticFormatError(AnnotationFormatError, CatmapErrorWithFields):
    """A COCO panoptic file (or the metadata it is read with) is malformed."""

    field_names = ("path", "image_id", "segment_id", "key")


class CityscapesFormatError(AnnotationFormatError, CatmapErrorWithFields):
    """A Cityscapes file is missing or malformed."""

    field_names = ("path", "index", "key")


class CocoExportError(CatmapErrorWithFields, ValueError):
    """A dataset's records cannot be written as a COCO file."""

    field_names = ("dataset", "index", "key")


class CocoEvaluationError(CatmapErrorWithFields, ValueError):
    """Predictions or results cannot be evaluated against a dataset (wrong shape, unknown
    class or image, keypoint count that differs from the ground truth's).
    """

    field_names = ("dataset", "image_id", "key")

#: How many examples the summary warning lists.
MAX_EXAMPLES = 5


class AnnotationFieldError(AnnotationFormatError, CatmapErrorWithFields):
    """A value in an annotation file has the wrong type or is out of range."""

    field_names = ("path", "index", "img_id", "instance", "key")


class AnnotationFieldTypeError(AnnotationFieldError, TypeError):
    """A value in an annotation file has the wrong type (also a ``TypeError``)."""


class ParseDataInfoError(CatmapErrorWithFields, TypeError):
    """A caller's ``parse_data_info`` returned something other than a dict or list of dicts."""

    field_names = ("index",)


class AnnotationSkips:
    """Counts of instances skipped and polygons dropped while validating one file."""

    MESSAGES = {
        "degenerate_boxes": "skipped {} instances whose bbox has x2 <= x1 or y2 <= y1",
        "dropped_polygons":
            "dropped {} mask polygons with fewer than 6 coordinates or an odd count",
        "no_valid_polygon": "skipped {} instances left without a valid polygon"}
    KINDS = tuple(MESSAGES)

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.examples: dict[str, list[str]] = {kind: [] for kind in self.KINDS}

    def count(self, kind: str, where: str, n: int = 1) -> None:
        """Add ``n`` to ``kind``, remembering ``where`` among the first examples."""
        self.counts[kind] += n
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(where)

    def report(self, path: str, logger: logging.Logger) -> None:
        """Log one warning summarizing every count (nothing when all are zero)."""
        parts = [
            f"{self.MESSAGES[kind].format(n)} (e.g. {', '.join(self.examples[kind])})"
            for kind, n in self.counts.items() if n
        ]
        if parts:
            logger.warning("%s: %s", path, "; ".join(parts),
                           extra={"annotation_skips": self.counts.copy()})

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
#: The characters of a compressed RLE ``counts`` string (pycocotools' encoding uses 48..111).
RLE_CHARS = r"\A[0-o]*\Z"


_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = _repr.maxother = 60
_repr.maxlist = _repr.maxdict = 8


def short_repr(value: Any) -> str:
    """A bounded repr for error messages (deeply nested or huge values stay short)."""
    return _repr.repr(value)


_VISIBILITY = frozenset((0, 1, 2))
_INF = float("inf")


def keypoints_problem(keypoints: list[Any], expected: int | None) -> str | None:
    """Why a non-empty list of numbers is not valid keypoints, or None: its length must be a
    multiple of 3 (and 3 * ``expected`` when the category names its keypoints) and every third
    value (the visibility) 0, 1 or 2.
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

#: Largest image height or width (and RLE mask side) accepted.
MAX_OPENMMLAB_SIDE = 1 << 16
#: Longest ``img_path`` / ``seg_map_path`` / string ``img_id`` accepted.
MAX_PATH_CHARS = 4096
#: Largest ``bbox_label`` accepted when the classes are not known.
MAX_LABEL = 2**31 - 1
#: Metainfo keys a file may not set: they are set by the loader or would shadow
#: ``Metadata`` methods once registered.
RESERVED_METAINFO_KEYS = frozenset({"name", "ann_file", "get", "set", "as_dict"})

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60
_short.maxlist = 6
_short.maxdict = 4
_short.maxlevel = 2


def _is_number(value: Any) -> bool:
    kind = type(value)
    if kind is int or kind is float:
        return True
    return kind is not bool and isinstance(value, numbers.Real)


_PLAIN_NUMBERS = frozenset({int, float})


def _finite_numbers(values: Any) -> bool:
    try:
        if not set(map(type, values)) <= _PLAIN_NUMBERS and not all(map(_is_number, values)):
            return False
        return all(map(math.isfinite, values))
    except (OverflowError, TypeError, ValueError):  # an int too large for a float
        return False


def decode_rle_string(counts: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' LEB128-like encoding);
    ValueError when it is malformed (a character outside '0'..'o', a truncated or overlong
    value, a run outside [0, 2**32))."""
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
        if not 0 <= value < 2**32:
            raise ValueError("RLE run out of range")
        runs.append(value)
    return runs


class Validator:
    """Checks one file's metainfo and ``data_list`` entries (see the module docstring)."""

    def __init__(self, path: str, *, num_classes: int | None = None, max_depth: int = 100):
        self.path = path
        self.num_classes = num_classes
        self.max_depth = max_depth
        self.skips = AnnotationSkips()

    def _fail(self, problem: str, value: Any, *, key: Any, index: int | None = None,
              img_id: Any = None, instance: int | None = None,
              wrong_type: bool = False) -> AnnotationFieldError:
        where = "metainfo" if index is None else f"data_list[{index}]"
        if img_id is not None:
            where += f" (img_id {_short.repr(img_id)})"
        if instance is not None:
            where += f" instances[{instance}]"
        cls = AnnotationFieldTypeError if wrong_type else AnnotationFieldError
        if key is not None:
            where += f" key {_short.repr(key)}"
        return cls(
            f"{self.path}: {where}: {problem}, got "
            f"{type(value).__name__} {_short.repr(value)}",
            path=self.path, index=index, img_id=img_id, instance=instance, key=key)

    def check_depth(self, value: Any, depth: int, **where: Any) -> None:
        """Refuse ``value`` (found at nesting level ``depth``) when it nests deeper than
        ``max_depth``; iterative, so no input can exhaust the stack.
        """
        if not isinstance(value, (list, tuple, dict)):
            return
        stack = [(value, depth)]
        while stack:
            item, level = stack.pop()
            if level > self.max_depth:
                raise self._fail(f"nested more than {self.max_depth} levels deep", "...", **where)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, level + 1) for c in children if isinstance(c, (list, tuple, dict)))

    def file_metainfo(self, meta: Any) -> dict:
        """Check the file's own ``metainfo``: a mapping with string keys (not reserved, not
        starting with '_'); ``classes``, when present, a list of strings.
        """
        if type(meta) is not dict:
            raise self._fail("'metainfo' must be a mapping", meta, key="metainfo", wrong_type=True)
        for key, value in meta.items():
            if type(key) is not str:
                raise self._fail("metainfo keys must be strings", key, key=key, wrong_type=True)
            if key.startswith("_") or key in RESERVED_METAINFO_KEYS:
                raise self._fail(
                    "reserved metainfo key (set by the loader, or a Metadata method name, or "
                    "starting with '_')", value, key=key)
            if key == "classes" and not (
                isinstance(value, (list, tuple)) and all(type(c) is str for c in value)
            ):
                raise self._fail(
                    "'classes' in a file must be a list of strings (a file of class names is "
                    "read only when the caller passes it in the metainfo argument)",
                    value, key=key, wrong_type=True)
            self.check_depth(value, 3, key=key)
        return meta

    def data_info(self, info: Any, index: int) -> dict:
        """The checked ``data_list`` entry: ``info`` itself, or a copy without the skipped
        instances and dropped polygons.
        """
        if type(info) is not dict:
            raise self._fail("a data_list entry must be a mapping", info, key=None, index=index,
                             wrong_type=True)
        img_id = info.get("img_id")
        if img_id is not None and not (
            is_int(img_id) or (type(img_id) is str and len(img_id) <= MAX_PATH_CHARS)
        ):
            raise self._fail(f"must be an int or a string of at most {MAX_PATH_CHARS} characters",
                             img_id, key="img_id", index=index, wrong_type=True)
        if "img_id" in info and img_id is None:
            raise self._fail("must be an int or a string", None, key="img_id", index=index)
        where = {"index": index, "img_id": img_id}
        size: dict[str, int] = {}
        for key, value in info.items():
            if type(key) is not str:
                raise self._fail("keys must be strings", key, key=key, wrong_type=True, **where)
            if key in ("img_path", "seg_map_path"):
                if type(value) is not str:
                    raise self._fail("must be a string", value, key=key, wrong_type=True, **where)
                if not value or "\x00" in value or len(value) > MAX_PATH_CHARS:
                    raise self._fail(
                        f"must be a non-empty path without NUL of at most {MAX_PATH_CHARS} "
                        "characters", value, key=key, **where)
            elif key in ("height", "width"):
                if not is_int(value):
                    raise self._fail("must be an int", value, key=key, wrong_type=True, **where)
                if not 1 <= value <= MAX_OPENMMLAB_SIDE:
                    raise self._fail(f"must be in 1..{MAX_OPENMMLAB_SIDE}", value, key=key, **where)
                size[key] = int(value)
            elif key != "instances" and key != "img_id":
                self.check_depth(value, 4, key=key, **where)
        if "instances" not in info:
            return info
        instances = info["instances"]
        if not isinstance(instances, (list, tuple)):
            raise self._fail("must be a list of mappings", instances, key="instances",
                             wrong_type=True, **where)
        hw = (size["height"], size["width"]) if len(size) == 2 else None
        kept = []
        changed = False
        for j, inst in enumerate(instances):
            checked = self._instance(inst, j, hw, **where)
            if checked is not inst:
                changed = True
            if checked is not None:
                kept.append(checked)
        return {**info, "instances": kept} if changed else info

    def _instance(self, inst: Any, j: int, hw: tuple[int, int] | None, *, index: int,
                  img_id: Any) -> dict | None:
        where = {"index": index, "img_id": img_id, "instance": j}
        if type(inst) is not dict:
            raise self._fail("an instance must be a mapping", inst, key=None, wrong_type=True,
                             **where)
        degenerate = False
        polygons = None
        for key, value in inst.items():
            if type(key) is not str:
                raise self._fail("keys must be strings", key, key=key, wrong_type=True, **where)
            if key == "bbox":
                if not (isinstance(value, (list, tuple)) and len(value) == 4):
                    raise self._fail("must be 4 numbers [x1, y1, x2, y2]", value, key=key,
                                     wrong_type=True, **where)
                if not _finite_numbers(value):
                    raise self._fail("must be 4 finite numbers", value, key=key, **where)
                degenerate = not (value[2] > value[0] and value[3] > value[1])
            elif key == "bbox_label":
                limit = self.num_classes if self.num_classes is not None else MAX_LABEL + 1
                if not is_int(value):
                    raise self._fail("must be an int", value, key=key, wrong_type=True, **where)
                if not 0 <= value < limit:
                    raise self._fail(f"must be in 0..{limit - 1} (the class indices)", value,
                                     key=key, **where)
            elif key == "ignore_flag":
                if not (type(value) in (int, bool) and value in (0, 1)):
                    raise self._fail("must be 0 or 1", value, key=key, **where)
            elif key == "mask":
                polygons = self._mask(value, hw, where)
            elif key == "keypoints":
                if not isinstance(value, (list, tuple)):
                    raise self._fail("must be a flat list of 3k numbers", value, key=key,
                                     wrong_type=True, **where)
                if len(value) % 3 or not _finite_numbers(value):
                    raise self._fail("must be a flat list of 3k finite numbers", value,
                                     key=key, **where)
            else:
                self.check_depth(value, 6, key=key, **where)
        label = f"data_list[{index}].instances[{j}]"
        if degenerate:
            self.skips.count("degenerate_boxes", label)
            return None
        if polygons is None:
            return inst
        if polygons:
            self.skips.count("dropped_polygons", label, len(inst["mask"]) - len(polygons))
            return {**inst, "mask": polygons}
        self.skips.count("dropped_polygons", label, len(inst["mask"]))
        self.skips.count("no_valid_polygon", label)
        return None

    def _mask(self, mask: Any, hw: tuple[int, int] | None, where: dict) -> list | None:
        """Check a mask; the valid polygons when some must be dropped, else None."""
        if isinstance(mask, dict):
            self._rle(mask, hw, where)
            return None
        if not isinstance(mask, (list, tuple)):
            raise self._fail("must be a list of polygons or an RLE mapping", mask, key="mask",
                             wrong_type=True, **where)
        valid = []
        for polygon in mask:
            if not isinstance(polygon, (list, tuple)) or not _finite_numbers(polygon):
                raise self._fail("each polygon must be a list of finite numbers", polygon,
                                 key="mask", wrong_type=not isinstance(polygon, (list, tuple)),
                                 **where)
            if len(polygon) >= 6 and not len(polygon) % 2:
                valid.append(polygon)
        return None if len(valid) == len(mask) else valid

    def _rle(self, rle: dict, hw: tuple[int, int] | None, where: dict) -> None:
        size, counts = rle.get("size"), rle.get("counts")
        if not (
            isinstance(size, (list, tuple))
            and len(size) == 2
            and all(is_int(s) and 1 <= s <= MAX_OPENMMLAB_SIDE for s in size)
        ):
            raise self._fail(f"an RLE mask needs 'size' [h, w], ints in 1..{MAX_OPENMMLAB_SIDE}",
                             size, key="mask", **where)
        if hw is not None and tuple(size) != hw:
            raise self._fail(f"the RLE size must be the image's [height, width] {list(hw)}",
                             size, key="mask", **where)
        pixels = int(size[0]) * int(size[1])
        if type(counts) is str:
            try:
                total: int | None = sum(decode_rle_string(counts))
            except ValueError:
                total = None
        elif isinstance(counts, (list, tuple)) and all(is_int(c) and c >= 0 for c in counts):
            total = sum(counts)
        else:
            raise self._fail("RLE 'counts' must be a string or a list of ints >= 0", counts,
                             key="mask", **where)
        if total != pixels:
            raise self._fail(f"RLE counts must be well formed and add up to h * w = {pixels}",
                             counts, key="mask", **where)

#: Largest segment id: ids are encoded in a PNG's RGB as ``R + 256 * G + 256**2 * B``.
MAX_SEGMENT_ID = 256**3 - 1
_SEGMENT_KEYS = ("id", "category_id", "iscrowd", "bbox", "area")


def as_dict(meta: Any, refuse: Callable[[str], BaseException]) -> dict[str, Any]:
    """``meta`` (a mapping, or an object with ``as_dict()`` such as :class:`Metadata`) as a
    plain dict; anything else raises ``refuse(<its type name>)``.
    """
    if hasattr(meta, "as_dict") and callable(meta.as_dict):
        meta = meta.as_dict()
    if not isinstance(meta, Mapping):
        raise refuse(type(meta).__name__)
    return dict(meta)


def id_map(meta: Mapping[str, Any], key: str, path: str) -> dict[int, int]:
    """``meta[key]`` checked as a dataset-id -> contiguous-id map of ints ({} when absent)."""
    value = meta.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            is_int(k) and is_int(v) and v >= 0 for k, v in value.items()):
        raise PanopticFormatError(
            f"{path}: meta[{key!r}] must map dataset category ids (ints) to contiguous ids "
            f"(ints >= 0), got {short_repr(value)}", path=path, key=key)
    return {int(k): int(v) for k, v in value.items()}


def relative_name(value: Any, path: str, where: dict[str, Any], key: str) -> str:
    """``value`` checked as a file name under the data root (:func:`outside_root_problem`),
    without NUL, not ending in ``/`` or ``.``."""
    if type(value) is not str:
        raise fail(path, "must be a str", value, key=key, **where)
    if (not value or "\x00" in value or len(value) > MAX_PATH_CHARS
            or value.replace("\\", "/").rsplit("/", 1)[-1] in ("", ".", "..")
            or outside_root_problem(value)):
        raise fail(path, "must be a relative file path that stays under the root (no leading "
                   f"'/', no '..' out of it), without NUL, not ending in '/', of at most "
                   f"{MAX_PATH_CHARS} characters", value, key=key, **where)
    return value


def fail(path: str, problem: str, value: Any, *, key: str | None, index: int | None = None,
          image_id: Any = None, segment_id: Any = None) -> PanopticFormatError:
    """The error for ``value`` at the place named by the keyword arguments."""
    where = f"annotations[{index}]" if index is not None else "images"
    if image_id is not None:
        where += f" (image_id {short_repr(image_id)})"
    if segment_id is not None:
        where += f" segment id {short_repr(segment_id)}"
    if key is not None:
        where += f" key {key!r}"
    return PanopticFormatError(
        f"{path}: {where}: {problem}, got {type(value).__name__} {short_repr(value)}",
        path=path, image_id=image_id, segment_id=segment_id, key=key)


def image_index(images: Any, path: str) -> dict[int, tuple[str, int | None, int | None]]:
    """``{image id: (file_name, height, width)}`` from the optional ``images`` list."""
    if images is None:
        return {}
    if type(images) is not list:
        raise fail(path, "'images' must be a list", images, key="images")
    out: dict[int, tuple[str, int | None, int | None]] = {}
    for image in images:
        if type(image) is not dict:
            raise fail(path, "an image must be a dict", image, key=None)
        image_id = image.get("id")
        if type(image_id) is not int or not INT64_MIN <= image_id <= INT64_MAX:
            raise fail(path, "must be a 64-bit int", image_id, key="id")
        if image_id in out:
            raise fail(path, "duplicate image id", image_id, key="id", image_id=image_id)
        name = relative_name(image.get("file_name"), path, {"image_id": image_id}, "file_name")
        size = []
        for key in ("height", "width"):
            value = image.get(key)
            if value is not None and not (type(value) is int and 1 <= value <= MAX_IMAGE_SIDE):
                raise fail(path, f"must be an int in [1, {MAX_IMAGE_SIDE}]", value, key=key,
                            image_id=image_id)
            size.append(value)
        out[image_id] = (name, size[0], size[1])
    return out


def check_segment(segment: Any, where: dict[str, Any], path: str, things: dict[int, int],
                  stuff: dict[int, int]) -> dict[str, Any]:
    """The record form of one ``segments_info`` entry (contiguous id, ``isthing``)."""
    if type(segment) is not dict:
        raise fail(path, "a segments_info entry must be a dict", segment, key="segments_info",
                    **where)
    seg_id = segment.get("id")
    if type(seg_id) is not int or not 0 <= seg_id <= MAX_SEGMENT_ID:
        raise fail(path, f"must be an int in [0, {MAX_SEGMENT_ID}] (an RGB-encoded id)",
                    seg_id, key="id", **where)
    where = {**where, "segment_id": seg_id}
    category = segment.get("category_id")
    if type(category) is not int:
        raise fail(path, "must be an int", category, key="category_id", **where)
    out: dict[str, Any] = {"id": seg_id}
    if category in things:
        out["category_id"], isthing = things[category], True
    elif category in stuff:
        out["category_id"], isthing = stuff[category], False
    else:
        raise fail(
            path, "is in neither thing_dataset_id_to_contiguous_id nor "
            "stuff_dataset_id_to_contiguous_id of the metadata",
            category, key="category_id", **where)
    iscrowd = segment.get("iscrowd", 0)
    if type(iscrowd) is not int or iscrowd not in (0, 1):
        raise fail(path, "must be 0 or 1", iscrowd, key="iscrowd", **where)
    out["iscrowd"] = iscrowd
    if segment.get("bbox") is not None:
        bbox = segment["bbox"]
        if type(bbox) is not list or len(bbox) != 4 or not _finite_numbers(bbox):
            raise fail(path, "must be 4 finite numbers [x, y, w, h]", bbox, key="bbox", **where)
        out["bbox"] = bbox
    if segment.get("area") is not None:
        area = segment["area"]
        if not _finite_numbers([area]) or area < 0:
            raise fail(path, "must be a finite number >= 0", area, key="area", **where)
        out["area"] = area
    for key, value in segment.items():
        if key in _SEGMENT_KEYS or key == "isthing":
            continue
        problem = extra_value_problem(value)
        if problem is not None:
            raise fail(path, f"{problem}", value, key=str(key), **where)
        out[key] = value
    out["isthing"] = isthing
    return out
