"""Fuzz the image decoders and the segmentation/keypoint checks with hypothesis.

Images: small valid files of every allowed format (JPEG, PNG, BMP, TIFF, WebP, GIF) are
mutated (bytes flipped, inserted, deleted, the file truncated, the header's size set to
anything up to 65535 x 65535) and decoded by every installed decoder under a small pixel
limit, and read as segmentation maps. Allowed outcomes: an image within the limit, or an
:class:`~mappers.errors.ImageReadError` (the family: too large, corrupt, unreadable). For
JPEG both decoders must agree on raise-vs-success and, on success, on the shape: simplejpeg
stops at any libjpeg warning and Pillow (the same libjpeg) decides.

Annotations: random polygons, RLE dicts and keypoints (NaN, inf, 1e300, wrong types, runs
past the mask) go through transform_annotations and annotations_to_instances in-process:
only catmap's typed errors may come out (a native crash would kill the run).

The mapper: DatasetMapper with bitmask masks under the default per-sample budget, on records
of COCO to Cityscapes sizes whose image is valid or mutated and whose instances are few or
4,000, with polygons that are random, huge or corner-to-corner zigzags (the edge-length bomb).

The default run uses ``CATMAP_FUZZ_EXAMPLES`` examples (150) and runs the capped child
harness once with a few; the slow test re-runs this file with thousands in a child process
limited to 3 GiB of address space beyond the interpreter's own (tests/memory_cap.py), so that a
native crash or unbounded memory shows up as a failed exit code.
"""

from __future__ import annotations

import io
import os
import pathlib
import resource
import struct
import tempfile
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import BoxMode
from catalog._common import CatmapError
from mappers import DatasetMapper, annotations_to_instances
from mappers import transforms as T
from mappers.annotations import transform_annotations
from mappers.errors import ImageReadError, UnsupportedImageFormatError
from mappers.image_io import (
    available_jpeg_decoders,
    decode_image,
    get_max_image_pixels,
    read_segmentation,
)
from mappers.transforms import HFlipTransform, NoOpTransform, ResizeTransform
from tests.image_bytes import jpeg_bytes, photo_like, png_bytes, set_jpeg_size, set_png_size
from tests.memory_cap import run_capped

EXAMPLES = int(os.environ.get("CATMAP_FUZZ_EXAMPLES", "150"))
DECODERS = available_jpeg_decoders()
LIMIT = 48 * 64 * 3  # pixels: a few times the seeds' size, far below any mutated header
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@lru_cache(maxsize=1)
def _seeds() -> tuple[bytes, ...]:
    """Valid files: baseline, progressive, grayscale and EXIF JPEGs; RGB, 16-bit, palette PNGs;
    BMP, TIFF, WebP and GIF."""
    from PIL import Image

    rgb = photo_like(24, 32, seed=5)
    exif = Image.Exif()
    exif[0x0112] = 6
    gray16 = (np.arange(24 * 32, dtype=np.uint32).reshape(24, 32) * 83 % 65536).astype(np.uint16)

    def encoded(image: Image.Image, fmt: str, **args) -> bytes:
        buf = io.BytesIO()
        image.save(buf, fmt, **args)
        return buf.getvalue()

    return (
        jpeg_bytes(rgb),
        jpeg_bytes(rgb, progressive=True),
        jpeg_bytes(rgb[:, :, 0]),
        jpeg_bytes(rgb, exif=exif.tobytes(), quality=75),
        png_bytes(rgb),
        png_bytes(gray16),
        encoded(Image.fromarray(rgb).convert("P"), "PNG"),
        encoded(Image.fromarray(rgb), "BMP"),
        encoded(Image.fromarray(rgb), "TIFF", compression="tiff_deflate"),
        encoded(Image.fromarray(rgb), "WEBP", quality=80),
        encoded(Image.fromarray(rgb).convert("P"), "GIF"),
    )


_ops = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("marker"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 16)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("size"), st.integers(0, 65535), st.integers(0, 65535)),
)


