"""load_coco_json / register_coco_instances: conversion and the bad-data policy."""

from __future__ import annotations

import copy
import gc
import json
import logging
import os

import pytest

from catalog import (
    AnnotationFormatError,
    BoxMode,
    DatasetCatalog,
    MetadataCatalog,
    MetadataConflictError,
    load_coco_json,
    register_coco_instances,
)


@pytest.fixture
def path_kind():
    """There is one decoder now; kept so the tests read as before."""
    return "msgspec"


def _coco() -> dict:
    return {
        "info": {"description": "fixture"},
        "images": [
            {"id": 30, "file_name": "c.jpg", "height": 40, "width": 60, "license": 1},
            {"id": 10, "file_name": "a.jpg", "height": 20, "width": 30},
            {"id": 20, "file_name": "sub/b.jpg", "height": 50, "width": 50},
        ],
        "categories": [
            {"id": 7, "name": "seven", "supercategory": "n"},
            {"id": 3, "name": "three"},
            {"id": 90, "name": "ninety"},
        ],
        "annotations": [
            {
                "id": 1,
                "image_id": 30,
                "category_id": 90,
                "bbox": [1, 2, 3, 4],
                "area": 12.0,
                "iscrowd": 0,
                "segmentation": [[0, 0, 1, 0, 1, 1], [5, 5, 6, 6]],  # 2nd polygon invalid
            },
            {
                "id": 2,
                "image_id": 10,
                "category_id": 3,
                "bbox": [0.5, 0.5, 10.0, 5.0],
                "iscrowd": 1,
                "segmentation": {"counts": [10, 5, 585], "size": [20, 30]},
            },
            {
                "id": 3,
                "image_id": 10,
                "category_id": 7,
                "bbox": [1, 1, 2, 2],
                "keypoints": [1, 2, 2, 3, 4, 0],
                "num_keypoints": 1,
            },
            {"id": 4, "image_id": 30, "category_id": 3, "bbox": [2, 2, 5, 5], "segmentation": []},
            {
                "id": 5,
                "image_id": 30,
                "category_id": 7,
                "bbox": [2, 2, 5, 5],
                "segmentation": [[1, 2, 3], [1, 2, 3, 4]],  # no valid polygon: skipped
            },
            {
                "id": 6,
                "image_id": 30,
                "category_id": 7,
                "bbox": [2, 2, 5, 5],
                "segmentation": {"counts": "abc", "size": [40, 60]},
            },
        ],
    }


def _write(tmp_path, content, name="instances.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(content))
    return str(path)


def test_records_follow_the_detectron2_format(tmp_path, path_kind, caplog):
    path = _write(tmp_path, _coco())
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(path, "/root/images", dataset_name="fixture", keep_file_order=True)
    assert [r["image_id"] for r in records] == [30, 10, 20]  # the file's image order
    assert records[0]["file_name"] == os.path.join("/root/images", "c.jpg")
    assert records[2]["file_name"] == os.path.join("/root/images", "sub/b.jpg")
    assert (records[0]["height"], records[0]["width"]) == (40, 60)
    assert records[2]["annotations"] == []  # image without annotations kept
    assert "license" not in records[0]

    first = records[0]["annotations"]
    assert [a["category_id"] for a in first] == [2, 0, 1]  # 90->2, 3->0, 7->1 (sorted ids)
    assert first[0]["bbox"] == [1, 2, 3, 4]
    assert first[0]["bbox_mode"] == BoxMode.XYWH_ABS
    assert first[0]["iscrowd"] == 0
    assert first[0]["segmentation"] == [[0, 0, 1, 0, 1, 1]]  # invalid polygon dropped
    assert "segmentation" not in first[1]  # empty list: box-only instance
    assert first[2]["segmentation"] == {"counts": "abc", "size": [40, 60]}  # compressed RLE
    assert "area" not in first[0]

    crowd, with_kp = records[1]["annotations"]
    assert crowd["iscrowd"] == 1
    assert crowd["segmentation"] == {"counts": [10, 5, 585], "size": [20, 30]}  # RLE kept
    assert with_kp["keypoints"] == [1.5, 2.5, 2, 3.5, 4.5, 0]
    assert "segmentation" not in with_kp  # absent: box-only

    meta = MetadataCatalog.get("fixture")
    assert meta.thing_classes == ["three", "seven", "ninety"]
    assert meta.thing_dataset_id_to_contiguous_id == {3: 0, 7: 1, 90: 2}

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "dropped 3 invalid polygons" in warnings[0]
    assert "skipped 1 instances" in warnings[0] and "[5]" in warnings[0]


def test_null_category_name_becomes_the_id_on_both_paths(tmp_path, path_kind):
    content = _coco()
    content["categories"][0]["name"] = None
    first_id = content["categories"][0]["id"]
    load_coco_json(_write(tmp_path, content), "", dataset_name="coco_null_name")
    meta = MetadataCatalog.get("coco_null_name")
    index = meta.thing_dataset_id_to_contiguous_id[first_id]
    assert meta.thing_classes[index] == str(first_id)


def test_extra_annotation_keys_copied_when_present(tmp_path, path_kind):
    records = load_coco_json(_write(tmp_path, _coco()), "", extra_annotation_keys=["area", "id"],
                             keep_file_order=True)
    first = records[0]["annotations"][0]
    assert first["area"] == 12.0 and first["id"] == 1
    assert "area" not in records[0]["annotations"][1]
    assert records[0]["file_name"] == "c.jpg"  # empty image_root keeps the name


def test_pathlib_paths_accepted(tmp_path, path_kind):
    _write(tmp_path, _coco())
    records = load_coco_json(tmp_path / "instances.json", tmp_path)
    assert records[0]["file_name"] == str(tmp_path / "a.jpg")  # image 10 first


def test_results_file_is_rejected(tmp_path, path_kind):
    path = _write(tmp_path, [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.9}])
    with pytest.raises(AnnotationFormatError, match="results") as info:
        load_coco_json(path, "")
    assert isinstance(info.value, ValueError)
    assert path in str(info.value)


