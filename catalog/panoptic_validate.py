"""Checks of the values of a COCO panoptic file (used by :mod:`catalog.coco_panoptic`).

Every failure is a :class:`PanopticFormatError` naming the file, the annotation index, the
image id, the segment id and the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .annotation_validate import _finite_numbers
from .coco_common import INT64_MAX, INT64_MIN, MAX_IMAGE_SIDE, extra_value_problem, short_repr
from .format_errors import PanopticFormatError
from .validation import is_int

__all__ = [
    "MAX_SEGMENT_ID",
    "as_dict",
    "check_segment",
    "fail",
    "id_map",
    "image_index",
    "relative_name",
]

#: Largest segment id: ids are encoded in a PNG's RGB as ``R + 256 * G + 256**2 * B``.
MAX_SEGMENT_ID = 256**3 - 1
_MAX_PATH_CHARS = 4096
_SEGMENT_KEYS = ("id", "category_id", "iscrowd", "bbox", "area")


def as_dict(meta: Any, refuse: Callable[[str], BaseException]) -> dict[str, Any]:
    """``meta`` (a mapping, or an object with ``as_dict()`` such as :class:`Metadata`) as a
    plain dict; anything else raises ``refuse(<its type name>)``.

    Example:
        >>> as_dict({"a": 1}, TypeError)
        {'a': 1}
        >>> as_dict([1], lambda got: TypeError(f"metadata must be a mapping, got {got}"))
        Traceback (most recent call last):
        ...
        TypeError: metadata must be a mapping, got list
    """
    if hasattr(meta, "as_dict") and callable(meta.as_dict):
        meta = meta.as_dict()
    if not isinstance(meta, Mapping):
        raise refuse(type(meta).__name__)
    return dict(meta)


def id_map(meta: Mapping[str, Any], key: str, path: str) -> dict[int, int]:
    """``meta[key]`` checked as a dataset-id -> contiguous-id map of ints ({} when absent).

    Example:
        >>> id_map({"m": {1: 0}}, "m", "p.json")
        {1: 0}
    """
    value = meta.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        is_int(k) and is_int(v) and v >= 0 for k, v in value.items()
    ):
        raise PanopticFormatError(
            f"{path}: meta[{key!r}] must map dataset category ids (ints) to contiguous ids "
            f"(ints >= 0), got {short_repr(value)}",
            path=path,
            key=key,
        )
    return {int(k): int(v) for k, v in value.items()}


def relative_name(value: Any, path: str, where: dict[str, Any], key: str) -> str:
    """``value`` checked as a relative file name (no NUL, no ``..``, not absolute, not ending
    in ``/`` or ``.``)."""
    if type(value) is not str:
        raise fail(path, "must be a str", value, key=key, **where)
    parts = value.replace("\\", "/").split("/")
    if (
        not value
        or "\x00" in value
        or len(value) > _MAX_PATH_CHARS
        or os.path.isabs(value)
        or value.startswith(("/", "\\"))
        or ".." in parts
        or parts[-1] in ("", ".")
    ):
        raise fail(
            path,
            f"must be a relative file path without '..' or NUL, not ending in '/', of at most "
            f"{_MAX_PATH_CHARS} characters",
            value,
            key=key,
            **where,
        )
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
        path=path,
        image_id=image_id,
        segment_id=segment_id,
        key=key,
    )


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


def check_segment(
    segment: Any,
    where: dict[str, Any],
    path: str,
    things: dict[int, int],
    stuff: dict[int, int],
) -> dict[str, Any]:
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
            path,
            "is in neither thing_dataset_id_to_contiguous_id nor "
            "stuff_dataset_id_to_contiguous_id of the metadata",
            category,
            key="category_id",
            **where,
        )
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
