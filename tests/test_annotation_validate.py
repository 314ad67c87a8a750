"""The field policy of OpenMMLab annotation files: typed errors naming file, index, img_id,
instance and key; degenerate boxes and invalid polygons skipped and counted in one warning."""

from __future__ import annotations

import json
import logging
import os
import pickle

import pytest

from catalog import AnnotationFormatError, RecordFormatError, load_annotation_file
from catalog.formats.validate import (
    MAX_IMAGE_SIDE,
    AnnotationFieldError,
    AnnotationFieldTypeError,
    ParseDataInfoError,
)
from catalog._common import CatmapError

# A 40x60 mask encoded by pycocotools (compressed COCO RLE).
RLE = "]6i0?00000000000000000000000000000000000000000000000[=]OXC000000000000000000000000000X5"


def _doc() -> dict:
    return {
        "metainfo": {"classes": ["cat", "dog", "bird"]},
        "data_list": [
            {
                "img_path": "a.jpg",
                "img_id": 11,
                "height": 40,
                "width": 60,
                "instances": [
                    {"bbox": [0, 0, 4, 4], "bbox_label": 0, "ignore_flag": 0},
                    {
                        "bbox": [1, 1, 9, 9.5],
                        "bbox_label": 2,
                        "mask": [[1, 1, 9, 1, 9, 9]],
                        "keypoints": [1, 2, 2, 3, 4, 0],
                    },
                    {"bbox": [0, 0, 60, 40], "bbox_label": 1,
                     "mask": {"size": [40, 60], "counts": RLE}},
                ],
            }
        ],
    }


def _load(tmp_path, doc, **kwargs):
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(doc))
    kwargs.setdefault("record_format", "openmmlab")  # these tests check the entries' own form
    return load_annotation_file(path, **kwargs)


def test_valid_document_unchanged(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="catalog.formats.openmmlab"):
        _, records = _load(tmp_path, _doc())
    assert records == _doc()["data_list"]
    assert not [r for r in caplog.records if hasattr(r, "annotation_skips")]


BAD = [
    # (path inside data_list[0], value, key named, wrong type?)
    (("img_path",), 3, "img_path", True),
    (("img_path",), "", "img_path", False),
    (("img_path",), "a\0b", "img_path", False),
    (("img_path",), "x" * 5000, "img_path", False),
    (("height",), True, "height", True),
    (("height",), 40.0, "height", True),
    (("height",), 0, "height", False),
    (("width",), MAX_IMAGE_SIDE + 1, "width", False),
    (("img_id",), 1.5, "img_id", True),
    (("img_id",), None, "img_id", False),
    (("instances",), {"bbox": [0, 0, 1, 1]}, "instances", True),
    (("instances", 0, "bbox"), [0, 0, 1], "bbox", True),
    (("instances", 0, "bbox"), [0, 0, "1", 1], "bbox", False),
    (("instances", 0, "bbox"), [0, 0, 10**400, 1], "bbox", False),
    (("instances", 0, "bbox"), [0, 0, True, 1], "bbox", False),
    # a label beyond the classes is kept with a warning here (raw mode), refused when converting
    (("instances", 0, "bbox_label"), -1, "bbox_label", False),
    (("instances", 0, "bbox_label"), 1.0, "bbox_label", True),
    (("instances", 0, "bbox_label"), False, "bbox_label", True),
    (("instances", 0, "ignore_flag"), 2, "ignore_flag", False),
    (("instances", 0, "ignore_flag"), "1", "ignore_flag", False),
    (("instances", 1, "mask"), "polygon", "mask", True),
    (("instances", 1, "mask"), [[0, 0, 1, 0, 1, "x"]], "mask", False),
    (("instances", 1, "mask"), [3, 4], "mask", True),
    (("instances", 1, "keypoints"), [1, 2], "keypoints", False),
    (("instances", 1, "keypoints"), "1 2 2", "keypoints", True),
    (("instances", 2, "mask"), {"size": [40, 60], "counts": RLE[:-1]}, "mask", False),
    (("instances", 2, "mask"), {"size": [40, 60], "counts": RLE + "!"}, "mask", False),
    (("instances", 2, "mask"), {"size": [40, 60], "counts": [2400, 1]}, "mask", False),
    (("instances", 2, "mask"), {"size": [4, 6], "counts": [24]}, "mask", False),
    (("instances", 2, "mask"), {"size": [40, 60], "counts": [2401, -1]}, "mask", False),
    (("instances", 2, "mask"), {"counts": [2400]}, "mask", False),
    (("instances", 2), [1, 2], None, True),
]


@pytest.mark.parametrize(("where", "value", "key", "wrong_type"), BAD)
def test_malformed_values_raise_naming_file_index_img_id_instance_key(
    tmp_path, where, value, key, wrong_type
):
    doc = _doc()
    target = doc["data_list"][0]
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    with pytest.raises(AnnotationFieldError) as info:
        _load(tmp_path, doc)
    err = info.value
    message = str(err)
    assert "ann.json" in message and "data_list[0]" in message
    assert isinstance(err, AnnotationFormatError) and isinstance(err, ValueError)
    assert isinstance(err, TypeError) == wrong_type
    assert err.index == 0 and err.key == key
    if where[0] != "img_id":
        assert err.img_id == 11 and "img_id 11" in message
    if where[0] == "instances" and len(where) > 1:
        assert err.instance == where[1] and f"instances[{where[1]}]" in message
    if key is not None:
        assert repr(key) in message
    assert len(message) < 600  # huge values are shortened