@pytest.mark.parametrize("content", [{"annotations": []}, {"images": {}}, 3, "text"])
def test_not_an_instances_file(tmp_path, path_kind, content):
    with pytest.raises(AnnotationFormatError, match="'images'"):
        load_coco_json(_write(tmp_path, content), "")


def test_invalid_json_names_the_file(tmp_path, path_kind):
    path = tmp_path / "broken.json"
    path.write_text('{"images": [')
    with pytest.raises(AnnotationFormatError, match="broken.json.*not valid JSON"):
        load_coco_json(path, "")


def _error_case(mutate):
    content = _coco()
    mutate(content)
    return content


ERROR_CASES = {
    "unknown category": (
        lambda c: c["annotations"][2].update(category_id=55),
        r"annotation 3 \(index 2\): category_id 55",
    ),
    "duplicate annotation id": (
        lambda c: c["annotations"][3].update(id=1),
        "annotation id 1 appears more than once",
    ),
    "missing image_id": (
        lambda c: c["annotations"][1].pop("image_id"),
        r"annotation 2 \(index 1\).*image_id",
    ),
    "missing bbox": (
        lambda c: c["annotations"][0].pop("bbox"),
        r"annotation 1 \(index 0\).*bbox",
    ),
    "bbox of 3 numbers": (
        lambda c: c["annotations"][0].update(bbox=[1, 2, 3]),
        r"annotation 1 \(index 0\): 'bbox'",
    ),
    "bbox of strings": (
        lambda c: c["annotations"][0].update(bbox=["1", "2", "3", "4"]),
        r"annotation 1 \(index 0\): 'bbox'",
    ),
    "segmentation of numbers": (
        lambda c: c["annotations"][0].update(segmentation=[1, 2, 3, 4, 5, 6]),
        r"annotation 1 \(index 0\): 'segmentation'",
    ),
    "segmentation a string": (
        lambda c: c["annotations"][0].update(segmentation="polygon"),
        r"annotation 1 \(index 0\): 'segmentation'",
    ),
    "annotation not a dict": (
        lambda c: c["annotations"].append([1, 2]),
        r"annotation None \(index 6\): Expected `object`, got `array`",
    ),
    "image without file_name": (
        lambda c: c["images"][1].pop("file_name"),
        r"image 10 \(index 1\).*file_name",
    ),
    "image file_name not a str": (
        lambda c: c["images"][1].update(file_name=5),
        r"image 10 \(index 1\): 'file_name'",
    ),
    "duplicate image id": (
        lambda c: c["images"][2].update(id=30),
        r"image 30 \(index 2\): image id 30 appears more than once",
    ),
    "duplicate category id": (
        lambda c: c["categories"].append({"id": 7, "name": "again"}),
        "category id 7 appears more than once",
    ),
    "category without id": (
        lambda c: c["categories"].append({"name": "anonymous"}),
        r"category None \(index 3\).*`id`",
    ),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_bad_data_raises_typed_error_naming_file_and_id(tmp_path, path_kind, case):
    mutate, pattern = ERROR_CASES[case]
    path = _write(tmp_path, _error_case(mutate))
    with pytest.raises(AnnotationFormatError, match=pattern) as info:
        load_coco_json(path, "")
    assert path in str(info.value)


def test_orphan_annotations_are_skipped_with_a_counted_warning(tmp_path, path_kind, caplog):
    content = _coco()
    content["annotations"] += [
        {"id": 100 + i, "image_id": 12345, "category_id": 3, "bbox": [0, 0, 1, 1]} for i in range(3)
    ]
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(_write(tmp_path, content), "")
    assert len(records) == 3  # no image dropped
    assert sum(len(r["annotations"]) for r in records) == 5
    message = next(r.getMessage() for r in caplog.records if "image_id" in r.getMessage())
    assert "skipped 3 annotations" in message and "(100, 12345)" in message


@pytest.mark.parametrize("bbox", [[0, 0, 0, 5], [0, 0, 5, 0], [3, 3, -1, 4], [3, 3, 4, -2]])
def test_empty_or_negative_bbox_skipped_with_warning(tmp_path, path_kind, caplog, bbox):
    content = _coco()
    content["annotations"][0]["bbox"] = bbox
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(_write(tmp_path, content), "")
    assert [a["category_id"] for a in records[0]["annotations"]] == [0, 1]
    assert any(
        "skipped 1 annotations with an empty or negative bbox" in r.getMessage()
        for r in caplog.records
    )


def test_ignore_flag_skips_annotation_with_warning(tmp_path, path_kind, caplog):
    content = _coco()
    content["annotations"][0]["ignore"] = 1
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(_write(tmp_path, content), "")
    assert len(records[0]["annotations"]) == 2
    assert any("skipped 1 annotations marked 'ignore'" in r.getMessage() for r in caplog.records)


def test_images_without_size_are_kept_with_a_warning(tmp_path, path_kind, caplog):
    content = _coco()
    del content["images"][2]["height"]
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(_write(tmp_path, content), "", keep_file_order=True)
    assert "height" not in records[2] and records[2]["width"] == 50
    assert any("1 images have no 'height' or 'width'" in r.getMessage() for r in caplog.records)


def test_file_without_annotations_or_categories(tmp_path, path_kind):
    content = {"images": _coco()["images"]}
    records = load_coco_json(_write(tmp_path, content), "", dataset_name="test_only")
    assert [r["annotations"] for r in records] == [[], [], []]
    assert MetadataCatalog.get("test_only").thing_classes == []


def test_metadata_conflict_is_reported(tmp_path, path_kind):
    MetadataCatalog.get("conflict").thing_classes = ["other"]
    with pytest.raises(MetadataConflictError, match="thing_classes"):
        load_coco_json(_write(tmp_path, _coco()), "", dataset_name="conflict")


def test_gc_is_re_enabled_after_success_and_failure(tmp_path, path_kind):
    assert gc.isenabled()
    load_coco_json(_write(tmp_path, _coco()), "")
    assert gc.isenabled()
    with pytest.raises(AnnotationFormatError):
        load_coco_json(_write(tmp_path, [], "results.json"), "")
    assert gc.isenabled()


def test_register_coco_instances_is_lazy(tmp_path, path_kind):
    path = tmp_path / "later.json"
    register_coco_instances("lazy_coco", {"extra": 1}, path, tmp_path / "imgs", keep_file_order=True)
    meta = MetadataCatalog.get("lazy_coco")
    assert meta.json_file == str(path)
    assert meta.image_root == str(tmp_path / "imgs")
    assert meta.evaluator_type == "coco"
    assert meta.extra == 1
    assert "thing_classes" not in meta  # the file has not been read
    path.write_text(json.dumps(_coco()))  # the file only needs to exist at the first get
    records = DatasetCatalog.get("lazy_coco")
    assert len(records) == 3
    assert records[1]["file_name"] == str(tmp_path / "imgs" / "a.jpg")
    assert meta.thing_classes == ["three", "seven", "ninety"]
    entry = DatasetCatalog.entry("lazy_coco")
    assert entry.source_files == (str(path),)
    assert entry.cache_key["json_file"] == os.path.abspath(path)


def test_register_coco_instances_missing_file_fails_at_get(tmp_path):
    register_coco_instances("missing_coco", {}, tmp_path / "nope.json", "")
    with pytest.raises(FileNotFoundError) as info:
        DatasetCatalog.get("missing_coco")
    assert any("missing_coco" in n for n in info.value.__notes__)


def test_register_coco_instances_metadata_conflict_rolls_back(tmp_path):
    MetadataCatalog.get("rollback").evaluator_type = "lvis"
    with pytest.raises(MetadataConflictError):
        register_coco_instances("rollback", {}, tmp_path / "x.json", "")
    assert "rollback" not in DatasetCatalog


def test_register_coco_instances_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="metadata"):
        register_coco_instances("badmeta", ["not", "a", "dict"], tmp_path / "x.json", "")
    with pytest.raises(TypeError, match="must be a str"):
        register_coco_instances(5, {}, tmp_path / "x.json", "")


