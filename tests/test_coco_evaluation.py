"""The COCO evaluation bridge: predictions to results, and COCOeval against registered datasets."""

from __future__ import annotations

import json
import math
import os
import pickle
import sys

import numpy as np
import pytest
import torch

from catalog import BoxMode, DatasetCatalog, MetadataCatalog
from catalog.formats.coco import register_coco_instances
from catalog.formats.export import evaluate_coco, instances_to_coco_results, write_coco_results
from catalog._common import MissingDependencyError
from catalog.formats.validate import CocoEvaluationError

mask_util = pytest.importorskip("pycocotools.mask")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

EXTERNAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "external", "coco")
H, W = 48, 64


class _Boxes:
    """A Boxes-like holder: predictions only need ``.tensor``."""

    def __init__(self, tensor):
        self.tensor = tensor


class _Predictions:
    """A duck-typed Instances: ``has`` and attributes, as detectron2's and catmap's."""

    def __init__(self, **fields):
        self._fields = fields

    def __len__(self):
        return len(self._fields["scores"])

    def has(self, name):
        return name in self._fields

    def __getattr__(self, name):
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None


def _instances_fixture(tmp_path, keypoints=False):
    """Three images, two categories (ids 4 and 9), polygon masks of several sizes."""
    def square(x, y, s):
        return [[x, y, x + s, y, x + s, y + s, x, y + s]]

    boxes = {1: [(4, 9, 5, 6, 20), (9, 30, 10, 12)], 2: [(4, 2, 2, 40)], 3: [(9, 20, 20, 8),
                                                                              (4, 1, 1, 4)]}
    annotations = []
    for image_id, items in boxes.items():
        for cat, x, y, s in [(b[0], b[1], b[2], b[3]) for b in items]:
            ann = {"id": len(annotations) + 1, "image_id": image_id, "category_id": cat,
                   "bbox": [x, y, s, s], "area": s * s, "iscrowd": 0,
                   "segmentation": square(x, y, s)}
            if keypoints:
                ann["keypoints"] = [x + 1, y + 1, 2, x + s - 1, y + 1, 2, x + 1, y + s - 1, 1]
                ann["num_keypoints"] = 3
            annotations.append(ann)
    categories = [{"id": 4, "name": "cat"}, {"id": 9, "name": "dog"}]
    if keypoints:
        categories = [{"id": 4, "name": "person", "keypoints": ["a", "b", "c"]}]
        for ann in annotations:
            ann["category_id"] = 4
    data = {"images": [{"id": i, "file_name": f"{i}.jpg", "height": H, "width": W}
                       for i in boxes], "annotations": annotations, "categories": categories}
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(data))
    return str(path)


def _ground_truth_as_predictions(records, with_masks=True, with_keypoints=False):
    """The records' annotations as one prediction per instance, score 1."""
    out = []
    for record in records:
        anns = record["annotations"]
        boxes = torch.tensor([BoxMode.convert(a["bbox"], a["bbox_mode"], BoxMode.XYXY_ABS)
                              for a in anns], dtype=torch.float32)
        fields = {"pred_boxes": _Boxes(boxes), "scores": torch.ones(len(anns)),
                  "pred_classes": torch.tensor([a["category_id"] for a in anns])}
        if with_masks:
            masks = [mask_util.decode(mask_util.merge(mask_util.frPyObjects(
                a["segmentation"], record["height"], record["width"]))) for a in anns]
            fields["pred_masks"] = torch.from_numpy(np.stack(masks).astype(bool))
        if with_keypoints:
            fields["pred_keypoints"] = torch.tensor([a["keypoints"] for a in anns]).view(
                len(anns), -1, 3)
        out.append((record["image_id"], _Predictions(**fields)))
    return out


def test_ground_truth_fed_back_gives_perfect_ap(tmp_path):
    register_coco_instances("eval_gt", {}, _instances_fixture(tmp_path), "", cache=False)
    records = list(DatasetCatalog.get("eval_gt"))
    results = []
    for image_id, preds in _ground_truth_as_predictions(records):
        results += instances_to_coco_results(preds, image_id, "eval_gt")
    assert {r["category_id"] for r in results} == {4, 9}  # dataset ids, not contiguous
    metrics = evaluate_coco("eval_gt", results)
    assert set(metrics) == {"bbox", "segm"}  # no keypoints in the results: skipped
    for kind in ("bbox", "segm"):
        assert metrics[kind]["AP"] == pytest.approx(100.0)
        assert metrics[kind]["AP50"] == pytest.approx(100.0)
        assert metrics[kind]["AP-cat"] == pytest.approx(100.0)
    # A worse prediction set scores lower: the metric is not constant.
    shifted = [{**r, "bbox": [r["bbox"][0] + r["bbox"][2] / 2, *r["bbox"][1:]]} for r in results]
    assert evaluate_coco("eval_gt", shifted, ("bbox",))["bbox"]["AP"] < 50