def test_label_range_unbounded_without_classes(tmp_path):
    doc = _doc()
    del doc["metainfo"]["classes"]
    doc["data_list"][0]["instances"][0]["bbox_label"] = 999
    _, records = _load(tmp_path, doc)
    assert records[0]["instances"][0]["bbox_label"] == 999
    doc["data_list"][0]["instances"][0]["bbox_label"] = 2**31
    with pytest.raises(AnnotationFieldError, match="bbox_label"):
        _load(tmp_path, doc)


def test_degenerate_boxes_and_bad_polygons_skipped_and_counted_in_one_warning(tmp_path, caplog):
    doc = _doc()
    insts = doc["data_list"][0]["instances"]
    insts.append({"bbox": [5, 5, 5, 9], "bbox_label": 0})  # zero width
    insts.append({"bbox": [5, 9, 8, 2], "bbox_label": 0})  # negative height
    insts[1]["mask"] = [[1, 1, 9, 1, 9, 9], [1, 2], [1, 2, 3, 4, 5, 6, 7]]  # 2 invalid
    insts.append({"bbox": [1, 1, 2, 2], "bbox_label": 1, "mask": [[1, 2, 3, 4]]})  # none valid
    with caplog.at_level(logging.WARNING, logger="catalog.formats.openmmlab"):
        _, records = _load(tmp_path, doc, record_format="detectron2")
    annotations = records[0]["annotations"]
    assert [a["bbox"] for a in annotations] == [i["bbox"] for i in insts[:3]]
    assert annotations[1]["segmentation"] == [[1, 1, 9, 1, 9, 9]]
    warnings = [r for r in caplog.records if hasattr(r, "annotation_skips")]
    assert len(warnings) == 1
    assert warnings[0].annotation_skips == {
        "degenerate_boxes": 2,
        "dropped_polygons": 3,
        "no_valid_polygon": 1,
    }
    message = warnings[0].getMessage()
    assert "ann.json" in message and "data_list[0].instances[3]" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="catalog.formats.openmmlab"):
        _, records = _load(tmp_path, doc)  # raw mode keeps them, as mmengine does
    assert records == doc["data_list"]
    (kept,) = [r for r in caplog.records if hasattr(r, "annotation_kept")]
    assert kept.annotation_kept["degenerate_boxes"] == 2


def test_extra_keys_kept_as_they_are(tmp_path):
    doc = _doc()
    doc["data_list"][0]["depth_path"] = {"any": ["thing", 1, None]}
    doc["data_list"][0]["instances"][0]["extra_anns"] = [1, 2, 3]
    _, records = _load(tmp_path, doc)
    assert records == doc["data_list"]


def test_parse_data_info_sees_checked_entries_and_output_is_checked(tmp_path):
    seen = []

    def parse(info):
        seen.append(len(info["instances"]))
        return {"file_name": info["img_path"]}

    doc = _doc()
    doc["data_list"][0]["instances"].append({"bbox": [3, 3, 1, 1], "bbox_label": 0})
    _, records = _load(tmp_path, doc, parse_data_info=parse)  # raw mode: as mmengine gives it
    assert seen == [4] and records == [{"file_name": "a.jpg"}]
    _load(tmp_path, doc, parse_data_info=lambda info: {**info, "n": parse(info)},
          record_format="detectron2")
    assert seen == [4, 3]  # converting: the checked entry, the empty box dropped
    with pytest.raises(ParseDataInfoError, match="entry 0") as info:
        _load(tmp_path, doc, parse_data_info=lambda info: "a.jpg")
    assert isinstance(info.value, TypeError) and isinstance(info.value, CatmapError)
    assert info.value.index == 0


def test_data_prefix_value_must_be_a_string(tmp_path):
    with pytest.raises(RecordFormatError, match="entry 0 has a int under 'img_id'"):
        _load(tmp_path, _doc(), data_prefix={"img_id": "images"})


def test_top_level_type_errors_are_typed(tmp_path):
    for content, pattern in (([1], "top level"), ({"metainfo": {}, "data_list": {}}, "data_list")):
        with pytest.raises(AnnotationFieldTypeError, match=pattern):
            _load(tmp_path, content)


def test_pickle_content_is_checked_too(tmp_path):
    doc = _doc()
    doc["data_list"][0]["height"] = -4
    path = tmp_path / "ann.pkl"
    path.write_bytes(pickle.dumps(doc))
    with pytest.raises(AnnotationFieldError, match="height"):
        load_annotation_file(path, allow_pickle=True)


def test_real_mmengine_file_point_pair_masks_are_kept_and_counted(caplog):
    path = "/work/shared/external/mmengine/annotations/dummy_annotation.json"
    if not os.path.isfile(path):
        pytest.skip("shared external files not available")
    with open(path) as f:
        n_instances = sum(len(d.get("instances", [])) for d in json.load(f)["data_list"])
    with caplog.at_level(logging.WARNING, logger="catalog.formats.openmmlab"):
        _, records = load_annotation_file(path, record_format="openmmlab")
    # its masks are [x, y] pairs, not polygons: raw mode keeps them, as mmengine does, and
    # counts them in one warning
    (warning,) = [r for r in caplog.records if hasattr(r, "annotation_kept")]
    assert warning.annotation_kept["no_valid_polygon"] == n_instances > 0
    assert sum(len(r["instances"]) for r in records) == n_instances
