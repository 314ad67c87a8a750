"""Image reading: a record's file -> bytes -> one decoder per format -> an HWC array.

Every bound is in one :class:`ImageLimits`: only regular files (never a hang on a FIFO), at
most ``max_bytes``, URLs only under a remote root; the format is sniffed from an allowlist and
pixels (x scans for progressive JPEGs) are bounded from the header before decoding.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import math
import os
import re
import stat
import struct
import sys
from dataclasses import asdict, dataclass, fields, replace
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
    ImageLimitsError,
    ImageNotFoundError,
    ImageReadError,
    ImageSizeMismatchError,
    ImageTooLargeError,
    UnsupportedImageFormatError,
)

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS", "ImageLimits", "MAX_IMAGE_SIDE", "apply_exif_orientation",
    "available_jpeg_decoders", "check_image_size", "decode_image", "default_jpeg_decoder",
    "get_cv2", "get_image_limits", "get_max_image_pixels", "image_to_tensor",
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
_LIMITS_ENV = "CATMAP_IMAGE_LIMITS"  # set_image_limits' JSON, for spawned / forkserver workers
_OPENCV_THREADS_ENV = "CATMAP_OPENCV_THREADS"
_SOS = re.compile(rb"\xff\xda")  # start of scan (in scan data 0xFF is followed by 0)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start of frame: the size
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF87a", "GIF"),
               (b"GIF89a", "GIF"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"BM", "BMP"))
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_RGB_TO_YUV = np.array([[0.299, 0.587, 0.114], [-0.14713, -0.28886, 0.436],
                        [0.615, -0.51499, -0.10001]], dtype=np.float32).T
_UNSET: Any = object()


@dataclass(frozen=True)
class ImageLimits:
    """The per-sample work budget, in one place; None removes a bound. The defaults are far
    above COCO, LVIS, Cityscapes and Objects365 samples. Reading: ``max_pixels`` (header),
    ``max_bytes`` (file), ``max_decode_work`` (pixels x scans of a progressive JPEG);
    ``remote_roots``: URL prefixes under which URLs may be read. Masks, checked before any
    allocation or rasterization (``SampleBudgetError``): ``max_mask_bytes`` (instances x H x W
    of a sample's bitmasks), ``max_polygon_vertices`` and ``max_polygon_edge_length`` (the sum
    over a sample's polygons of each edge's longer axis, in pixels; pycocotools allocates ~80
    bytes per pixel of it). :func:`set_image_limits` also writes them as JSON to
    ``$CATMAP_IMAGE_LIMITS``, which a process reads when it imports catmap: forked, spawned and
    forkserver DataLoader workers (and subprocesses) all get the limits set before they start.

    Example:
        >>> set_image_limits(remote_roots=("s3://my-bucket/",))  # doctest: +SKIP
    """

    max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS
    max_bytes: int | None = 1 << 30
    max_decode_work: int | None = 1 << 29
    remote_roots: tuple[str, ...] = ()
    remote_timeout_s: float = 30.0
    max_mask_bytes: int | None = 1 << 30
    max_polygon_vertices: int | None = 1 << 20
    max_polygon_edge_length: int | None = 1 << 22

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_bytes", "max_decode_work", "max_mask_bytes",
                     "max_polygon_vertices", "max_polygon_edge_length"):
            check_int(getattr(self, name), name, minimum=1, optional=True,
                      error=ImageLimitsError, where="ImageLimits")
        roots = self.remote_roots
        if not isinstance(roots, (list, tuple)) or not all(
                isinstance(r, str) and "://" in r for r in roots):
            raise ImageLimitsError(f"ImageLimits: remote_roots must be URL prefixes, got {roots!r}")
        object.__setattr__(self, "remote_roots", tuple(roots))
        if not (type(self.remote_timeout_s) in (int, float) and 0 < self.remote_timeout_s < 1e9):
            raise ImageLimitsError(f"ImageLimits: bad remote_timeout_s {self.remote_timeout_s!r}")


def _limits_from_env(text: str) -> ImageLimits | None:
    """``$CATMAP_IMAGE_LIMITS`` (a JSON object of ImageLimits fields) as limits; '' is None."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ImageLimitsError(f"${_LIMITS_ENV}: not JSON ({exc})") from None
    known = {f.name for f in fields(ImageLimits)}
    if not isinstance(data, dict) or not set(data) <= known:
        raise ImageLimitsError(f"${_LIMITS_ENV}: expected an object with keys among "
                               f"{sorted(known)}, got {text[:200]!r}")
    try:
        return ImageLimits(**data)
    except ImageLimitsError as exc:
        raise ImageLimitsError(f"${_LIMITS_ENV}: {exc}") from None


