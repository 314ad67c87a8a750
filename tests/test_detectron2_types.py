"""DatasetMapper output takes detectron2's structure classes when detectron2 is imported
(issue 23, item 1).

detectron2 checks ``isinstance(x, detectron2.structures.Boxes)`` (``Boxes.cat`` when ground
truth is appended to proposals) and reads ``Instances._fields``, ``Boxes.tensor``,
``BitMasks.tensor`` / ``BitMasks.image_size`` (an attribute there), ``PolygonMasks.polygons``
and ``Keypoints.tensor``. detectron2 is not on the package index, so CI pins the conversion
against a ``detectron2.structures`` module made here with those class names and attributes; the
last test runs against the real detectron2 wherever it imports (PYTHONPATH=<checkout>), and
``tools/check_detectron2.py`` trains its Mask R-CNN on catmap's loader.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from catalog.box_mode import BoxMode
from mappers import structures as S
from mappers.dataset_mapper import DatasetMapper
from mappers.instances import DETECTRON2_TYPES_ENV, as_detectron2_types
from samplers import build_detection_train_loader

_NAMES = ("Instances", "Boxes", "RotatedBoxes", "BitMasks", "PolygonMasks", "Keypoints",
          "ROIMasks")


def _mapper(**options) -> DatasetMapper:
    return DatasetMapper(is_train=True, augmentations=[], image_format="RGB",
                         use_instance_mask=True, use_keypoint=True, **options)


def _module() -> types.ModuleType:
    """A ``detectron2.structures`` with detectron2's class names; picklable under fork."""
    module = types.ModuleType("detectron2.structures")
    for name in _NAMES:
        setattr(module, name, type(name, (), {"__module__": "detectron2.structures"}))
    return module


@pytest.fixture()
def d2(monkeypatch):
    module = _module()
    package = types.ModuleType("detectron2")
    package.structures = module
    monkeypatch.setitem(sys.modules, "detectron2", package)  # pickle imports the parent
    monkeypatch.setitem(sys.modules, "detectron2.structures", module)
    monkeypatch.delenv(DETECTRON2_TYPES_ENV, raising=False)
    return module


@pytest.fixture()
def record(tmp_path):
    path = tmp_path / "img.png"
    Image.fromarray(np.full((40, 60, 3), 90, np.uint8)).save(path)
    return {
        "file_name": str(path), "height": 40, "width": 60, "image_id": 1,
        "annotations": [
            {"bbox": [4, 5, 20, 10], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1,
             "segmentation": [[4, 5, 24, 5, 24, 15, 4, 15]], "keypoints": [6, 7, 2]},
            {"bbox": [30, 20, 10, 10], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 0,
             "segmentation": [[30, 20, 40, 20, 40, 30]], "keypoints": [31, 21, 2]},
        ],
    }


def test_mapper_output_uses_detectron2_classes_sharing_data(d2, record):
    sample = _mapper()(record)
    inst = sample["instances"]
    assert type(inst) is d2.Instances
    assert inst._image_size == (40, 60) and list(inst._fields) == [
        "gt_boxes", "gt_classes", "gt_masks", "gt_keypoints"]
    fields = inst._fields
    assert type(fields["gt_boxes"]) is d2.Boxes
    assert type(fields["gt_masks"]) is d2.PolygonMasks
    assert type(fields["gt_keypoints"]) is d2.Keypoints
    assert fields["gt_boxes"].tensor.tolist() == [[4, 5, 24, 15], [30, 20, 40, 30]]
    assert fields["gt_classes"].tolist() == [1, 0]
    assert [len(p) for p in fields["gt_masks"].polygons] == [1, 1]

    # The same tensors and polygon arrays, not copies: converting costs no data.
    catmap = _mapper()
    sys.modules.pop("detectron2.structures")
    own = catmap(record)["instances"]
    converted = as_detectron2_types({"instances": own})["instances"]
    assert type(converted) is S.Instances  # detectron2 no longer imported: unchanged
    sys.modules["detectron2.structures"] = d2
    converted = as_detectron2_types({"instances": own})["instances"]
    assert converted._fields["gt_boxes"].tensor is own.gt_boxes.tensor
    assert converted._fields["gt_keypoints"].tensor is own.gt_keypoints.tensor
    assert converted._fields["gt_classes"] is own.gt_classes
    assert converted._fields["gt_masks"].polygons is own.gt_masks.polygons


def test_bitmasks_get_image_size_attribute(d2, record):
    mapper = _mapper(instance_mask_format="bitmask")
    masks = mapper(record)["instances"]._fields["gt_masks"]
    assert type(masks) is d2.BitMasks
    assert masks.image_size == (40, 60) and masks.tensor.dtype == torch.bool
    rotated = as_detectron2_types({"instances": S.Instances(
        (5, 5), gt_boxes=S.RotatedBoxes([[2, 2, 2, 1, 30]]))})["instances"]
    assert type(rotated._fields["gt_boxes"]) is d2.RotatedBoxes


def test_switch_keeps_catmap_types(d2, record, monkeypatch):
    monkeypatch.setenv(DETECTRON2_TYPES_ENV, "0")
    inst = _mapper()(record)["instances"]
    assert type(inst) is S.Instances and type(inst.gt_boxes) is S.Boxes


def test_without_detectron2_nothing_changes(record, monkeypatch):
    monkeypatch.delitem(sys.modules, "detectron2.structures", raising=False)
    inst = _mapper()(record)["instances"]
    assert type(inst) is S.Instances and type(inst.gt_masks) is S.PolygonMasks


def test_loader_workers_deliver_detectron2_classes(d2, record):
    loader = build_detection_train_loader(
        [record] * 4, mapper=_mapper(),
        total_batch_size=2, seed=0, num_workers=1, multiprocessing_context="fork")
    batch = next(iter(loader))
    assert [type(s["instances"]) for s in batch] == [d2.Instances] * 2
    assert type(batch[0]["instances"]._fields["gt_boxes"]) is d2.Boxes
    assert batch[0]["instances"]._fields["gt_boxes"].tensor.tolist()[0] == [4, 5, 24, 15]


@pytest.mark.skipif(importlib.util.find_spec("detectron2") is None,
                    reason="detectron2 is not on the package index; run with its checkout")
def test_real_detectron2_accepts_the_batch(record, monkeypatch):  # pragma: no cover - local
    monkeypatch.delenv(DETECTRON2_TYPES_ENV, raising=False)
    from detectron2 import structures as real
    from detectron2.modeling.proposal_generator.proposal_utils import (
        add_ground_truth_to_proposals,
    )

    inst = _mapper()(record)["instances"]
    assert isinstance(inst, real.Instances) and isinstance(inst.gt_boxes, real.Boxes)
    proposals = real.Instances((40, 60), proposal_boxes=real.Boxes(torch.zeros(1, 4)),
                               objectness_logits=torch.zeros(1))
    joined = add_ground_truth_to_proposals([inst], [proposals])[0]
    assert len(joined) == 3
    assert inst.gt_masks.crop_and_resize(inst.gt_boxes.tensor, 8).shape == (2, 8, 8)
    assert len(real.Instances.cat([inst, inst])) == 4
    assert inst.gt_keypoints.to_heatmap(inst.gt_boxes.tensor, 4)[0].shape == (2, 1)
