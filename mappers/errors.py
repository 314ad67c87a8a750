"""Typed errors of the mappers package; messages name the record index, file and sizes."""

from __future__ import annotations

import logging
import pickle

from catalog._common import CatmapError, CatmapErrorWithFields, RecordFormatError

__all__ = [
    "ImageNotFoundError",
    "ImageReadError",
    "ImageSizeMismatchError",
    "ImageTooLargeError",
    "KeypointFlipError",
    "MapFuncPickleError",
    "MapperArgumentError",
    "PipelineStepError",
    "RefetchExhaustedError",
    "SampleBudgetError",
    "StructureIndexError",
    "StructureShapeError",
    "UnsupportedImageFormatError",
    "add_context",
]


class KeypointFlipError(CatmapError, ValueError):
    """Keypoint flip indices are missing, malformed, or cannot be built from the metadata."""


class RefetchExhaustedError(CatmapError, RuntimeError):
    """MapDataset gave up: ``tried`` records in a row mapped to None for request ``index``
    (``last_failed``: the most recent failing indices, oldest first)."""

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

    def __str__(self) -> str:  # OSError formats its args specially; keep the plain message
        return str(self.args[0]) if self.args else ""


class ImageNotFoundError(ImageReadError, FileNotFoundError):
    """The image file does not exist."""


class ImageTooLargeError(ImageReadError):
    """An image's header declares more ``pixels`` than the decoder ``limit`` allows."""

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


class SampleBudgetError(CatmapErrorWithFields, RecordFormatError):
    """A sample's masks would cost more than the ``budget`` field of ``ImageLimits`` allows
    (``cost`` > ``limit``); raised before any allocation, skipped by ``skip_bad_annotations``."""

    field_names = ("budget", "cost", "limit")


class MapFuncPickleError(CatmapError, pickle.PicklingError):
    """A mapping function cannot be pickled (e.g. a lambda while cloudpickle is missing)."""


class PipelineStepError(CatmapError, TypeError):
    """A Compose pipeline entry is neither a callable nor a ``{"type": ...}`` dict."""


class MapperArgumentError(CatmapError, TypeError):
    """DatasetMapper got a wrong argument (unknown, missing or mistyped), named in ``argument``."""

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StructureShapeError(CatmapError, ValueError):
    """A structure (boxes, masks, keypoints, images) got data of the wrong shape or type."""


class StructureIndexError(CatmapError, IndexError):
    """A structure was indexed with something it cannot be indexed by, or out of range."""


def add_context(exc: BaseException, context: str) -> None:
    """Append ``[context]`` to ``exc``'s message in place, keeping its type and fields (a note
    for an ``OSError`` or an exception whose args are not one message)."""
    args = exc.args
    if not isinstance(exc, OSError) and len(args) == 1 and isinstance(args[0], str):
        exc.args = (f"{args[0]} [{context}]",)
    elif not isinstance(exc, OSError) and not args:
        exc.args = (f"[{context}]",)
    elif hasattr(exc, "add_note"):
        exc.add_note(f"[{context}]")
    else:  # Python 3.10 and an exception whose args are not one message
        logging.getLogger(__name__).error("%s raised %s", context, type(exc).__name__)
