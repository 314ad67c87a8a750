"""Tests for mappers.image_io.read_image: formats, EXIF orientation, decoders, errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mappers.errors import ImageNotFoundError, ImageReadError, UnsupportedImageFormatError
from mappers.image_io import (
    apply_exif_orientation,
    available_jpeg_decoders,
    decode_image,
    default_jpeg_decoder,
    read_image,
)

DECODERS = available_jpeg_decoders()
FAST_DECODERS = [d for d in DECODERS if d != "pillow"]


def _pattern(h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth, asymmetric RGB pattern (JPEG keeps it close; orientation errors show)."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + 2 * y) % 256], axis=-1).astype(np.uint8)


def _save(path, array: np.ndarray, fmt: str, orientation: int | None = None, **kwargs) -> str:
    image = Image.fromarray(array)
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    image.save(path, fmt, **kwargs)
    return str(path)


def _pillow_reference(path: str) -> np.ndarray:
    from PIL import ImageOps

    with Image.open(path) as img:
        return np.asarray(ImageOps.exif_transpose(img).convert("RGB"))


def test_pillow_is_always_available_and_default_is_fastest():
    assert DECODERS[-1] == "pillow"
    assert default_jpeg_decoder() == DECODERS[0]


def test_png_rgb_bgr_l(tmp_path):
    array = _pattern()
    path = _save(tmp_path / "a.png", array, "PNG")
    rgb = read_image(path)
    assert rgb.dtype == np.uint8 and rgb.shape == (48, 64, 3)
    np.testing.assert_array_equal(rgb, array)
    np.testing.assert_array_equal(read_image(path, "RGB"), array)
    bgr = read_image(path, "BGR")
    np.testing.assert_array_equal(bgr, array[:, :, ::-1])
    assert bgr.flags.c_contiguous and bgr.flags.writeable
    gray = read_image(path, "L")
    assert gray.shape == (48, 64, 1)
    expected = np.asarray(Image.fromarray(array).convert("L"))
    np.testing.assert_array_equal(gray[:, :, 0], expected)


def test_accepts_pathlike_and_grayscale_source(tmp_path):
    gray_src = _pattern()[:, :, 0]
    path = tmp_path / "g.png"
    Image.fromarray(gray_src).save(path)
    rgb = read_image(path)
    assert rgb.shape == (48, 64, 3)
    np.testing.assert_array_equal(rgb[:, :, 1], gray_src)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("fmt", ["RGB", "BGR", "L"])
def test_jpeg_decoders_agree_with_pillow(tmp_path, decoder, fmt):
    path = _save(tmp_path / "a.jpg", _pattern(60, 80), "JPEG", quality=92)
    got = read_image(path, fmt, decoder=decoder)
    ref = read_image(path, fmt, decoder="pillow")
    assert got.shape == ref.shape == ((60, 80, 1) if fmt == "L" else (60, 80, 3))
    assert got.flags.c_contiguous and got.flags.writeable
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 2  # decoder rounding


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("decoder", DECODERS)
def test_exif_orientation_jpeg(tmp_path, orientation, decoder):
    path = _save(tmp_path / "o.jpg", _pattern(), "JPEG", orientation=orientation, quality=95)
    expected = _pillow_reference(path)
    got = read_image(path, decoder=decoder)
    assert got.shape == expected.shape
    assert got.shape[:2] == ((48, 64) if orientation <= 4 else (64, 48))
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2


@pytest.mark.parametrize("exif", [None, 1, 6])
def test_xmp_orientation_jpeg_as_pillow(tmp_path, exif):
    """XMP's tiff:Orientation counts where EXIF has no orientation tag, as exif_transpose;
    an EXIF block without one (here: only a 0x010F tag) falls through to it too."""
    kwargs = {"xmp": b'<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'}
    if exif is not None:
        tags = Image.Exif()
        tags[0x0112 if exif != 1 else 0x010F] = exif if exif != 1 else "maker"
        kwargs["exif"] = tags.tobytes()
    path = _save(tmp_path / "x.jpg", _pattern(), "JPEG", quality=95, **kwargs)
    expected = _pillow_reference(path)
    got = read_image(path)
    assert got.shape == expected.shape == (64, 48, 3)  # 6 or 8: both turn it
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2


@pytest.mark.parametrize("kind, count", [(4, 1), (3, 2)])
def test_unusual_exif_orientation_entries_as_pillow(tmp_path, kind, count):
    """An orientation stored as a LONG, or as two SHORTs: read exactly as exif_transpose."""
    import struct

    entry = struct.pack("<HHII", 0x0112, kind, count, 6)
    exif = b"Exif\0\0II*\x00" + struct.pack("<IH", 8, 1) + entry + b"\0" * 4
    path = _save(tmp_path / "u.jpg", _pattern(), "JPEG", quality=95, exif=exif)
    expected = _pillow_reference(path)
    got = read_image(path)
    assert got.shape == expected.shape
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_png(tmp_path, orientation):
    path = _save(tmp_path / "o.png", _pattern(), "PNG", orientation=orientation)
    np.testing.assert_array_equal(read_image(path), _pillow_reference(path))


def test_apply_exif_orientation_matches_pillow_transposes():
    array = _pattern(5, 7)
    ops = {
        2: Image.Transpose.FLIP_LEFT_RIGHT,
        3: Image.Transpose.ROTATE_180,
        4: Image.Transpose.FLIP_TOP_BOTTOM,
        5: Image.Transpose.TRANSPOSE,
        6: Image.Transpose.ROTATE_270,
        7: Image.Transpose.TRANSVERSE,
        8: Image.Transpose.ROTATE_90,
    }
    for orientation, op in ops.items():
        expected = np.asarray(Image.fromarray(array).transpose(op))
        np.testing.assert_array_equal(apply_exif_orientation(array, orientation), expected)
    assert apply_exif_orientation(array, 1) is array


@pytest.mark.parametrize("decoder", DECODERS)
def test_reduced_decoding_keeps_at_least_min_size(tmp_path, decoder):
    path = _save(tmp_path / "big.jpg", _pattern(400, 600), "JPEG", quality=90)
    half = read_image(path, min_size=(150, 250), decoder=decoder)
    assert half.shape == (200, 300, 3)
    eighth = read_image(path, min_size=(40, 60), decoder=decoder)
    assert eighth.shape == (50, 75, 3)
    full = read_image(path, min_size=(300, 300), decoder=decoder)
    assert full.shape == (400, 600, 3)
    # the reduced image looks like the downscaled full one
    small = np.asarray(Image.fromarray(full).resize((300, 200), Image.BILINEAR))
    assert np.abs(half.astype(int) - small.astype(int)).mean() < 4


@pytest.mark.parametrize("decoder", DECODERS)
def test_reduced_decoding_with_rotation_uses_oriented_sizes(tmp_path, decoder):
    path = _save(tmp_path / "r.jpg", _pattern(400, 600), "JPEG", orientation=6)
    # oriented image is 600 x 400 (h x w)
    out = read_image(path, min_size=(300, 200), decoder=decoder)
    assert out.shape == (300, 200, 3)
    out = read_image(path, min_size=(300, 201), decoder=decoder)
    assert out.shape == (600, 400, 3)


def test_reduced_decoding_ignored_for_png(tmp_path):
    path = _save(tmp_path / "a.png", _pattern(40, 60), "PNG")
    assert read_image(path, min_size=(5, 5)).shape == (40, 60, 3)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.jpg"
    with pytest.raises(ImageNotFoundError) as info:
        read_image(path)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, ImageReadError)
    assert str(path) in str(info.value)
    assert info.value.path == str(path)


def test_directory_is_a_read_error(tmp_path):
    with pytest.raises(ImageReadError, match=str(tmp_path)):
        read_image(tmp_path)


@pytest.mark.parametrize("decoder", DECODERS)
def test_corrupt_and_truncated_files(tmp_path, decoder):
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"this is not an image at all")
    with pytest.raises(ImageReadError, match="garbage.jpg"):
        read_image(garbage, decoder=decoder)
    good = _save(tmp_path / "good.jpg", _pattern(64, 64), "JPEG")
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="truncated.jpg"):
        read_image(truncated, decoder=decoder)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageReadError, match="empty.png"):
        read_image(empty, decoder=decoder)


def test_cmyk_jpeg_falls_back_to_pillow(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.fromarray(_pattern()).convert("CMYK").save(path, "JPEG", quality=95)
    expected = _pillow_reference(str(path))
    for decoder in DECODERS:
        got = read_image(path, decoder=decoder)
        assert got.shape == expected.shape
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2


def test_unsupported_format_and_decoder(tmp_path):
    path = _save(tmp_path / "a.png", _pattern(), "PNG")
    with pytest.raises(UnsupportedImageFormatError, match="CMYK"):
        read_image(path, "CMYK")
    with pytest.raises(ValueError, match="unknown JPEG decoder"):
        read_image(path, decoder="libfoo")


def test_decoder_forced_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CATMAP_JPEG_DECODER", "pillow")
    assert default_jpeg_decoder() == "pillow"
    monkeypatch.setenv("CATMAP_JPEG_DECODER", "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        default_jpeg_decoder()


def test_decode_image_from_bytes():
    buf = io.BytesIO()
    Image.fromarray(_pattern(10, 12)).save(buf, "PNG")
    out = decode_image(buf.getvalue(), "BGR")
    np.testing.assert_array_equal(out, _pattern(10, 12)[:, :, ::-1])
    with pytest.raises(ImageReadError, match="<bytes>"):
        decode_image(b"\xff\xd8\xff\xe0garbage")


def test_bounded_read_of_a_file_that_grew_after_its_size_was_taken():
    import io

    from mappers.errors import ImageTooLargeError
    from mappers.image_io import _read_bounded

    data = bytes(range(256)) * 20_000  # 5 MB, more than one chunk past the stale size
    assert _read_bounded(io.BytesIO(data), "f.jpg", None, 10) == data
    assert _read_bounded(io.BytesIO(data), "f.jpg", len(data), 10) == data
    with pytest.raises(ImageTooLargeError):
        _read_bounded(io.BytesIO(data), "f.jpg", len(data) - 1, 10)
    with pytest.raises(ImageTooLargeError):
        _read_bounded(io.BytesIO(data), "f.jpg", 100, None)
