"""Read images into HWC uint8 numpy arrays: fast JPEG decoders, bounded, identical results.

``read_image`` decodes with Pillow by default. For JPEG files, a faster decoder is used when
one is installed, tried in this order: simplejpeg, PyTurboJPEG, OpenCV (all libjpeg-turbo with
the accurate DCT, so pixels match Pillow's up to decoder rounding).

Every decoder gives the same answer for the same bytes:

* **Pixel limit.** The size declared in the header is checked against
  :func:`~mappers.image_header.get_max_image_pixels` (default 89,478,485, Pillow's
  ``Image.MAX_IMAGE_PIXELS``) before any pixel is decoded:
  :class:`~mappers.errors.ImageTooLargeError`.
* **Corrupt JPEGs.** The marker structure is checked once for every decoder (truncated
  file, no end-of-image marker, a stray marker inside the scan data): ImageReadError.
  simplejpeg and PyTurboJPEG stop at any libjpeg warning and hand the file to Pillow, so
  damage libjpeg repairs (e.g. a few wrong bytes inside the entropy-coded data) decodes,
  and damage it cannot repair fails, exactly as with Pillow; OpenCV, which cannot report
  libjpeg warnings, relies on the structural check (and agreed with Pillow on every fuzzed
  file, see tests/test_fuzz_images.py).
* **EXIF orientation** is read from the Exif/XMP segments wherever they sit before the
  first scan, with Pillow's EXIF parser, and applied the way ``ImageOps.exif_transpose``
  does, whatever the decoder.
* **16-bit images** are scaled to 8 bits with ``value >> 8`` (or kept as uint16 with
  ``keep_16bit=True``), never clipped.
* **Expected size.** With ``expected_size`` the header's (oriented) size is compared with it
  before decoding, and a reduced decode (``min_size``) must have exactly the reduced size:
  :class:`~mappers.errors.ImageSizeMismatchError`.

The decoder can be forced with the ``decoder`` argument or the ``CATMAP_JPEG_DECODER``
environment variable (``pillow``, ``simplejpeg``, ``turbojpeg``, ``opencv``).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from catalog.errors import MissingDependencyError, missing_dependency

from .errors import (
    ImageReadError,
    ImageSizeMismatchError,
    UnsupportedImageFormatError,
)
from .image_header import (
    _UNSET,
    _checked_limit,
    check_pixel_limit,
    get_max_image_pixels,
    jpeg_exif_orientation,
    parse_jpeg,
    png_header,
)
from .image_pillow import apply_exif_orientation, decode_with_pillow, to_format
from .image_source import DEFAULT_MAX_IMAGE_BYTES, read_image_bytes
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
#: The package and catmap extra that install each decoder.
_DECODER_PACKAGES = {"simplejpeg": ("simplejpeg", "fast"), "turbojpeg": ("PyTurboJPEG", "fast"),
                     "opencv": ("opencv-python-headless", "opencv"), "pillow": ("Pillow", "images")}

#: Pixel formats read_image produces.
SUPPORTED_FORMATS = ("RGB", "BGR", "L")

_JPEG_MAGIC = b"\xff\xd8\xff"
_REDUCTIONS = (8, 4, 2)


def _pillow_draft_scale(height: int, width: int, factor: int) -> int:
    """The scale Pillow's JPEG ``draft`` picks when asked for 1/factor of the size."""
    scale = min(width // max(1, width // factor), height // max(1, height // factor))
    return next(s for s in (8, 4, 2, 1) if scale >= s)


def _reduction_for(height: int, width: int, min_size: tuple[int, int] | None) -> int:
    """Largest factor in (8, 4, 2) keeping ceil(h/f) >= min_h and ceil(w/f) >= min_w; else 1.

    Only factors every decoder (Pillow's draft included) reproduces exactly are used.
    """
    if min_size is None:
        return 1
    min_h, min_w = min_size
    for factor in _REDUCTIONS:
        if (
            math.ceil(height / factor) >= min_h
            and math.ceil(width / factor) >= min_w
            and _pillow_draft_scale(height, width, factor) == factor
        ):
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


def _decode_simplejpeg(data: bytes, fmt: str, height: int, width: int, factor: int) -> np.ndarray:
    import simplejpeg

    colorspace = {"RGB": "RGB", "BGR": "BGR", "L": "GRAY"}[fmt]
    # strict: any libjpeg warning raises, and Pillow (the same libjpeg) decides instead, so
    # a damaged file decodes or fails exactly as with Pillow.
    if factor == 1:
        return simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True)
    return simplejpeg.decode_jpeg(
        data,
        colorspace=colorspace,
        min_height=math.ceil(height / factor),
        min_width=math.ceil(width / factor),
        min_factor=factor,
        strict=True,
    )


