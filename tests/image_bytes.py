"""Small encoded images for the image-reading tests, built in memory.

Example:
    >>> jpeg_bytes(photo_like(8, 8))[:3]
    b'\\xff\\xd8\\xff'
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

__all__ = [
    "exif_segment",
    "insert_segment",
    "jpeg_bytes",
    "jpeg_segments",
    "many_scan_jpeg",
    "photo_like",
    "png_bytes",
    "set_jpeg_size",
    "set_png_size",
]


def photo_like(height: int, width: int, seed: int = 0) -> np.ndarray:
    """An RGB uint8 image with gradients, edges and noise (JPEG handles it like a photo)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255 // max(1, width), y * 255 // max(1, height), ((x // 8 + y // 8) % 2) * 160],
        axis=-1,
    )
    noise = rng.integers(-24, 25, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def jpeg_bytes(array: np.ndarray, **save_args) -> bytes:
    """``array`` encoded as JPEG by Pillow (``save_args`` go to ``Image.save``)."""
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=save_args.pop("quality", 90), **save_args)
    return buf.getvalue()


def png_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8, or uint16 HxW) encoded as PNG by Pillow."""
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


def jpeg_segments(data: bytes) -> tuple[list[bytes], bytes]:
    """The marker segments between SOI and the first SOS (each with its marker), and the rest
    (from SOS to the end)."""
    pos, segments = 2, []
    while data[pos + 1] != 0xDA:
        (length,) = struct.unpack_from(">H", data, pos + 2)
        segments.append(data[pos : pos + 2 + length])
        pos += 2 + length
    return segments, data[pos:]


def exif_segment(orientation: int) -> bytes:
    """An APP1 Exif segment holding ``orientation``, as Pillow writes it."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = b"Exif\x00\x00" + exif.tobytes()
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def insert_segment(data: bytes, segment: bytes, after_marker: int | None) -> bytes:
    """``data`` with ``segment`` placed after the first segment with ``after_marker`` (e.g.
    0xDB for DQT, 0xC4 for DHT), or right after SOI for None."""
    segments, rest = jpeg_segments(data)
    out = [] if after_marker is not None else [segment]
    placed = after_marker is None
    for seg in segments:
        out.append(seg)
        if not placed and seg[1] == after_marker:
            out.append(segment)
            placed = True
    if not placed:
        raise ValueError(f"no segment with marker 0x{after_marker:02x}")
    return b"\xff\xd8" + b"".join(out) + rest


def set_jpeg_size(data: bytes, height: int, width: int) -> bytes:
    """``data`` with the frame header declaring (height, width)."""
    segments, rest = jpeg_segments(data)
    out = []
    for seg in segments:
        if 0xC0 <= seg[1] <= 0xCF and seg[1] not in (0xC4, 0xC8, 0xCC):
            seg = seg[:5] + struct.pack(">HH", height, width) + seg[9:]
        out.append(seg)
    return b"\xff\xd8" + b"".join(out) + rest


def set_png_size(data: bytes, height: int, width: int) -> bytes:
    """``data`` with IHDR declaring (height, width), its CRC updated."""
    ihdr = data[12:16] + struct.pack(">II", width, height) + data[24:29]
    return data[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + data[33:]


def many_scan_jpeg(height: int, width: int, repeats: int) -> bytes:
    """A flat progressive JPEG whose last (refinement) scan is repeated ``repeats`` times:
    a small file that costs a decoder ``repeats`` extra passes over every pixel."""
    data = jpeg_bytes(np.full((height, width, 3), 128, np.uint8), progressive=True)
    last = data.rfind(b"\xff\xda")
    return data[:-2] + data[last:-2] * repeats + b"\xff\xd9"
