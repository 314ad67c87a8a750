"""Image reading for the mappers: a file's bytes, one decoder per format, a record's image.

Trust by construction, every bound in one :class:`ImageLimits`:

* a file named by a record is opened non-blocking and read only if it is a regular file
  (a FIFO, a device or a directory is an :class:`ImageReadError`, never a hang), at most
  ``max_bytes`` of it; a URL is read (through fsspec) only under a remote root the user
  registered, with connect/read timeouts;
* the format is chosen by the file's first bytes from an allowlist (JPEG, PNG, BMP, TIFF,
  WebP, GIF) and Pillow opens it with that plugin only: EPS/PS/PDF never reach a decoder;
* the work is bounded from the header, before any pixel is decoded: ``max_pixels`` and,
  for progressive JPEGs, pixels x scans (``max_decode_work``).

JPEGs decode with simplejpeg when it is installed (straight into RGB/BGR/gray), else with
Pillow; everything else with Pillow. EXIF orientation is applied as Pillow's
``ImageOps.exif_transpose`` does; 16-bit images are scaled with ``value >> 8``.
"""

from __future__ import annotations

import io
import logging
import math
import os
import stat
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from catalog.errors import MissingDependencyError, RecordFormatError, missing_dependency
from catalog.validation import check_int, is_int

from .errors import (
    ImageNotFoundError,
    ImageReadError,
    ImageSizeMismatchError,
    ImageTooLargeError,
    UnsupportedImageFormatError,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS", "ImageLimits", "JPEG_DECODERS", "MAX_IMAGE_SIDE",
    "SUPPORTED_FORMATS", "apply_exif_orientation", "available_jpeg_decoders",
    "check_image_size", "copy_for_mapping", "decode_image", "default_jpeg_decoder", "get_cv2",
    "get_image_limits", "get_max_image_pixels", "image_to_tensor", "is_remote_path",
    "limit_opencv_threads", "read_file_bytes", "read_image", "read_record_image",
    "read_segmentation", "read_sized_image", "record_image_size", "record_name",
    "set_image_limits", "set_max_image_pixels",
]

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------- limits

#: Pillow's default ``Image.MAX_IMAGE_PIXELS``: 89,478,485.
DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
#: Largest side a record may declare (a JPEG header holds at most 65,535).
MAX_IMAGE_SIDE = 1 << 20
_PIXELS_ENV = "CATMAP_MAX_IMAGE_PIXELS"
_UNSET: Any = object()


