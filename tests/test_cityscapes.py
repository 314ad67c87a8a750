"""Cityscapes loaders: instances from the polygon json (and from instanceIds PNGs), semantic."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from catalog import BoxMode
from catalog.formats.cityscapes import load_cityscapes_instances, load_cityscapes_semantic
from catalog.formats.cityscapes import STUFF_CLASSES, THING_CLASSES, THING_ID_TO_CONTIGUOUS
from catalog.formats.validate import CityscapesFormatError

Image = pytest.importorskip("PIL.Image")
mask_util = pytest.importorskip("pycocotools.mask")
pytest.importorskip("cv2")

H, W = 24, 32
BASE = "aachen_000000_000019_"


def _rect(x0, y0, x1, y1):
    """A polygon covering pixel columns x0..x1 and rows y0..y1 (inclusive)."""
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


OBJECTS = [
    {"label": "road", "polygon": _rect(0, 0, 31, 23)},
    {"label": "person", "polygon": _rect(2, 2, 9, 7)},
    {"label": "car", "polygon": _rect(14, 10, 25, 17)},
    {"label": "pole", "polygon": _rect(6, 0, 7, 23)},  # covers person columns 6..7
    {"label": "car", "polygon": _rect(20, 1, 22, 3)},
    {"label": "building", "polygon": _rect(19, 0, 23, 4)},  # covers the car above entirely
    {"label": "cargroup", "polygon": _rect(27, 18, 30, 21)},
    {"label": "car", "polygon": _rect(0, 20, 3, 23), "deleted": 1},
    {"label": "license plate", "polygon": _rect(15, 16, 16, 17)},  # never drawn
]


def _expected_masks():
    """The visible pixels of the three kept instances, in detectron2's (reverse) order."""
    person = np.zeros((H, W), bool)
    person[2:8, 2:10] = True
    person[:, 6:8] = False
    car = np.zeros((H, W), bool)
    car[10:18, 14:26] = True
    group = np.zeros((H, W), bool)
    group[18:22, 27:31] = True
    return [("car", True, group), ("car", False, car), ("person", False, person)]


def _write(tmp_path, objects=OBJECTS, json_text=None, city="aachen"):
    image_dir, gt_dir = tmp_path / "leftImg8bit" / "val", tmp_path / "gtFine" / "val"
    (image_dir / city).mkdir(parents=True, exist_ok=True)
    (gt_dir / city).mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((H, W, 3), np.uint8)).save(
        image_dir / city / f"{BASE}leftImg8bit.png")
    (gt_dir / city / f"{BASE}gtFine_polygons.json").write_text(
        json_text if json_text is not None else
        json.dumps({"imgHeight": H, "imgWidth": W, "objects": objects}))
    ids = np.zeros((H, W), np.uint16)
    ids[:] = 7  # road
    for k, (name, crowd, mask) in enumerate(_expected_masks()):
        label_id = {"car": 26, "person": 24}[name]
        ids[mask] = label_id if crowd else label_id * 1000 + k
    Image.fromarray(ids).save(gt_dir / city / f"{BASE}gtFine_instanceIds.png")
    Image.fromarray(np.zeros((H, W), np.uint8)).save(
        gt_dir / city / f"{BASE}gtFine_labelTrainIds.png")
    (image_dir / city / "notes.txt").write_text("not an image")
    return str(image_dir), str(gt_dir)


def test_labels_match_detectron2_classes():
    assert THING_CLASSES == ["person", "rider", "car", "truck", "bus", "train", "motorcycle",
                             "bicycle"]
    assert len(STUFF_CLASSES) == 19 and STUFF_CLASSES[:3] == ["road", "sidewalk", "building"]
    assert STUFF_CLASSES[11:] == THING_CLASSES
    assert THING_ID_TO_CONTIGUOUS == {24: 0, 25: 1, 26: 2, 27: 3, 28: 4, 31: 5, 32: 6, 33: 7}


def test_instances_from_json(tmp_path):
    image_dir, gt_dir = _write(tmp_path)
    (record,) = load_cityscapes_instances(image_dir, gt_dir)
    assert record["file_name"] == f"{image_dir}/aachen/{BASE}leftImg8bit.png"
    assert record["image_id"] == f"{BASE}leftImg8bit.png"
    assert (record["height"], record["width"]) == (H, W)
    anns = record["annotations"]
    assert [(a["category_id"], a["iscrowd"]) for a in anns] == [(2, 1), (2, 0), (0, 0)]
    assert all(a["bbox_mode"] == BoxMode.XYXY_ABS for a in anns)
    # An object nothing covers keeps its polygon (+0.5) and its pixel-extent box.
    assert anns[1]["segmentation"] == [
        [14.5, 10.5, 25.5, 10.5, 25.5, 17.5, 14.5, 17.5]]
    assert anns[1]["bbox"] == [14.0, 10.0, 26.0, 18.0]
    # The person is split by the pole drawn after it: two outlines of visible pixels.
    person = anns[2]
    assert person["bbox"] == [2.0, 2.0, 10.0, 8.0]
    assert len(person["segmentation"]) == 2
    visible = _expected_masks()[2][2]
    for polygon in person["segmentation"]:
        points = np.asarray(polygon).reshape(-1, 2) - 0.5
        assert len(points) >= 3
        assert visible[points[:, 1].astype(int), points[:, 0].astype(int)].all()


