"""Read a record's image and segmentation map, check sizes, hand images to torch.

The record-level input/output the pipeline steps (:mod:`mappers.pipeline_steps`) and
:class:`~mappers.dataset_mapper.DatasetMapper` share: one place for the size checks and the
error messages that name the record.

Example:
    >>> rec = {"file_name": "a.jpg"}
    >>> check_image_size(rec, np.zeros((4, 6, 3), np.uint8)); (rec["height"], rec["width"])
    (4, 6)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from catalog.errors import RecordFormatError

from .errors import ImageReadError, ImageSizeMismatchError
from .image_io import read_image
from .record_size import record_image_size

__all__ = [
    "check_image_size",
    "copy_for_mapping",
    "image_to_tensor",
    "read_record_image",
    "read_segmentation",
    "read_sized_image",
    "record_name",
]


def copy_for_mapping(record: dict[str, Any]) -> dict[str, Any]:
    """The record and its annotation dicts copied; nested values shared.

    Enough to leave the caller's record untouched: the mapping steps only set or pop keys of
    the record and of its annotation dicts, and replace (never modify in place) the values
    they transform. Much cheaper than a deep copy of every polygon.
    """
    out = dict(record)
    annotations = out.get("annotations")
    if isinstance(annotations, list):
        out["annotations"] = [dict(a) if isinstance(a, dict) else a for a in annotations]
    return out


def record_name(record: dict[str, Any]) -> str:
    """How error messages name a record: its file name, else its image id.

    Example:
        >>> record_name({"image_id": 7})
        'image_id=7'
    """
    for key in ("file_name", "image_id"):
        if record.get(key) is not None:
            return f"{key}={record[key]!r}"
    return "record"


def check_image_size(record: dict[str, Any], image: np.ndarray) -> None:
    """Check ``image``'s size against the record's ``height``/``width``; fill them if absent.

    Raises:
        ImageSizeMismatchError: (a ValueError) the sizes differ; names the file and both sizes.

    Example:
        >>> rec = {"file_name": "a.jpg"}
        >>> check_image_size(rec, np.zeros((4, 6, 3), np.uint8)); (rec["height"], rec["width"])
        (4, 6)
    """
    h, w = int(image.shape[0]), int(image.shape[1])
    expected_h, expected_w = record.get("height"), record.get("width")
    expected = record_image_size(record)  # RecordFormatError for a malformed size
    if expected is not None:
        if expected != (h, w):
            raise ImageSizeMismatchError(
                f"image {record.get('file_name')!r} (image_id={record.get('image_id')!r}) has "
                f"size (h={h}, w={w}) but its record says (h={expected_h}, w={expected_w}); "
                "fix the annotation file or the image (EXIF orientation is applied)"
            )
    if expected_h is None:
        record["height"] = h
    if expected_w is None:
        record["width"] = w


def read_segmentation(file_name: str | os.PathLike[str]) -> np.ndarray:
    """Read a semantic segmentation map (label ids) as an HxW integer array.

    Palette ("P") and grayscale PNGs give their stored values (palette indices are the labels),
    16/32-bit images give int32. A color image is an error: labels would be ambiguous.

    Raises:
        ImageNotFoundError / ImageReadError: missing or undecodable file (names the path).
        ImageTooLargeError: over the pixel limit (checked before decoding).
    """
    from PIL import Image

    from .errors import ImageNotFoundError, ImageTooLargeError
    from .image_header import check_pixel_limit

    path = os.fspath(file_name)
    try:
        with Image.open(path) as img:
            check_pixel_limit(img.size[1], img.size[0], path)  # before any pixel is decoded
            img.load()
            mode = img.mode
            if mode in ("L", "P"):
                return np.array(img, dtype=np.uint8)
            if mode in ("I", "I;16", "I;16B", "I;16L"):
                return np.array(img, dtype=np.int32)
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"segmentation file not found: {path}", path) from exc
    except ImageReadError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(f"segmentation file {path}: {exc}", path) from exc
    except OSError as exc:
        raise ImageReadError(f"cannot read segmentation file {path}: {exc}", path) from exc
    raise ImageReadError(
        f"segmentation file {path} has mode {mode!r}; expected a single-channel label map "
        "(L, P, I or I;16)",
        path,
    )


def read_record_image(
    record: dict[str, Any],
    image_format: str = "RGB",
    *,
    decoder: str | None = None,
    min_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Read ``record["file_name"]`` and check its size (filling height/width when absent).

    With ``min_size`` a JPEG may come back decoded at 1/2, 1/4 or 1/8 of the record's size
    (see :func:`~mappers.image_io.read_image`): the header's full size is checked against
    the record before decoding, and the decoded size must be exactly the reduced one.

    Raises:
        RecordFormatError: the record has no ``file_name``, or a malformed height/width.
        ImageReadError: the image cannot be read.
        ImageSizeMismatchError: the image's size differs from the record's.
    """
    return read_sized_image(record, record_image_size(record), image_format, decoder, min_size)


def read_sized_image(
    record: dict[str, Any],
    expected: tuple[int, int] | None,
    image_format: str,
    decoder: str | None,
    min_size: tuple[int, int] | None,
) -> np.ndarray:
    """:func:`read_record_image` with the record's size already checked (``expected``)."""
    file_name = record.get("file_name")
    if file_name is None:
        raise RecordFormatError(
            f"record ({record_name(record)}) has no 'file_name' key; keys: {sorted(record)}"
        )
    image = read_image(
        file_name, image_format, min_size=min_size, decoder=decoder, expected_size=expected
    )
    if expected is None:  # read_image checked a known size (full, or exactly reduced)
        check_image_size(record, image)  # fills height/width from the image
    return image


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """An HWC (or HW) numpy image as a CHW tensor sharing its memory (no copy when possible).

    Example:
        >>> image_to_tensor(np.zeros((4, 6, 3), np.uint8)).shape
        torch.Size([3, 4, 6])
    """
    if image.ndim == 2:
        image = image[:, :, None]
    flags = image.flags
    if not (flags.c_contiguous and flags.writeable) and (  # the usual case: no checks
        any(s < 0 for s in image.strides) or not flags.writeable
    ):
        image = np.ascontiguousarray(image) if flags.writeable else image.copy()
    # numpy's transpose is a free view; torch keeps its strides (cheaper than Tensor.permute)
    return torch.from_numpy(image.transpose(2, 0, 1))