@dataclass(frozen=True)
class ImageLimits:
    """Every bound on reading one image. The defaults are far above COCO, LVIS, Cityscapes
    (2048x1024) and Objects365 photos; None removes a bound.

    Attributes:
        max_pixels: height x width from the header (Pillow's default limit).
        max_bytes: bytes read from one file (1 GiB).
        max_decode_work: pixels x scans of a progressive JPEG (2**29: a 50-megapixel photo
            with 10 scans); a small file with thousands of scans costs seconds per scan pass.
        remote_roots: URL prefixes (``"s3://bucket/"``) under which URLs may be read.
        remote_timeout_s: connect and read timeout for URLs (http(s) and s3).

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
        if isinstance(self.remote_roots, str) or not all(
            isinstance(root, str) and "://" in root for root in self.remote_roots
        ):
            raise ValueError(f"ImageLimits: remote_roots must be URL prefixes, got "
                             f"{self.remote_roots!r}")
        object.__setattr__(self, "remote_roots", tuple(self.remote_roots))
        if not (isinstance(self.remote_timeout_s, (int, float)) and self.remote_timeout_s > 0):
            raise ValueError(f"ImageLimits: remote_timeout_s must be > 0, got "
                             f"{self.remote_timeout_s!r}")


_configured: ImageLimits | None = None  # inherited by forked workers, not by spawned ones


def get_image_limits() -> ImageLimits:
    """The limits in force: :func:`set_image_limits`, else the defaults with
    ``$CATMAP_MAX_IMAGE_PIXELS`` (a positive int or ``none``) as ``max_pixels``."""
    if _configured is not None:
        return _configured
    text = os.environ.get(_PIXELS_ENV, "").strip()
    if not text:
        return _DEFAULT_LIMITS
    if text.lower() == "none":
        return replace(_DEFAULT_LIMITS, max_pixels=None)
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"${_PIXELS_ENV} must be a positive integer or 'none', got {text!r}")
    return replace(_DEFAULT_LIMITS, max_pixels=int(text))


def set_image_limits(limits: ImageLimits | None = None, **changes: Any) -> ImageLimits:
    """Set the limits of this process (and of workers forked after it): ``limits``, or the
    current ones with ``changes``; ``set_image_limits(ImageLimits())`` restores the defaults.
    Spawned workers start from the defaults (set ``$CATMAP_MAX_IMAGE_PIXELS`` for those)."""
    global _configured
    _configured = replace(limits or get_image_limits(), **changes)
    return _configured


def get_max_image_pixels() -> int | None:
    """``get_image_limits().max_pixels``; None means no limit."""
    return get_image_limits().max_pixels


def set_max_image_pixels(limit: int | None) -> None:
    """Set the largest height x width any image may have (None: no limit).

    Example:
        >>> set_max_image_pixels(10_000_000); get_max_image_pixels()
        10000000
        >>> set_max_image_pixels(DEFAULT_MAX_IMAGE_PIXELS)
    """
    set_image_limits(max_pixels=limit)


def _check_pixels(height: int, width: int, source: str, limit: int | None) -> None:
    if limit is not None and height * width > limit:
        raise ImageTooLargeError(
            f"image {source} is {height} x {width} = {height * width} pixels, over the limit "
            f"of {limit} (a decompression bomb?); raise it with set_image_limits(max_pixels=...)"
            f" or ${_PIXELS_ENV}", source, pixels=height * width, limit=limit)


_DEFAULT_LIMITS = ImageLimits()

# ----------------------------------------------------------------------------------- OpenCV

#: Environment variable with the number of OpenCV threads catmap sets (default 1).
OPENCV_THREADS_ENV = "CATMAP_OPENCV_THREADS"
_cv2_configured = False  # inherited by forked children, so a child never reconfigures


def _configure_cv2(cv2: Any, imported_before: bool) -> None:
    # A worker forked after cv2's pool started inherits its locks, not its threads: calling
    # into the pool there (setNumThreads included) can deadlock, so it keeps the parent's.
    global _cv2_configured
    if _cv2_configured:
        return
    _cv2_configured = True
    if imported_before and torch.utils.data.get_worker_info() is not None:
        return
    raw = os.environ.get(OPENCV_THREADS_ENV, "1")
    if not raw.strip().isdigit():
        raise ValueError(f"{OPENCV_THREADS_ENV} must be an integer >= 0, got {raw!r}")
    cv2.setNumThreads(int(raw))


def get_cv2() -> Any | None:
    """``cv2`` set to ``$CATMAP_OPENCV_THREADS`` threads (default 1), or None if missing."""
    imported_before = "cv2" in sys.modules
    try:
        import cv2
    except ImportError:
        return None
    _configure_cv2(cv2, imported_before)
    return cv2


def limit_opencv_threads() -> None:
    """Set OpenCV's threads if cv2 is imported; the loader builders call it before workers
    start (never call it inside a forked worker)."""
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        _configure_cv2(cv2, False)

# ----------------------------------------------------------------------------------- bytes


def is_remote_path(path: str) -> bool:
    """True when ``path`` has a URL scheme (``s3://``, ``https://`` ...), ``file://`` aside.

    Example:
        >>> is_remote_path("s3://bucket/a.jpg"), is_remote_path("/data/a.jpg")
        (True, False)
    """
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isascii() and scheme[:1].isalpha() and scheme != "file" and all(
        c.isalnum() or c in "+.-" for c in scheme)


def _too_large(path: str, size: int | None, limit: int) -> ImageTooLargeError:
    what = f"{size} bytes" if size is not None else "more bytes"
    return ImageTooLargeError(f"file {path} holds {what} than the {limit}-byte limit "
                              "(max_bytes)", path, limit=limit)


def _read_bounded(handle: Any, path: str, limit: int | None, size: int | None) -> bytes:
    """At most ``limit`` bytes of ``handle``; ``size`` (known or None) sizes the first read."""
    if limit is not None and size is not None and size > limit:
        raise _too_large(path, size, limit)
    cap = None if limit is None else limit + 1
    want = (size + 1 if cap is None else min(size + 1, cap)) if size is not None else (cap or -1)
    data = handle.read(want)
    if size is not None and len(data) > size:  # the file grew: read on, bounded
        parts, total = [data], len(data)
        while cap is None or total < cap:
            chunk = handle.read(1 << 20 if cap is None else min(1 << 20, cap - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        data = b"".join(parts)
    if limit is not None and len(data) > limit:
        raise _too_large(path, None, limit)
    return bytes(data)


def _read_remote(path: str, limits: ImageLimits) -> bytes:
    if not any(path.startswith(root) for root in limits.remote_roots):
        raise ImageReadError(
            f"{path} is a URL outside every registered remote root; catmap reads URLs only "
            "under roots you allow: set_image_limits(remote_roots=('s3://bucket/',))", path)
    try:
        import fsspec
    except ImportError:
        raise missing_dependency("fsspec", "remote", "reading a URL") from None
    timeout = limits.remote_timeout_s
    options: dict[str, Any] = {}
    scheme = path.partition("://")[0]
    if scheme in ("http", "https"):
        import aiohttp

        options["client_kwargs"] = {
            "timeout": aiohttp.ClientTimeout(sock_connect=timeout, sock_read=timeout)}
    elif scheme in ("s3", "s3a"):
        options["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout}
    try:
        fs, inner = fsspec.core.url_to_fs(path, **options)
        try:
            size = fs.size(inner)
        except FileNotFoundError:
            raise
        except Exception:  # unknown size: the bounded read still holds
            size = None
        with fs.open(inner, "rb") as handle:
            return _read_bounded(handle, path, limits.max_bytes, size if is_int(size) else None)
    except ImageReadError:
        raise
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"file not found: {path}", path) from exc
    except Exception as exc:  # timeouts, protocol and client errors of any fsspec backend
        raise ImageReadError(f"cannot read {path}: {type(exc).__name__}: {exc}", path) from exc


def read_file_bytes(file_name: str | os.PathLike[str], max_bytes: Any = _UNSET) -> bytes:
    """The bytes of a regular file (opened non-blocking) or of a URL under a remote root.

    Raises:
        ImageNotFoundError: the file does not exist.
        ImageTooLargeError: it holds more than ``max_bytes`` (default: the limits').
        ImageReadError: not a regular file (FIFO, device, directory), unreadable, or a URL
            outside the remote roots, timed out or failed.
    """
    path = os.fspath(file_name)
    if not isinstance(path, str):
        raise TypeError(f"file_name must be a str or path, got {type(path).__name__}")
    limits = get_image_limits()
    if max_bytes is not _UNSET:
        limits = replace(limits, max_bytes=max_bytes)
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif is_remote_path(path):
        return _read_remote(path, limits)
    try:
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
        except OSError as exc:
            if isinstance(exc, ImageReadError):
                raise
            raise ImageReadError(f"cannot read {path}: {exc}", path) from exc

# ----------------------------------------------------------------------------------- decode

#: JPEG decoders, fastest first; other formats always decode with Pillow.
JPEG_DECODERS = ("simplejpeg", "pillow")
#: Pixel formats read_image produces (YUV-BT.601 as float32, as detectron2).
SUPPORTED_FORMATS = ("RGB", "BGR", "L", "YUV-BT.601")
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"),
               (b"GIF89a", "GIF"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"BM", "BMP"))
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_RGB_TO_YUV = np.array([[0.299, 0.587, 0.114], [-0.14713, -0.28886, 0.436],
                        [0.615, -0.51499, -0.10001]], dtype=np.float32).T


@lru_cache(maxsize=1)
def available_jpeg_decoders() -> tuple[str, ...]:
    """The JPEG decoders installed here, fastest first.

    Example:
        >>> available_jpeg_decoders()[-1]
        'pillow'
    """
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return ("pillow",)
    return JPEG_DECODERS


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
    """The Pillow image classes of the allowed formats: opening one directly runs that
    plugin only (no probing of the others, no Pillow bomb check: the limits here rule)."""
    try:
        from PIL import BmpImagePlugin, GifImagePlugin, JpegImagePlugin, PngImagePlugin
        from PIL import TiffImagePlugin, WebPImagePlugin
    except ImportError:
        raise missing_dependency("Pillow", "images", "reading images") from None
    return {"JPEG": JpegImagePlugin.JpegImageFile, "PNG": PngImagePlugin.PngImageFile,
            "BMP": BmpImagePlugin.BmpImageFile, "GIF": GifImagePlugin.GifImageFile,
            "TIFF": TiffImagePlugin.TiffImageFile, "WEBP": WebPImagePlugin.WebPImageFile}


def _open(data: bytes, source: str) -> Any:
    """``data`` opened (header only) by the plugin of the format its first bytes name."""
    return _plugins()[_sniff(data, source)](io.BytesIO(data))


def _sniff(data: bytes, source: str) -> str:
    for magic, name in _SIGNATURES:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    raise ImageReadError(f"cannot decode image {source}: not a JPEG, PNG, BMP, TIFF, WebP or "
                         f"GIF file (starts with {data[:8]!r})", source)


def apply_exif_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """Rotate/flip an HWC array as EXIF ``orientation`` says, as ``exif_transpose`` does.

    Example:
        >>> apply_exif_orientation(np.zeros((2, 3, 1), np.uint8), 6).shape
        (3, 2, 1)
    """
    if orientation == 2:
        out = image[:, ::-1]
    elif orientation == 3:
        out = image[::-1, ::-1]
    elif orientation == 4:
        out = image[::-1]
    elif orientation == 5:
        out = image.transpose(1, 0, 2)
    elif orientation == 6:
        out = np.rot90(image, -1)
    elif orientation == 7:
        out = image[::-1, ::-1].transpose(1, 0, 2)
    elif orientation == 8:
        out = np.rot90(image, 1)
    else:
        return image
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
    """Largest JPEG scale 1/f (f in 8, 4, 2) keeping at least ``min_size`` that Pillow's
    ``draft`` reproduces too; else 1."""
    if min_size is None:
        return 1
    for factor in (8, 4, 2):
        draft = min(width // max(1, width // factor), height // max(1, height // factor))
        if (math.ceil(height / factor) >= min_size[0] and math.ceil(width / factor) >= min_size[1]
                and draft >= factor and (factor == 8 or draft < 2 * factor)):
            return factor
    return 1


def _mismatch(source: str, got: tuple[int, int], expected: tuple[int, int]) -> Exception:
    return ImageSizeMismatchError(
        f"image {source} has size (h={got[0]}, w={got[1]}) but (h={expected[0]}, "
        f"w={expected[1]}) was expected; fix the annotation file or the image (EXIF "
        "orientation is applied)")


def _pillow_pixels(img: Any, data: bytes, fmt: str, reduce: int, keep_16bit: bool,
                   source: str, jpeg: bool = False) -> np.ndarray:
    """Decode an opened Pillow image to HxW(xC), 16-bit samples scaled (or kept)."""
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
    if keep_16bit and data[:8] == b"\x89PNG\r\n\x1a\n" and data[24] == 16 and data[25] in (2, 6):
        return _png16_color(data, fmt, source)  # Pillow reads 16-bit color as 8 bits
    return _to_format(np.asarray(img.convert("L" if fmt == "L" else "RGB")), fmt)


def _png16_color(data: bytes, fmt: str, source: str) -> np.ndarray:
    cv2 = get_cv2()
    if cv2 is None:
        raise UnsupportedImageFormatError(
            f"read_image: {source} is a 16-bit color image; keep_16bit=True needs OpenCV")
    image = cv2.imdecode(np.frombuffer(data, np.uint8),
                         cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None or image.dtype != np.uint16 or image.ndim != 3:
        raise ImageReadError(f"cannot decode image {source}: OpenCV could not read it", source)
    if fmt == "L":
        return cv2.cvtColor(image[:, :, :3], cv2.COLOR_BGR2GRAY)[:, :, None]
    return _to_format(image[:, :, 2::-1], fmt)  # BGR(A) -> RGB


def _decode_jpeg(img: Any, data: bytes, fmt: str, decoder: str, factor: int,
                 source: str) -> np.ndarray:
    width, height = img.size
    if decoder == "simplejpeg":
        import simplejpeg

        space = {"BGR": "BGR", "L": "GRAY"}.get(fmt, "RGB")
        try:  # strict: on any libjpeg warning Pillow (the same libjpeg) decides
            if factor == 1:
                image = simplejpeg.decode_jpeg(data, colorspace=space, strict=True)
            else:
                image = simplejpeg.decode_jpeg(
                    data, colorspace=space, strict=True, min_factor=factor,
                    min_height=math.ceil(height / factor), min_width=math.ceil(width / factor))
            return _to_format(image, fmt) if fmt == "YUV-BT.601" else image
        except Exception as exc:  # CMYK, a warning ...: Pillow gets a try
            logger.debug("simplejpeg failed on %s (%s); trying Pillow", source, exc)
    return _pillow_pixels(img, data, fmt, factor, False, source, jpeg=True)


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
    fmt = _check_format(format)
    decoder = _check_decoder(decoder) if decoder else default_jpeg_decoder()
    limits = get_image_limits()
    if max_pixels is not _UNSET:
        limits = replace(limits, max_pixels=max_pixels)
    if expected_size is not None:
        expected_size = (int(expected_size[0]), int(expected_size[1]))
    kind = _sniff(data, source)
    try:
        with _plugins()[kind](io.BytesIO(data)) as img:
            width, height = img.size
            _check_pixels(height, width, source, limits.max_pixels)
            orientation = img.getexif().get(0x0112, 1) if kind == "JPEG" else 1
            orientation = orientation if is_int(orientation) and 1 <= orientation <= 8 else 1
            oriented = (width, height) if orientation >= 5 else (height, width)
            if expected_size is not None and kind == "JPEG" and oriented != expected_size:
                raise _mismatch(source, oriented, expected_size)
            if kind == "JPEG":
                scans = data.count(b"\xff\xda") if img.info.get("progressive") else 1
                work = height * width * scans
                if limits.max_decode_work is not None and work > limits.max_decode_work:
                    raise ImageTooLargeError(
                        f"image {source}: {height} x {width} pixels x {scans} scans = {work} "
                        f"is over the decode-work limit of {limits.max_decode_work}; raise it "
                        "with set_image_limits(max_decode_work=...)", source, pixels=work,
                        limit=limits.max_decode_work)
                stored = None if min_size is None else (
                    tuple(min_size[::-1]) if orientation >= 5 else tuple(min_size))
                factor = _reduction(height, width, stored)
                image = _decode_jpeg(img, data, fmt, decoder, factor, source)
                reduced = (math.ceil(height / factor), math.ceil(width / factor))
                if image.shape[:2] != reduced:
                    raise ImageReadError(f"cannot decode image {source}: got size "
                                         f"{image.shape[:2]}, the header says {reduced}", source)
            else:
                image = _pillow_pixels(img, data, fmt, 1, keep_16bit, source)
                orientation = img.getexif().get(0x0112, 1)
                orientation = orientation if is_int(orientation) and 1 <= orientation <= 8 else 1
    except (ImageReadError, ImageSizeMismatchError, UnsupportedImageFormatError,
            MissingDependencyError):
        raise
    except Exception as exc:  # whatever a decoder raises for broken data
        raise ImageReadError(f"cannot decode image {source}: {type(exc).__name__}: {exc}",
                             source) from exc
    image = apply_exif_orientation(image, orientation)
    if expected_size is not None and kind != "JPEG" and image.shape[:2] != expected_size:
        raise _mismatch(source, image.shape[:2], expected_size)
    return image


def _check_format(fmt: str | None) -> str:
    fmt = "RGB" if fmt is None else fmt
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedImageFormatError(
            f"read_image: format {fmt!r} is not supported; choose one of "
            f"{', '.join(SUPPORTED_FORMATS)}")
    return fmt


def read_image(file_name: str | os.PathLike[str], format: str | None = None, *,
               min_size: tuple[int, int] | None = None, decoder: str | None = None,
               expected_size: tuple[int, int] | None = None, max_pixels: int | None = _UNSET,
               keep_16bit: bool = False, max_bytes: int | None = _UNSET) -> np.ndarray:
    """Read an image file into an HWC array with its EXIF orientation applied (detectron2).

    Args:
        file_name: a local path, or a URL under a registered remote root (:class:`ImageLimits`).
        format: "RGB" (default, also None), "BGR", "L" (HxWx1) or "YUV-BT.601" (float32).
        min_size: (height, width) the caller will shrink to; a JPEG at least 2x larger may
            decode at 1/2, 1/4 or 1/8 scale (never below it). The returned shape tells.
        decoder: force the JPEG decoder ("simplejpeg", "pillow"); default the fastest.
        expected_size: (height, width) the oriented image must have, checked from the header.
        max_pixels, max_bytes: override the :class:`ImageLimits` ones for this call.
        keep_16bit: return uint16 for 16-bit images instead of scaling them to 8 bits.

    Raises:
        ImageNotFoundError: (a FileNotFoundError) the file does not exist.
        ImageTooLargeError: over a limit (pixels, bytes or decode work), before decoding.
        ImageReadError: (an OSError) unreadable, not a regular file, not an allowed format,
            or undecodable; names the file.
        ImageSizeMismatchError: (a ValueError) the size differs from ``expected_size``.
        UnsupportedImageFormatError: (a ValueError) an unknown ``format``.

    Example:
        >>> read_image("photo.jpg", "BGR").shape  # doctest: +SKIP
        (480, 640, 3)
    """
    _check_format(format)
    path = os.fspath(file_name)
    return decode_image(read_file_bytes(path, max_bytes), format, min_size=min_size,
                        decoder=decoder, source=str(path), expected_size=expected_size,
                        max_pixels=max_pixels, keep_16bit=keep_16bit)


def read_segmentation(file_name: str | os.PathLike[str]) -> np.ndarray:
    """A semantic segmentation map (label ids) as HxW: uint8 for L/P images (palette
    indices are the labels), int32 for 16/32-bit ones; a color image is refused.

    Raises:
        ImageNotFoundError / ImageTooLargeError / ImageReadError: as :func:`read_image`.
    """
    path = str(os.fspath(file_name))
    data = read_file_bytes(path)
    try:
        with _open(data, path) as img:
            _check_pixels(img.size[1], img.size[0], path, get_max_image_pixels())
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

# ----------------------------------------------------------------------------------- records


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


def record_image_size(record: dict[str, Any]) -> tuple[int, int] | None:
    """The record's validated (height, width); None when either is absent.

    Raises:
        RecordFormatError: a side is not an int in [1, 2**20], or height x width is over the
            pixel limit; names the file and the key.

    Example:
        >>> record_image_size({"file_name": "a.jpg", "height": 480, "width": 640})
        (480, 640)
    """
    height, width = record.get("height"), record.get("width")
    if height is None or width is None:
        return None
    where = f"record ({record_name(record)})"
    height, width = (check_int(record[key], f"key {key!r}", minimum=1, maximum=MAX_IMAGE_SIDE,
                               error=RecordFormatError, where=where) for key in ("height", "width"))
    limit = get_max_image_pixels()
    if limit is not None and height * width > limit:
        raise RecordFormatError(
            f"{where}: keys 'height' x 'width' = {height} x {width} = {height * width} "
            f"pixels, over the image pixel limit of {limit}")
    return height, width


def check_image_size(record: dict[str, Any], image: np.ndarray) -> None:
    """Check ``image``'s size against the record's height/width; fill them when absent.

    Example:
        >>> rec = {"file_name": "a.jpg"}
        >>> check_image_size(rec, np.zeros((4, 6, 3), np.uint8)); (rec["height"], rec["width"])
        (4, 6)
    """
    h, w = int(image.shape[0]), int(image.shape[1])
    expected = record_image_size(record)
    if expected is not None and expected != (h, w):
        raise ImageSizeMismatchError(
            f"image {record.get('file_name')!r} (image_id={record.get('image_id')!r}) has size "
            f"(h={h}, w={w}) but its record says (h={expected[0]}, w={expected[1]}); fix the "
            "annotation file or the image (EXIF orientation is applied)")
    if record.get("height") is None:
        record["height"] = h
    if record.get("width") is None:
        record["width"] = w


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
    """Read a record's image, its size checked against the record's (from the header).

    With ``min_size`` a JPEG may come back at 1/2, 1/4 or 1/8 of the record's size.
    """
    return read_sized_image(record, record_image_size(record), image_format, decoder, min_size)


def copy_for_mapping(record: dict[str, Any]) -> dict[str, Any]:
    """The record and its annotation dicts copied, nested values shared: the mapping steps
    only set or pop keys and replace (never modify) values, so this leaves the input intact."""
    out = dict(record)
    annotations = out.get("annotations")
    if isinstance(annotations, list):
        out["annotations"] = [dict(a) if isinstance(a, dict) else a for a in annotations]
    return out


def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """An HWC (or HW) image as a CHW tensor sharing its memory when possible.

    Example:
        >>> image_to_tensor(np.zeros((4, 6, 3), np.uint8)).shape
        torch.Size([3, 4, 6])
    """
    if image.ndim == 2:
        image = image[:, :, None]
    flags = image.flags
    if not (flags.c_contiguous and flags.writeable) and (
            not flags.writeable or any(s < 0 for s in image.strides)):
        image = np.ascontiguousarray(image) if image.flags.writeable else image.copy()
    return torch.from_numpy(image.transpose(2, 0, 1))