_DEFAULT_LIMITS = ImageLimits()
_configured: ImageLimits | None = _limits_from_env(os.environ.get(_LIMITS_ENV, ""))


def get_image_limits() -> ImageLimits:
    """The limits in force: :func:`set_image_limits`, else the defaults with
    ``$CATMAP_MAX_IMAGE_PIXELS`` (a positive int or ``none``) as ``max_pixels``."""
    text = os.environ.get(_PIXELS_ENV, "").strip()
    if _configured is not None or not text:
        return _configured or _DEFAULT_LIMITS
    if text.lower() != "none" and (not text.isdigit() or int(text) <= 0):
        raise ImageLimitsError(f"${_PIXELS_ENV} must be a positive int or 'none', got {text!r}")
    return replace(_DEFAULT_LIMITS, max_pixels=None if text.lower() == "none" else int(text))


def set_image_limits(limits: ImageLimits | None = None, **changes: Any) -> ImageLimits:
    """Set the limits of this process and of the workers and subprocesses it starts later
    (through ``$CATMAP_IMAGE_LIMITS``): ``limits``, or the current ones with ``changes``."""
    global _configured
    _configured = replace(limits or get_image_limits(), **changes)
    os.environ[_LIMITS_ENV] = json.dumps(asdict(_configured))
    return _configured


def get_max_image_pixels() -> int | None:
    """``get_image_limits().max_pixels``; None means no limit."""
    return get_image_limits().max_pixels


def set_max_image_pixels(limit: int | None) -> None:
    """``set_image_limits(max_pixels=limit)``; None removes the limit."""
    set_image_limits(max_pixels=limit)


# OpenCV: one thread per process, so N workers use N cores without oversubscription.
_cv2_configured = False  # inherited by forked children, so a child never reconfigures


def get_cv2() -> Any | None:
    """``cv2`` set to ``$CATMAP_OPENCV_THREADS`` threads (default 1) on first use, or None.

    A worker forked after cv2's pool started inherits its locks, not its threads: calling
    into the pool there (setNumThreads too) can deadlock, so it keeps the parent's setting.
    """
    global _cv2_configured
    if _cv2_configured:  # per image: no import statement, no worker lookup
        return sys.modules.get("cv2")
    inherited = "cv2" in sys.modules and torch.utils.data.get_worker_info() is not None
    try:
        import cv2
    except ImportError:  # not installed: no search per image (None in sys.modules: a test's)
        _cv2_configured = "cv2" not in sys.modules
        return None
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


# Bytes: regular files opened non-blocking; URLs (a scheme other than file://) only under a
# remote root.
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
    if size is not None and len(data) != size and (cap < 0 or len(data) < cap):  # changed
        data += handle.read(cap if cap < 0 else cap - len(data))
    if limit is not None and len(data) > limit:
        raise _too_large(path, None, limit)
    return data