@lru_cache(maxsize=1)
def _turbojpeg_instance():  # -> turbojpeg.TurboJPEG
    from turbojpeg import TurboJPEG

    return TurboJPEG()


def _decode_turbojpeg(data: bytes, fmt: str, height: int, width: int, factor: int) -> np.ndarray:
    import turbojpeg

    pixel_format = {"RGB": turbojpeg.TJPF_RGB, "BGR": turbojpeg.TJPF_BGR, "L": turbojpeg.TJPF_GRAY}[
        fmt
    ]
    scaling = None if factor == 1 else (1, factor)
    # stop on warnings, as simplejpeg's strict mode: Pillow then decides for damaged files
    flags = getattr(turbojpeg, "TJFLAG_STOPONWARNING", 0)
    return _turbojpeg_instance().decode(
        data, pixel_format=pixel_format, scaling_factor=scaling, flags=flags
    )


def _decode_opencv(data: bytes, fmt: str, height: int, width: int, factor: int) -> np.ndarray:
    cv2 = get_cv2()
    if cv2 is None:
        raise ImportError("OpenCV is not installed")
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


_FAST_DECODERS: dict[str, Callable[[bytes, str, int, int, int], np.ndarray]] = {
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
        package, extra = _DECODER_PACKAGES[name]
        raise missing_dependency(package, extra, f"the JPEG decoder {name!r}")
    return name


def _check_format(fmt: str | None) -> str:
    fmt = "RGB" if fmt is None else fmt
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedImageFormatError(
            f"read_image: format {fmt!r} is not supported; choose one of {', '.join(SUPPORTED_FORMATS)}"
        )
    return fmt


def _mismatch(source: str, what: str, got: tuple[int, int], expected: tuple[int, int]):
    return ImageSizeMismatchError(
        f"image {source} has {what} (h={got[0]}, w={got[1]}) but (h={expected[0]}, "
        f"w={expected[1]}) was expected; fix the annotation file or the image (EXIF "
        "orientation is applied)"
    )


def _decode_jpeg(
    data: bytes,
    fmt: str,
    name: str,
    min_size: tuple[int, int] | None,
    expected_size: tuple[int, int] | None,
    source: str,
    limit: int | None,
) -> np.ndarray:
    header = parse_jpeg(data, source)
    height, width, orientation = header.height, header.width, header.orientation
    check_pixel_limit(height, width, source, limit=limit)
    oriented = (width, height) if orientation >= 5 else (height, width)
    if expected_size is not None and oriented != expected_size:
        raise _mismatch(source, "size", oriented, expected_size)
    factor = _reduction_for(height, width, _stored_min_size(min_size, orientation))
    reduced = (math.ceil(height / factor), math.ceil(width / factor))
    image: np.ndarray | None = None
    fast_error: Exception | None = None
    if name != "pillow":
        try:
            image = _FAST_DECODERS[name](data, fmt, height, width, factor)
        except Exception as exc:  # e.g. CMYK or an unusual JPEG: Pillow gets a try
            fast_error = exc
            logger.debug("%s failed on %s (%s); falling back to Pillow", name, source, exc)
    if image is None:
        try:
            image = decode_with_pillow(
                data, fmt, source=source, limit=limit, reduce=factor, orientation=1,
                size_checked=True,
            )
        except (ImageReadError, MissingDependencyError):
            raise  # a missing Pillow is not a bad image: skip_bad_images must not hide it
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            if fast_error is not None:
                detail += f"; {name}: {type(fast_error).__name__}: {fast_error}"
            raise ImageReadError(f"cannot decode image {source}: {detail}", source) from exc
    if image.ndim == 2:
        image = image[:, :, None]
    if tuple(image.shape[:2]) != reduced:  # a decoder that ignored the header: never trust it
        raise ImageReadError(
            f"cannot decode image {source}: the decoder returned size {image.shape[:2]}, the "
            f"header declares {reduced} at 1/{factor} scale",
            source,
        )
    return apply_exif_orientation(image, orientation)


def _decode_16bit_color_opencv(data: bytes, fmt: str, source: str) -> np.ndarray:
    """A 16-bit color PNG as uint16 (Pillow reads those as 8 bits)."""
    cv2 = get_cv2()
    if cv2 is None:
        raise UnsupportedImageFormatError(
            f"read_image: {source} is a 16-bit color image; keep_16bit=True needs OpenCV for it"
        )
    image = cv2.imdecode(
        np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION
    )
    if image is None or image.dtype != np.uint16 or image.ndim != 3:
        raise ImageReadError(f"cannot decode image {source}: OpenCV could not read it", source)
    image = image[:, :, 2::-1]  # BGR(A) -> RGB
    if fmt == "L":
        return cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)[:, :, None]
    return to_format(image, fmt)


