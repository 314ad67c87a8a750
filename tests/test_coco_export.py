"""convert_to_coco_dict / convert_to_coco_json: records back to a COCO file, and round trips."""

from __future__ import annotations

import copy
import json
import os
import pickle

import numpy as np
import pytest

from catalog import BoxMode, DatasetCatalog, MetadataCatalog, load_coco_json
from catalog.formats.coco import register_coco_instances
from catalog.formats.export import convert_to_coco_dict, convert_to_coco_json, polygons_area, rle_area
from catalog.formats.validate import CocoExportError

EXTERNAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "external", "coco")


def _coco_fixture() -> dict:
    """Two images; polygons, a compressed and an uncompressed RLE, keypoints, a crowd, and
    category ids that are not contiguous (3 and 7)."""
    mask_util = pytest.importorskip("pycocotools.mask")
    mask = np.zeros((10, 12), np.uint8, order="F")
    mask[2:6, 3:9] = 1
    compressed = mask_util.encode(mask)
    compressed["counts"] = compressed["counts"].decode("ascii")
    return {
        "images": [
            {"id": 5, "file_name": "a.jpg", "height": 10, "width": 12},
            {"id": 2, "file_name": "b.jpg", "height": 10, "width": 12},
            {"id": 8, "file_name": "c.jpg", "height": 10, "width": 12},
        ],
        "categories": [
            {"id": 7, "name": "dog", "keypoints": ["nose", "tail"]},
            {"id": 3, "name": "cat"},
        ],
        "annotations": [
            {"id": 1, "image_id": 5, "category_id": 7, "bbox": [1, 2, 4, 3], "iscrowd": 0,
             "segmentation": [[1, 2, 5, 2, 5, 5, 1, 5]], "area": 12,
             "keypoints": [2, 3, 2, 4, 4, 1], "num_keypoints": 2},
            {"id": 2, "image_id": 5, "category_id": 3, "bbox": [3, 2, 6, 4], "iscrowd": 1,
             "segmentation": compressed, "area": 24},
            {"id": 3, "image_id": 2, "category_id": 3, "bbox": [0.5, 0.25, 2.125, 3],
             "iscrowd": 0, "segmentation": {"size": [10, 12], "counts": [5, 7, 108]},
             "area": 7},
            {"id": 4, "image_id": 2, "category_id": 7, "bbox": [1, 1, 2, 2], "iscrowd": 0,
             "keypoints": [0, 0, 0, 1, 1, 2], "num_keypoints": 1},
        ],
    }


def _register(tmp_path, data: dict, name: str = "export_src") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    register_coco_instances(name, {}, str(path), "imgs", cache=False, keep_file_order=True)
    return str(path)


def test_convert_fields(tmp_path):
    _register(tmp_path, _coco_fixture())
    coco = convert_to_coco_dict("export_src")
    assert coco["categories"] == [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}]
    assert [i["id"] for i in coco["images"]] == [5, 2, 8]
    assert coco["images"][0] == {"id": 5, "width": 12, "height": 10, "file_name": "imgs/a.jpg"}
    anns = coco["annotations"]
    assert [a["id"] for a in anns] == [1, 2, 3, 4]
    first = anns[0]
    assert first["bbox"] == [1.0, 2.0, 4.0, 3.0] and first["category_id"] == 7
    assert first["area"] == 12.0  # shoelace of the polygon, not the box
    assert first["keypoints"] == [2, 3, 2, 4, 4, 1] and first["num_keypoints"] == 2
    assert anns[1]["area"] == 24.0 and anns[1]["iscrowd"] == 1  # compressed RLE pixel count
    assert anns[2]["area"] == 7.0  # uncompressed RLE
    assert anns[3]["area"] == 4.0  # box area when there is no mask
    json.dumps(coco, allow_nan=False)


def test_round_trip_gives_the_same_records(tmp_path):
    data = _coco_fixture()
    src = _register(tmp_path, data)
    before = copy.deepcopy(list(DatasetCatalog.get("export_src")))
    out = tmp_path / "out" / "export.json"
    convert_to_coco_json("export_src", out)
    assert list(DatasetCatalog.get("export_src")) == before  # records not modified
    again = load_coco_json(out, "", "export_again")
    # file_name already holds image_root; everything else is identical.
    assert again == load_coco_json(src, "imgs")
    assert MetadataCatalog.get("export_again").thing_dataset_id_to_contiguous_id == {3: 0, 7: 1}
    assert not [p for p in os.listdir(out.parent) if p.endswith(".tmp")]


