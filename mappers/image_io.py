"""Image reading: a record's file -> bytes -> one decoder per format -> an HWC array.

Every bound is in one :class:`ImageLimits`: only regular files (never a hang on a FIFO), at
most ``max_bytes``, URLs only under a remote root; the format is sniffed from an allowlist and
pixels (x scans for progressive JPEGs) are bounded from the header before decoding.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from catalog._common import (
    MissingDependencyError,
    RecordFormatError,
    check_int,
    is_int,
    missing_dependency,
)
from catalog.storage.shard_cache import SHARD_SOURCES, ShardError

from .errors import (
    ImageNotFoundError,
    ImageReadError,
    ImageSizeMismatchError,
    ImageTooLargeError,
    UnsupportedImageFormatError,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS", "ImageLimits", "MAX_IMAGE_SIDE", "apply_exif_orientation",
    "available_jpeg_decoders", "check_image_size", "decode_image", "default_jpeg_decoder",
    "get_cv2", "get_image_limits", "get_max_image_pixels", "image_to_tensor", "is_remote_path",
    "limit_opencv_threads", "read_file_bytes", "read_image", "read_record_image",
    "read_segmentation", "read_sized_image", "record_image_size", "record_name",
    "set_image_limits", "set_max_image_pixels",
]

logger = logging.getLogger(__name__)

#: Pillow's default ``Image.MAX_IMAGE_PIXELS``: 89,478,485.
DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
#: Largest side a record may declare (a JPEG header holds at most 65,535).
MAX_IMAGE_SIDE = 1 << 20
JPEG_DECODERS = ("simplejpeg", "pillow")  # fastest first; other formats always use Pillow
SUPPORTED_FORMATS = ("RGB", "BGR", "L", "YUV-BT.601")
_PIXELS_ENV = "CATMAP_MAX_IMAGE_PIXELS"
_OPENCV_THREADS_ENV = "CATMAP_OPENCV_THREADS"
_SOS = re.compile(rb"\xff\xda")  # start of scan (in scan data 0xFF is followed by 0)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"),
               (b"GIF89a", "GIF"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"BM", "BMP"))
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_RGB_TO_YUV = np.array([[0.299, 0.587, 0.114], [-0.14713, -0.28886, 0.436],
                        [0.615, -0.51499, -0.10001]], dtype=np.float32).T
_UNSET: Any = object()


@dataclass(frozen=True)
class ImageLimits:
    """Every bound on reading one image; None removes one. The defaults are far above COCO,
    LVIS, Cityscapes and Objects365 photos. ``max_decode_work`` bounds pixels x scans of a
    progressive JPEG; ``remote_roots``: URL prefixes under which URLs may be read.

    Example:
        >>> set_image_limits(remote_roots=("s3://my-bucket/",))  # doctest: +SKIP
    """

    max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS
    max_bytes: int | None = 1 << 30
    max_decode_work: int | None = 1 << 29
    remote_roots: tuple[str, ...] = ()
    remote_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_bytes", "max_decode_work"):
            check_int(getattr(self, name), name, minimum=1, optional=True, error=ValueError,
                      where="ImageLimits")
        roots = self.remote_roots
        if isinstance(roots, str) or not all(isinstance(r, str) and "://" in r for r in roots):
            raise ValueError(f"ImageLimits: remote_roots must be URL prefixes, got {roots!r}")
        object.__setattr__(self, "remote_roots", tuple(roots))
        if not (isinstance(self.remote_timeout_s, (int, float)) and self.remote_timeout_s > 0):
            raise ValueError(f"ImageLimits: bad remote_timeout_s {self.remote_timeout_s!r}")


_DEFAULT_LIMITS = ImageLimits()
_configured: ImageLimits | None = None  # inherited by forked workers, not by spawned ones


def get_image_limits() -> ImageLimits:
    """The limits in force: :func:`set_image_limits`, else the defaults with
    ``$CATMAP_MAX_IMAGE_PIXELS`` (a positive int or ``none``) as ``max_pixels``."""
    text = os.environ.get(_PIXELS_ENV, "").strip()
    if _configured is not None or not text:
        return _configured or _DEFAULT_LIMITS
    if text.lower() != "none" and (not text.isdigit() or int(text) <= 0):
        raise ValueError(f"${_PIXELS_ENV} must be a positive integer or 'none', got {text!r}")
    return replace(_DEFAULT_LIMITS, max_pixels=None if text.lower() == "none" else int(text))


def set_image_limits(limits: ImageLimits | None = None, **changes: Any) -> ImageLimits:
    """Set this process's limits (forked workers inherit them; spawned ones read
    ``$CATMAP_MAX_IMAGE_PIXELS``): ``limits``, or the current ones with ``changes``."""
    global _configured
    _configured = replace(limits or get_image_limits(), **changes)
    return _configured


def get_max_image_pixels() -> int | None:
    """``get_image_limits().max_pixels``; None means no limit."""
    return get_image_limits().max_pixels


def set_max_image_pixels(limit: int | None) -> None:
    """``set_image_limits(max_pixels=limit)``; None removes the limit."""
    set_image_limits(max_pixels=limit)


def _check_pixels(height: int, width: int, source: str, limit: int | None) -> None:
    if limit is not None and height * width > limit:
        raise ImageTooLargeError(
            f"image {source} is {height} x {width} = {height * width} pixels, over the limit "
            f"of {limit} (a decompression bomb?); raise it with set_image_limits(max_pixels=...)"
            f" or ${_PIXELS_ENV}", source, pixels=height * width, limit=limit)


# OpenCV: one thread per process, so N workers use N cores without oversubscription.
_cv2_configured = False  # inherited by forked children, so a child never reconfigures


def get_cv2() -> Any | None:
    """``cv2`` set to ``$CATMAP_OPENCV_THREADS`` threads (default 1) on first use, or None.

    A worker forked after cv2's pool started inherits its locks, not its threads: calling
    into the pool there (setNumThreads too) can deadlock, so it keeps the parent's setting.
    """
    global _cv2_configured
    inherited = "cv2" in sys.modules and torch.utils.data.get_worker_info() is not None
    try:
        import cv2
    except ImportError:
        return None
    if not _cv2_configured:
        _cv2_configured = True
        raw = os.environ.get(_OPENCV_THREADS_ENV, "1")
        if not raw.strip().isdigit():
            raise ValueError(f"{_OPENCV_THREADS_ENV} must be an integer >= 0, got {raw!r}")
        if not inherited:
            cv2.setNumThreads(int(raw))
    return cv2


def limit_opencv_threads() -> None:
    """Set OpenCV's threads if cv2 is imported; call before workers start, not in them."""
    if "cv2" in sys.modules:
        get_cv2()