def decode_image(
    data: bytes,
    format: str | None = None,
    *,
    min_size: tuple[int, int] | None = None,
    decoder: str | None = None,
    source: str = "<bytes>",
    expected_size: tuple[int, int] | None = None,
    max_pixels: int | None | object = _UNSET,
    keep_16bit: bool = False,
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
    limit = get_max_image_pixels() if max_pixels is _UNSET else _checked_limit(max_pixels, source)
    if expected_size is not None:
        expected_size = (int(expected_size[0]), int(expected_size[1]))
    if data[:3] == _JPEG_MAGIC:
        return _decode_jpeg(data, fmt, name, min_size, expected_size, source, limit)
    png = png_header(data)
    if png is not None:
        check_pixel_limit(png.height, png.width, source, limit=limit)
    try:
        if keep_16bit and png is not None and png.bit_depth == 16 and png.color_type in (2, 6):
            image = _decode_16bit_color_opencv(data, fmt, source)
            image = apply_exif_orientation(image, _pillow_orientation(data))
        else:
            image = decode_with_pillow(
                data, fmt, source=source, limit=limit, keep_16bit=keep_16bit,
                size_checked=png is not None,
            )
    except (ImageReadError, UnsupportedImageFormatError, MissingDependencyError):
        raise
    except Exception as exc:
        raise ImageReadError(
            f"cannot decode image {source}: {type(exc).__name__}: {exc}", source
        ) from exc
    if expected_size is not None and tuple(image.shape[:2]) != expected_size:
        raise _mismatch(source, "size", tuple(image.shape[:2]), expected_size)
    return image


def _pillow_orientation(data: bytes) -> int:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img.load()
        return int(img.getexif().get(0x0112, 1) or 1)


def read_image(
    file_name: str | os.PathLike[str],
    format: str | None = None,
    *,
    min_size: tuple[int, int] | None = None,
    decoder: str | None = None,
    expected_size: tuple[int, int] | None = None,
    max_pixels: int | None | object = _UNSET,
    keep_16bit: bool = False,
    max_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
) -> np.ndarray:
    """Read an image file into an HWC uint8 array with its EXIF orientation applied.

    Args:
        file_name: path of the image, or a URL (``s3://``, ``https://``, ``file://`` ...)
            read through fsspec (the optional extra ``catmap[remote]``, see
            :mod:`mappers.image_source`); the same byte bound and pixel limit apply.
        format: "RGB" (default, also for None), "BGR", or "L" (grayscale, shape HxWx1).
        min_size: (height, width) the caller will shrink the image to, in the oriented image's
            coordinates. When the image is at least 2x larger in both sides, a JPEG may be
            decoded at 1/2, 1/4 or 1/8 scale (never below ``min_size``); the returned shape
            tells the scale. None decodes at full size.
        decoder: force a JPEG decoder ("pillow", "simplejpeg", "turbojpeg", "opencv");
            default :func:`default_jpeg_decoder`. Other formats always use Pillow.
        expected_size: (height, width) the image must have (after EXIF orientation); for a
            JPEG it is checked from the header, before decoding.
        max_pixels: pixel limit for this call (None: no limit); default
            :func:`~mappers.image_header.get_max_image_pixels`.
        keep_16bit: return uint16 samples for 16-bit images instead of scaling to 8 bits.
        max_bytes: the most bytes read from the file (default 1 GiB; None: no bound).

    Returns:
        A C-contiguous, writable array of shape (H, W, 3) or (H, W, 1); uint8 (uint16 for a
        16-bit image with ``keep_16bit``).

    Raises:
        ImageNotFoundError: (a FileNotFoundError) the file does not exist.
        ImageTooLargeError: (an ImageReadError) the header declares more pixels than allowed,
            or the file holds more than ``max_bytes`` bytes.
        MissingDependencyError: (an ImportError) a URL, and fsspec is not installed.
        ImageReadError: (an OSError) the file cannot be read or decoded; names the path.
        ImageSizeMismatchError: (a ValueError) the size differs from ``expected_size``.
        UnsupportedImageFormatError: (a ValueError) ``format`` is not RGB, BGR or L.

    Example:
        >>> image = read_image("photo.jpg", "BGR")  # doctest: +SKIP
        >>> image.shape, image.dtype  # doctest: +SKIP
        ((480, 640, 3), dtype('uint8'))
    """
    _check_format(format)
    data, path = read_image_bytes(file_name, max_bytes)
    return decode_image(
        data,
        format,
        min_size=min_size,
        decoder=decoder,
        source=path,
        expected_size=expected_size,
        max_pixels=max_pixels,
        keep_16bit=keep_16bit,
    )
