"""The mmengine migration path end to end: an OpenMMLab 2.0 (mmdet-style) annotation file and the
same data as a COCO file give the same records, filtering, mapped samples, repeat factors and
loader batches; the raw form matches what mmengine's own BaseDataset reads."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from catalog import (
    AnnotationFormatError,
    BoxMode,
    DatasetCatalog,
    MetadataCatalog,
    get_detection_dataset_dicts,
    load_annotation_file,
    register_annotation_file,
    register_coco_instances,
)
from mappers import Compose, DatasetMapper
from mappers import transforms as T
from samplers import build_detection_train_loader, repeat_factors_from_category_frequency
from tests.optional_imports import import_or_skip

CLASSES = ["cat", "dog", "bird"]
COCO_IDS = [3, 7, 11]  # dataset ids of COCO; OpenMMLab files use indices into `classes`

# (file, height, width, [(class index, x, y, w, h, iscrowd)])
IMAGES = [
    ("a.jpg", 40, 60, [(0, 2, 3, 20, 10, 0), (1, 30, 5, 10, 30, 0)]),
    ("b.jpg", 50, 30, []),  # no instances: filtered by default
    ("c.jpg", 30, 30, [(2, 1, 1, 5, 5, 1)]),  # only a crowd region: filtered by default
    ("d.jpg", 32, 48, [(2, 4, 4, 10, 12, 0), (2, 20, 2, 8, 8, 0), (0, 1, 1, 6, 6, 0)]),
]


def _polygon(x, y, w, h):
    return [[x, y, x + w, y, x + w, y + h, x, y + h]]


@pytest.fixture()
def dataset_dir(tmp_path):
    rng = np.random.default_rng(0)
    os.makedirs(tmp_path / "images")
    coco = {"images": [], "annotations": [], "categories": []}
    coco["categories"] = [{"id": i, "name": n} for i, n in zip(COCO_IDS, CLASSES, strict=True)]
    mm = {"metainfo": {"classes": CLASSES}, "data_list": []}
    ann_id = 1
    for image_id, (name, h, w, objects) in enumerate(IMAGES, start=1):
        pixels = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "images" / name, quality=95)
        coco["images"].append({"id": image_id, "file_name": name, "height": h, "width": w})
        instances = []
        for label, x, y, bw, bh, crowd in objects:
            coco["annotations"].append({
                "id": ann_id, "image_id": image_id, "category_id": COCO_IDS[label],
                "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": crowd,
                "segmentation": _polygon(x, y, bw, bh),
            })
            instances.append({
                "bbox": [x, y, x + bw, y + bh], "bbox_label": label, "ignore_flag": crowd,
                "mask": _polygon(x, y, bw, bh), "area_note": bw * bh,
            })
            ann_id += 1
        mm["data_list"].append({
            "img_path": name, "img_id": image_id, "height": h, "width": w,
            "instances": instances,
        })
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    (tmp_path / "mm.json").write_text(json.dumps(mm))
    register_coco_instances("mig_coco", {}, str(tmp_path / "coco.json"), str(tmp_path / "images"))
    register_annotation_file(
        "mig_mm", "mm.json", data_root=str(tmp_path), data_prefix={"img_path": "images"}
    )
    return tmp_path


def _xyxy(annotation):
    return BoxMode.convert(list(annotation["bbox"]), annotation["bbox_mode"], BoxMode.XYXY_ABS)


def test_records_are_detectron2_style_and_match_coco(dataset_dir):
    coco, mm = DatasetCatalog.get("mig_coco"), DatasetCatalog.get("mig_mm")
    assert len(coco) == len(mm) == len(IMAGES)
    for a, b in zip(coco, mm, strict=True):
        for key in ("file_name", "image_id", "height", "width"):
            assert a[key] == b[key], key
        assert len(a["annotations"]) == len(b["annotations"])
        for x, y in zip(a["annotations"], b["annotations"], strict=True):
            assert y["bbox_mode"] == BoxMode.XYXY_ABS
            assert _xyxy(x) == pytest.approx(_xyxy(y))
            assert (x["category_id"], x["iscrowd"]) == (y["category_id"], y["iscrowd"])
            assert x["segmentation"] == y["segmentation"]
            assert y["area_note"] > 0  # an extra instance key is kept
    assert MetadataCatalog.get("mig_mm").thing_classes == CLASSES


def test_filtering_and_repeat_factors_equal_coco(dataset_dir):
    coco = get_detection_dataset_dicts("mig_coco")
    mm = get_detection_dataset_dicts("mig_mm")
    assert [r["image_id"] for r in coco] == [r["image_id"] for r in mm] == [1, 4]
    for thresh in (0.5, 1.0):
        factors_coco = repeat_factors_from_category_frequency(coco, thresh)
        factors_mm = repeat_factors_from_category_frequency(mm, thresh)
        assert torch.equal(factors_coco, factors_mm)
    # dog is in half of the images: class balancing is in effect, not 1.0 for every image
    assert repeat_factors_from_category_frequency(mm, 1.0).max() > 1.0


def test_dataset_mapper_and_compose_give_the_same_instances(dataset_dir):
    coco, mm = DatasetCatalog.get("mig_coco"), DatasetCatalog.get("mig_mm")
    mapper = DatasetMapper(True, augmentations=[T.Resize((64, 64))], use_instance_mask=True)
    pipeline = Compose([
        {"type": "LoadImage"},
        {"type": "ApplyAugmentations", "augmentations": [{"type": "Resize", "shape": [64, 64]}]},
        {"type": "AnnotationsToInstances", "use_instance_mask": True},
        {"type": "ToTensor"},
    ])
    for fn in (mapper, pipeline):
        a, b = fn(dict(coco[3])), fn(dict(mm[3]))
        assert torch.equal(a["image"], b["image"])
        boxes_a, boxes_b = a["instances"].gt_boxes, b["instances"].gt_boxes
        boxes_a = getattr(boxes_a, "tensor", boxes_a)
        boxes_b = getattr(boxes_b, "tensor", boxes_b)
        assert torch.allclose(boxes_a, boxes_b)
        assert torch.equal(a["instances"].gt_classes, b["instances"].gt_classes)


def test_train_loader_batches_equal_coco(dataset_dir):
    mapper = DatasetMapper(True, augmentations=[T.RandomFlip()])

    def batches(name):
        loader = build_detection_train_loader(
            dataset=get_detection_dataset_dicts(name), mapper=mapper, total_batch_size=2,
            num_workers=0, seed=5,
        )
        it = iter(loader)
        return [next(it) for _ in range(3)]

    for batch_a, batch_b in zip(batches("mig_coco"), batches("mig_mm"), strict=True):
        assert [s["image_id"] for s in batch_a] == [s["image_id"] for s in batch_b]
        for a, b in zip(batch_a, batch_b, strict=True):
            assert torch.equal(a["image"], b["image"])


def test_openmmlab_form_kept_on_request_and_matches_mmengine(dataset_dir):
    _, raw = load_annotation_file(
        "mm.json", data_root=str(dataset_dir), data_prefix={"img_path": "images"},
        record_format="openmmlab",
    )
    assert raw[0]["img_path"] == os.path.join(str(dataset_dir), "images", "a.jpg")
    assert raw[0]["instances"][0]["bbox_label"] == 0
    mmengine_dataset = import_or_skip("mmengine.dataset")
    theirs = mmengine_dataset.BaseDataset(
        ann_file="mm.json", data_root=str(dataset_dir), data_prefix={"img_path": "images"},
        serialize_data=False,
    )
    assert len(theirs) == len(raw)
    for index, record in enumerate(raw):
        info = theirs.get_data_info(index)
        for key, value in record.items():
            assert info[key] == value, key


def test_entry_without_img_path_names_file_index_and_key(tmp_path):
    doc = {"metainfo": {"classes": ["a"]},
           "data_list": [{"img_path": "x.jpg", "instances": []}, {"instances": []}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    with pytest.raises(AnnotationFormatError, match=r"entry 1 has no 'img_path'") as info:
        load_annotation_file(tmp_path / "ann.json")
    assert (info.value.index, info.value.key) == (1, "img_path")
    with pytest.raises(ValueError, match="record_format"):
        load_annotation_file(tmp_path / "ann.json", record_format="mmdet")


def test_instance_without_label_is_a_typed_error(tmp_path):
    doc = {"metainfo": {}, "data_list": [{"img_path": "x.jpg", "img_id": 9,
                                          "instances": [{"bbox": [0, 0, 2, 2]}]}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    with pytest.raises(AnnotationFormatError, match="bbox_label") as info:
        load_annotation_file(tmp_path / "ann.json")
    assert (info.value.index, info.value.instance, info.value.img_id) == (0, 0, 9)
    _, raw = load_annotation_file(tmp_path / "ann.json", record_format="openmmlab")
    assert raw[0]["instances"] == [{"bbox": [0, 0, 2, 2]}]


def _loose_doc() -> dict:
    """What mmengine's BaseDataset keeps as it is: a label beyond the classes, [x, y] point
    pairs as a mask (mmengine's own dummy_annotation.json has them), an empty box, extra keys."""
    return {"metainfo": {"task_name": "t"}, "data_list": [
        {"img_path": "a.jpg", "height": 20, "width": 30, "instances": [
            {"bbox": [0, 0, 10, 20], "bbox_label": 1, "mask": [[0, 0], [0, 10], [10, 20]],
             "extra_anns": [1, 2]},
            {"bbox": [5, 5, 5, 9], "bbox_label": 0, "ignore_flag": 0},
            {"bbox": [1, 1, 9, 9], "bbox_label": 0, "mask": [[1, 1, 9, 1, 9, 9], [2, 2]]}]},
        {"img_path": "b.jpg", "instances": [], "note": "x"}]}


def test_raw_mode_keeps_what_mmengine_keeps_and_warns(tmp_path, caplog):
    path = tmp_path / "loose.json"
    path.write_text(json.dumps(_loose_doc()))
    with caplog.at_level("WARNING", logger="catalog.formats.openmmlab"):
        meta, raw = load_annotation_file(path, metainfo={"classes": ("dog",)},
                                         record_format="openmmlab")
    assert raw == _loose_doc()["data_list"] and meta["classes"] == ("dog",)
    (warning,) = [r for r in caplog.records if hasattr(r, "annotation_kept")]
    assert warning.annotation_kept["unknown_labels"] == 1
    assert warning.annotation_kept["degenerate_boxes"] == 1
    assert warning.annotation_kept["no_valid_polygon"] == 1
    assert "kept as they are" in warning.getMessage()
    mmengine_dataset = import_or_skip("mmengine.dataset")
    theirs = mmengine_dataset.BaseDataset(ann_file=str(path), metainfo={"classes": ("dog",)},
                                          serialize_data=False)
    assert len(theirs) == len(raw) and theirs.metainfo["classes"] == ("dog",)
    for index, entry in enumerate(raw):
        info = theirs.get_data_info(index)
        assert {k: v for k, v in info.items() if k != "sample_idx"} == entry
    # Converting still refuses the label with a typed error naming entry, instance and key.
    with pytest.raises(AnnotationFormatError, match="bbox_label") as error:
        load_annotation_file(path, metainfo={"classes": ("dog",)})
    assert (error.value.index, error.value.instance, error.value.key) == (0, 0, "bbox_label")


def test_converted_records_hold_no_raw_fields(tmp_path):
    doc = {"metainfo": {"classes": ["a", "b"]}, "data_list": [
        {"img_path": "a.jpg", "img_id": 4, "height": 20, "width": 30, "instances": [
            {"bbox": [0, 0, 10, 20], "bbox_label": 1, "ignore_flag": 1,
             "mask": [[0, 0, 9, 0, 9, 9]], "score": 0.5}]}]}
    (tmp_path / "ann.json").write_text(json.dumps(doc))
    _, (record,) = load_annotation_file(tmp_path / "ann.json")
    assert record == {
        "file_name": "a.jpg", "image_id": 4, "height": 20, "width": 30, "annotations": [
            {"bbox": [0, 0, 10, 20], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 1,
             "iscrowd": 1, "segmentation": [[0, 0, 9, 0, 9, 9]], "score": 0.5}]}