def test_round_trip_of_external_coco_sample(tmp_path):
    path = os.path.join(EXTERNAL, "mmdetection_coco_dummy_instances_val2017.json")
    if not os.path.exists(path):
        pytest.skip("shared external samples are not available")
    register_coco_instances("external_src", {}, path, "", cache=False)
    out = tmp_path / "external.json"
    convert_to_coco_json("external_src", out)
    assert load_coco_json(out, "") == load_coco_json(path, "")
    # The areas are the shoelace areas of the polygons, as the file's own (COCO's) areas.
    original = {a["bbox"][0]: a["area"] for a in json.load(open(path))["annotations"]
                if isinstance(a.get("segmentation"), list) and len(a["segmentation"]) == 1}
    exported = json.loads(out.read_text())["annotations"]
    close = [abs(a["area"] - original[a["bbox"][0]]) <= 0.01 * original[a["bbox"][0]] + 1
             for a in exported if a["bbox"][0] in original]
    assert close and all(close)


def test_xyxy_records_and_no_id_map(tmp_path):
    def load():
        return [{"file_name": "x.jpg", "height": 8, "width": 8, "annotations": [
            {"bbox": np.array([1.0, 2.0, 5.0, 7.0]), "bbox_mode": BoxMode.XYXY_ABS,
             "category_id": np.int64(1)}]}]

    DatasetCatalog.register("export_plain", load)
    MetadataCatalog.get("export_plain").set(thing_classes=["a", "b"])
    coco = convert_to_coco_dict("export_plain")
    assert coco["images"][0]["id"] == 0  # no image_id: the index
    assert coco["categories"] == [{"id": 0, "name": "a"}, {"id": 1, "name": "b"}]
    assert coco["annotations"][0]["bbox"] == [1.0, 2.0, 4.0, 5.0]
    assert coco["annotations"][0]["area"] == 20.0


def test_no_annotations_key_when_empty(tmp_path):
    DatasetCatalog.register("export_empty", lambda: [
        {"file_name": "x.jpg", "height": 8, "width": 8, "image_id": 1, "annotations": []}])
    MetadataCatalog.get("export_empty").set(thing_classes=["a"])
    assert "annotations" not in convert_to_coco_dict("export_empty")


@pytest.mark.parametrize(
    ("record", "key"),
    [
        ({"file_name": "x.jpg", "height": 8}, "width"),
        ({"file_name": "x.jpg", "height": 8, "width": 8,
          "annotations": [{"bbox": [0, 0, 1, 1], "category_id": 0}]}, "bbox"),
        ({"file_name": "x.jpg", "height": 8, "width": 8,
          "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": 5}]},
         "category_id"),
        ({"file_name": "x.jpg", "height": 8, "width": 8,
          "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": 0,
                           "segmentation": {"size": [2, 2], "counts": "!!"}}]},
         "segmentation"),
        ({"file_name": "x.jpg", "height": 8, "width": 8,
          "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": 0,
                           "keypoints": [1, 2]}]}, "keypoints"),
    ],
)
def test_errors_name_dataset_record_and_key(record, key):
    DatasetCatalog.register("export_bad", lambda: [{"file_name": "ok.jpg", "height": 1,
                                                    "width": 1}, record])
    MetadataCatalog.get("export_bad").set(
        thing_classes=["a"], thing_dataset_id_to_contiguous_id={1: 0})
    with pytest.raises(CocoExportError) as info:
        convert_to_coco_dict("export_bad")
    err = info.value
    assert (err.dataset, err.index, err.key) == ("export_bad", 1, key)
    assert "'export_bad', record 1" in str(err)
    assert pickle.loads(pickle.dumps(err)).key == key


def test_missing_thing_classes():
    DatasetCatalog.register("export_nometa", lambda: [{"file_name": "x.jpg"}])
    with pytest.raises(CocoExportError, match="thing_classes"):
        convert_to_coco_dict("export_nometa")


def test_allow_cached(tmp_path):
    _register(tmp_path, _coco_fixture())
    out = tmp_path / "cached.json"
    out.write_text("{}")
    convert_to_coco_json("export_src", out)
    assert out.read_text() == "{}"
    convert_to_coco_json("export_src", out, allow_cached=False)
    assert len(json.loads(out.read_text())["annotations"]) == 4


def test_area_helpers_agree_with_pycocotools():
    mask_util = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = np.asfortranarray((rng.random((17, 23)) > 0.6).astype(np.uint8))
        rle = mask_util.encode(mask)
        assert rle_area(rle) == int(mask.sum()) == int(mask_util.area(rle))
    assert polygons_area([[0, 0, 4, 0, 4, 2, 0, 2], [0, 0, 1, 0, 0, 1]]) == 8.5
