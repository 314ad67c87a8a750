"""Polygons, RLE and keypoints are checked before pycocotools (native code) sees them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from catalog import BoxMode
from catalog._common import RecordFormatError
from mappers import annotations_to_instances, transform_instance_annotations
from mappers.annotations import transform_annotations
from mappers.geometry_checks import (
    check_rle,
    coordinate_bound,
    decode_rle_counts,
    input_size_of,
    polygons_to_bitmask,
    rle_to_bitmask,
)
from mappers.transforms import (
    CropTransform,
    HFlipTransform,
    ResizeTransform,
    TransformList,
)

mask_utils = pytest.importorskip("pycocotools.mask")


def _anno(**extra):
    return {"bbox": [1, 1, 9, 9], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0, "id": 41, **extra}


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter: a native crash fails the test, not pytest."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_huge_polygon_coordinate_is_a_typed_error_not_a_crash():
    result = _run_isolated(
        """
        from catalog import BoxMode
        from catalog._common import RecordFormatError
        from mappers import annotations_to_instances
        anno = {"bbox": [0, 0, 9, 9], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 0, "id": 5,
                "segmentation": [[0, 0, 1e9, 0, 1e9, 1e9]]}
        try:
            annotations_to_instances([anno], (50, 60), "bitmask", context="file a.jpg")
        except RecordFormatError as exc:
            print("typed:", exc)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "typed:" in result.stdout
    assert "a.jpg" in result.stdout and "annotation id 5" in result.stdout
    assert "'segmentation'" in result.stdout


