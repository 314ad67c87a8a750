"""Validation of the content of OpenMMLab 2.0 annotation files (``metainfo`` + ``data_list``).

One policy for every field the loader knows (present keys are checked, absent ones are not
required; unknown keys are kept as they are, only their nesting depth is bounded):

==========================================  =======================================================
value                                       outcome
==========================================  =======================================================
wrong type, out of range, not finite        :class:`AnnotationFieldError` naming the file, the
                                            ``data_list`` index, the ``img_id``, the instance
                                            index and the key (``AnnotationFieldTypeError``, also
                                            a ``TypeError``, when the type is wrong)
bbox ``[x1, y1, x2, y2]`` with              instance skipped; counted
``x2 <= x1`` or ``y2 <= y1``
polygon with fewer than 6 coordinates or    polygon dropped; counted
an odd count
instance whose polygons are all dropped     instance skipped; counted
==========================================  =======================================================

The counts are reported in one warning per file (its log record carries them as
``record.annotation_skips``), as the COCO loader does.

Rules: ``img_path`` / ``seg_map_path`` non-empty strings without NUL of at most
:data:`MAX_PATH_CHARS` characters; ``img_id`` an int or such a string; ``height`` / ``width``
ints in ``1..MAX_IMAGE_SIDE`` (a bool is not an int); ``instances`` a list of mappings;
``bbox`` 4 finite numbers; ``bbox_label`` an int in ``0..len(classes)-1`` (``0..2**31-1``
when the classes are unknown); ``ignore_flag`` 0, 1 or a bool; ``mask`` a list of polygons
(lists of finite numbers) or an RLE mapping ``{"size": [h, w], "counts": str | list[int]}``
whose counts add up to ``h * w`` (and whose size is the image's when the record has one);
``keypoints`` a flat list of ``3k`` finite numbers; nesting at most ``max_depth`` levels.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from typing import Any

from .annotation_errors import (
    AnnotationFieldError,
    AnnotationFieldTypeError,
    AnnotationSkips,
    ParseDataInfoError,
)
from .validation import is_int

__all__ = [
    "AnnotationFieldError",
    "AnnotationFieldTypeError",
    "ParseDataInfoError",
    "AnnotationSkips",
    "Validator",
    "MAX_IMAGE_SIDE",
    "MAX_PATH_CHARS",
    "RESERVED_METAINFO_KEYS",
]

#: Largest image height or width (and RLE mask side) accepted.
MAX_IMAGE_SIDE = 1 << 16
#: Longest ``img_path`` / ``seg_map_path`` / string ``img_id`` accepted.
MAX_PATH_CHARS = 4096
#: Largest ``bbox_label`` accepted when the classes are not known.
MAX_LABEL = 2**31 - 1
#: Metainfo keys a file may not set: they are set by the loader or would shadow
#: ``Metadata`` methods once registered.
RESERVED_METAINFO_KEYS = frozenset({"name", "ann_file", "get", "set", "as_dict"})

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
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


def _rle_string_total(counts: str) -> int | None:
    """The pixel total of a compressed COCO RLE string, None when the string is malformed
    (a character outside '0'..'o', a truncated or overlong value, a negative count)."""
    total = 0
    previous = [0, 0]  # the counts two and one positions back
    m = 0
    p, n = 0, len(counts)
    while p < n:
        x, k = 0, 0
        while True:
            if p >= n or k >= 7:
                return None
            c = ord(counts[p]) - 48
            if not 0 <= c < 64:
                return None
            x |= (c & 0x1F) << (5 * k)
            p += 1
            k += 1
            if not c & 0x20:
                if c & 0x10:
                    x |= -1 << (5 * k)
                break
        if m > 2:
            x += previous[0]
        if not 0 <= x < 2**32:
            return None
        total += x
        previous = [previous[1], x]
        m += 1
    return total


class Validator:
    """Checks one file's metainfo and ``data_list`` entries (see the module docstring).

    Args:
        path: the file, named in every error.
        num_classes: the number of classes when known (bounds ``bbox_label``).
        max_depth: the deepest nesting accepted (the top level of the file is 1).

    Example:
        >>> v = Validator("a.json", num_classes=2)
        >>> v.data_info({"img_path": "a.jpg", "instances": [{"bbox": [0, 0, 0, 5]}]}, 0)
        {'img_path': 'a.jpg', 'instances': []}
        >>> v.skips.as_dict()["degenerate_boxes"]
        1
    """

    def __init__(self, path: str, *, num_classes: int | None = None, max_depth: int = 100):
        self.path = path
        self.num_classes = num_classes
        self.max_depth = max_depth
        self.skips = AnnotationSkips()

    # ------------------------------------------------------------------ errors
    def _fail(
        self,
        problem: str,
        value: Any,
        *,
        key: Any,
        index: int | None = None,
        img_id: Any = None,
        instance: int | None = None,
        wrong_type: bool = False,
    ) -> AnnotationFieldError:
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
            path=self.path,
            index=index,
            img_id=img_id,
            instance=instance,
            key=key,
        )

    def check_depth(self, value: Any, depth: int, **where: Any) -> None:
        """Refuse ``value`` (found at nesting level ``depth``) when it nests deeper than
        ``max_depth``; iterative, so no input can exhaust the stack."""
        if not isinstance(value, (list, tuple, dict)):
            return
        stack = [(value, depth)]
        while stack:
            item, level = stack.pop()
            if level > self.max_depth:
                raise self._fail(f"nested more than {self.max_depth} levels deep", "...", **where)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, level + 1) for c in children if isinstance(c, (list, tuple, dict)))

    # ------------------------------------------------------------------ metainfo
    def file_metainfo(self, meta: Any) -> dict:
        """Check the file's own ``metainfo``: a mapping with string keys (not reserved, not
        starting with '_'); ``classes``, when present, a list of strings."""
        if type(meta) is not dict:
            raise self._fail("'metainfo' must be a mapping", meta, key="metainfo", wrong_type=True)
        for key, value in meta.items():
            if type(key) is not str:
                raise self._fail("metainfo keys must be strings", key, key=key, wrong_type=True)
            if key.startswith("_") or key in RESERVED_METAINFO_KEYS:
                raise self._fail(
                    "reserved metainfo key (set by the loader, or a Metadata method name, or "
                    "starting with '_')",
                    value,
                    key=key,
                )
            if key == "classes" and not (
                isinstance(value, (list, tuple)) and all(type(c) is str for c in value)
            ):
                raise self._fail(
                    "'classes' in a file must be a list of strings (a file of class names is "
                    "read only when the caller passes it in the metainfo argument)",
                    value,
                    key=key,
                    wrong_type=True,
                )
            self.check_depth(value, 3, key=key)
        return meta

    # ------------------------------------------------------------------ records
    def data_info(self, info: Any, index: int) -> dict:
        """The checked ``data_list`` entry: ``info`` itself, or a copy without the skipped
        instances and dropped polygons."""
        if type(info) is not dict:
            raise self._fail(
                "a data_list entry must be a mapping", info, key=None, index=index, wrong_type=True
            )
        img_id = info.get("img_id")
        if img_id is not None and not (
            is_int(img_id) or (type(img_id) is str and len(img_id) <= MAX_PATH_CHARS)
        ):
            raise self._fail(
                f"must be an int or a string of at most {MAX_PATH_CHARS} characters",
                img_id,
                key="img_id",
                index=index,
                wrong_type=True,
            )
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
                        "characters",
                        value,
                        key=key,
                        **where,
                    )
            elif key in ("height", "width"):
                if not is_int(value):
                    raise self._fail("must be an int", value, key=key, wrong_type=True, **where)
                if not 1 <= value <= MAX_IMAGE_SIDE:
                    raise self._fail(f"must be in 1..{MAX_IMAGE_SIDE}", value, key=key, **where)
                size[key] = int(value)
            elif key != "instances" and key != "img_id":
                self.check_depth(value, 4, key=key, **where)
        if "instances" not in info:
            return info
        instances = info["instances"]
        if not isinstance(instances, (list, tuple)):
            raise self._fail(
                "must be a list of mappings", instances, key="instances", wrong_type=True, **where
            )
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

    def _instance(
        self, inst: Any, j: int, hw: tuple[int, int] | None, *, index: int, img_id: Any
    ) -> dict | None:
        where = {"index": index, "img_id": img_id, "instance": j}
        if type(inst) is not dict:
            raise self._fail("an instance must be a mapping", inst, key=None, wrong_type=True, **where)
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
            and all(is_int(s) and 1 <= s <= MAX_IMAGE_SIDE for s in size)
        ):
            raise self._fail(f"an RLE mask needs 'size' [h, w], ints in 1..{MAX_IMAGE_SIDE}",
                             size, key="mask", **where)
        if hw is not None and tuple(size) != hw:
            raise self._fail(f"the RLE size must be the image's [height, width] {list(hw)}",
                             size, key="mask", **where)
        pixels = int(size[0]) * int(size[1])
        if type(counts) is str:
            total = _rle_string_total(counts)
        elif isinstance(counts, (list, tuple)) and all(is_int(c) and c >= 0 for c in counts):
            total = sum(counts)
        else:
            raise self._fail("RLE 'counts' must be a string or a list of ints >= 0", counts,
                             key="mask", **where)
        if total != pixels:
            raise self._fail(f"RLE counts must be well formed and add up to h * w = {pixels}",
                             counts, key="mask", **where)