# Bytes: regular files opened non-blocking; URLs only under a remote root.
def is_remote_path(path: str) -> bool:
    """True when ``path`` has a URL scheme other than ``file://`` (``s3://b/a.jpg``)."""
    match = _SCHEME.match(path)
    return match is not None and match[1] != "file"


def _too_large(path: str, size: int | None, limit: int) -> ImageTooLargeError:
    what = f"{size} bytes" if size is not None else "more bytes"
    return ImageTooLargeError(f"file {path} holds {what} than the {limit}-byte limit "
                              "(max_bytes)", path, limit=limit)


def _read_bounded(handle: Any, path: str, limit: int | None, size: int | None) -> bytes:
    """At most ``limit`` bytes of ``handle``; ``size`` (known or None) sizes the first read."""
    if limit is not None and size is not None and size > limit:
        raise _too_large(path, size, limit)
    cap = -1 if limit is None else limit + 1
    data = handle.read(cap if size is None else size + 1 if cap < 0 else min(size + 1, cap))
    if size is not None and len(data) > size and (cap < 0 or len(data) < cap):  # it grew
        data += handle.read(cap if cap < 0 else cap - len(data))
    if limit is not None and len(data) > limit:
        raise _too_large(path, None, limit)
    return data


def _read_remote(path: str, limits: ImageLimits) -> bytes:
    if not any(path.startswith(root) for root in limits.remote_roots):
        raise ImageReadError(
            f"{path} is a URL outside every registered remote root; catmap reads URLs only "
            "under roots you allow: set_image_limits(remote_roots=('s3://bucket/',))", path)
    try:
        import fsspec
    except ImportError:
        raise missing_dependency("fsspec", "remote", "reading a URL") from None
    t, scheme, options = limits.remote_timeout_s, path.partition("://")[0], {}
    try:
        if scheme in ("http", "https"):
            from aiohttp import ClientTimeout

            options = {"client_kwargs": {"timeout": ClientTimeout(sock_connect=t, sock_read=t)}}
        elif scheme in ("s3", "s3a"):
            options = {"config_kwargs": {"connect_timeout": t, "read_timeout": t}}
        fs, inner = fsspec.core.url_to_fs(path, **options)
        size = fs.info(inner).get("size")  # FileNotFoundError for a missing file
        with fs.open(inner, "rb") as handle:
            return _read_bounded(handle, path, limits.max_bytes, size if is_int(size) else None)
    except ImageReadError:
        raise
    except FileNotFoundError as exc:  # fsspec's http says so for an unreachable server too
        raise ImageNotFoundError(f"file not found: {path} {exc.__cause__ or ''}", path) from exc
    except Exception as exc:  # timeouts, protocol and client errors of any fsspec backend
        raise ImageReadError(f"cannot read {path}: {type(exc).__name__}: {exc}", path) from exc