def test_rle_runs_past_the_mask_are_refused_in_a_subprocess():
    result = _run_isolated(
        """
        from catalog._common import RecordFormatError
        from mappers.geometry_checks import rle_to_bitmask
        for rle in ({"size": [5, 6], "counts": [1, 2, 100000]},
                    {"size": [5, 6], "counts": "0" + "Z" * 6 + "1"}):
            try:
                rle_to_bitmask(rle, context="x")
            except RecordFormatError as exc:
                print("typed:", exc)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("typed:") == 2


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e9, -1e7])
def test_bad_polygon_values(value):
    segm = [[0, 0, 8, 0, value, 8]]
    with pytest.raises(RecordFormatError, match="polygon 0"):
        polygons_to_bitmask(segm, 10, 10)
    with pytest.raises(RecordFormatError, match="annotation id 41"):
        annotations_to_instances([_anno(segmentation=segm)], (10, 10), "polygon")
    with pytest.raises(RecordFormatError, match="annotation 0"):
        transform_annotations(
            [_anno(segmentation=segm)], [ResizeTransform(10, 10, 5, 5)], (5, 5), context="f.jpg"
        )


def test_polygons_slightly_outside_the_image_are_fine():
    segm = [[-3.0, -2.0, 12.5, 0.0, 12.0, 11.0]]
    mask = polygons_to_bitmask(segm, 10, 10)
    assert mask.shape == (10, 10) and mask.sum() > 0
    bound = coordinate_bound(10, 10)
    assert bound == 4 * 10 + 64
    assert polygons_to_bitmask([[0, 0, bound, 0, bound, bound]], 10, 10).sum() > 0


def test_rle_size_is_checked_before_decoding(monkeypatch):
    calls = []
    real_decode = mask_utils.decode
    monkeypatch.setattr(mask_utils, "decode", lambda *a: calls.append(a) or real_decode(*a))
    rle = {"size": [20000, 20000], "counts": "0"}
    with pytest.raises(RecordFormatError, match=r"RLE has size \[20000, 20000\]"):
        annotations_to_instances([_anno(segmentation=rle)], (10, 10), "bitmask", context="f.jpg")
    with pytest.raises(RecordFormatError, match="annotation id 41"):
        transform_instance_annotations(_anno(segmentation=rle), [HFlipTransform(10)], (10, 10))
    with pytest.raises(RecordFormatError, match="pixel limit"):
        rle_to_bitmask(rle)  # no image size known: the pixel limit still bounds it
    assert calls == []


@pytest.mark.parametrize(
    "rle, match",
    [
        ({"size": [3, 4], "counts": [1, 2]}, "add up"),
        ({"size": [3, 4], "counts": [5, -1, 8]}, "non-negative"),
        ({"size": [3, 4], "counts": [True, 11]}, "list of at most"),
        ({"size": [3, 4], "counts": [1.5, 10.5]}, "list of at most"),
        ({"size": [3, 4], "counts": "0:"}, "add up"),
        ({"size": [3, 4], "counts": "0~"}, "alphabet"),
        ({"size": [3, 4], "counts": "0\u00e9"}, "non-ASCII"),
        ({"size": [3, 4], "counts": "0" + "g" * 7 + "1"}, "too long"),
        ({"size": [3, 4], "counts": "0g"}, "ends inside"),
        ({"size": [3, 4], "counts": {"a": 1}}, "compressed string"),
        ({"size": [3, 4, 5], "counts": [12]}, "'size'"),
        ({"size": [0, 4], "counts": []}, "'size'"),
        ({"size": ["3", 4], "counts": [12]}, "'size'"),
        ({"size": [3, 4]}, "needs keys"),
    ],
)
def test_malformed_rle(rle, match):
    with pytest.raises(RecordFormatError, match=match):
        rle_to_bitmask(rle, context="f.jpg")


def test_valid_rle_round_trips_both_encodings():
    rng = np.random.default_rng(3)
    mask = (rng.random((17, 23)) > 0.5).astype(np.uint8)
    encoded = mask_utils.encode(np.asfortranarray(mask))
    np.testing.assert_array_equal(rle_to_bitmask(encoded, image_size=(17, 23)), mask)
    as_text = {"size": encoded["size"], "counts": encoded["counts"].decode()}
    np.testing.assert_array_equal(rle_to_bitmask(as_text), mask)
    runs = decode_rle_counts(encoded["counts"], "x").tolist()
    assert sum(runs) == 17 * 23
    np.testing.assert_array_equal(rle_to_bitmask({"size": [17, 23], "counts": runs}), mask)
    assert check_rle({"size": [17, 23], "counts": runs}, "x", (17, 23))[:2] == (17, 23)


def test_rle_through_transforms_uses_the_input_size():
    mask = np.zeros((10, 20), np.uint8)
    mask[2:5, 3:9] = 1
    encoded = mask_utils.encode(np.asfortranarray(mask))
    anno = transform_instance_annotations(
        _anno(segmentation=encoded), [ResizeTransform(10, 20, 5, 10)], (5, 10)
    )
    assert anno["segmentation"].shape == (5, 10)
    with pytest.raises(RecordFormatError, match=r"the image is \[20, 40\]"):
        transform_instance_annotations(
            _anno(segmentation=encoded), [ResizeTransform(20, 40, 5, 10)], (5, 10)
        )


def test_input_size_of():
    assert input_size_of(TransformList([]), (5, 6)) == (5, 6)
    tl = TransformList([HFlipTransform(40), ResizeTransform(30, 40, 15, 20)])
    assert input_size_of(tl, (15, 20)) == (30, 40)
    assert input_size_of(TransformList([CropTransform(0, 0, 4, 4)]), (4, 4)) is None
    assert input_size_of(TransformList([CropTransform(0, 0, 4, 4, 9, 8)]), (4, 4)) == (8, 9)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_keypoints(value):
    kps = [1.0, 2.0, 2.0, value, 3.0, 2.0]
    with pytest.raises(RecordFormatError, match="'keypoints'"):
        annotations_to_instances([_anno(keypoints=kps)], (10, 10))
    with pytest.raises(RecordFormatError, match="annotation id 41.*'keypoints'"):
        transform_instance_annotations(_anno(keypoints=kps), [], (10, 10))
    with pytest.raises(RecordFormatError, match="'keypoints'"):
        annotations_to_instances([_anno(keypoints=["a", 1, 2])], (10, 10))