def _read_remote(path: str, limits: ImageLimits, limit: int | None) -> bytes:
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
            return _read_bounded(handle, path, limit, size if is_int(size) else None)
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
    limit = get_image_limits().max_bytes if max_bytes is _UNSET else check_int(
        max_bytes, "max_bytes", minimum=1, optional=True, error=ImageLimitsError,
        where="read_file_bytes")
    if SHARD_SOURCES:  # shard datasets registered by program code (catalog.register_shards)
        for prefix, source in SHARD_SOURCES.items():
            if path.startswith(prefix):
                try:
                    return source(path, limit)
                except ShardError as exc:  # skip_bad_images replaces it, as a bad file
                    raise ImageReadError(str(exc), path) from exc
    scheme = _SCHEME.match(path)
    if scheme and scheme[1] != "file":
        return _read_remote(path, get_image_limits(), limit)
    path = path[len("file://"):] if scheme else path
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
    with open(fd, "rb", buffering=0) as handle:  # unbuffered: one read, sized by fstat
        try:
            return _read_bounded(handle, path, limit, info.st_size)
        except ImageReadError:
            raise
        except OSError as exc:
            raise ImageReadError(f"cannot read {path}: {exc}", path) from exc


# Decoding: the format by content, the limits from the header, then one decoder.
_INSTALLED_DECODERS = JPEG_DECODERS if importlib.util.find_spec("simplejpeg") else ("pillow",)


def available_jpeg_decoders() -> tuple[str, ...]:
    """The JPEG decoders installed here, fastest first ("simplejpeg", "pillow")."""
    return _INSTALLED_DECODERS


def default_jpeg_decoder() -> str:
    """``$CATMAP_JPEG_DECODER``, else the fastest installed JPEG decoder."""
    forced = os.environ.get("CATMAP_JPEG_DECODER")
    return _check_decoder(forced) if forced else _INSTALLED_DECODERS[0]


def _check_decoder(name: str) -> str:
    name = name.lower()
    if name not in JPEG_DECODERS:
        raise ValueError(f"unknown JPEG decoder {name!r}; choose one of {', '.join(JPEG_DECODERS)}")
    if name not in _INSTALLED_DECODERS:
        raise missing_dependency("simplejpeg", "fast", "the JPEG decoder 'simplejpeg'")
    return name


def _check_pixels(height: int, width: int, source: str, max_pixels: int | None) -> None:
    if max_pixels is not None and height * width > max_pixels:
        raise ImageTooLargeError(
            f"image {source} is {height} x {width} = {height * width} pixels, over the limit "
            f"of {max_pixels} (a decompression bomb?); raise it with set_image_limits("
            f"max_pixels=...) or ${_PIXELS_ENV}", source, pixels=height * width, limit=max_pixels)


def _exif_orientation(tiff: bytes) -> int | None:
    """Tag 0x0112 of the first IFD of EXIF's TIFF block, -1 if absent, None if malformed."""
    order = {b"II*\x00": "<", b"MM\x00*": ">"}.get(tiff[:4])
    if order is None or len(tiff) < 8:
        return None
    ifd = struct.unpack_from(order + "I", tiff, 4)[0]
    count = struct.unpack_from(order + "H", tiff, ifd)[0] if ifd + 2 <= len(tiff) else 0
    end = ifd + 2 + 12 * count
    if not count or end > len(tiff):  # Pillow decides
        return None
    for pos in range(ifd + 2, end, 12):
        tag, kind, count = struct.unpack_from(order + "HHI", tiff, pos)
        if tag == 0x0112:  # one SHORT, else Pillow decides
            value = struct.unpack_from(order + "H", tiff, pos + 8)[0]
            return value if kind == 3 and count == 1 else None
    return -1


