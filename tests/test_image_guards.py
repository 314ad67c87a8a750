"""read_image guards: limits before decoding, trusted inputs only, corrupt JPEGs, EXIF, 16 bits.

Every test runs each installed decoder on the same bytes: they must agree.
"""

from __future__ import annotations

import io
import os
import struct
import time
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile, ImageOps

from mappers import image_io
from mappers.errors import (
    ImageReadError,
    ImageSizeMismatchError,
    ImageTooLargeError,
    UnsupportedImageFormatError,
)
from mappers.image_io import (
    DEFAULT_MAX_IMAGE_PIXELS,
    ImageLimits,
    available_jpeg_decoders,
    decode_image,
    get_image_limits,
    get_max_image_pixels,
    read_image,
    read_segmentation,
    set_image_limits,
    set_max_image_pixels,
)
from tests.image_bytes import (
    exif_segment,
    insert_segment,
    jpeg_bytes,
    jpeg_segments,
    many_scan_jpeg,
    photo_like,
    png_bytes,
    set_jpeg_size,
    set_png_size,
)
from tests.work_counting import CallCounter, count_calls

DECODERS = available_jpeg_decoders()


@pytest.fixture(autouse=True)
def default_limit(monkeypatch):
    """Every test starts from the default limit and leaves it so."""
    monkeypatch.delenv("CATMAP_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.setattr(image_io, "_configured", None)
    monkeypatch.setenv(image_io._LIMITS_ENV, "")  # restored after set_image_limits
    yield


# --------------------------------------------------------------------------- pixel limit


def test_default_limit_is_pillows():
    assert get_max_image_pixels() == DEFAULT_MAX_IMAGE_PIXELS == 89_478_485
    assert DEFAULT_MAX_IMAGE_PIXELS == int(1024 * 1024 * 1024 // 4 // 3)


@pytest.mark.parametrize("decoder", DECODERS)
def test_limit_applies_to_every_decoder(decoder):
    data = jpeg_bytes(photo_like(64, 80))
    set_max_image_pixels(64 * 80 - 1)
    with pytest.raises(ImageTooLargeError) as info:
        decode_image(data, decoder=decoder, source="big.jpg")
    assert info.value.pixels == 64 * 80 and info.value.limit == 64 * 80 - 1
    assert info.value.path == "big.jpg" and "big.jpg" in str(info.value)
    set_max_image_pixels(64 * 80)
    assert decode_image(data, decoder=decoder).shape == (64, 80, 3)
    # per call, and None for no limit
    with pytest.raises(ImageTooLargeError):
        decode_image(data, decoder=decoder, max_pixels=100)
    assert decode_image(data, decoder=decoder, max_pixels=None).shape == (64, 80, 3)


@pytest.mark.parametrize("decoder", DECODERS)
def test_huge_header_is_refused_before_decoding(decoder, monkeypatch):
    """A 2 KB JPEG declaring 60000 x 60000 (3.6 G pixels): refused from the header."""
    data = set_jpeg_size(jpeg_bytes(photo_like(16, 16)), 60000, 60000)
    # the work, counted: no decoder is ever handed the data (a decoder would allocate the
    # 10.8 GB of pixels the header declares; budget 0 stops it before it runs)
    decoders = _count_decoders(monkeypatch)
    with pytest.raises(ImageTooLargeError) as info:
        decode_image(data, decoder=decoder, source="bomb.jpg")
    assert {name: counter.calls for name, counter in decoders.items() if counter.calls} == {}
    assert info.value.pixels == 60000 * 60000
    assert info.value.limit == DEFAULT_MAX_IMAGE_PIXELS


def _count_decoders(monkeypatch) -> dict[str, CallCounter]:
    """Count (with a budget of 0 calls) every way decode_image has to decode pixels."""
    counters = {"pillow load": count_calls(monkeypatch, ImageFile.ImageFile, "load", budget=0)}
    if "simplejpeg" in DECODERS:
        import simplejpeg

        counters["simplejpeg"] = count_calls(monkeypatch, simplejpeg, "decode_jpeg", budget=0)
    return counters


def test_png_and_other_formats_are_limited():
    png = set_png_size(png_bytes(photo_like(16, 16)), 30000, 30000)
    with pytest.raises(ImageTooLargeError, match="bomb.png"):
        decode_image(png, source="bomb.png")
    buf = io.BytesIO()
    Image.fromarray(photo_like(40, 50)).save(buf, "BMP")
    with pytest.raises(ImageTooLargeError) as info:
        decode_image(buf.getvalue(), max_pixels=1999, source="a.bmp")
    assert info.value.pixels == 2000


def test_limit_from_environment(monkeypatch):
    data = png_bytes(photo_like(10, 10))
    monkeypatch.setenv("CATMAP_MAX_IMAGE_PIXELS", "99")
    with pytest.raises(ImageTooLargeError):
        decode_image(data)
    monkeypatch.setenv("CATMAP_MAX_IMAGE_PIXELS", "none")
    assert get_max_image_pixels() is None
    monkeypatch.setenv("CATMAP_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(ValueError, match="CATMAP_MAX_IMAGE_PIXELS"):
        get_max_image_pixels()
    with pytest.raises(ValueError):
        set_max_image_pixels(0)
    with pytest.raises(ValueError):
        set_max_image_pixels(True)


def test_catmaps_limit_is_the_only_pixel_limit(monkeypatch):
    """Pillow's own bomb limit (and its warning) plays no part: the limits are in one place."""
    buf = io.BytesIO()
    Image.fromarray(photo_like(40, 40)).save(buf, "BMP")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 700)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageTooLargeError) as info:
            decode_image(buf.getvalue(), max_pixels=1500)
        assert info.value.limit == 1500
        assert decode_image(buf.getvalue(), max_pixels=None).shape == (40, 40, 3)


# --------------------------------------------------------------------------- corrupt JPEGs


def _scan_start(data: bytes) -> int:
    return len(data) - len(jpeg_segments(data)[1])


def _corruptions() -> dict[str, bytes]:
    data = jpeg_bytes(photo_like(96, 128, seed=3))
    sos = _scan_start(data)
    mid = (sos + len(data)) // 2
    return {
        "truncated": data[: len(data) // 2],
        "scan cut short": data[: sos + 40],
        "stray marker in scan": data[:mid] + b"\xff\x13" + data[mid:],
        "second frame header in scan": data[:mid] + b"\xff\xc0" + data[mid + 2 :],
        "second SOI": data[:mid] + b"\xff\xd8" + data[mid + 2 :],
        "garbage": b"\xff\xd8\xff\xe0 not a jpeg at all",
    }


@pytest.mark.parametrize("name", sorted(_corruptions()))
@pytest.mark.parametrize("decoder", DECODERS)
def test_corrupt_jpeg_raises_on_every_decoder(name, decoder):
    data = _corruptions()[name]
    with pytest.raises(ImageReadError, match="c.jpg"):
        decode_image(data, decoder=decoder, source="c.jpg")


def test_damage_libjpeg_repairs_decodes_on_every_decoder():
    """Flipped bytes inside the entropy-coded data that make no marker: libjpeg resyncs
    (it only warns), and every decoder returns an image of the right size."""
    data = bytearray(jpeg_bytes(photo_like(96, 128, seed=3)))
    sos = _scan_start(bytes(data))
    for k in range(sos + 200, sos + 260, 7):
        if data[k] != 0xFF and data[k - 1] != 0xFF and data[k] ^ 0x55 != 0xFF:
            data[k] ^= 0x55
    shapes = {d: decode_image(bytes(data), decoder=d).shape for d in DECODERS}
    assert set(shapes.values()) == {(96, 128, 3)}


def test_missing_eoi_decodes_alike_on_every_decoder():
    """All scan data present, only the end marker missing: libjpeg repairs it everywhere."""
    data = jpeg_bytes(photo_like(96, 128, seed=3))[:-2]
    shapes = {d: decode_image(data, decoder=d).shape for d in DECODERS}
    assert set(shapes.values()) == {(96, 128, 3)}


def test_skip_bad_images_skips_corrupt_jpeg(tmp_path):
    from mappers import DatasetMapper

    path = tmp_path / "bad.jpg"
    path.write_bytes(_corruptions()["stray marker in scan"])
    mapper = DatasetMapper(False, augmentations=[], skip_bad_images=True)
    assert mapper({"file_name": str(path), "height": 96, "width": 128}) is None
    assert mapper.num_skipped == 1


# --------------------------------------------------------------------------- EXIF placement


def _pillow_oriented(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(ImageOps.exif_transpose(img).convert("RGB"))


@pytest.mark.parametrize(
    "after", [None, 0xE0, 0xDB, 0xC0, 0xC4], ids=["first", "APP0", "DQT", "SOF", "DHT"]
)
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_found_wherever_pillow_finds_it(after, orientation):
    plain = jpeg_bytes(photo_like(48, 64, seed=1), quality=95)
    data = insert_segment(plain, exif_segment(orientation), after)
    expected = _pillow_oriented(data)
    assert expected.shape[:2] == ((48, 64) if orientation == 3 else (64, 48))
    results = [decode_image(data, decoder=d) for d in DECODERS]
    for decoder, got in zip(DECODERS, results, strict=True):
        assert got.shape == expected.shape, decoder
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2, decoder
    np.testing.assert_array_equal(results[-1], expected)  # Pillow: identical


def test_xmp_orientation_like_pillow():
    plain = jpeg_bytes(photo_like(20, 30))
    packet = b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><rdf:Description tiff:Orientation=\"6\"/>"
    segment = b"\xff\xe1" + (len(packet) + 2).to_bytes(2, "big")
    data = insert_segment(plain, segment + packet, 0xE0)
    expected = _pillow_oriented(data)
    assert expected.shape == (30, 20, 3)
    for decoder in DECODERS:
        assert decode_image(data, decoder=decoder).shape == (30, 20, 3)


# --------------------------------------------------------------------------- 16 bits


def _gradient16(height: int = 8, width: int = 512) -> np.ndarray:
    return (np.arange(height * width, dtype=np.uint32).reshape(height, width) * 37 % 65536).astype(
        np.uint16
    )


def test_16bit_gray_png_is_scaled_not_clipped():
    g = _gradient16()
    data = png_bytes(g)
    gray = decode_image(data, "L")
    assert gray.dtype == np.uint8 and gray.shape == (8, 512, 1)
    np.testing.assert_array_equal(gray[:, :, 0], (g >> 8).astype(np.uint8))
    rgb = decode_image(data, "RGB")
    np.testing.assert_array_equal(rgb, np.repeat((g >> 8).astype(np.uint8)[:, :, None], 3, axis=2))
    kept = decode_image(data, "L", keep_16bit=True)
    assert kept.dtype == np.uint16
    np.testing.assert_array_equal(kept[:, :, 0], g)


def test_16bit_color_png_matches_8bit_scale():
    cv2 = pytest.importorskip("cv2")
    g = _gradient16()
    rgb16 = np.stack([g, g[:, ::-1], g // 2], axis=-1)
    ok, encoded = cv2.imencode(".png", np.ascontiguousarray(rgb16[:, :, ::-1]))
    assert ok
    data = encoded.tobytes()
    got = decode_image(data, "RGB")
    np.testing.assert_array_equal(got, (rgb16 >> 8).astype(np.uint8))
    with pytest.raises(UnsupportedImageFormatError, match="16-bit color"):
        decode_image(data, "RGB", keep_16bit=True)  # one PNG decoder: Pillow reads 8 bits


def test_float_image_is_refused_not_clipped(tmp_path):
    path = tmp_path / "f.tiff"
    Image.fromarray(np.full((4, 5), 0.5, dtype=np.float32)).save(path)
    with pytest.raises(ImageReadError, match="floating-point"):
        read_image(path)


# --------------------------------------------------------------------------- expected size


@pytest.mark.parametrize("decoder", DECODERS)
def test_expected_size_checked_from_header_and_after_reduction(tmp_path, decoder):
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo_like(200, 300)))
    assert read_image(path, decoder=decoder, expected_size=(200, 300)).shape == (200, 300, 3)
    out = read_image(path, decoder=decoder, expected_size=(200, 300), min_size=(50, 75))
    assert out.shape == (50, 75, 3)
    # a file half the size the record says is a mismatch, even when a reduction is allowed
    with pytest.raises(ImageSizeMismatchError, match="a.jpg"):
        read_image(path, decoder=decoder, expected_size=(400, 600), min_size=(100, 150))


# --------------------------------------------------------------------------- trusted inputs


def test_limits_are_one_frozen_configurable_value():
    limits = get_image_limits()
    assert limits == ImageLimits() and limits.max_pixels == DEFAULT_MAX_IMAGE_PIXELS
    with pytest.raises(AttributeError):
        limits.max_pixels = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        ImageLimits(max_decode_work=0)
    set_image_limits(max_bytes=10)
    assert get_image_limits().max_bytes == 10 and get_max_image_pixels() == DEFAULT_MAX_IMAGE_PIXELS


@pytest.mark.parametrize("size", [(480, 640), (1024, 2048), (2000, 3000), (4000, 6000)])
def test_default_limits_never_trip_on_real_photo_sizes(size):
    """COCO/LVIS (640x480), Cityscapes (2048x1024), Objects365-sized and 24 MP camera photos,
    progressive included (libjpeg's default progression: 10 scans)."""
    height, width = size
    for progressive in (False, True):
        data = jpeg_bytes(np.full((height, width, 3), 90, np.uint8), progressive=progressive)
        assert decode_image(data, min_size=(height // 8, width // 8)).shape[2] == 3


def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "a.jpg"
    os.mkfifo(fifo)  # nobody writes: a blocking open or read would hang forever
    with pytest.raises(ImageReadError, match="not a regular file"):
        read_image(fifo)
    with pytest.raises(ImageReadError, match="not a regular file"):
        read_segmentation(fifo)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_device_file_is_refused(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    with pytest.raises(ImageReadError, match="not a regular file"):
        read_image(device)


def test_eps_named_jpg_never_reaches_a_decoder(tmp_path, monkeypatch):
    from PIL import EpsImagePlugin

    opened = count_calls(monkeypatch, EpsImagePlugin.EpsImageFile, "_open", budget=0)
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    with pytest.raises(ImageReadError, match="photo.jpg"):
        read_image(path)
    with pytest.raises(ImageReadError, match="photo.jpg"):
        read_segmentation(path)
    assert opened.calls == 0


@pytest.mark.parametrize("decoder", DECODERS)
def test_many_scan_jpeg_is_refused_before_decoding(decoder, monkeypatch):
    """A progressive JPEG under 1 MB whose decode would take seconds: pixels x scans bound."""
    data = many_scan_jpeg(1024, 1024, 600)
    assert len(data) < 1 << 20
    decoders = _count_decoders(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(ImageTooLargeError, match="scans"):
        decode_image(data, decoder=decoder, source="scans.jpg")
    assert time.perf_counter() - start < 1.0
    assert {name: counter.calls for name, counter in decoders.items() if counter.calls} == {}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_damaged_png_chunk_is_a_typed_error(tmp_path):
    """Damage Pillow reports as OSError, SyntaxError or ValueError: one typed error."""
    good = png_bytes(np.arange(64 * 64, dtype=np.uint8).reshape(64, 64) % 7)
    iend = good.rfind(b"IEND") - 4
    idat = good.find(b"IDAT")
    damaged = {
        "idat": good[: idat + 8] + b"\xff" * 8 + good[idat + 16 :],
        "chunk": good[:33] + b"\x00\x00\x00\x04tEXt" + b"\xff" * 8,
        "ztxt": good[:iend] + _chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"x" * (2 << 20)))
        + good[iend:],  # ValueError in Pillow: untyped at d43f773
    }
    for name, data in damaged.items():
        path = tmp_path / f"seg_{name}.png"
        path.write_bytes(data)
        with pytest.raises(ImageReadError, match=f"seg_{name}.png"):
            read_segmentation(path)
        with pytest.raises(ImageReadError, match=f"seg_{name}.png"):
            read_image(path)


def test_url_is_read_only_under_a_registered_remote_root(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    data = jpeg_bytes(photo_like(16, 24))
    with fsspec.open("memory://roots/a.jpg", "wb") as handle:
        handle.write(data)
    try:
        with pytest.raises(ImageReadError, match="remote root"):
            read_image("memory://roots/a.jpg")
        with pytest.raises(ImageReadError, match="remote root"):
            read_image("https://example.invalid/a.jpg")  # never contacted
        set_image_limits(remote_roots=("memory://roots/",))
        assert read_image("memory://roots/a.jpg").shape == (16, 24, 3)
        with pytest.raises(ImageReadError, match="remote root"):
            read_image("memory://other/a.jpg")
    finally:
        fsspec.filesystem("memory").rm("memory://roots/a.jpg")


def test_silent_server_gives_a_typed_error_within_the_timeout():
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    import socket

    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/a.jpg"
        set_image_limits(remote_roots=("http://127.0.0.1:",), remote_timeout_s=0.5)
        start = time.perf_counter()
        with pytest.raises(ImageReadError, match="127.0.0.1"):
            read_image(url)
        assert time.perf_counter() - start < 10