def test_input_is_not_mutated_between_loads(tmp_path, path_kind):
    path = _write(tmp_path, _coco())
    first = load_coco_json(path, "")
    second = load_coco_json(path, "")
    assert first == second
    assert copy.deepcopy(first) == first


def test_make_synthetic_coco_shape_and_determinism(tmp_path):
    from tools.make_synthetic_coco import coco_category_ids, make_synthetic_coco

    first = tmp_path / "a.json"
    summary = make_synthetic_coco(str(first), num_images=300, seed=3)
    again = tmp_path / "b.json"
    make_synthetic_coco(str(again), num_images=300, seed=3)
    assert first.read_bytes() == again.read_bytes()  # same seed, same file
    other = tmp_path / "c.json"
    make_synthetic_coco(str(other), num_images=300, seed=4)
    assert other.read_bytes() != first.read_bytes()

    content = json.loads(first.read_text())
    assert len(content["images"]) == 300 == summary["images"]
    assert len(content["annotations"]) == summary["annotations"]
    assert 4 * 300 < summary["annotations"] < 11 * 300  # about 7.3 per image
    ids = [c["id"] for c in content["categories"]]
    assert ids == coco_category_ids() and len(ids) == 80 and ids[-1] == 90
    lengths = [
        len(p) for a in content["annotations"] if not a["iscrowd"] for p in a["segmentation"]
    ]
    assert min(lengths) >= 8 and max(lengths) <= 40 and all(n % 2 == 0 for n in lengths)
    crowd = [a for a in content["annotations"] if a["iscrowd"]]
    for ann in crowd:
        h, w = ann["segmentation"]["size"]
        assert sum(ann["segmentation"]["counts"]) == h * w
    assert summary["crowd"] == len(crowd)

    records = load_coco_json(first, "img", dataset_name="synthetic")
    assert len(records) == 300
    assert sum(len(r["annotations"]) for r in records) == summary["annotations"]
    assert len(MetadataCatalog.get("synthetic").thing_classes) == 80


