"""DatasetMapper / read_record_image on records with a malformed or wrong height/width."""

from __future__ import annotations

import numpy as np
import pytest

from catalog._common import RecordFormatError
from mappers import DatasetMapper
from mappers import transforms as T
from mappers.dataset_mapper import check_image_size, read_record_image
from mappers.errors import ImageSizeMismatchError
from mappers.image_io import MAX_IMAGE_SIDE, record_image_size
from tests.image_bytes import jpeg_bytes, photo_like


@pytest.fixture
def jpeg_file(tmp_path):
    path = tmp_path / "img.jpg"
    path.write_bytes(jpeg_bytes(photo_like(40, 60)))
    return str(path)


BAD_SIDES = [0, -5, True, "40", 40.0, float("nan"), [40], 10**9, MAX_IMAGE_SIDE + 1]


@pytest.mark.parametrize("key", ["height", "width"])
@pytest.mark.parametrize("bad", BAD_SIDES, ids=repr)
@pytest.mark.parametrize(
    "augs",
    [[], [T.ResizeShortestEdge(20, 100), T.RandomFlip()], [T.RandomCrop("absolute", (10, 10))]],
    ids=["none", "plannable", "general"],
)
def test_mapper_bad_record_size_is_a_typed_error(jpeg_file, key, bad, augs):
    record = {"file_name": jpeg_file, "height": 40, "width": 60, "annotations": []}
    record[key] = bad
    mapper = DatasetMapper(True, augmentations=augs)
    with pytest.raises(RecordFormatError) as info:
        mapper(record)
    assert jpeg_file in str(info.value) and repr(key) in str(info.value)


def test_huge_area_is_refused_even_with_valid_sides(jpeg_file):
    record = {"file_name": jpeg_file, "height": 100_000, "width": 100_000}
    with pytest.raises(RecordFormatError, match="pixel limit"):
        DatasetMapper(False, augmentations=[T.ResizeShortestEdge(20, 100)])(record)


def test_numpy_ints_are_fine(jpeg_file):
    record = {"file_name": jpeg_file, "height": np.int64(40), "width": np.int32(60)}
    assert record_image_size(record) == (40, 60)
    out = DatasetMapper(False, augmentations=[])(record)
    assert tuple(out["image"].shape) == (3, 40, 60)


def test_read_record_image_and_check_image_size_validate(jpeg_file):
    with pytest.raises(RecordFormatError, match="'width'"):
        read_record_image({"file_name": jpeg_file, "height": 40, "width": 0})
    with pytest.raises(RecordFormatError, match="'height'"):
        check_image_size({"file_name": "a.jpg", "height": "40", "width": 60}, np.zeros((40, 60, 3)))
    rec = {"file_name": jpeg_file}
    read_record_image(rec)
    assert (rec["height"], rec["width"]) == (40, 60)


def test_reduced_decode_refuses_an_image_smaller_than_the_record(tmp_path):
    """The file is half the record's size: a 1/2-scale decode would have matched the plan's
    reduced size, but the header's full size is compared with the record first."""
    path = tmp_path / "half.jpg"
    path.write_bytes(jpeg_bytes(photo_like(200, 300)))
    record = {"file_name": str(path), "height": 400, "width": 600}
    mapper = DatasetMapper(
        False, augmentations=[T.ResizeShortestEdge(100, 1000)], reduced_decode=True
    )
    with pytest.raises(ImageSizeMismatchError, match="half.jpg"):
        mapper(record)
    record.update(height=200, width=300)
    assert tuple(mapper(record)["image"].shape) == (3, 100, 150)


def test_reduced_decode_with_matching_record(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo_like(400, 600)))
    record = {"file_name": str(path), "height": 400, "width": 600}
    image = read_record_image(record, min_size=(100, 150))
    assert image.shape == (100, 150, 3)
    with pytest.raises(ImageSizeMismatchError):
        read_record_image({**record, "height": 800, "width": 1200}, min_size=(100, 150))


def test_segmentation_file_is_pixel_limited(tmp_path, monkeypatch):
    from PIL import Image

    from mappers import image_io
    from mappers.dataset_mapper import read_segmentation
    from mappers.errors import ImageTooLargeError

    path = tmp_path / "seg.png"
    Image.fromarray(np.zeros((30, 40), np.uint8)).save(path)
    assert read_segmentation(path).shape == (30, 40)
    monkeypatch.setattr(image_io, "_configured", image_io.ImageLimits(max_pixels=1199))
    with pytest.raises(ImageTooLargeError, match="seg.png") as info:
        read_segmentation(path)
    assert info.value.pixels == 1200
