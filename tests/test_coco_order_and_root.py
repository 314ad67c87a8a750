"""COCO and LVIS: records sorted by image id (switch: the file's order); image file names must
resolve under image_root unless the user allows otherwise (one policy for both loaders)."""

from __future__ import annotations

import json
import os

import pytest

from catalog import (
    AnnotationFormatError,
    DatasetCatalog,
    MetadataCatalog,
    load_coco_json,
    load_lvis_json,
    register_coco_instances,
    register_lvis_instances,
)

FILE_ORDER = [30, 5, 20, 10]


def _coco(names: list[str] | None = None) -> dict:
    names = names or [f"{i}.jpg" for i in FILE_ORDER]
    images = [{"id": i, "file_name": n, "height": 8, "width": 8} for i, n in zip(FILE_ORDER, names)]
    annotations = [{"id": k + 1, "image_id": i, "category_id": 1, "bbox": [0, 0, 2, 2]}
                   for k, i in enumerate(FILE_ORDER)]
    return {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}


def _lvis(names: list[str] | None = None, urls: list[str] | None = None) -> dict:
    data = _coco(names)
    for k, image in enumerate(data["images"]):
        image.update(not_exhaustive_category_ids=[], neg_category_ids=[])
        if urls is not None:
            del image["file_name"]
            image["coco_url"] = urls[k]
    data["categories"][0].update(synonyms=["a"], frequency="f", image_count=1)
    return data


def _write(tmp_path, data: dict) -> str:
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("load", [load_coco_json, load_lvis_json])
def test_records_sorted_by_image_id_unless_file_order_is_kept(tmp_path, load):
    path = _write(tmp_path, _lvis() if load is load_lvis_json else _coco())
    assert [r["image_id"] for r in load(path, str(tmp_path))] == sorted(FILE_ORDER)
    kept = load(path, str(tmp_path), keep_file_order=True)
    assert [r["image_id"] for r in kept] == FILE_ORDER
    assert [r["annotations"][0]["bbox"] for r in kept] == [[0, 0, 2, 2]] * 4


@pytest.mark.parametrize("register", [register_coco_instances, register_lvis_instances])
def test_registered_order_switch_is_part_of_the_cache_key(tmp_path, monkeypatch, register):
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path, _lvis() if register is register_lvis_instances else _coco())
    try:
        register("order_sorted", {}, path, str(tmp_path))
        register("order_file", {}, path, str(tmp_path), keep_file_order=True)
        # the second load of the same file must not be served the first one's cache entry
        assert [r["image_id"] for r in DatasetCatalog.get("order_sorted")] == sorted(FILE_ORDER)
        assert [r["image_id"] for r in DatasetCatalog.get("order_file")] == FILE_ORDER
    finally:
        for name in ("order_sorted", "order_file"):
            DatasetCatalog.remove(name)
            MetadataCatalog.remove(name)


OUTSIDE = ["/etc/passwd", "../secret.jpg", "a/../../secret.jpg", "..", "\\\\host\\share\\x.jpg"]


@pytest.mark.parametrize("load", [load_coco_json, load_lvis_json])
@pytest.mark.parametrize("name", OUTSIDE)
def test_file_names_outside_image_root_are_refused(tmp_path, load, name):
    names = ["30.jpg", "5.jpg", name, "10.jpg"]
    path = _write(tmp_path, _lvis(names) if load is load_lvis_json else _coco(names))
    with pytest.raises(AnnotationFormatError) as info:
        load(path, str(tmp_path / "images"), "root_policy")
    message = str(info.value)
    for part in ("'root_policy'", path, "image 20 (index 2)", "'file_name'",
                 "allow_outside_root=True"):
        assert part in message
    records = load(path, str(tmp_path / "images"), allow_outside_root=True, keep_file_order=True)
    expected = name if name.startswith("/") else os.path.join(str(tmp_path / "images"), name)
    assert records[2]["file_name"] == expected


@pytest.mark.parametrize("load", [load_coco_json, load_lvis_json])
def test_relative_names_and_dotdot_that_stays_inside_are_accepted(tmp_path, load):
    names = ["train/30.jpg", "a/../5.jpg", "./20.jpg", "x..y/10.jpg"]
    path = _write(tmp_path, _lvis(names) if load is load_lvis_json else _coco(names))
    records = load(path, "root", keep_file_order=True)
    assert [r["file_name"] for r in records] == [os.path.join("root", n) for n in names]


def test_register_refuses_outside_names_at_the_first_get(tmp_path, monkeypatch):
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(tmp_path / "cache"))
    path = _write(tmp_path, _coco(["30.jpg", "5.jpg", "../20.jpg", "10.jpg"]))
    try:
        register_coco_instances("outside_refused", {}, path, str(tmp_path))
        with pytest.raises(AnnotationFormatError, match="outside_refused"):
            DatasetCatalog.get("outside_refused")
        register_coco_instances("outside_allowed", {}, path, str(tmp_path), allow_outside_root=True)
        assert len(DatasetCatalog.get("outside_allowed")) == 4
    finally:
        for name in ("outside_refused", "outside_allowed"):
            DatasetCatalog.remove(name)
            MetadataCatalog.remove(name)


def test_lvis_coco_url_and_file_name_follow_one_policy(tmp_path):
    urls = [f"http://images.cocodataset.org/val2017/{i}.jpg" for i in FILE_ORDER]
    path = _write(tmp_path, _lvis(urls=urls))
    records = load_lvis_json(path, "coco")
    assert records[0]["file_name"] == os.path.join("coco", "val2017", "5.jpg")
    urls[1] = "http://images.cocodataset.org/../5.jpg"  # '..' in coco_url: refused
    with pytest.raises(AnnotationFormatError, match="coco_url"):
        load_lvis_json(_write(tmp_path, _lvis(urls=urls)), "coco")


@pytest.mark.parametrize("img_path", ["/etc/passwd", "../outside.jpg", "a/../../b.jpg"])
def test_openmmlab_img_path_follows_the_same_root_policy(tmp_path, img_path):
    from catalog import load_annotation_file
    from catalog.formats.validate import AnnotationFieldError

    ann = tmp_path / "train.json"
    ann.write_text(json.dumps({"metainfo": {"classes": ["a"]}, "data_list": [
        {"img_path": img_path, "img_id": 7, "height": 8, "width": 8, "instances": []}]}))
    with pytest.raises(AnnotationFieldError) as err:
        load_annotation_file(ann, data_prefix={"img_path": "images"})
    assert err.value.key == "img_path" and err.value.img_id == 7
    _, records = load_annotation_file(ann, data_prefix={"img_path": "images"},
                                      allow_outside_root=True)
    assert records[0]["file_name"] == os.path.join("images", img_path)
    _, inside = load_annotation_file(ann, record_format="openmmlab", allow_outside_root=True)
    assert inside[0]["img_path"] == img_path