def _mutate(data: bytes, ops: list[tuple]) -> bytes:
    out = bytearray(data)
    for op in ops:
        if not out:
            break
        kind, pos = op[0], op[1] % len(out) if op[0] != "size" else 0
        if kind == "flip":
            out[pos] ^= op[2]
        elif kind == "insert":
            out[pos:pos] = op[2]
        elif kind == "marker":  # 0xFF + a byte: the kind of damage that confuses parsers
            out[pos:pos] = bytes([0xFF, op[2]])
        elif kind == "delete":
            del out[pos : pos + op[2]]
        elif kind == "truncate":
            del out[pos:]
        elif kind == "size":
            try:
                if out[:3] == b"\xff\xd8\xff":
                    out = bytearray(set_jpeg_size(bytes(out), op[1], op[2]))
                elif out[:4] == b"\x89PNG":
                    out = bytearray(set_png_size(bytes(out), op[1], op[2]))
            except (IndexError, struct.error, ValueError):
                pass  # the header was already broken by an earlier op
    return bytes(out)


def _outcome(data: bytes, decoder: str, **kwargs) -> tuple[str, object]:
    try:
        image = decode_image(data, decoder=decoder, max_pixels=LIMIT, source="fuzz", **kwargs)
    except ImageReadError as exc:
        assert exc.path == "fuzz"
        return "error", type(exc).__name__
    assert image.dtype in (np.uint8, np.uint16) and image.ndim == 3
    assert image.shape[0] * image.shape[1] <= LIMIT, image.shape
    assert image.flags.c_contiguous and image.flags.writeable
    return "ok", image.shape


@FUZZ
@given(seed=st.integers(0, 10), ops=st.lists(_ops, min_size=1, max_size=4))
def test_fuzz_decoders_typed_errors_and_agreement(seed, ops):
    data = _mutate(_seeds()[seed], ops)
    outcomes = {d: _outcome(data, d) for d in DECODERS}
    if data[:3] == b"\xff\xd8\xff":
        kinds = {d: o[0] for d, o in outcomes.items()}
        assert len(set(kinds.values())) == 1, f"decoders disagree: {outcomes}"
        if kinds[DECODERS[0]] == "ok":
            assert len({o[1] for o in outcomes.values()}) == 1, outcomes
    try:
        _outcome(data, "pillow", format="L", keep_16bit=True)
    except UnsupportedImageFormatError:
        pass  # keep_16bit on a 16-bit color PNG: refused by name, not a crash
    _outcome(data, DECODERS[0], format="BGR", min_size=(6, 8))
    _SEGMENTATION_FILE.write_bytes(data)
    try:
        label_map = read_segmentation(_SEGMENTATION_FILE)
    except ImageReadError:
        return
    assert label_map.ndim == 2 and label_map.size <= get_max_image_pixels()


_SEGMENTATION_FILE = pathlib.Path(tempfile.mkdtemp()) / "fuzz.png"


_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.floats(-100, 100),
)
_polygon = st.lists(st.one_of(_number, st.text(max_size=2), st.none()), max_size=12)
_size_value = st.one_of(st.integers(-3, 70000), st.booleans(), st.text(max_size=3), st.floats())
_rle = st.fixed_dictionaries(
    {
        "size": st.one_of(
            st.lists(_size_value, max_size=3), st.just([16, 20]), st.just([8, 10])
        ),
        "counts": st.one_of(
            st.lists(st.one_of(st.integers(-5, 2**40), st.floats()), max_size=12),
            st.text(alphabet=[chr(c) for c in range(40, 130)], max_size=24),
            st.binary(max_size=24),
        ),
    }
)
_annotation = st.fixed_dictionaries(
    {"bbox": st.just([1.0, 1.0, 6.0, 7.0]), "bbox_mode": st.just(BoxMode.XYXY_ABS)},
    optional={
        "segmentation": st.one_of(st.lists(_polygon, max_size=3), _rle),
        "keypoints": st.lists(_number, max_size=9),
    },
).map(lambda a: {**a, "category_id": 0})


@FUZZ
@given(
    annos=st.lists(_annotation, max_size=4),
    transform=st.sampled_from(["noop", "resize", "flip"]),
    mask_format=st.sampled_from(["polygon", "bitmask"]),
)
def test_fuzz_annotations_typed_errors_only(annos, transform, mask_format):
    tfm = {
        "noop": NoOpTransform(),
        "resize": ResizeTransform(16, 20, 8, 10),
        "flip": HFlipTransform(20),
    }[transform]
    out_size = (8, 10) if transform == "resize" else (16, 20)
    try:
        moved = transform_annotations(
            [dict(a) for a in annos], [tfm], out_size, keypoint_hflip_indices=None
        )
        annotations_to_instances(moved, out_size, mask_format, context="fuzz")
    except CatmapError:
        pass
    try:  # untransformed values straight into the instances (the raw records' values)
        annotations_to_instances([dict(a) for a in annos], (16, 20), mask_format)
    except CatmapError:
        pass