def test_rle_masks_are_the_visible_pixels_and_match_the_png_path(tmp_path):
    image_dir, gt_dir = _write(tmp_path)
    (from_json,) = load_cityscapes_instances(image_dir, gt_dir, to_polygons=False)
    (from_png,) = load_cityscapes_instances(image_dir, gt_dir, from_json=False,
                                            to_polygons=False)
    expected = _expected_masks()
    for anns in (from_json["annotations"], sorted(from_png["annotations"],
                                                  key=lambda a: (-a["iscrowd"],
                                                                 -a["category_id"]))):
        assert len(anns) == 3
        for ann, (name, crowd, mask) in zip(anns, expected, strict=True):
            assert ann["category_id"] == THING_CLASSES.index(name)
            assert ann["iscrowd"] == int(crowd)
            decoded = mask_util.decode(ann["segmentation"]).astype(bool)
            assert np.array_equal(decoded, mask)
            ys, xs = np.nonzero(mask)
            assert ann["bbox"] == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    (png_polygons,) = load_cityscapes_instances(image_dir, gt_dir, from_json=False)
    assert all(isinstance(a["segmentation"], list) for a in png_polygons["annotations"])


def test_semantic(tmp_path):
    image_dir, gt_dir = _write(tmp_path)
    records = load_cityscapes_semantic(image_dir, gt_dir)
    assert records == [{
        "file_name": f"{image_dir}/aachen/{BASE}leftImg8bit.png",
        "sem_seg_file_name": f"{gt_dir}/aachen/{BASE}gtFine_labelTrainIds.png",
        "height": H, "width": W}]
    (tmp_path / "gtFine" / "val" / "aachen" / f"{BASE}gtFine_labelTrainIds.png").unlink()
    with pytest.raises(FileNotFoundError, match="createTrainIdLabelImgs"):
        load_cityscapes_semantic(image_dir, gt_dir)


@pytest.mark.parametrize(
    ("objects", "index", "key"),
    [
        ([{"label": "spaceship", "polygon": _rect(0, 0, 2, 2)}], 0, "label"),
        ([{"label": "car", "polygon": _rect(0, 0, 2, 2)}, {"label": 3, "polygon": []}], 1,
         "label"),
        ([{"label": "car", "polygon": [[0, 0], [1, "x"], [2, 2]]}], 0, "polygon"),
        ([{"label": "car", "polygon": [[0, 0], [1e300, 1], [2, 2]]}], 0, "polygon"),
        ([{"label": "car", "polygon": {"x": 1}}], 0, "polygon"),
        (["car"], 0, "objects"),
    ],
)
def test_bad_objects_name_file_index_and_key(tmp_path, objects, index, key):
    image_dir, gt_dir = _write(tmp_path, objects)
    with pytest.raises(CityscapesFormatError) as info:
        load_cityscapes_instances(image_dir, gt_dir)
    err = info.value
    assert (err.index, err.key) == (index, key)
    assert err.path.endswith("gtFine_polygons.json") and f"objects[{index}]" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is CityscapesFormatError and again.key == key


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"imgHeight": true, "imgWidth": 4, "objects": []}', "imgHeight"),
        ('{"imgHeight": 100000, "imgWidth": 100000, "objects": []}', "limit"),
        ('{"imgHeight": 4, "imgWidth": 4}', "objects"),
        ("[1, 2]", "top level"),
        ('{"imgHeight": 4', "not valid JSON"),
    ],
)
def test_bad_files(tmp_path, text, match):
    image_dir, gt_dir = _write(tmp_path, json_text=text)
    with pytest.raises(CityscapesFormatError.__mro__[1], match=match):
        load_cityscapes_instances(image_dir, gt_dir)


def test_bounds_and_missing_files(tmp_path, monkeypatch):
    from catalog.formats import cityscapes

    image_dir, gt_dir = _write(tmp_path)
    monkeypatch.setattr(cityscapes, "MAX_JSON_BYTES", 16)
    with pytest.raises(CityscapesFormatError.__mro__[1], match="limit is 16"):
        load_cityscapes_instances(image_dir, gt_dir)
    monkeypatch.undo()
    (tmp_path / "gtFine" / "val" / "aachen" / f"{BASE}gtFine_polygons.json").unlink()
    with pytest.raises(CityscapesFormatError, match="does not exist"):
        load_cityscapes_instances(image_dir, gt_dir)
    with pytest.raises(CityscapesFormatError, match="no '<city>"):
        load_cityscapes_instances(str(tmp_path / "gtFine"), gt_dir)