def test_keypoints_fed_back_gives_perfect_ap(tmp_path):
    path = _instances_fixture(tmp_path, keypoints=True)
    register_coco_instances("eval_kp", {}, path, "", cache=False)
    records = list(DatasetCatalog.get("eval_kp"))
    results = []
    for image_id, preds in _ground_truth_as_predictions(records, False, True):
        results += instances_to_coco_results(preds, image_id, "eval_kp")
    original = {a["id"]: a["keypoints"] for a in json.load(open(path))["annotations"]}
    assert sorted(r["keypoints"] for r in results) == sorted(original.values())
    with pytest.raises(CocoEvaluationError, match="OKS sigmas"):
        evaluate_coco("eval_kp", results, ("keypoints",))
    metrics = evaluate_coco("eval_kp", results, kpt_oks_sigmas=[0.05, 0.05, 0.05])
    assert metrics["keypoints"]["AP"] == pytest.approx(100.0)
    assert metrics["bbox"]["AP"] == pytest.approx(100.0)
    assert "APs" not in metrics["keypoints"]


def test_dataset_without_json_file_is_converted(tmp_path):
    from catalog import load_coco_json

    path = _instances_fixture(tmp_path)
    DatasetCatalog.register("eval_plain", lambda: load_coco_json(path, "", "eval_plain"))
    records = list(DatasetCatalog.get("eval_plain"))
    assert "json_file" not in MetadataCatalog.get("eval_plain")
    results = []
    for image_id, preds in _ground_truth_as_predictions(records, with_masks=False):
        results += instances_to_coco_results(preds, image_id, MetadataCatalog.get("eval_plain"))
    metrics = evaluate_coco("eval_plain", results, output_dir=tmp_path / "out")
    assert metrics["bbox"]["AP"] == pytest.approx(100.0) and "segm" not in metrics
    assert (tmp_path / "out" / "eval_plain_coco_format.json").is_file()
    results_file = tmp_path / "res" / "results.json"
    write_coco_results(results, results_file)
    again = evaluate_coco("eval_plain", str(results_file))["bbox"]
    assert again == pytest.approx(metrics["bbox"], nan_ok=True)


def test_matches_pycocotools_on_external_sample(tmp_path):
    gt = os.path.join(EXTERNAL, "detectron2_test_coco_evaluation_gt.json")
    dets = os.path.join(EXTERNAL, "detectron2_test_coco_evaluation_dets.json")
    if not os.path.exists(gt):
        pytest.skip("shared external samples are not available")
    register_coco_instances("eval_external", {}, gt, "", cache=False)
    ours = evaluate_coco("eval_external", dets)
    coco_gt = COCO(gt)
    for kind in ("bbox", "segm"):
        results = json.load(open(dets))
        if kind == "segm":
            for r in results:
                r.pop("bbox")
        reference = COCOeval(coco_gt, coco_gt.loadRes(results), kind)
        reference.evaluate()
        reference.accumulate()
        reference.summarize()
        for i, name in enumerate(("AP", "AP50", "AP75", "APs", "APm", "APl")):
            expected = reference.stats[i] * 100 if reference.stats[i] >= 0 else math.nan
            assert ours[kind][name] == pytest.approx(expected, nan_ok=True), (kind, name)
    assert 0 < ours["bbox"]["AP"] < 100


def test_results_fields_and_errors():
    preds = {"pred_boxes": torch.tensor([[1.0, 2.0, 4.0, 8.0], [0, 0, 1, 1]]),
             "scores": torch.tensor([0.9, 0.1]), "pred_classes": torch.tensor([1, 0]),
             "pred_keypoints": torch.tensor([[[1.5, 2.5, 0.3]], [[0.5, 0.5, 0.9]]])}
    meta = {"thing_dataset_id_to_contiguous_id": {10: 0, 20: 1}}
    results = instances_to_coco_results(preds, np.int64(3), meta)
    assert results[0] == {"image_id": 3, "category_id": 20, "bbox": [1.0, 2.0, 3.0, 6.0],
                          "score": pytest.approx(0.9), "keypoints": [1.0, 2.0,
                                                                     pytest.approx(0.3)]}
    assert instances_to_coco_results(preds, 3)[0]["category_id"] == 1  # no metadata
    empty = {"pred_boxes": torch.zeros(0, 4), "scores": torch.zeros(0),
             "pred_classes": torch.zeros(0, dtype=torch.int64)}
    assert instances_to_coco_results(empty, 1) == []
    with pytest.raises(CocoEvaluationError, match="not in the metadata") as info:
        instances_to_coco_results({**preds, "pred_classes": torch.tensor([5, 0])}, 3, meta)
    assert info.value.image_id == 3 and info.value.key == "pred_classes"
    assert pickle.loads(pickle.dumps(info.value)).key == "pred_classes"
    with pytest.raises(CocoEvaluationError, match="shape"):
        instances_to_coco_results({**preds, "scores": torch.ones(3)}, 3)
    with pytest.raises(CocoEvaluationError, match="missing"):
        instances_to_coco_results({"scores": torch.ones(1)}, 3)
    with pytest.raises(CocoEvaluationError, match="not finite"):
        instances_to_coco_results({**preds, "scores": torch.tensor([math.nan, 1])}, 3)
    with pytest.raises(CocoEvaluationError, match="pred_masks"):
        instances_to_coco_results({**preds, "pred_masks": torch.zeros(2, 4)}, 3)