def _jpeg_header(data: bytes) -> tuple[int, int, bool, int] | None:
    """(height, width, progressive, EXIF or XMP orientation) from a JPEG's segments up to
    its first scan, read as Pillow reads them; None for anything unusual (Pillow decides)."""
    pos, size, exif, xmp = 2, None, None, None
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker, length = data[pos + 1], (data[pos + 2] << 8) | data[pos + 3]
        if marker == 0xDA:
            break
        if not 0xC0 <= marker <= 0xFE or 0xD0 <= marker <= 0xD9 or length < 2:
            return None
        body = data[pos + 4:pos + 2 + length]
        if marker in _SOF and len(body) >= 5:
            size = ((body[1] << 8) | body[2], (body[3] << 8) | body[4], marker in _PROGRESSIVE)
        elif marker in _SOF or marker == 0xE1 and body.startswith(b"Exif\0\0") and exif:
            return None  # a short SOF, a second EXIF segment (Pillow joins them)
        elif marker == 0xE1 and body.startswith(b"Exif\0\0"):
            exif = body[6:]
        elif marker == 0xE1 and body.startswith(b"http://ns.adobe.com/xap/1.0/\x00"):
            xmp = body.split(b"\x00", 1)[1]
        pos += 2 + length
    else:
        return None
    orientation = -1 if exif is None else _exif_orientation(exif)
    if size is None or not size[0] or not size[1] or orientation is None:
        return None
    match = re.search(rb'tiff:Orientation(="|>)([0-9])', xmp) if xmp and orientation < 0 else None
    orientation = int(match[2]) if match else orientation
    return (*size, orientation if 1 <= orientation <= 8 else 1)


def _open(data: bytes, source: str, max_pixels: int | None) -> Any:
    """The image opened by the Pillow plugin of its format, sniffed from the first bytes:
    no other plugin (EPS, PDF ...) is ever probed, and the header's pixels are checked (the
    limits here rule, not Pillow's bomb check). The caller closes it."""
    kind = "WEBP" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else None
    for magic, name in _SIGNATURES:
        kind = name if data.startswith(magic) else kind
    if kind is None:
        raise ImageReadError(f"cannot decode image {source}: not a JPEG, PNG, BMP, TIFF, WebP "
                             f"or GIF file (starts with {data[:8]!r})", source)
    try:
        from PIL import BmpImagePlugin, GifImagePlugin, JpegImagePlugin, PngImagePlugin
        from PIL import TiffImagePlugin, WebPImagePlugin
    except ImportError:
        raise missing_dependency("Pillow", "images", "reading images") from None
    plugin = {"JPEG": JpegImagePlugin.JpegImageFile, "PNG": PngImagePlugin.PngImageFile,
              "BMP": BmpImagePlugin.BmpImageFile, "GIF": GifImagePlugin.GifImageFile,
              "TIFF": TiffImagePlugin.TiffImageFile, "WEBP": WebPImagePlugin.WebPImageFile}
    img = plugin[kind](io.BytesIO(data))
    if max_pixels is not None and img.size[0] * img.size[1] > max_pixels:
        img.close()
        _check_pixels(img.size[1], img.size[0], source, max_pixels)
    return img


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


def _mismatch(source: str, got: tuple[int, ...], expected: tuple[int, int]) -> Exception:
    return ImageSizeMismatchError(
        f"image {source} has size (h={got[0]}, w={got[1]}) but its record says (h={expected[0]}"
        f", w={expected[1]}); fix the annotation file or the image (EXIF orientation is applied)")


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


