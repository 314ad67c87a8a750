"""Pillow decoding for read_image: every non-JPEG format, JPEGs the fast decoders refuse.

Bounded and lossless about depth:

* the size is checked against the pixel limit before any pixel is decoded; Pillow's own
  decompression-bomb guard (a warning above ``Image.MAX_IMAGE_PIXELS``, an error above twice
  that) becomes :class:`~mappers.errors.ImageTooLargeError`;
* 16-bit images (``I;16*`` modes: 16-bit grayscale PNG/TIFF) are scaled to 8 bits with
  ``value >> 8`` -- the high byte, which is what Pillow, libpng and OpenCV do for 16-bit
  color images -- or kept as uint16 with ``keep_16bit=True``; never clipped. 32-bit
  integer images are accepted when their values fit in 16 bits; floating-point images are
  refused (:class:`~mappers.errors.ImageReadError`), since no scale is implied.

Example:
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("I;16", (3, 2), 0x1234).save(buf, "PNG")
    >>> int(decode_with_pillow(buf.getvalue(), "L", source="a.png", limit=None)[0, 0, 0])
    18
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

from catalog.errors import missing_dependency

from .errors import ImageReadError, ImageTooLargeError, UnsupportedImageFormatError
from .image_header import check_pixel_limit


def pil_image() -> Any:
    """``PIL.Image``, or :class:`~catalog.errors.MissingDependencyError` naming the extra."""
    try:
        from PIL import Image
    except ImportError:
        raise missing_dependency("Pillow", "images", "reading this image") from None
    return Image

__all__ = ["SIXTEEN_BIT_MODES", "apply_exif_orientation", "decode_with_pillow", "pil_image", "to_format"]

#: Pillow modes holding 16-bit samples.
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


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


def to_format(array: np.ndarray, fmt: str) -> np.ndarray:
    """An HxW, HxWx1 or HxWx3 (RGB) array as RGB, BGR or L (HxWx1), C-contiguous and writable.

    Gray is replicated to three channels; RGB becomes L only through Pillow (callers pass
    gray already for "L").

    Example:
        >>> to_format(np.zeros((2, 3), np.uint8), "BGR").shape
        (2, 3, 3)
    """
    if array.ndim == 2:
        array = array[:, :, None]
    if fmt == "L":
        out = array[:, :, :1]
    elif array.shape[2] == 1:
        out = np.repeat(array, 3, axis=2)
    else:
        out = array[:, :, ::-1] if fmt == "BGR" else array
    if not out.flags.writeable or not out.flags.c_contiguous:
        return np.array(out, order="C")
    return out


def _bomb_error(exc: Exception, source: str) -> ImageTooLargeError:
    Image = pil_image()

    limit = Image.MAX_IMAGE_PIXELS
    return ImageTooLargeError(
        f"image {source} is over Pillow's decompression-bomb limit ({exc}); raise "
        "PIL.Image.MAX_IMAGE_PIXELS together with catmap's limit to read it",
        source,
        limit=None if limit is None else 2 * limit,
    )


def _open(data: bytes, source: str, limit: int | None, size_checked: bool) -> Any:
    """Image.open (header only), the pixel limit checked on the declared size."""
    Image = pil_image()

    try:
        if size_checked:
            img = Image.open(io.BytesIO(data))
        else:  # the limit below replaces Pillow's warning
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise _bomb_error(exc, source) from None
    width, height = img.size
    try:
        check_pixel_limit(height, width, source, limit=limit)
    except ImageTooLargeError:
        img.close()
        raise
    return img


def _sixteen_bit(img: Any, source: str) -> np.ndarray:
    """The samples of an I;16* or I image as a uint16 HxW array."""
    array = np.asarray(img)
    if img.mode == "I":
        if array.size and (int(array.min()) < 0 or int(array.max()) > 0xFFFF):
            raise ImageReadError(
                f"cannot decode image {source}: 32-bit integer pixels outside 0..65535 "
                "have no 8-bit scale; convert the image to 8 or 16 bits",
                source,
            )
    return array.astype(np.uint16, copy=False)


def decode_with_pillow(
    data: bytes,
    fmt: str,
    *,
    source: str,
    limit: int | None,
    reduce: int = 1,
    orientation: int | None = None,
    keep_16bit: bool = False,
    size_checked: bool = False,
) -> np.ndarray:
    """Decode ``data`` with Pillow to an HWC array in ``fmt`` with the EXIF orientation applied.

    Args:
        data: the encoded image.
        fmt: "RGB", "BGR" or "L".
        source: file name for messages.
        limit: pixel limit (None: none).
        reduce: JPEG only: decode at 1/reduce scale (1, 2, 4 or 8).
        orientation: the EXIF orientation when already known (JPEG); else read by Pillow.
        keep_16bit: return uint16 for 16-bit grayscale images instead of scaling to 8 bits.
        size_checked: the caller already checked the declared size against ``limit``.

    Raises:
        ImageTooLargeError: over the pixel limit (before decoding).
        ImageReadError: floating-point or out-of-range 32-bit pixels.
        UnsupportedImageFormatError: ``keep_16bit`` on a 16-bit color image (Pillow
            reads those as 8 bits; decode them with OpenCV).
        OSError, ValueError, SyntaxError...: whatever Pillow raises for broken data (the
            caller wraps them in ImageReadError).
    """
    Image = pil_image()

    with _open(data, source, limit, size_checked) as img:
        if img.format == "JPEG" and (reduce > 1 or fmt == "L"):
            width, height = img.size
            size = (max(1, width // reduce), max(1, height // reduce)) if reduce > 1 else None
            img.draft("L" if fmt == "L" else "RGB", size)
        try:
            img.load()
        except Image.DecompressionBombError as exc:
            raise _bomb_error(exc, source) from None
        if orientation is None:
            orientation = int(img.getexif().get(0x0112, 1) or 1)
        mode = img.mode
        if mode in SIXTEEN_BIT_MODES or mode == "I":
            samples = _sixteen_bit(img, source)
            array = samples if keep_16bit else (samples >> 8).astype(np.uint8)
        elif mode == "F":
            raise ImageReadError(
                f"cannot decode image {source}: floating-point pixels have no 8-bit scale; "
                "convert the image to 8 or 16 bits",
                source,
            )
        else:
            if keep_16bit and _declares_16bit_color(data):
                raise UnsupportedImageFormatError(
                    f"read_image: {source} is a 16-bit color image, which Pillow reads as 8 "
                    "bits; keep_16bit=True needs OpenCV for it"
                )
            array = np.asarray(img.convert("L" if fmt == "L" else "RGB"))
    return apply_exif_orientation(to_format(array, fmt), orientation)


def _declares_16bit_color(data: bytes) -> bool:
    from .image_header import png_header

    header = png_header(data)
    return header is not None and header.bit_depth == 16 and header.color_type in (2, 4, 6)
