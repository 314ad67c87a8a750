"""Tests for mappers.dataset_mapper: Compose, the TRANSFORMS registry and the shipped steps."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError
from catalog.registry import RegistryKeyError
from mappers import transforms as T
from mappers.compose import AnnotationsToInstances, ApplyAugmentations, Compose, ToTensor
from mappers.dataset_mapper import TRANSFORMS, DatasetMapper, LoadImage
from mappers.datasets import DatasetFromList, MapDataset
from mappers.errors import ImageReadError, PipelineStepError

H, W = 30, 40


@pytest.fixture()
def record(tmp_path):
    y, x = np.mgrid[0:H, 0:W]
    image = np.stack([x * 6, y * 8, x + y], axis=-1).astype(np.uint8)
    path = tmp_path / "a.png"
    Image.fromarray(image).save(path)
    return {
        "file_name": str(path),
        "height": H,
        "width": W,
        "image_id": 1,
        "annotations": [
            {"bbox": [4, 6, 10, 12], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 3},
            {"bbox": [0, 0, 5, 5], "bbox_mode": BoxMode.XYWH_ABS, "category_id": 1, "iscrowd": 1},
        ],
    }


FULL_PIPELINE = [
    {"type": "LoadImage", "format": "RGB"},
    {
        "type": "ApplyAugmentations",
        "augmentations": [
            {"type": "Resize", "shape": (2 * H, 2 * W)},
            {"type": "RandomFlip", "prob": 1.0},
        ],
    },
    {"type": "AnnotationsToInstances"},
    {"type": "ToTensor"},
]


def test_config_pipeline_matches_dataset_mapper(record):
    pipeline = Compose(FULL_PIPELINE)
    out = pipeline(record)
    expected = DatasetMapper(
        True, augmentations=[T.Resize((2 * H, 2 * W)), T.RandomFlip(prob=1.0)]
    )(record)
    assert torch.equal(out["image"], expected["image"])
    assert torch.equal(out["instances"].gt_boxes.tensor, expected["instances"].gt_boxes.tensor)
    assert out["instances"].gt_classes.tolist() == [3]
    # XYWH [4, 6, 10, 12] -> XYXY [4, 6, 14, 18] -> x2 [8, 12, 28, 36] -> flip at 80
    np.testing.assert_allclose(out["instances"].gt_boxes.tensor.numpy(), [[52, 12, 72, 36]])
    assert isinstance(out["transforms"], T.TransformList)
    assert "annotations" not in out
    assert "annotations" in record and "image" not in record  # input untouched


def test_callables_and_none_ends_pipeline():
    calls = []

    def first(d):
        calls.append("first")
        return None if d.get("skip") else {**d, "a": 1}

    def second(d):
        calls.append("second")
        return {**d, "b": 2}

    pipe = Compose([first, second])
    assert pipe({"x": 0}) == {"x": 0, "a": 1, "b": 2}
    calls.clear()
    assert pipe({"skip": True}) is None
    assert calls == ["first"]
    assert Compose([])({"x": 1}) == {"x": 1}
    assert Compose(second)({}) == {"b": 2}  # a single step is accepted


def test_registry_extension_and_unknown_names():
    @TRANSFORMS.register("AddConstantForTest")
    class AddConstant:
        def __init__(self, value):
            self.value = value

        def __call__(self, d):
            return {**d, "c": self.value}

    assert "AddConstantForTest" in TRANSFORMS
    assert Compose([{"type": "AddConstantForTest", "value": 5}])({}) == {"c": 5}
    with pytest.raises(RegistryKeyError) as info:
        Compose([{"type": "LoadImag"}])
    assert isinstance(info.value, KeyError)
    assert "LoadImage" in str(info.value)
    for name in ("LoadImage", "ApplyAugmentations", "AnnotationsToInstances", "ToTensor"):
        assert name in TRANSFORMS


def test_bad_entries():
    with pytest.raises(PipelineStepError, match="step 1"):
        Compose([ToTensor(), 42])
    with pytest.raises(PipelineStepError, match="no 'type'"):
        Compose([{"format": "RGB"}])
    with pytest.raises(PipelineStepError, match="LoadImage"):
        Compose([{"type": "LoadImage", "colour": "RGB"}])
    with pytest.raises(PipelineStepError, match="RandomFlip"):
        ApplyAugmentations([{"type": "RandomFlp"}])
    with pytest.raises(PipelineStepError, match="no 'type'"):
        ApplyAugmentations([{"prob": 0.5}])
    with pytest.raises(ValueError, match="format"):
        LoadImage(format="CMYK")
    with pytest.raises(ValueError, match="instance_mask_format"):
        AnnotationsToInstances(instance_mask_format="rle")


def test_repr_lists_steps():
    text = repr(Compose(FULL_PIPELINE))
    lines = text.splitlines()
    assert lines[0] == "Compose("
    assert lines[1].strip().startswith("LoadImage(format='RGB'")
    assert "RandomFlip(prob=1.0)" in lines[2]
    assert lines[3].strip().startswith("AnnotationsToInstances(")
    assert lines[4].strip() == "ToTensor(keys=('image',)),"
    assert repr(Compose([])) == "Compose()"


def test_load_image_skip_bad_images_makes_map_dataset_refetch(record, tmp_path):
    bad = dict(record, file_name=str(tmp_path / "missing.png"))
    with pytest.raises(ImageReadError, match="missing.png"):
        Compose([LoadImage()])(bad)
    load = LoadImage(skip_bad_images=True)
    pipeline = Compose([load, ToTensor()])
    assert pipeline(bad) is None
    assert load.num_skipped == 1
    ds = MapDataset(DatasetFromList([bad, record]), pipeline, seed=0)
    assert ds[0]["file_name"] == record["file_name"]
    stats = ds.failure_stats()  # a replacement is drawn from both records: 0 may come again
    assert stats["failed_indices"] == [0] and stats["num_failures"] >= 1


def test_load_image_other_key_and_missing_keys(record):
    rec = {"path": record["file_name"], "height": H, "width": W}
    out = LoadImage(key="path", format="BGR")(rec)
    assert out["image"].shape == (H, W, 3)
    with pytest.raises(RecordFormatError, match="'path'"):
        LoadImage(key="path")({"file_name": "x"})
    with pytest.raises(RecordFormatError, match="LoadImage"):
        ApplyAugmentations([])({"file_name": "x"})
    with pytest.raises(RecordFormatError, match="image"):
        AnnotationsToInstances()({"file_name": "x"})
    with pytest.raises(RecordFormatError, match="'image'"):
        ToTensor()({"file_name": "x"})


def test_steps_without_augmentation_and_with_sem_seg(record, tmp_path):
    seg = np.zeros((H, W), np.uint8)
    seg[:5] = 2
    Image.fromarray(seg, mode="L").save(tmp_path / "seg.png")
    record["sem_seg_file_name"] = str(tmp_path / "seg.png")
    out = Compose([LoadImage(), AnnotationsToInstances(), ToTensor()])(record)
    np.testing.assert_allclose(out["instances"].gt_boxes.tensor.numpy(), [[4, 6, 14, 18]])
    assert out["sem_seg"].dtype == torch.int64 and out["sem_seg"][0, 0] == 2
    assert out["image"].shape == (3, H, W)


def test_two_augmentation_steps_chain_transforms(record):
    pipe = Compose(
        [
            LoadImage(),
            ApplyAugmentations([T.Resize((2 * H, 2 * W))]),
            ApplyAugmentations([T.RandomFlip(prob=1.0)]),
            AnnotationsToInstances(),
        ]
    )
    out = pipe(record)
    np.testing.assert_allclose(out["instances"].gt_boxes.tensor.numpy(), [[52, 12, 72, 36]])


def test_pipeline_with_lambda_pickles(record):
    pipe = Compose([LoadImage(), lambda d: {**d, "tag": "ok"}, ToTensor()])
    back = pickle.loads(pickle.dumps(pipe))
    out = back(record)
    assert out["tag"] == "ok" and out["image"].shape == (3, H, W)
    assert "<lambda>" in repr(back)
