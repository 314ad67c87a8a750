"""LVIS loader: v1 (coco_url) and v0.5 (file_name) files, LVIS keys, checks, registration."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalog.formats.coco as lvis_module
from catalog import (
    AnnotationFormatError,
    BoxMode,
    DatasetCatalog,
    MetadataCatalog,
    load_lvis_json,
    register_lvis_instances,
)

EXTERNAL_LVIS = Path("/work/shared/external/lvis")


def _category(cat_id: int, name: str, frequency: str, image_count: int) -> dict:
    # The LVIS category format: id, name, synonyms, synset, def, frequency, counts.
    return {
        "id": cat_id,
        "name": name,
        "synonyms": [name, name + "_alias"],
        "synset": f"{name}.n.01",
        "def": f"a {name}",
        "frequency": frequency,
        "image_count": image_count,
        "instance_count": image_count * 2,
    }


def lvis_v1_data() -> dict:
    """A small LVIS v1 file as the format documentation describes it: images name their file
    only through coco_url and list not-exhaustive and negative categories."""
    images = [
        {"id": 9, "coco_url": "http://images.cocodataset.org/val2017/000000000009.jpg",
         "height": 480, "width": 640, "not_exhaustive_category_ids": [7],
         "neg_category_ids": [3], "license": 1, "flickr_url": "http://x/9.jpg"},
        {"id": 4, "coco_url": "http://images.cocodataset.org/train2017/000000000004.jpg",
         "height": 100, "width": 200, "not_exhaustive_category_ids": [],
         "neg_category_ids": [1, 7]},
    ]
    annotations = [
        {"id": 1, "image_id": 9, "category_id": 7, "bbox": [10, 20, 30, 40], "area": 1200.0,
         "segmentation": [[10, 20, 40, 20, 40, 60, 10, 60]]},
        {"id": 2, "image_id": 4, "category_id": 1, "bbox": [1, 2, 3, 4], "area": 12.0,
         "segmentation": [[1, 2, 4, 2, 4, 6]]},
        {"id": 3, "image_id": 9, "category_id": 3, "bbox": [0, 0, 5, 5], "area": 25.0,
         "segmentation": [[0, 0, 5, 0, 5, 5, 0, 5]]},
    ]
    categories = [
        _category(7, "zebra", "f", 150),
        _category(1, "acorn", "r", 3),
        _category(3, "bagel", "c", 40),
    ]
    return {"info": {}, "licenses": [], "images": images, "annotations": annotations,
            "categories": categories}


def write(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_v1_file_names_from_coco_url_and_lvis_keys(tmp_path: Path) -> None:
    json_file = write(tmp_path / "lvis_v1_val.json", lvis_v1_data())
    records = load_lvis_json(json_file, str(tmp_path / "coco"), "lvis_test_v1")
    assert [r["image_id"] for r in records] == [4, 9]  # sorted by image id
    assert records[0]["file_name"] == os.path.join(str(tmp_path / "coco"), "train2017",
                                                   "000000000004.jpg")
    assert records[1]["file_name"].endswith(os.path.join("coco", "val2017", "000000000009.jpg"))
    assert records[1]["not_exhaustive_category_ids"] == [7]
    assert records[1]["neg_category_ids"] == [3]
    assert records[0]["neg_category_ids"] == [1, 7]
    assert (records[1]["height"], records[1]["width"]) == (480, 640)
    # contiguous ids by sorted LVIS id: 1 -> 0, 3 -> 1, 7 -> 2
    assert [a["category_id"] for a in records[1]["annotations"]] == [2, 1]
    ann = records[0]["annotations"][0]
    assert ann["bbox"] == [1, 2, 3, 4] and ann["bbox_mode"] == BoxMode.XYWH_ABS
    assert ann["segmentation"] == [[1, 2, 4, 2, 4, 6]]
    meta = MetadataCatalog.get("lvis_test_v1")
    assert meta.thing_classes == ["acorn", "bagel", "zebra"]
    assert meta.thing_dataset_id_to_contiguous_id == {1: 0, 3: 1, 7: 2}
    assert meta.class_image_count == [
        {"id": 1, "image_count": 3}, {"id": 3, "image_count": 40}, {"id": 7, "image_count": 150}
    ]
    assert meta.class_frequency == ["r", "c", "f"]


def test_v0_5_file_names_and_missing_lists(tmp_path: Path) -> None:
    data = lvis_v1_data()
    for img in data["images"]:
        del img["coco_url"]
        img["file_name"] = f"COCO_val2014_{img['id']:012d}.jpg"
    del data["images"][1]["neg_category_ids"]
    del data["images"][1]["not_exhaustive_category_ids"]
    records = load_lvis_json(write(tmp_path / "v05.json", data), "imgs")
    assert records[0]["file_name"] == os.path.join("imgs", "COCO_val2014_000000000004.jpg")
    assert records[0]["neg_category_ids"] == [] and records[0]["not_exhaustive_category_ids"] == []


def test_extra_annotation_keys(tmp_path: Path) -> None:
    records = load_lvis_json(write(tmp_path / "a.json", lvis_v1_data()), "", None, ["area", "id"])
    assert records[0]["annotations"][0]["area"] == 12.0
    assert records[0]["annotations"][0]["id"] == 2


def test_existing_frequency_metadata_is_kept(tmp_path: Path) -> None:
    MetadataCatalog.get("lvis_test_keep").set(class_image_count=[{"id": 0, "image_count": 1}])
    load_lvis_json(write(tmp_path / "a.json", lvis_v1_data()), "", "lvis_test_keep")
    meta = MetadataCatalog.get("lvis_test_keep")
    assert meta.class_image_count == [{"id": 0, "image_count": 1}]
    assert meta.class_frequency == ["r", "c", "f"]


def _set(path: tuple, value: object):
    def edit(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (_set(("images", 0, "coco_url"), 5), "coco_url"),
        (_set(("images", 0, "coco_url"), "http://x/../a.jpg"), "coco_url"),
        (_set(("images", 0, "coco_url"), "a.jpg"), "coco_url"),
        (_set(("images", 0, "coco_url"), "http://x/val/"), "coco_url"),
        (_set(("images", 0, "neg_category_ids"), [99]), "neg_category_ids"),
        (_set(("images", 0, "neg_category_ids"), "3"), "neg_category_ids"),
        (_set(("images", 1, "not_exhaustive_category_ids"), [1.5]), "not_exhaustive"),
        (_set(("images", 0), [1]), r"image None \(index 0\)"),
        (_set(("categories", 0, "frequency"), "x"), "frequency"),
        (_set(("categories", 0, "image_count"), -1), "image_count"),
        (_set(("categories", 1, "instance_count"), True), "instance_count"),
        (_set(("categories", 2, "synonyms"), []), "synonyms"),
        (_set(("annotations", 0, "category_id"), 8), "category_id"),
        (_set(("annotations", 0, "bbox"), [1, 2, 3]), "bbox"),
        (_set(("images",), None), "images"),
    ],
)
def test_malformed_values_raise_typed_errors(tmp_path: Path, edit, pattern: str) -> None:
    data = lvis_v1_data()
    edit(data)
    json_file = write(tmp_path / "bad.json", data)
    with pytest.raises(AnnotationFormatError, match=pattern) as info:
        load_lvis_json(json_file, "coco")
    assert json_file in str(info.value)


def test_invalid_json_and_non_regular_file(tmp_path: Path) -> None:
    bad = tmp_path / "nan.json"
    bad.write_text('{"images": [], "x": NaN}')
    with pytest.raises(AnnotationFormatError, match="not valid JSON"):
        load_lvis_json(str(bad), "")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(AnnotationFormatError, match="not a regular file"):
        load_lvis_json(str(fifo), "")  # never blocks on a FIFO


def test_invalid_polygons_are_dropped_and_counted(tmp_path: Path) -> None:
    data = lvis_v1_data()
    data["annotations"][0]["segmentation"] = [[0, 0, 1, 1], [0, 0, 4, 0, 4, 4]]
    data["annotations"][1]["segmentation"] = [[0, 0]]
    records = load_lvis_json(write(tmp_path / "p.json", data), "")
    assert records[0]["annotations"] == []
    assert records[1]["annotations"][0]["segmentation"] == [[0, 0, 4, 0, 4, 4]]


def test_register_loads_lazily_and_caches(tmp_path: Path, monkeypatch) -> None:
    json_file = write(tmp_path / "lvis.json", lvis_v1_data())
    register_lvis_instances("lvis_test_reg", {"extra_key": 1}, json_file, str(tmp_path))
    meta = MetadataCatalog.get("lvis_test_reg")
    assert meta.evaluator_type == "lvis" and meta.json_file == json_file and meta.extra_key == 1
    assert "thing_classes" not in meta  # nothing read yet
    first = list(DatasetCatalog.get("lvis_test_reg"))
    assert meta.thing_classes == ["acorn", "bagel", "zebra"]
    # a second registration reads the cache: the loader does not run, metadata comes back
    DatasetCatalog.remove("lvis_test_reg")
    MetadataCatalog.remove("lvis_test_reg")

    def refuse(*args, **kwargs):
        raise AssertionError("the cache should have served the records")

    monkeypatch.setattr(lvis_module, "load_coco_records", refuse)
    register_lvis_instances("lvis_test_reg", {"extra_key": 1}, json_file, str(tmp_path))
    assert list(DatasetCatalog.get("lvis_test_reg")) == first
    assert MetadataCatalog.get("lvis_test_reg").class_frequency == ["r", "c", "f"]


def test_register_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        register_lvis_instances("x", [], "a.json", "")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        register_lvis_instances(3, {}, "a.json", "")  # type: ignore[arg-type]


@pytest.mark.skipif(not EXTERNAL_LVIS.is_dir(), reason="external LVIS samples not present")
def test_real_lvis_v0_5_sample_loads() -> None:
    from catalog.formats.builtin import LVIS_V0_5_CLASSES

    records = load_lvis_json(EXTERNAL_LVIS / "lvis_val_100.json", "coco", "lvis_test_real")
    assert len(records) == 100
    assert sum(len(r["annotations"]) for r in records) > 900
    assert all(r["file_name"].startswith(os.path.join("coco", "val2017", "")) for r in records)
    ids = [r["image_id"] for r in records]
    assert ids == sorted(ids)
    assert any(r["neg_category_ids"] for r in records)
    meta = MetadataCatalog.get("lvis_test_real")
    assert meta.thing_classes == list(LVIS_V0_5_CLASSES)  # the bundled v0.5 class names agree
    fake = EXTERNAL_LVIS / "mmdetection_test_lvis_inline_fake.json"
    if fake.exists():
        assert len(load_lvis_json(fake, "coco")) == 4


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6,
)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, prefix + (index,))
    return out


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_value_anywhere_loads_or_raises_the_typed_error(tmp_path_factory, data) -> None:
    lvis = lvis_v1_data()
    path = data.draw(st.sampled_from(_paths(lvis)))
    _set(path, data.draw(_JSON_VALUES))(lvis)
    json_file = write(tmp_path_factory.mktemp("fuzz") / "f.json", lvis)
    try:
        records = load_lvis_json(json_file, "coco")
    except AnnotationFormatError as error:
        assert json_file in str(error)
    else:
        assert all(isinstance(r["neg_category_ids"], list) for r in records)
        assert all(isinstance(r["file_name"], str) for r in records)
