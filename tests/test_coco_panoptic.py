"""COCO panoptic loading and detectron2's standard / separated registrations."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import DatasetCatalog, MetadataCatalog
from catalog.formats.panoptic import (
    load_coco_panoptic_json,
    merge_to_panoptic,
    register_coco_panoptic,
    register_coco_panoptic_separated,
)
from catalog.formats.validate import PanopticFormatError, SemSegPairingError

Image = pytest.importorskip("PIL.Image")

# Category ids as in COCO: things 1 (person) and 3 (car), stuff 92 and 184.
META = {
    "thing_dataset_id_to_contiguous_id": {1: 0, 3: 1},
    "stuff_dataset_id_to_contiguous_id": {92: 2, 184: 3},
}


def _png(path, value=0, size=(6, 4)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path)


def _segment(seg_id, category, **extra):
    return {"id": seg_id, "category_id": category, "iscrowd": 0, "bbox": [0, 0, 2, 2],
            "area": 4, **extra}


def _nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def _fixture(tmp_path, annotations=None, images=True):
    annotations = annotations if annotations is not None else [
        {"image_id": 7, "file_name": "000007.png",
         "segments_info": [_segment(1, 1), _segment(2, 92), _segment(3, 3, iscrowd=1)]},
        {"image_id": 9, "file_name": "000009.png", "segments_info": []},
    ]
    data = {"annotations": annotations, "categories": []}
    if images:
        data["images"] = [{"id": 7, "file_name": "000007.jpg", "height": 4, "width": 6},
                          {"id": 9, "file_name": "000009.jpg", "height": 4, "width": 6}]
    for ann in annotations:
        if isinstance(ann, dict) and isinstance(ann.get("file_name"), str):
            stem = ann["file_name"].rsplit(".", 1)[0]
            _png(tmp_path / "images" / f"{stem}.jpg")
            _png(tmp_path / "panoptic" / ann["file_name"])
    path = tmp_path / "panoptic.json"
    path.write_text(json.dumps(data))
    return str(path), str(tmp_path / "images"), str(tmp_path / "panoptic")


def test_load_records(tmp_path):
    json_file, image_dir, gt_dir = _fixture(tmp_path)
    records = load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    assert [r["image_id"] for r in records] == [7, 9]
    first = records[0]
    assert first["file_name"] == f"{image_dir}/000007.jpg"
    assert first["pan_seg_file_name"] == f"{gt_dir}/000007.png"
    assert (first["height"], first["width"]) == (4, 6)
    assert [(s["id"], s["category_id"], s["isthing"], s["iscrowd"])
            for s in first["segments_info"]] == [(1, 0, True, 0), (2, 2, False, 0),
                                                 (3, 1, True, 1)]
    assert first["segments_info"][0]["bbox"] == [0, 0, 2, 2]
    assert records[1]["segments_info"] == []


def test_without_images_list_uses_jpg_and_no_size(tmp_path):
    json_file, image_dir, gt_dir = _fixture(tmp_path, images=False)
    records = load_coco_panoptic_json(json_file, image_dir, gt_dir, MetadataCatalog.get(
        "test_pan_meta").set(**META))
    MetadataCatalog.remove("test_pan_meta")
    assert records[0]["file_name"] == f"{image_dir}/000007.jpg"
    assert "height" not in records[0]


@pytest.mark.parametrize(
    ("segment", "key", "match"),
    [
        (_segment(1, 5), "category_id", "neither"),
        (_segment(1, 1, iscrowd=2), "iscrowd", "0 or 1"),
        (_segment(-1, 1), "id", "RGB"),
        (_segment(2**24, 1), "id", "RGB"),
        (_segment(1, 1, bbox=[0, 0, 1]), "bbox", "4 finite"),
        (_segment(1, 1, area=-3), "area", ">= 0"),
        (_segment(1, "1"), "category_id", "int"),
        ("nope", "segments_info", "dict"),
    ],
)
def test_bad_segments_name_file_image_segment_key(tmp_path, segment, key, match):
    anns = [{"image_id": 7, "file_name": "000007.png", "segments_info": [segment]}]
    json_file, image_dir, gt_dir = _fixture(tmp_path, anns)
    with pytest.raises(PanopticFormatError, match=match) as info:
        load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    err = info.value
    assert err.key == key and err.image_id == 7 and err.path == json_file
    assert json_file in str(err) and "image_id 7" in str(err)
    if isinstance(segment, dict) and key != "id":
        assert err.segment_id == 1 and "segment id 1" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is PanopticFormatError and again.key == key


@pytest.mark.parametrize(
    ("annotations", "key"),
    [
        ([{"image_id": "7", "file_name": "a.png", "segments_info": []}], "image_id"),
        ([{"image_id": 7, "file_name": "../a.png", "segments_info": []}], "file_name"),
        ([{"image_id": 7, "file_name": "/etc/a.png", "segments_info": []}], "file_name"),
        ([{"image_id": 7, "file_name": "x/../../a.png", "segments_info": []}], "file_name"),
        ([{"image_id": 7, "file_name": "a.png", "segments_info": None}], "segments_info"),
        ([{"image_id": 7, "file_name": "a.png", "segments_info": []},
          {"image_id": 7, "file_name": "b.png", "segments_info": []}], "image_id"),
        ([{"image_id": 7, "file_name": "a.png",
           "segments_info": [_segment(1, 1), _segment(1, 92)]}], "id"),
        ([], "annotations"),
        ([{"image_id": 7, "file_name": "a.png", "segments_info": [
            _segment(1, 1, extra=_nested(40))]}], "extra"),
    ],
)
def test_bad_annotations(tmp_path, annotations, key):
    json_file, image_dir, gt_dir = _fixture(tmp_path, annotations, images=False)
    with pytest.raises(PanopticFormatError) as info:
        load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    assert info.value.key == key and json_file in str(info.value)


def test_bounded_and_invalid_files(tmp_path, monkeypatch):
    from catalog.formats import panoptic as coco_panoptic

    json_file, image_dir, gt_dir = _fixture(tmp_path)
    monkeypatch.setattr(coco_panoptic, "MAX_PANOPTIC_JSON_BYTES", 10)
    with pytest.raises(PanopticFormatError.__mro__[1], match="limit is 10"):
        load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    monkeypatch.undo()
    with open(json_file, "w") as f:
        f.write("[" * 5000)
    with pytest.raises(PanopticFormatError.__mro__[1], match="nested"):
        load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    with pytest.raises(PanopticFormatError, match="thing_dataset_id"):
        load_coco_panoptic_json(json_file, image_dir, gt_dir, {
            "thing_dataset_id_to_contiguous_id": {"1": "x"}})
    with pytest.raises(PanopticFormatError, match="meta must be a mapping"):
        load_coco_panoptic_json(json_file, image_dir, gt_dir, [1])


def test_missing_first_files(tmp_path):
    json_file, image_dir, gt_dir = _fixture(tmp_path)
    (tmp_path / "panoptic" / "000007.png").unlink()
    with pytest.raises(FileNotFoundError, match="pan_seg_file_name of image_id 7"):
        load_coco_panoptic_json(json_file, image_dir, gt_dir, META)


def test_register_standard(tmp_path):
    json_file, image_dir, gt_dir = _fixture(tmp_path)
    name = "test_pan_standard"
    try:
        register_coco_panoptic(name, {**META, "stuff_classes": ["a"]}, image_dir, gt_dir,
                               json_file)
        meta = MetadataCatalog.get(name)
        assert meta.evaluator_type == "coco_panoptic_seg" and meta.label_divisor == 1000
        assert meta.ignore_label == 255 and meta.panoptic_json == json_file
        assert meta.json_file is None and meta.stuff_classes == ["a"]
        assert list(DatasetCatalog.get(name)) == load_coco_panoptic_json(
            json_file, image_dir, gt_dir, META)
    finally:
        DatasetCatalog.remove(name)
        MetadataCatalog.remove(name)


def test_register_separated(tmp_path):
    json_file, image_dir, gt_dir = _fixture(tmp_path)
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps({
        "images": [{"id": 7, "file_name": "000007.jpg", "height": 4, "width": 6},
                   {"id": 9, "file_name": "000009.jpg", "height": 4, "width": 6}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 3, "bbox": [1, 1, 2, 2],
                         "iscrowd": 0, "area": 4}],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
    }))
    (tmp_path / "stuff").mkdir()
    for stem in ("000007", "000009"):
        Image.fromarray(np.zeros((4, 6), np.uint8)).save(tmp_path / "stuff" / f"{stem}.png")
    meta = {**META, "thing_classes": ["person", "car"]}
    try:
        register_coco_panoptic_separated("test_pan", meta, image_dir, gt_dir, json_file,
                                         str(tmp_path / "stuff"), str(instances))
        records = list(DatasetCatalog.get("test_pan_separated"))
        assert [r["image_id"] for r in records] == [7, 9]
        assert records[0]["annotations"][0]["category_id"] == 1
        assert records[0]["sem_seg_file_name"] == f"{tmp_path}/stuff/000007.png"
        stuff = list(DatasetCatalog.get("test_pan_stuffonly"))
        assert [r["sem_seg_file_name"] for r in stuff] == [r["sem_seg_file_name"]
                                                          for r in records]
        assert MetadataCatalog.get("test_pan_stuffonly").evaluator_type == "sem_seg"
        assert MetadataCatalog.get("test_pan_separated").sem_seg_root == f"{tmp_path}/stuff"
    finally:
        for name in ("test_pan_separated", "test_pan_stuffonly"):
            if name in DatasetCatalog:
                DatasetCatalog.remove(name)
            MetadataCatalog.remove(name)


def test_merge_to_panoptic_names_missing_image():
    with pytest.raises(SemSegPairingError, match="b.jpg"):
        merge_to_panoptic([{"file_name": "b.jpg"}], [{"file_name": "a.jpg"}])
    with pytest.raises(SemSegPairingError):
        merge_to_panoptic([{"file_name": "b.jpg"}], [])



_KEYS = ["id", "category_id", "iscrowd", "bbox", "area", "image_id", "file_name",
         "segments_info", "x"]
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=6),
       annotation_extra=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=2))
def test_fuzz_any_json_gives_records_or_a_typed_error(tmp_path, segment, annotation_extra):
    from catalog import AnnotationFormatError

    annotation = {"image_id": 7, "file_name": "000007.png", "segments_info": [segment],
                  **annotation_extra}
    if not (tmp_path / "panoptic" / "000007.png").exists():
        _png(tmp_path / "images" / "000007.jpg")
        _png(tmp_path / "panoptic" / "000007.png")
    json_file = tmp_path / "fuzz.json"
    json_file.write_text(json.dumps({"annotations": [annotation]}))
    json_file, image_dir, gt_dir = str(json_file), str(tmp_path / "images"), str(
        tmp_path / "panoptic")
    try:
        records = load_coco_panoptic_json(json_file, image_dir, gt_dir, META)
    except (AnnotationFormatError, FileNotFoundError):
        return
    for info in records[0]["segments_info"]:
        assert type(info["id"]) is int and info["category_id"] in (0, 1, 2, 3)
        assert info["isthing"] == (info["category_id"] < 2)
    json.dumps(records, allow_nan=False)