def _decode_jpeg(header: tuple[int, int, bool, int], data: bytes, fmt: str, decoder: str,
                 limits: ImageLimits, min_size: tuple[int, int] | None,
                 expected: tuple[int, int] | None, source: str) -> np.ndarray:
    """The pixels in the stored orientation; sizes and work checked first."""
    height, width, progressive, orientation = header
    oriented = (width, height) if orientation >= 5 else (height, width)
    if expected is not None and oriented != expected:
        raise _mismatch(source, oriented, expected)
    # libjpeg refuses a second baseline scan: only progressive JPEGs have many
    scans = len(_SOS.findall(data)) if progressive else 1
    work = height * width * scans
    if limits.max_decode_work is not None and work > limits.max_decode_work:
        raise ImageTooLargeError(
            f"image {source}: {height} x {width} pixels x {scans} scans = {work} is over the "
            f"decode-work limit of {limits.max_decode_work}; raise it with "
            "set_image_limits(max_decode_work=...)", source, pixels=work,
            limit=limits.max_decode_work)
    if min_size is not None and orientation >= 5:
        min_size = (min_size[1], min_size[0])
    factor = 1  # the largest scale 1/f keeping min_size that Pillow's draft reproduces too
    for f in (8, 4, 2) if min_size is not None else ():
        draft = min(width // max(1, width // f), height // max(1, height // f))
        if (math.ceil(height / f) >= min_size[0] and math.ceil(width / f) >= min_size[1]
                and draft >= f and (f == 8 or draft < 2 * f)):
            factor = f
            break
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
        with _open(data, source, None) as img:
            image = _pillow_pixels(img, data, fmt, factor, False, source, jpeg=True)
    if image.shape[:2] != reduced:
        raise ImageReadError(f"cannot decode image {source}: got size {image.shape[:2]}, the "
                             f"header says {reduced}", source)
    return image


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
    decoder = decoder or os.environ.get("CATMAP_JPEG_DECODER")  # as default_jpeg_decoder
    decoder = _check_decoder(decoder) if decoder else _INSTALLED_DECODERS[0]
    limits = get_image_limits()
    if max_pixels is not _UNSET:
        limits = replace(limits, max_pixels=max_pixels)
    expected = None if expected_size is None else (int(expected_size[0]), int(expected_size[1]))
    try:
        header = _jpeg_header(data) if data[:3] == b"\xff\xd8\xff" else None
        jpeg = header is not None
        if jpeg:  # the usual JPEG: its header read here, Pillow never opened
            _check_pixels(header[0], header[1], source, limits.max_pixels)
        else:
            with _open(data, source, limits.max_pixels) as img:
                jpeg = img.format == "JPEG"  # other formats: pixels first, then their EXIF
                image = None if jpeg else _pillow_pixels(img, data, fmt, 1, keep_16bit, source)
                value = img.getexif().get(0x0112, 1)  # EXIF, else XMP (as exif_transpose)
                orientation = value if is_int(value) and 1 <= value <= 8 else 1
                header = (img.size[1], img.size[0], bool(img.info.get("progressive")),
                          orientation)
        if jpeg:
            image = _decode_jpeg(header, data, fmt, decoder, limits, min_size, expected, source)
        orientation = header[3]
    except (ImageReadError, ImageSizeMismatchError, UnsupportedImageFormatError,
            MissingDependencyError):
        raise
    except Exception as exc:  # whatever a decoder raises for broken data
        raise ImageReadError(f"cannot decode image {source}: {type(exc).__name__}: {exc}",
                             source) from exc
    image = apply_exif_orientation(image, orientation) if orientation != 1 else image
    if expected is not None and image.shape[:2] != expected and not jpeg:
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
        with _open(data, path, get_image_limits().max_pixels) as img:
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
                     image_format: str, decoder: str | None, min_size: tuple[int, int] | None,
                     data: bytes | None = None) -> np.ndarray:
    """Read ``record["file_name"]`` (bytes ``data`` if read ahead), sized ``expected`` or None."""
    file_name = record.get("file_name")
    if file_name is None:
        raise RecordFormatError(
            f"record ({record_name(record)}) has no 'file_name' key; keys: {sorted(record)}")
    path = os.fsdecode(file_name)
    image = decode_image(read_file_bytes(path) if data is None else data, image_format,
                         min_size=min_size, decoder=decoder, source=path, expected_size=expected)
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
    elif not image.flags.c_contiguous and min(image.strides) < 0:
        image = np.ascontiguousarray(image)
    return torch.from_numpy(image.transpose(2, 0, 1))