def test_make_synthetic_coco_rejects_negative_count(tmp_path):
    from tools.make_synthetic_coco import make_synthetic_coco

    with pytest.raises(ValueError, match="num_images"):
        make_synthetic_coco(str(tmp_path / "x.json"), num_images=-1)


def test_gc_resume_keeps_an_application_freeze(tmp_path, path_kind):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        load_coco_json(_write(tmp_path, _coco()), "")
        assert gc.isenabled()
        assert gc.get_freeze_count() == frozen  # the application's freeze is not undone
    finally:
        gc.unfreeze()


def test_gc_stays_disabled_when_it_was_disabled(tmp_path, path_kind):
    gc.disable()
    try:
        load_coco_json(_write(tmp_path, _coco()), "")
        assert not gc.isenabled()
    finally:
        gc.enable()


# --- Regression tests: malformed values, and every parser giving the same verdict. ---------


@pytest.fixture
def parser():
    """The one decoder (msgspec); kept so the regression tests read as before."""
    return "msgspec"


def _write_bytes(tmp_path, data: bytes) -> str:
    path = tmp_path / "instances.json"
    path.write_bytes(data)
    return str(path)


MALFORMED_CASES = {
    "bbox with strings": (lambda c: c["annotations"][0].update(bbox=["1", "2", 3, 4]), "'bbox'"),
    "bbox with a bool": (lambda c: c["annotations"][0].update(bbox=[True, 0, 3, 4]), "'bbox'"),
    "bbox with an int beyond 64 bits": (
        lambda c: c["annotations"][0].update(bbox=[2**70, 0, 3, 4]), "'bbox'"
    ),
    "polygon of strings": (
        lambda c: c["annotations"][0].update(segmentation=[["1", "2", "3", "4", "5", "6"]]),
        "'segmentation'",
    ),
    "RLE without size": (lambda c: c["annotations"][1].update(segmentation={"counts": "abc"}),
                         "'segmentation'"),
    "RLE of garbage": (
        lambda c: c["annotations"][1].update(segmentation={"size": "x", "counts": 5}),
        "'segmentation'",
    ),
    "empty RLE dict": (lambda c: c["annotations"][1].update(segmentation={}), "'segmentation'"),
    "RLE counts not covering its size": (
        lambda c: c["annotations"][1].update(segmentation={"size": [20, 30], "counts": [1, 2]}),
        "sum to 3",
    ),
    "RLE string with bad characters": (
        lambda c: c["annotations"][5].update(segmentation={"size": [40, 60], "counts": "a b"}),
        "'segmentation' Expected `str` matching regex",
    ),
    "4-value keypoints": (lambda c: c["annotations"][2].update(keypoints=[1, 2, 2, 3]),
                          "'keypoints'"),
    "keypoint visibility 3": (lambda c: c["annotations"][2].update(keypoints=[1, 2, 3]),
                              "visibility"),
    "keypoints not matching the category": (
        lambda c: (c["categories"][0].update(keypoints=["a", "b", "c"]),
                   c["annotations"][2].update(keypoints=[1, 2, 2])),
        "the category names 3",
    ),
    "zero height": (lambda c: c["images"][0].update(height=0), "'height'"),
    "negative width": (lambda c: c["images"][0].update(width=-5), "'width'"),
    "string height": (lambda c: c["images"][0].update(height="480"), "'height'"),
    "huge width": (lambda c: c["images"][0].update(width=10**12), "'width'"),
    "float height": (lambda c: c["images"][0].update(height=480.0), "'height'"),
    "bool image id": (lambda c: c["images"][0].update(id=True), "'id'"),
    "iscrowd 2": (lambda c: c["annotations"][0].update(iscrowd=2), "'iscrowd'"),
    "area a string": (lambda c: c["annotations"][0].update(area="12"), "'area'"),
    "num_keypoints negative": (lambda c: c["annotations"][2].update(num_keypoints=-1),
                               "'num_keypoints'"),
    "category name a number": (lambda c: c["categories"][0].update(name=5), "'name'"),
    "annotations false": (lambda c: c.update(annotations=False), "'annotations'"),
    "file name with NUL": (lambda c: c["images"][0].update(file_name="a\x00b"), "NUL"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_CASES))
