"""Typed errors raised by the mappers package.

Each message names what is needed to find the problem: the requested record index, the
image path, the sizes involved.
"""

from __future__ import annotations

import pickle

from catalog.errors import CatmapError

__all__ = [
    "RefetchExhaustedError",
    "ImageReadError",
    "ImageNotFoundError",
    "ImageTooLargeError",
    "ImageSizeMismatchError",
    "UnsupportedImageFormatError",
    "MapFuncPickleError",
    "PipelineStepError",
    "StructureIndexError",
    "StructureShapeError",
]


class RefetchExhaustedError(CatmapError, RuntimeError):
    """MapDataset could not produce a sample: too many consecutive records mapped to None.

    Attributes:
        index: the index that was requested.
        tried: how many indices were mapped (the requested one included) before giving up.
        last_failed: the most recent failing indices, oldest first.
    """

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        tried: int | None = None,
        last_failed: list[int] | None = None,
    ) -> None:
        super().__init__(message)
        self.index = index
        self.tried = tried
        self.last_failed = list(last_failed or [])


class ImageReadError(CatmapError, OSError):
    """An image file could not be read or decoded. ``path`` holds the file name."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:  # OSError formats its args specially; keep the plain message.
        return str(self.args[0]) if self.args else ""


class ImageNotFoundError(ImageReadError, FileNotFoundError):
    """The image file does not exist."""


class ImageTooLargeError(ImageReadError):
    """An image's header declares more pixels than the decoder limit allows.

    Checked from the header, before any pixel is decoded. Attributes: ``path``, ``pixels``
    (height * width from the header) and ``limit``.
    """

    def __init__(
        self,
        message: str,
        path: str | None = None,
        *,
        pixels: int | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message, path)
        self.pixels = pixels
        self.limit = limit


class ImageSizeMismatchError(CatmapError, ValueError):
    """A decoded image does not have the height/width its record declares."""


class UnsupportedImageFormatError(CatmapError, ValueError):
    """``read_image`` was asked for a pixel format it does not produce (RGB, BGR, L)."""


class MapFuncPickleError(CatmapError, pickle.PicklingError):
    """A mapping function cannot be pickled (e.g. a lambda while cloudpickle is missing)."""


class PipelineStepError(CatmapError, TypeError):
    """A Compose pipeline entry is neither a callable nor a ``{"type": ...}`` dict."""


class StructureShapeError(CatmapError, ValueError):
    """A structure (boxes, masks, keypoints, images) got data of the wrong shape, dtype or
    type; the message names the structure and the shape it needs."""


class StructureIndexError(CatmapError, IndexError):
    """A structure was indexed with something it cannot be indexed by, or out of range."""