def read_file_bytes(file_name: str | os.PathLike[str], max_bytes: Any = _UNSET) -> bytes:
    """The bytes of a regular file, or of a URL under a remote root: ImageNotFoundError,
    ImageTooLargeError (over ``max_bytes``, default the limits'), or ImageReadError (not a
    regular file, unreadable, a URL outside the remote roots, timed out or failed)."""
    path = os.fsdecode(file_name)
    limits = get_image_limits()
    if max_bytes is not _UNSET:
        limits = replace(limits, max_bytes=max_bytes)
    if SHARD_SOURCES:  # shard datasets registered by program code (catalog.register_shards)
        for prefix, source in SHARD_SOURCES.items():
            if path.startswith(prefix):
                try:
                    return source(path, limits.max_bytes)
                except ShardError as exc:  # skip_bad_images replaces it, as a bad file
                    raise ImageReadError(str(exc), path) from exc
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif is_remote_path(path):
        return _read_remote(path, limits)
    try:  # non-blocking: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"file not found: {path}", path) from exc
    except OSError as exc:
        raise ImageReadError(f"cannot open {path}: {exc}", path) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ImageReadError(f"cannot read {path}: not a regular file (a FIFO, device or "
                             "directory is never read)", path)
    with open(fd, "rb") as handle:
        try:
            return _read_bounded(handle, path, limits.max_bytes, info.st_size)
        except ImageReadError:
            raise
        except OSError as exc:
            raise ImageReadError(f"cannot read {path}: {exc}", path) from exc


# Decoding: the format by content, the limits from the header, then one decoder.
@lru_cache(maxsize=1)
def available_jpeg_decoders() -> tuple[str, ...]:
    """The JPEG decoders installed here, fastest first ("simplejpeg", "pillow")."""
    return JPEG_DECODERS if importlib.util.find_spec("simplejpeg") else ("pillow",)


def default_jpeg_decoder() -> str:
    """``$CATMAP_JPEG_DECODER``, else the fastest installed JPEG decoder."""
    forced = os.environ.get("CATMAP_JPEG_DECODER")
    return _check_decoder(forced) if forced else available_jpeg_decoders()[0]