def test_malformed_values_raise_on_every_path(tmp_path, parser, case):
    mutate, pattern = MALFORMED_CASES[case]
    content = _coco()
    mutate(content)
    path = _write(tmp_path, content)
    with pytest.raises(AnnotationFormatError, match=pattern) as info:
        load_coco_json(path, "")
    assert path in str(info.value)


BAD_BYTES_CASES = {
    "invalid UTF-8 in a key the loader skips": b'{"info": "\xff\xfe", "images": []}',
    "invalid UTF-8 in a file name": b'{"images": [{"id": 1, "file_name": "\xc0\xaf"}]}',
    "UTF-8 encoded surrogate": b'{"info": "\xed\xa0\x80", "images": []}',
    "UTF-16 file": '{"images": []}'.encode("utf-16"),
    "byte order mark": b'\xef\xbb\xbf{"images": []}',
    "lone surrogate escape": b'{"info": "\\ud800", "images": []}',
    "NaN": b'{"info": NaN, "images": []}',
    "deep nesting in a skipped key": b'{"info": ' + b"[" * 5000 + b"]" * 5000 + b', "images": []}',
    "very deep nesting (crashed orjson 3.8)": b"[" * 2_000_000 + b"]" * 2_000_000,
    "huge number in a bbox": (
        b'{"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}], "annotations": '
        b'[{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1e400, 0, 1, 1]}]}'
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BYTES_CASES))
def test_bad_bytes_raise_a_typed_error_naming_the_file(tmp_path, parser, case):
    path = _write_bytes(tmp_path, BAD_BYTES_CASES[case])
    with pytest.raises(AnnotationFormatError) as info:
        load_coco_json(path, "")
    assert path in str(info.value)


