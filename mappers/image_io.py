"""Read images into HWC uint8 numpy arrays, with a fast JPEG path and EXIF orientation.

``read_image`` decodes with Pillow by default. For JPEG files, a faster decoder is used when
one is installed, tried in this order: simplejpeg, PyTurboJPEG, OpenCV (all libjpeg-turbo with
the accurate DCT, so pixels match Pillow's up to decoder rounding). The EXIF orientation is
read from the JPEG header and applied on every path, the same way Pillow's
``ImageOps.exif_transpose`` does. When the caller knows the image will be shrunk at least 2x,
``min_size`` lets the decoder skip work by decoding at 1/2, 1/4 or 1/8 scale (JPEG only).

The decoder can be forced with the ``decoder`` argument or the ``CATMAP_JPEG_DECODER``
environment variable (``pillow``, ``simplejpeg``, ``turbojpeg``, ``opencv``).
"""

from __future__ import annotations

import io
import logging
import math
import os
import struct
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from .errors import ImageNotFoundError, ImageReadError, UnsupportedImageFormatError
from .opencv_threads import get_cv2

__all__ = [
    "JPEG_DECODERS",
    "SUPPORTED_FORMATS",
    "apply_exif_orientation",
    "available_jpeg_decoders",
    "default_jpeg_decoder",
    "jpeg_exif_orientation",
    "read_image",
    "decode_image",
]

logger = logging.getLogger(__name__)

#: JPEG decoders read_image knows, fastest first.
JPEG_DECODERS = ("simplejpeg", "turbojpeg", "opencv", "pillow")

#: Pixel formats read_image produces.
SUPPORTED_FORMATS = ("RGB", "BGR", "L")

_JPEG_MAGIC = b"\xff\xd8\xff"
_REDUCTIONS = (8, 4, 2)


# --------------------------------------------------------------------------- EXIF orientation


def jpeg_exif_orientation(data: bytes | memoryview) -> int:
    """The EXIF orientation tag (1..8) stored in a JPEG's APP1 segment; 1 when absent.

    Only the header segments before the image data are scanned.

    Example:
        >>> jpeg_exif_orientation(b"\\xff\\xd8\\xff\\xd9")
        1
    """
    view = memoryview(data)
    n = len(view)
    pos = 2
    while pos + 4 <= n:
        if view[pos] != 0xFF:
            return 1
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        if not (0xE0 <= marker <= 0xEF or marker == 0xFE):
            # EXIF lives in an APP1 segment, which comes before the tables and the frame
            return 1
        (length,) = struct.unpack_from(">H", view, pos + 2)
        if length < 2:
            return 1
        if marker == 0xE1 and bytes(view[pos + 4 : pos + 10]) == b"Exif\x00\x00":
            return _tiff_orientation(view[pos + 10 : pos + 2 + length])
        pos += 2 + length
    return 1