def _check_decoder(name: str) -> str:
    name = name.lower()
    if name not in JPEG_DECODERS:
        raise ValueError(f"unknown JPEG decoder {name!r}; choose one of {', '.join(JPEG_DECODERS)}")
    if name not in available_jpeg_decoders():
        raise missing_dependency("simplejpeg", "fast", "the JPEG decoder 'simplejpeg'")
    return name


def _plugins() -> dict[str, Any]:
    """Pillow's classes for the allowed formats. Opening one directly runs that plugin only:
    no probing of the others (EPS, PDF ...), no Pillow bomb check (the limits here rule)."""
    try:
        from PIL import BmpImagePlugin, GifImagePlugin, JpegImagePlugin, PngImagePlugin
        from PIL import TiffImagePlugin, WebPImagePlugin
    except ImportError:
        raise missing_dependency("Pillow", "images", "reading images") from None
    return {"JPEG": JpegImagePlugin.JpegImageFile, "PNG": PngImagePlugin.PngImageFile,
            "BMP": BmpImagePlugin.BmpImageFile, "GIF": GifImagePlugin.GifImageFile,
            "TIFF": TiffImagePlugin.TiffImageFile, "WEBP": WebPImagePlugin.WebPImageFile}


def _sniff(data: bytes, source: str) -> str:
    for magic, name in _SIGNATURES:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    raise ImageReadError(f"cannot decode image {source}: not a JPEG, PNG, BMP, TIFF, WebP or "
                         f"GIF file (starts with {data[:8]!r})", source)


def apply_exif_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """Rotate/flip an HWC array as EXIF ``orientation`` says, as ``exif_transpose`` does."""
    if not 2 <= orientation <= 8:
        return image
    flips = {2: image[:, ::-1], 3: image[::-1, ::-1], 4: image[::-1]}
    if orientation in flips:
        return np.ascontiguousarray(flips[orientation])
    turned = image.transpose(1, 0, 2)  # 5: transpose; 6: rotate 270; 7: transverse; 8: 90
    out = {5: turned, 6: turned[:, ::-1], 7: turned[::-1, ::-1], 8: turned[::-1]}[orientation]
    return np.ascontiguousarray(out)


def _to_format(array: np.ndarray, fmt: str) -> np.ndarray:
    """HxW, HxWx1 (gray) or HxWx3 (RGB) as ``fmt``, C-contiguous and writable."""
    if array.ndim == 2:
        array = array[:, :, None]
    if fmt == "L":
        out = array[:, :, :1]
    elif array.shape[2] == 1:
        out = np.repeat(array, 3, axis=2)
    else:
        out = array[:, :, ::-1] if fmt == "BGR" else array
    if fmt == "YUV-BT.601":
        return np.dot(out.astype(np.float32) / 255, _RGB_TO_YUV)
    if not out.flags.writeable or not out.flags.c_contiguous:
        return np.array(out, order="C")
    return out