_MAPPER_SIZES = ((48, 64), (480, 640), (1024, 2048))


@lru_cache(maxsize=None)
def _image_file(height: int, width: int, seed: int, ops: tuple) -> str:
    """A PNG/JPEG of (height, width) (mutated by ``ops``) in a temporary file."""
    array = photo_like(height, width, seed=seed)
    data = _mutate((png_bytes if seed % 2 else jpeg_bytes)(array), list(ops)) if ops else (
        (png_bytes if seed % 2 else jpeg_bytes)(array))
    path = pathlib.Path(tempfile.mkdtemp()) / f"{height}x{width}-{seed}-{len(ops)}.img"
    path.write_bytes(data)
    return str(path)


def _mapper_polygon(kind: str, height: int, width: int, vertices: int, rng) -> list:
    if kind == "zigzag":  # inside the image, every edge corner to corner
        xy = np.zeros((vertices, 2))
        xy[1::2] = (width - 1, height - 1)
        xy[2::4, 0] = 0.5
    elif kind == "huge":
        xy = rng.uniform(-1e7, 1e7, (vertices, 2))
    else:
        xy = rng.uniform(-5, 1.1 * max(height, width), (vertices, 2))
    return xy.reshape(-1).tolist()


@settings(FUZZ, max_examples=max(3, EXAMPLES // 10))  # ~0.5 s each: images up to 2048 wide
@given(
    size=st.sampled_from(_MAPPER_SIZES),
    image_ops=st.one_of(st.just(()), st.lists(_ops, min_size=1, max_size=2).map(tuple)),
    seed=st.integers(0, 3),
    count=st.sampled_from([0, 1, 3, 6, 4000]),
    kind=st.sampled_from(["random", "zigzag", "huge"]),
    vertices=st.sampled_from([3, 40, 2000, 30000]),
    scale=st.sampled_from([0.5, 1.0, 1.5]),
)
def test_fuzz_mapper_bitmasks_under_the_budget(size, image_ops, seed, count, kind, vertices,
                                                scale):
    height, width = size
    rng = np.random.default_rng(seed)
    polygon = _mapper_polygon(kind, height, width, vertices, rng)
    tiny = [1.0, 1.0, 4.0, 1.0, 4.0, 4.0]
    annos = [{"bbox": [1.0, 1.0, 9.0, 9.0], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0,
              "id": i, "segmentation": [polygon if i == 0 else tiny]} for i in range(count)]
    record = {"file_name": _image_file(height, width, seed, image_ops), "height": height,
              "width": width, "image_id": seed, "annotations": annos}
    out = (int(height * scale), int(width * scale))
    mapper = DatasetMapper(True, augmentations=[T.Resize(out), T.RandomFlip(prob=1.0)],
                           use_instance_mask=True, instance_mask_format="bitmask")
    try:
        sample = mapper(record)
    except CatmapError:
        return
    masks = sample["instances"].gt_masks.tensor
    assert masks.shape[1:] == out and masks.shape[0] <= count
    assert masks.shape[0] * out[0] * out[1] <= 1 << 30


def _run_file_in_subprocess(examples: int, *select: str) -> None:
    args = ["-q", "-p", "no:cacheprovider", __file__, "-m", "not slow", "-k",
            " or ".join(select) or "fuzz and not harness"]
    result = run_capped(  # bounded memory: a bigger allocation fails the run
        f"import sys, pytest\nsys.exit(pytest.main({args!r}))", timeout=3600,
        env={"CATMAP_FUZZ_EXAMPLES": str(examples)})
    assert result.returncode == 0, (result.returncode, result.stdout[-4000:], result.stderr[-2000:])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    print(f"{examples} examples per fuzzer ({max(3, examples // 10)} for the mapper): passed; "
          f"peak resident memory of a child {peak} MiB")


def test_fuzz_harness_runs_capped_in_a_child():
    """The slow run's harness, with a few examples of the mapper and decoder fuzzers."""
    _run_file_in_subprocess(5, "test_fuzz_mapper", "test_fuzz_decoders")


@pytest.mark.slow
def test_fuzz_thousands_in_a_subprocess():
    """5000 examples each for decoders and annotations, 500 for the mapper, in a child process
    with 3 GiB of address space: a native crash or unbounded memory fails this test."""
    _run_file_in_subprocess(5000)