@pytest.mark.parametrize("raw", [b"1e400", b"1" * 5000, b"123456789012345678901234567890"])
def test_huge_numbers_where_the_loader_does_not_read_are_ignored(tmp_path, parser, raw):
    content = json.dumps(_coco()).encode()
    data = content.replace(b'"fixture"', raw)  # info.description
    records = load_coco_json(_write_bytes(tmp_path, data), "")
    assert len(records) == 3


def test_huge_int_id_gives_the_same_verdict_on_every_path(tmp_path, parser):
    # msgspec and json read 2**64 + 5 as an int, orjson as a float: refused everywhere.
    data = json.dumps(_coco()).encode().replace(b'"id": 30', b'"id": 18446744073709551621')
    with pytest.raises(AnnotationFormatError, match=r"\(index 0\): 'id' Expected `int` <="):
        load_coco_json(_write_bytes(tmp_path, data), "")


def test_nesting_deeper_than_the_limit_is_refused(tmp_path, parser):
    data = b'{"info": ' + b"[" * 1024 + b"]" * 1024 + b', "images": []}'
    with pytest.raises(AnnotationFormatError, match="nested deeper than 1024"):
        load_coco_json(_write_bytes(tmp_path, data), "")


def test_nesting_up_to_the_limit_loads(tmp_path, parser):
    depth = 1024 - 1  # the top-level object is the first level
    data = b'{"info": ' + b"[" * depth + b"]" * depth + b', "images": []}'
    assert load_coco_json(_write_bytes(tmp_path, data), "") == []


def test_negative_area_is_skipped_with_a_counted_warning(tmp_path, parser, caplog):
    content = _coco()
    content["annotations"][0]["area"] = -1
    with caplog.at_level(logging.WARNING, logger="catalog.formats.coco"):
        records = load_coco_json(_write(tmp_path, content), "")
    assert [a["category_id"] for a in records[0]["annotations"]] == [0, 1]
    messages = [r.getMessage() for r in caplog.records]
    assert any("skipped 1 annotations with a negative area" in m for m in messages)


def test_rle_dict_is_rebuilt_with_size_and_counts(tmp_path, parser):
    content = _coco()
    content["annotations"][1]["segmentation"]["extra"] = {"ignored": True}
    records = load_coco_json(_write(tmp_path, content), "", keep_file_order=True)
    rle = records[1]["annotations"][0]["segmentation"]
    assert rle == {"counts": [10, 5, 585], "size": [20, 30]}


def test_extra_keys_of_record_fields_do_not_overwrite_checked_values(tmp_path, parser):
    records = load_coco_json(
        _write(tmp_path, _coco()), "", extra_annotation_keys=["segmentation", "id", "area"],
        keep_file_order=True,
    )
    first = records[0]["annotations"][0]
    assert first["segmentation"] == [[0, 0, 1, 0, 1, 1]]  # invalid polygon still dropped
    assert first["id"] == 1 and first["area"] == 12.0


def test_extra_key_values_are_checked(tmp_path, parser):
    content = _coco()
    deep: list = [1]
    for _ in range(40):
        deep = [deep]
    content["annotations"][0]["attributes"] = {"deep": deep}
    with pytest.raises(AnnotationFormatError, match="'attributes'"):
        load_coco_json(_write(tmp_path, content), "", extra_annotation_keys=["attributes"])
    records = load_coco_json(_write(tmp_path, content), "")  # not copied: not checked
    assert "attributes" not in records[0]["annotations"][0]


def test_register_coco_instances_metadata_may_set_evaluator_type(tmp_path):
    from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances

    path = tmp_path / "c.json"
    path.write_text('{"images": [], "annotations": [], "categories": []}')
    register_coco_instances("eval_type", {"evaluator_type": "lvis"}, str(path), str(tmp_path))
    assert MetadataCatalog.get("eval_type").evaluator_type == "lvis"
    assert "eval_type" in DatasetCatalog
