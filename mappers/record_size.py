"""Validate the ``height`` / ``width`` a record declares for its image.

A record's size is input like any other: it sizes the augmentation plan before decoding
and is compared with the decoded image. :func:`record_image_size` accepts only positive
integers (Python or numpy ints, not bools, floats or strings) whose product stays within
the pixel limit (:func:`~mappers.image_header.get_max_image_pixels`), and raises a
:class:`~catalog.errors.RecordFormatError` naming the file and the key otherwise.

Example:
    >>> record_image_size({"file_name": "a.jpg", "height": 480, "width": 640})
    (480, 640)
    >>> record_image_size({"file_name": "a.jpg"}) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.errors import RecordFormatError
from catalog.validation import check_int

from .image_header import get_max_image_pixels

__all__ = ["MAX_IMAGE_SIDE", "record_image_size"]

#: Largest side any record may declare (a JPEG's header holds at most 65,535).
MAX_IMAGE_SIDE = 1 << 20


def _describe(record: Mapping[str, Any]) -> str:
    parts = []
    for key in ("file_name", "image_id"):
        if record.get(key) is not None:
            parts.append(f"{key}={record[key]!r}")
    return "record (" + ", ".join(parts) + ")" if parts else "record"


def _side(record: Mapping[str, Any], key: str) -> int:
    return check_int(
        record[key],
        f"key {key!r}",
        minimum=1,
        maximum=MAX_IMAGE_SIDE,
        error=RecordFormatError,
        where=_describe(record),
    )


def record_image_size(record: Mapping[str, Any]) -> tuple[int, int] | None:
    """The record's (height, width), validated; None when either key is absent or None.

    Raises:
        RecordFormatError: a side is not an int (bool, float, str ...), is below 1 or above
            :data:`MAX_IMAGE_SIDE`, or height * width is over the pixel limit; names the
            file and the key.

    Example:
        >>> record_image_size({"file_name": "a.jpg", "height": 0, "width": 5})
        Traceback (most recent call last):
        ...
        catalog.errors.RecordFormatError: record (file_name='a.jpg'): key 'height' must be in [1, 2**20], got 0
    """
    if record.get("height") is None or record.get("width") is None:
        return None
    height, width = _side(record, "height"), _side(record, "width")
    limit = get_max_image_pixels()
    if limit is not None and height * width > limit:
        raise RecordFormatError(
            f"{_describe(record)}: keys 'height' x 'width' = {height} x {width} = "
            f"{height * width} pixels, over the image pixel limit of {limit}"
        )
    return height, width
