"""One augmentation engine: DatasetMapper is a preset of the Compose steps.

* DatasetMapper and the same Compose steps give identical samples, planned or not;
* planning before decoding lives in the augmentations (``AugmentationList.plan``) and the
  transforms (``output_size``), and reaches Compose pipelines too (reduced decode);
* ``gt_boxes`` is a ``Boxes`` on every path;
* one skip/warn policy for unreadable images and malformed annotations.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image

import mappers.image_io as record_io
from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError
from mappers import transforms as T
from mappers.compose import AnnotationsToInstances, ApplyAugmentations, Compose, ToTensor
from mappers.dataset_mapper import DatasetMapper, LoadImage
from mappers.datasets import DatasetFromList, MapDataset
from mappers.random_state import seed_generator, use_generator
from mappers.structures import BitMasks, Boxes, PolygonMasks

H, W = 60, 80


@pytest.fixture()
def record(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "noise.jpg"
    Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(path, quality=95)
    return {
        "file_name": str(path),
        "height": H,
        "width": W,
        "image_id": 11,
        "annotations": [
            {
                "bbox": [3.5, 4.25, 30, 21],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": 1,
                "segmentation": [[4, 5, 33, 5, 33, 25, 4, 25]],
            },
            {
                "bbox": [40, 10, 79, 59],
                "bbox_mode": BoxMode.XYXY_ABS,
                "category_id": 4,
                "segmentation": [[41, 11, 78, 11, 78, 58]],
            },
            {"bbox": [1, 1, 2, 2], "bbox_mode": BoxMode.XYXY_ABS, "category_id": 2, "iscrowd": 1},
        ],
    }


AUGMENTATION_SETS = {
    "resize+flip (planned)": lambda: [T.ResizeShortestEdge((40, 90), 1000), T.RandomFlip()],
    "crop first (planned)": lambda: [
        T.RandomCrop("absolute", (40, 50)),
        T.ResizeShortestEdge((30, 70), 1000),
        T.RandomFlip(prob=0.5, horizontal=False, vertical=True),
    ],
    "brightness (planned)": lambda: [T.RandomBrightness(0.5, 1.5), T.RandomFlip()],
    "contrast (general)": lambda: [T.RandomContrast(0.5, 1.5), T.Resize((30, 40))],
    "random apply (planned)": lambda: [T.RandomApply(T.Resize((90, 120)), prob=0.5)],
}


@pytest.mark.parametrize("name", sorted(AUGMENTATION_SETS))
def test_dataset_mapper_equals_its_compose_steps(record, name):
    augs = AUGMENTATION_SETS[name]()
    mapper = DatasetMapper(True, augmentations=augs, use_instance_mask=True)
    pipeline = Compose(
        [
            LoadImage("RGB"),
            ApplyAugmentations(augs),
            AnnotationsToInstances(use_instance_mask=True),
            ToTensor(),
        ]
    )
    assert T.reads_shape_only(mapper.augmentations) == name.endswith("(planned)")
    for seed in range(6):
        seed_generator(seed)
        a = mapper(record)
        seed_generator(seed)
        b = pipeline(record)
        assert torch.equal(a["image"], b["image"])
        assert isinstance(a["instances"].gt_boxes, Boxes)
        assert torch.equal(a["instances"].gt_boxes.tensor, b["instances"].gt_boxes.tensor)
        assert a["instances"].gt_classes.tolist() == b["instances"].gt_classes.tolist()
        assert "transforms" in b and "transforms" not in a  # the mapper's public keys


@pytest.mark.parametrize("name", sorted(AUGMENTATION_SETS))
def test_planned_transforms_are_the_drawn_ones(record, name):
    """The plan (before decoding) equals what the augmentations draw on the decoded image."""
    augs = T.AugmentationList(AUGMENTATION_SETS[name]())
    image = np.zeros((H, W, 3), np.uint8)
    for seed in range(10):
        plan = augs.plan((H, W, 3), rng=np.random.default_rng(seed))
        aug_input = T.AugInput(image.copy())
        drawn = augs(aug_input, rng=np.random.default_rng(seed))
        if not name.endswith("(planned)"):
            assert plan is None
            continue
        assert [repr(t) for t in plan] == [repr(t) for t in drawn]
        assert plan.output_size(H, W) == aug_input.image.shape[:2]


def test_boxes_on_every_path(record):
    for kwargs in (
        {},
        {"use_instance_mask": True},
        {"use_instance_mask": True, "instance_mask_format": "bitmask", "recompute_boxes": True},
    ):
        for augs in ([T.Resize((30, 40))], [T.RandomContrast(0.9, 1.1)], []):
            out = DatasetMapper(True, augmentations=augs, **kwargs)(record)
            boxes = out["instances"].gt_boxes
            assert isinstance(boxes, Boxes), (kwargs, augs)
            assert boxes.tensor.dtype == torch.float32 and len(boxes) == 2
            if kwargs:
                masks = out["instances"].gt_masks
                expected = BitMasks if kwargs.get("instance_mask_format") else PolygonMasks
                assert isinstance(masks, expected) and len(masks) == 2
    empty = DatasetMapper(True, augmentations=[])(dict(record, annotations=[]))
    assert isinstance(empty["instances"].gt_boxes, Boxes)
    assert empty["instances"].gt_boxes.tensor.shape == (0, 4)
    no_key = {k: v for k, v in record.items() if k != "annotations"}
    assert "instances" not in DatasetMapper(True, augmentations=[])(no_key)  # as detectron2
    assert "instances" not in Compose([LoadImage(), AnnotationsToInstances()])(no_key)


def test_compose_pipelines_also_decode_reduced(record, tmp_path, monkeypatch):
    big = np.random.default_rng(0).integers(0, 256, (400, 600, 3), dtype=np.uint8)
    path = tmp_path / "big.jpg"
    Image.fromarray(big).save(path, quality=90)
    rec = dict(record, file_name=str(path), height=400, width=600, annotations=[])
    seen = []
    real = record_io.decode_image

    def spy(*args, **kwargs):
        image = real(*args, **kwargs)
        seen.append(image.shape[:2])
        return image

    monkeypatch.setattr(record_io, "decode_image", spy)
    augs = [T.ResizeShortestEdge(100, 1000), T.RandomFlip()]
    out = Compose([LoadImage(reduced_decode=True), ApplyAugmentations(augs), ToTensor()])(rec)
    assert out["image"].shape == (3, 100, 150) and seen[-1] == (100, 150)
    # not directly followed by its augmentations: nothing to plan, a full decode
    Compose([LoadImage(reduced_decode=True), ToTensor()])(rec)
    assert seen[-1] == (400, 600)


def test_malformed_annotation_raises_or_is_skipped_once_per_file(record, caplog):
    bad = dict(record, annotations=[{"bbox": [1, 2, 3], "bbox_mode": 0, "category_id": 0}])
    with pytest.raises(RecordFormatError, match="bbox"):
        DatasetMapper(True, augmentations=[])(bad)
    mapper = DatasetMapper(True, augmentations=[], skip_bad_annotations=True)
    with caplog.at_level(logging.WARNING):
        assert mapper(bad) is None
        assert mapper(bad) is None
    assert mapper.num_skipped == 2
    warnings = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(warnings) == 1 and "DatasetMapper" in warnings[0]
    assert record["file_name"] in warnings[0] and "annotations" in warnings[0]
    dataset = MapDataset(DatasetFromList([bad, record]), mapper, seed=0)
    assert dataset[0]["image_id"] == 11  # another record was used
    # test mode does not read annotations, so they cannot make it skip
    assert DatasetMapper(False, augmentations=[], skip_bad_annotations=True)(bad) is not None


def test_a_subclass_overriding_get_transform_is_not_planned():
    class ReadsPixels(T.ResizeShortestEdge):
        def get_transform(self, image):
            assert isinstance(image, np.ndarray)  # the real image, never a stand-in
            return super().get_transform(image)

    class DeclaresShapeOnly(ReadsPixels):
        shape_only = True

        def get_transform(self, image):
            return T.ResizeShortestEdge.get_transform(self, image)

    assert not T.reads_shape_only(ReadsPixels(20))
    assert T.AugmentationList([ReadsPixels(20)]).plan((10, 20, 3)) is None
    assert T.reads_shape_only(DeclaresShapeOnly(20))
    with use_generator(np.random.default_rng(0)):
        plan = T.AugmentationList([[DeclaresShapeOnly(20)], T.RandomFlip(1.0)]).plan((10, 20))
    assert plan.output_size(10, 20) == (20, 40) and len(plan) == 2


def test_output_size_of_each_transform():
    assert T.ResizeTransform(10, 20, 5, 7).output_size(10, 20) == (5, 7)
    assert T.ResizeTransform(10, 20, 5, 7).output_size(11, 20) is None  # another input size
    assert T.HFlipTransform(20).output_size(10, 20) == (10, 20)
    assert T.CropTransform(2, 3, 5, 4).output_size(10, 20) == (4, 5)
    assert T.CropTransform(18, 3, 5, 4).output_size(10, 20) is None  # outside the image
    assert T.PadTransform(1, 2, 3, 4).output_size(10, 20) == (16, 24)
    assert T.BlendTransform(0, 0.5, 0.5).output_size(10, 20) == (10, 20)
    assert T.NoOpTransform().output_size(10, 20) == (10, 20)
    chain = T.TransformList([T.PadTransform(1, 1, 1, 1), T.ResizeTransform(12, 22, 6, 11)])
    assert chain.output_size(10, 20) == (6, 11)

    class Custom(T.Transform):
        def apply_image(self, img):
            return img

        def apply_coords(self, coords):
            return coords

    assert Custom().output_size(10, 20) is None  # unknown: planning gives up