def test_evaluate_errors(tmp_path):
    register_coco_instances("eval_err", {}, _instances_fixture(tmp_path), "", cache=False)
    good = {"image_id": 1, "category_id": 4, "bbox": [9, 5, 6, 20], "score": 1.0}
    with pytest.raises(CocoEvaluationError, match="image_id") as info:
        evaluate_coco("eval_err", [{**good, "image_id": 77}])
    assert info.value.image_id == 77 and info.value.dataset == "eval_err"
    with pytest.raises(CocoEvaluationError, match="category_id 0"):
        evaluate_coco("eval_err", [{**good, "category_id": 0}])
    with pytest.raises(CocoEvaluationError, match="unknown iou_types"):
        evaluate_coco("eval_err", [good], ("box",))
    with pytest.raises(CocoEvaluationError, match="1 of 2 results carry 'segmentation'"):
        evaluate_coco("eval_err", [good, {**good, "segmentation": [[9, 5, 15, 5, 15, 25]]}],
                      ("segm",))
    with pytest.raises(CocoEvaluationError, match="no keypoints"):
        evaluate_coco("eval_err", [{**good, "keypoints": [1, 1, 1]}], ("keypoints",))
    nan = evaluate_coco("eval_err", [], ("bbox",))
    assert list(nan) == ["bbox"] and math.isnan(nan["bbox"]["AP"])


def test_missing_pycocotools_names_the_extra(monkeypatch):
    for name in ("pycocotools", "pycocotools.mask", "pycocotools.coco", "pycocotools.cocoeval"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingDependencyError, match=r'pip install "catmap\[coco\]"') as info:
        evaluate_coco("anything", [])
    assert isinstance(info.value, ImportError) and info.value.extra == "coco"
    preds = {"pred_boxes": torch.zeros(1, 4), "scores": torch.ones(1),
             "pred_classes": torch.zeros(1, dtype=torch.int64),
             "pred_masks": torch.zeros(1, 2, 2, dtype=torch.bool)}
    with pytest.raises(MissingDependencyError):
        instances_to_coco_results(preds, 1)
    del preds["pred_masks"]
    assert len(instances_to_coco_results(preds, 1)) == 1  # boxes need no pycocotools


def test_write_coco_results_is_atomic_and_typed(tmp_path):
    path = tmp_path / "r.json"
    write_coco_results([{"image_id": 1, "score": 0.5}], path)
    assert json.loads(path.read_text()) == [{"image_id": 1, "score": 0.5}]
    with pytest.raises(CocoEvaluationError):
        write_coco_results([{"score": math.nan}], path)
    with pytest.raises(CocoEvaluationError):
        write_coco_results({"a": 1}, path)
    assert json.loads(path.read_text()) == [{"image_id": 1, "score": 0.5}]
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_catmap_instances_and_boxes_give_the_same_results():
    mappers = pytest.importorskip("mappers")
    boxes = torch.tensor([[1.0, 2.0, 5.0, 9.0], [0.0, 0.0, 3.0, 3.0]])
    fields = {"scores": torch.tensor([0.75, 0.25]), "pred_classes": torch.tensor([1, 0]),
              "pred_masks": torch.rand(2, 10, 12, generator=torch.Generator().manual_seed(0)) > 0.5}
    wrapped = mappers.structures.Boxes(boxes)
    instances = mappers.Instances((10, 12), pred_boxes=wrapped, **fields)
    meta = {"thing_dataset_id_to_contiguous_id": {3: 0, 8: 1}}
    ours = instances_to_coco_results(instances, 11, meta)
    assert ours == instances_to_coco_results({"pred_boxes": boxes, **fields}, 11, meta)
    assert [r["category_id"] for r in ours] == [8, 3]
    for result, mask in zip(ours, fields["pred_masks"], strict=True):
        assert np.array_equal(mask_util.decode(result["segmentation"]).astype(bool),
                              mask.numpy())