def _reduction(height: int, width: int, min_size: tuple[int, int] | None) -> int:
    """Largest JPEG scale 1/f (f = 8, 4, 2) keeping ``min_size`` that Pillow's draft
    reproduces too; else 1."""
    if min_size is None:
        return 1
    for factor in (8, 4, 2):
        draft = min(width // max(1, width // factor), height // max(1, height // factor))
        if (math.ceil(height / factor) >= min_size[0] and math.ceil(width / factor) >= min_size[1]
                and draft >= factor and (factor == 8 or draft < 2 * factor)):
            return factor
    return 1


def _mismatch(source: str, got: tuple[int, ...], expected: tuple[int, int]) -> Exception:
    return ImageSizeMismatchError(
        f"image {source} has size (h={got[0]}, w={got[1]}) but its record says (h={expected[0]}"
        f", w={expected[1]}); fix the annotation file or the image (EXIF orientation is applied)")


def _orientation(img: Any) -> int:
    value = img.getexif().get(0x0112, 1)  # EXIF, else XMP, as exif_transpose reads it
    return value if is_int(value) and 1 <= value <= 8 else 1


def _pillow_pixels(img: Any, data: bytes, fmt: str, reduce: int, keep_16bit: bool,
                   source: str, jpeg: bool = False) -> np.ndarray:
    """Decode an opened Pillow image into ``fmt``; 16-bit samples scaled (or kept)."""
    if jpeg and (reduce > 1 or fmt == "L"):
        width, height = img.size
        size = (max(1, width // reduce), max(1, height // reduce)) if reduce > 1 else None
        img.draft("L" if fmt == "L" else "RGB", size)
    img.load()
    if img.mode in _SIXTEEN_BIT:
        samples = np.asarray(img)
        if img.mode == "I" and samples.size and (samples.min() < 0 or samples.max() > 0xFFFF):
            raise ImageReadError(f"cannot decode image {source}: 32-bit pixels outside 0..65535 "
                                 "have no 8-bit scale", source)
        samples = samples.astype(np.uint16, copy=False)
        return _to_format(samples if keep_16bit else (samples >> 8).astype(np.uint8), fmt)
    if img.mode == "F":
        raise ImageReadError(f"cannot decode image {source}: floating-point pixels have no "
                             "8-bit scale; convert the image to 8 or 16 bits", source)
    if keep_16bit and data[:4] == b"\x89PNG" and data[24] == 16 and data[25] in (2, 4, 6):
        raise UnsupportedImageFormatError(f"read_image: {source} is a 16-bit color image, which "
                                          "Pillow reads as 8 bits; keep_16bit is for gray ones")
    return _to_format(np.asarray(img.convert("L" if fmt == "L" else "RGB")), fmt)


def _decode_jpeg(img: Any, data: bytes, fmt: str, decoder: str, limits: ImageLimits,
                 min_size: tuple[int, int] | None, expected: tuple[int, int] | None,
                 source: str) -> tuple[np.ndarray, int]:
    """(pixels in the stored orientation, EXIF orientation); sizes and work checked first."""
    width, height = img.size
    orientation = _orientation(img)
    oriented = (width, height) if orientation >= 5 else (height, width)
    if expected is not None and oriented != expected:
        raise _mismatch(source, oriented, expected)
    # libjpeg refuses a second baseline scan: only progressive JPEGs have many
    scans = len(_SOS.findall(data)) if img.info.get("progressive") else 1
    work = height * width * scans
    if limits.max_decode_work is not None and work > limits.max_decode_work:
        raise ImageTooLargeError(
            f"image {source}: {height} x {width} pixels x {scans} scans = {work} is over the "
            f"decode-work limit of {limits.max_decode_work}; raise it with "
            "set_image_limits(max_decode_work=...)", source, pixels=work,
            limit=limits.max_decode_work)
    if min_size is not None and orientation >= 5:
        min_size = (min_size[1], min_size[0])
    factor = _reduction(height, width, min_size)
    reduced = (math.ceil(height / factor), math.ceil(width / factor))
    image = None
    if decoder == "simplejpeg":
        import simplejpeg

        space = {"BGR": "BGR", "L": "GRAY"}.get(fmt, "RGB")
        try:  # strict: on any libjpeg warning Pillow (the same libjpeg) decides
            image = simplejpeg.decode_jpeg(data, colorspace=space, strict=True, min_factor=factor,
                                           min_height=reduced[0], min_width=reduced[1])
            image = _to_format(image, fmt) if fmt == "YUV-BT.601" else image
        except Exception as exc:  # CMYK, a libjpeg warning ...: Pillow gets a try
            logger.debug("simplejpeg failed on %s (%s); trying Pillow", source, exc)
    if image is None:
        image = _pillow_pixels(img, data, fmt, factor, False, source, jpeg=True)
    if image.shape[:2] != reduced:
        raise ImageReadError(f"cannot decode image {source}: got size {image.shape[:2]}, the "
                             f"header says {reduced}", source)
    return image, orientation


def decode_image(data: bytes, format: str | None = None, *,
                 min_size: tuple[int, int] | None = None, decoder: str | None = None,
                 source: str = "<bytes>", expected_size: tuple[int, int] | None = None,
                 max_pixels: int | None = _UNSET, keep_16bit: bool = False) -> np.ndarray:
    """Decode encoded image bytes; see :func:`read_image` for the arguments.

    Example:
        >>> from PIL import Image
        >>> buf = io.BytesIO(); Image.new("RGB", (4, 2)).save(buf, "PNG")
        >>> decode_image(buf.getvalue()).shape
        (2, 4, 3)
    """
    fmt = "RGB" if format is None else format
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedImageFormatError(f"read_image: format {fmt!r} is not supported; "
                                          f"choose one of {', '.join(SUPPORTED_FORMATS)}")
    decoder = _check_decoder(decoder) if decoder else default_jpeg_decoder()
    limits = get_image_limits()
    if max_pixels is not _UNSET:
        limits = replace(limits, max_pixels=max_pixels)
    expected = None if expected_size is None else (int(expected_size[0]), int(expected_size[1]))
    kind = _sniff(data, source)
    try:
        with _plugins()[kind](io.BytesIO(data)) as img:
            _check_pixels(img.size[1], img.size[0], source, limits.max_pixels)
            if kind == "JPEG":
                image, orientation = _decode_jpeg(img, data, fmt, decoder, limits, min_size,
                                                  expected, source)
            else:
                image = _pillow_pixels(img, data, fmt, 1, keep_16bit, source)
                orientation = _orientation(img)
    except (ImageReadError, ImageSizeMismatchError, UnsupportedImageFormatError,
            MissingDependencyError):
        raise
    except Exception as exc:  # whatever a decoder raises for broken data
        raise ImageReadError(f"cannot decode image {source}: {type(exc).__name__}: {exc}",
                             source) from exc
    image = apply_exif_orientation(image, orientation)
    if expected is not None and image.shape[:2] != expected and kind != "JPEG":
        raise _mismatch(source, image.shape[:2], expected)
    return image


def read_image(file_name: str | os.PathLike[str], format: str | None = None, *,
               min_size: tuple[int, int] | None = None, decoder: str | None = None,
               expected_size: tuple[int, int] | None = None, max_pixels: int | None = _UNSET,
               keep_16bit: bool = False, max_bytes: int | None = _UNSET) -> np.ndarray:
    """Read an image file into an HWC array with its EXIF orientation applied (detectron2).

    ``format``: "RGB" (default), "BGR", "L" (HxWx1) or "YUV-BT.601" (float32). ``min_size``:
    the (h, w) the caller shrinks to; a JPEG 2x larger may decode at 1/2, 1/4 or 1/8 scale.
    ``expected_size`` is checked from the header; ``keep_16bit`` keeps 16-bit gray as uint16.

    Example:
        >>> read_image("photo.jpg", "BGR").shape  # doctest: +SKIP
        (480, 640, 3)
    """
    path = os.fsdecode(file_name)
    return decode_image(read_file_bytes(path, max_bytes), format, min_size=min_size,
                        decoder=decoder, source=path, expected_size=expected_size,
                        max_pixels=max_pixels, keep_16bit=keep_16bit)


def read_segmentation(file_name: str | os.PathLike[str]) -> np.ndarray:
    """A semantic segmentation map (label ids) as HxW: uint8 for L/P images (palette
    indices are the labels), int32 for 16/32-bit ones; a color image is refused. Read and
    bounded as :func:`read_image`, with the same typed errors."""
    path = os.fsdecode(file_name)
    data = read_file_bytes(path)
    try:
        with _plugins()[_sniff(data, path)](io.BytesIO(data)) as img:
            _check_pixels(img.size[1], img.size[0], path, get_image_limits().max_pixels)
            img.load()
            if img.mode in ("L", "P"):
                return np.array(img, dtype=np.uint8)
            if img.mode in ("I", "I;16", "I;16B", "I;16L"):
                return np.array(img, dtype=np.int32)
            mode = img.mode
    except ImageReadError:
        raise
    except Exception as exc:  # SyntaxError, ValueError ... from a damaged chunk
        raise ImageReadError(f"cannot read segmentation file {path}: {type(exc).__name__}: "
                             f"{exc}", path) from exc
    raise ImageReadError(f"segmentation file {path} has mode {mode!r}; expected a "
                         "single-channel label map (L, P, I or I;16)", path)


# Records: a record's image, its declared size checked.
def record_name(record: dict[str, Any]) -> str:
    """How error messages name a record: its file name, else its image id."""
    for key in ("file_name", "image_id"):
        if record.get(key) is not None:
            return f"{key}={record[key]!r}"
    return "record"


def record_image_size(record: dict[str, Any]) -> tuple[int, int] | None:
    """The record's (height, width) (RecordFormatError naming the key if bad), or None."""
    height, width = record.get("height"), record.get("width")
    if height is None or width is None:
        return None
    if not (type(height) is int and type(width) is int  # the usual case, checked cheaply
            and 0 < height <= MAX_IMAGE_SIDE and 0 < width <= MAX_IMAGE_SIDE):
        where = f"record ({record_name(record)})"
        height, width = (
            check_int(record[key], f"key {key!r}", minimum=1, maximum=MAX_IMAGE_SIDE,
                      error=RecordFormatError, where=where) for key in ("height", "width"))
    limit = get_image_limits().max_pixels
    if limit is not None and height * width > limit:
        raise RecordFormatError(
            f"record ({record_name(record)}): keys 'height' x 'width' = {height} x {width} = "
            f"{height * width} pixels, over the image pixel limit of {limit}")
    return height, width


def check_image_size(record: dict[str, Any], image: np.ndarray) -> None:
    """Check ``image``'s size against the record's height/width; fill them when absent.

    Example:
        >>> rec = {"file_name": "a.jpg"}
        >>> check_image_size(rec, np.zeros((4, 6, 3), np.uint8)); (rec["height"], rec["width"])
        (4, 6)
    """
    size = (int(image.shape[0]), int(image.shape[1]))
    expected = record_image_size(record)
    if expected is not None and expected != size:
        source = f"{record.get('file_name')!r} (image_id={record.get('image_id')!r})"
        raise _mismatch(source, size, expected)
    record["height"] = size[0] if record.get("height") is None else record["height"]
    record["width"] = size[1] if record.get("width") is None else record["width"]


def read_sized_image(record: dict[str, Any], expected: tuple[int, int] | None,
                     image_format: str, decoder: str | None,
                     min_size: tuple[int, int] | None) -> np.ndarray:
    """Read ``record["file_name"]`` whose size was validated (``expected``, or None)."""
    file_name = record.get("file_name")
    if file_name is None:
        raise RecordFormatError(
            f"record ({record_name(record)}) has no 'file_name' key; keys: {sorted(record)}")
    image = read_image(file_name, image_format, min_size=min_size, decoder=decoder,
                       expected_size=expected)
    if expected is None:
        check_image_size(record, image)  # fills height/width from the image
    return image


def read_record_image(record: dict[str, Any], image_format: str = "RGB", *,
                      decoder: str | None = None,
                      min_size: tuple[int, int] | None = None) -> np.ndarray:
    """A record's image, its size checked against the record's (from a JPEG's header)."""
    return read_sized_image(record, record_image_size(record), image_format, decoder, min_size)


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """An HWC (or HW) image as a CHW tensor sharing its memory when possible."""
    image = image[:, :, None] if image.ndim == 2 else image
    if not image.flags.writeable:
        image = image.copy()
    elif not image.flags.c_contiguous and any(s < 0 for s in image.strides):
        image = np.ascontiguousarray(image)
    return torch.from_numpy(image.transpose(2, 0, 1))