def _tiff_orientation(tiff: memoryview) -> int:
    if len(tiff) < 8:
        return 1
    order = bytes(tiff[:2])
    if order == b"II":
        endian = "<"
    elif order == b"MM":
        endian = ">"
    else:
        return 1
    (ifd,) = struct.unpack_from(endian + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(endian + "H", tiff, ifd)
    for k in range(count):
        entry = ifd + 2 + 12 * k
        if entry + 12 > len(tiff):
            return 1
        tag, typ = struct.unpack_from(endian + "HH", tiff, entry)
        if tag == 0x0112:
            if typ == 3:  # SHORT
                (value,) = struct.unpack_from(endian + "H", tiff, entry + 8)
            elif typ == 4:  # LONG, written by a few tools
                (value,) = struct.unpack_from(endian + "I", tiff, entry + 8)
            else:
                return 1
            return int(value) if 1 <= value <= 8 else 1
    return 1


def apply_exif_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """Rotate/flip an HWC array as EXIF ``orientation`` says (what Pillow's exif_transpose does).

    Returns a C-contiguous array (``image`` itself for orientation 1).

    Example:
        >>> apply_exif_orientation(np.arange(6, dtype=np.uint8).reshape(2, 3, 1), 6).shape
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


# --------------------------------------------------------------------------- decoders


def _reduction_for(height: int, width: int, min_size: tuple[int, int] | None) -> int:
    """Largest factor in (8, 4, 2) keeping ceil(h/f) >= min_h and ceil(w/f) >= min_w; else 1."""
    if min_size is None:
        return 1
    min_h, min_w = min_size
    for factor in _REDUCTIONS:
        if math.ceil(height / factor) >= min_h and math.ceil(width / factor) >= min_w:
            return factor
    return 1


def _stored_min_size(
    min_size: tuple[int, int] | None, orientation: int
) -> tuple[int, int] | None:
    """``min_size`` in the file's stored orientation (swapped for the transposing ones)."""
    if min_size is None:
        return None
    if orientation >= 5:
        return (int(min_size[1]), int(min_size[0]))
    return (int(min_size[0]), int(min_size[1]))


def _decode_simplejpeg(data: bytes, fmt: str, min_size: tuple[int, int] | None) -> np.ndarray:
    import simplejpeg

    colorspace = {"RGB": "RGB", "BGR": "BGR", "L": "GRAY"}[fmt]
    if min_size is None:
        return simplejpeg.decode_jpeg(data, colorspace=colorspace)
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    factor = _reduction_for(height, width, min_size)
    if factor == 1:
        return simplejpeg.decode_jpeg(data, colorspace=colorspace)
    return simplejpeg.decode_jpeg(
        data,
        colorspace=colorspace,
        min_height=math.ceil(height / factor),
        min_width=math.ceil(width / factor),
        min_factor=factor,
    )


@lru_cache(maxsize=1)
def _turbojpeg_instance():  # -> turbojpeg.TurboJPEG
    from turbojpeg import TurboJPEG

    return TurboJPEG()


def _decode_turbojpeg(data: bytes, fmt: str, min_size: tuple[int, int] | None) -> np.ndarray:
    import turbojpeg

    jpeg = _turbojpeg_instance()
    pixel_format = {"RGB": turbojpeg.TJPF_RGB, "BGR": turbojpeg.TJPF_BGR, "L": turbojpeg.TJPF_GRAY}[
        fmt
    ]
    factor = 1
    if min_size is not None:
        width, height, _, _ = jpeg.decode_header(data)
        factor = _reduction_for(height, width, min_size)
    scaling = None if factor == 1 else (1, factor)
    image = jpeg.decode(data, pixel_format=pixel_format, scaling_factor=scaling)
    return image


def _decode_opencv(data: bytes, fmt: str, min_size: tuple[int, int] | None) -> np.ndarray:
    cv2 = get_cv2()
    if cv2 is None:
        raise ImportError("OpenCV is not installed")

    factor = 1
    if min_size is not None:
        header = _jpeg_size(data)
        if header is not None:
            factor = _reduction_for(header[0], header[1], min_size)
    gray = fmt == "L"
    flag = {
        (1, False): cv2.IMREAD_COLOR,
        (2, False): cv2.IMREAD_REDUCED_COLOR_2,
        (4, False): cv2.IMREAD_REDUCED_COLOR_4,
        (8, False): cv2.IMREAD_REDUCED_COLOR_8,
        (1, True): cv2.IMREAD_GRAYSCALE,
        (2, True): cv2.IMREAD_REDUCED_GRAYSCALE_2,
        (4, True): cv2.IMREAD_REDUCED_GRAYSCALE_4,
        (8, True): cv2.IMREAD_REDUCED_GRAYSCALE_8,
    }[(factor, gray)]
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None:
        raise ValueError("OpenCV could not decode the data")
    if fmt == "RGB":
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    return image


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a JPEG's SOF segment, or None."""
    view = memoryview(data)
    pos = 2
    n = len(view)
    while pos + 9 <= n:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", view, pos + 2)
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack_from(">HH", view, pos + 5)
            return int(height), int(width)
        if marker in (0xDA, 0xD9) or length < 2:
            return None
        pos += 2 + length
    return None


def _decode_pillow(data: bytes, fmt: str, min_size: tuple[int, int] | None) -> np.ndarray:
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as img:
        if img.format == "JPEG" and (min_size is not None or fmt == "L"):
            # Grayscale straight from the luma channel, as the fast decoders do.
            if min_size is None:
                draft_size = img.size
            else:
                orientation = img.getexif().get(0x0112, 1)
                min_h, min_w = _stored_min_size(min_size, orientation) or min_size
                draft_size = (min_w, min_h)
            img.draft("L" if fmt == "L" else "RGB", draft_size)
        img = ImageOps.exif_transpose(img)
        img = img.convert("L" if fmt == "L" else "RGB")
        array = np.asarray(img)
    if fmt == "L":
        array = array[:, :, None]
    elif fmt == "BGR":
        array = array[:, :, ::-1]
    if not array.flags.writeable:
        return array.copy()  # ndarray.copy is C-ordered
    return np.ascontiguousarray(array)


_FAST_DECODERS: dict[str, Callable[[bytes, str, tuple[int, int] | None], np.ndarray]] = {
    "simplejpeg": _decode_simplejpeg,
    "turbojpeg": _decode_turbojpeg,
    "opencv": _decode_opencv,
}


def _importable(name: str) -> bool:
    try:
        if name == "simplejpeg":
            import simplejpeg  # noqa: F401
        elif name == "turbojpeg":
            _turbojpeg_instance()  # needs the libturbojpeg shared library too
        elif name == "opencv":
            if get_cv2() is None:
                return False
        elif name == "pillow":
            import PIL  # noqa: F401
        else:
            return False
    except Exception:  # ImportError, or OSError when a shared library is missing
        return False
    return True


@lru_cache(maxsize=1)
def available_jpeg_decoders() -> tuple[str, ...]:
    """The JPEG decoders installed here, fastest first (always ends with "pillow" if present).

    Example:
        >>> "pillow" in available_jpeg_decoders()
        True
    """
    return tuple(name for name in JPEG_DECODERS if _importable(name))


def default_jpeg_decoder() -> str:
    """The decoder read_image uses for JPEG: ``$CATMAP_JPEG_DECODER`` or the fastest installed."""
    forced = os.environ.get("CATMAP_JPEG_DECODER")
    if forced:
        return _check_decoder(forced.lower())
    available = available_jpeg_decoders()
    return available[0] if available else "pillow"


def _check_decoder(name: str) -> str:
    if name not in JPEG_DECODERS:
        raise ValueError(f"unknown JPEG decoder {name!r}; choose one of {', '.join(JPEG_DECODERS)}")
    if name not in available_jpeg_decoders():
        raise ImportError(f"JPEG decoder {name!r} is not installed here")
    return name


def _check_format(fmt: str | None) -> str:
    fmt = "RGB" if fmt is None else fmt
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedImageFormatError(
            f"read_image: format {fmt!r} is not supported; choose one of {', '.join(SUPPORTED_FORMATS)}"
        )
    return fmt


def decode_image(
    data: bytes,
    format: str | None = None,
    *,
    min_size: tuple[int, int] | None = None,
    decoder: str | None = None,
    source: str = "<bytes>",
) -> np.ndarray:
    """Decode encoded image bytes; see :func:`read_image` for the arguments.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO(); Image.new("RGB", (4, 2)).save(buf, "PNG")
        >>> decode_image(buf.getvalue()).shape
        (2, 4, 3)
    """
    fmt = _check_format(format)
    name = _check_decoder(decoder.lower()) if decoder else default_jpeg_decoder()
    fast_error: Exception | None = None
    if name != "pillow" and data[:3] == _JPEG_MAGIC:
        orientation = jpeg_exif_orientation(data)
        try:
            image = _FAST_DECODERS[name](data, fmt, _stored_min_size(min_size, orientation))
        except Exception as exc:  # e.g. CMYK or an unusual JPEG: Pillow gets a try
            fast_error = exc
            logger.debug("%s failed on %s (%s); falling back to Pillow", name, source, exc)
        else:
            if image.ndim == 2:
                image = image[:, :, None]
            return apply_exif_orientation(image, orientation)
    try:
        return _decode_pillow(data, fmt, min_size)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        if fast_error is not None:
            detail += f"; {name}: {type(fast_error).__name__}: {fast_error}"
        raise ImageReadError(f"cannot decode image {source}: {detail}", source) from exc


def read_image(
    file_name: str | os.PathLike[str],
    format: str | None = None,
    *,
    min_size: tuple[int, int] | None = None,
    decoder: str | None = None,
) -> np.ndarray:
    """Read an image file into an HWC uint8 array with its EXIF orientation applied.

    Args:
        file_name: path of the image.
        format: "RGB" (default, also for None), "BGR", or "L" (grayscale, shape HxWx1).
        min_size: (height, width) the caller will shrink the image to, in the oriented image's
            coordinates. When the image is at least 2x larger in both sides, a JPEG may be
            decoded at 1/2, 1/4 or 1/8 scale (never below ``min_size``); the returned shape
            tells the scale. None decodes at full size.
        decoder: force a JPEG decoder ("pillow", "simplejpeg", "turbojpeg", "opencv");
            default :func:`default_jpeg_decoder`. Other formats always use Pillow.

    Returns:
        A C-contiguous, writable uint8 array of shape (H, W, 3) or (H, W, 1).

    Raises:
        ImageNotFoundError: (a FileNotFoundError) the file does not exist.
        ImageReadError: (an OSError) the file cannot be read or decoded; names the path.
        UnsupportedImageFormatError: (a ValueError) ``format`` is not RGB, BGR or L.

    Example:
        >>> image = read_image("photo.jpg", "BGR")  # doctest: +SKIP
        >>> image.shape, image.dtype  # doctest: +SKIP
        ((480, 640, 3), dtype('uint8'))
    """
    _check_format(format)
    path = os.fspath(file_name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as exc:
        raise ImageNotFoundError(f"image file not found: {path}", path) from exc
    except OSError as exc:
        raise ImageReadError(f"cannot read image file {path}: {exc}", path) from exc
    return decode_image(data, format, min_size=min_size, decoder=decoder, source=path)
