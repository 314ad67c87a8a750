"""mappers.torchvision_targets: mapped samples as torchvision detection inputs.

The adapter tests need no torchvision; the training-step test runs one step of a torchvision
Mask R-CNN (``weights=None``) on catmap batches where torchvision is usable.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from catalog import DatasetCatalog, MetadataCatalog, register_coco_instances
from mappers import DatasetMapper, Instances
from mappers.torchvision_targets import (
    TorchvisionTargetError,
    to_torchvision_batch,
    to_torchvision_detection,
)
from mappers.transforms import RandomFlip
from samplers import build_detection_train_loader
from tests.optional_imports import import_or_skip


def _sample(n=2, h=8, w=10, **fields):
    boxes = torch.tensor([[1.0, 1.0, 5.0, 6.0], [2.0, 0.0, 9.0, 3.0]])[:n]
    inst = Instances((h, w), gt_boxes=boxes, gt_classes=torch.tensor([0, 2])[:n], **fields)
    image = torch.arange(3 * h * w, dtype=torch.int64).remainder(256).to(torch.uint8)
    return {"file_name": "x.jpg", "image_id": 7, "image": image.reshape(3, h, w),
            "instances": inst}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from tools.shapes_dataset import generate_shapes_dataset

    return generate_shapes_dataset(
        tmp_path_factory.mktemp("tv") / "shapes", num_images=6, seed=2,
        image_sizes=[(64, 48), (48, 64)],
    )


@pytest.fixture
def shapes_name(shapes):
    register_coco_instances("tv_shapes", {}, shapes.json_file, shapes.image_root)
    return "tv_shapes"


def test_image_boxes_labels_dtypes_shapes_and_offset():
    sample = _sample()
    image, target = to_torchvision_detection(sample, label_offset=1)
    assert image.dtype == torch.float32 and image.shape == (3, 8, 10)
    assert torch.equal(image, sample["image"].float() / 255)
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert target["boxes"].dtype == torch.float32 and target["boxes"].shape == (2, 4)
    assert torch.equal(target["boxes"], sample["instances"].gt_boxes)
    assert target["labels"].dtype == torch.int64
    assert target["labels"].tolist() == [1, 3]
    assert to_torchvision_detection(sample, label_offset=0)[1]["labels"].tolist() == [0, 2]
    assert sorted(target) == ["boxes", "labels"]
    # the sample is not changed
    assert sample["instances"].gt_classes.tolist() == [0, 2]


def test_label_offset_is_required_and_checked():
    with pytest.raises(TypeError):
        to_torchvision_detection(_sample())  # no default: the caller must choose
    with pytest.raises(TypeError):
        to_torchvision_batch([_sample()])
    with pytest.raises(TypeError, match="label_offset"):
        to_torchvision_detection(_sample(), label_offset=True)
    with pytest.raises(ValueError, match="label_offset"):
        to_torchvision_detection(_sample(), label_offset=-1)


def test_empty_instances_and_a_sample_without_instances():
    empty = Instances((8, 10), gt_boxes=torch.zeros(0, 4),
                      gt_classes=torch.zeros(0, dtype=torch.int64),
                      gt_masks=torch.zeros(0, 8, 10, dtype=torch.uint8))
    _, target = to_torchvision_detection({**_sample(), "instances": empty}, label_offset=1)
    assert target["boxes"].shape == (0, 4) and target["boxes"].dtype == torch.float32
    assert target["labels"].shape == (0,) and target["labels"].dtype == torch.int64
    assert target["masks"].shape == (0, 8, 10) and target["masks"].dtype == torch.uint8
    sample = _sample()
    del sample["instances"]
    _, target = to_torchvision_detection(sample, label_offset=1)
    assert target["boxes"].shape == (0, 4) and target["labels"].shape == (0,)


def test_masks_from_bitmask_tensors_polygons_and_structures():
    square = [np.array([1.0, 1.0, 5.0, 1.0, 5.0, 6.0, 1.0, 6.0])]
    strip = [np.array([2.0, 0.0, 9.0, 0.0, 9.0, 3.0, 2.0, 3.0])]
    from mappers.geometry_checks import polygons_to_bitmask

    expected = torch.from_numpy(
        np.stack([polygons_to_bitmask(square, 8, 10), polygons_to_bitmask(strip, 8, 10)])
    )
    _, from_polygons = to_torchvision_detection(
        _sample(gt_masks=[square, strip]), label_offset=1
    )
    assert from_polygons["masks"].dtype == torch.uint8
    assert torch.equal(from_polygons["masks"], expected)
    _, from_bits = to_torchvision_detection(
        _sample(gt_masks=expected.bool()), label_offset=1
    )
    assert torch.equal(from_bits["masks"], expected)

    from mappers.structures import BitMasks, Boxes, PolygonMasks

    sample = _sample(gt_masks=BitMasks(expected.bool()))
    sample["instances"].gt_boxes = Boxes(sample["instances"].gt_boxes.double())
    _, target = to_torchvision_detection(sample, label_offset=0)
    assert torch.equal(target["masks"], expected) and target["boxes"].dtype == torch.float32
    _, target = to_torchvision_detection(
        _sample(gt_masks=PolygonMasks([square, strip])), label_offset=0
    )
    assert torch.equal(target["masks"], expected)


def test_keypoints_degenerate_boxes_and_device():
    keypoints = torch.tensor([[[1.0, 2.0, 2.0], [3.0, 3.0, 0.0]], [[4.0, 1.0, 1.0], [0, 0, 0]]])
    from mappers.structures import Keypoints

    assert torch.equal(
        to_torchvision_detection(_sample(gt_keypoints=Keypoints(keypoints)), label_offset=1)[1][
            "keypoints"
        ],
        keypoints,
    )
    sample = _sample(gt_keypoints=keypoints.double())
    sample["instances"].gt_boxes = torch.tensor([[1.0, 1.0, 5.0, 6.0], [2.0, 2.0, 2.0, 3.0]])
    _, target = to_torchvision_detection(sample, label_offset=1, device="cpu")
    assert target["boxes"].shape == (1, 4) and target["labels"].tolist() == [1]
    assert target["keypoints"].dtype == torch.float32
    assert torch.equal(target["keypoints"], keypoints[:1])
    _, kept = to_torchvision_detection(sample, label_offset=1, drop_degenerate=False)
    assert kept["boxes"].shape == (2, 4) and kept["keypoints"].shape == (2, 2, 3)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda s: s["instances"].remove("gt_classes"), "gt_classes"),
        (lambda s: s.__setitem__("image", torch.zeros(8, 10)), "image"),
        (lambda s: s.__setitem__("image", torch.zeros(3, 8, 10, dtype=torch.int32)), "image"),
        (lambda s: s["instances"].set("gt_masks", torch.zeros(2, 4, 4)), "gt_masks"),
        (lambda s: s["instances"].set("gt_keypoints", torch.zeros(2, 3)), "gt_keypoints"),
        (lambda s: s["instances"].set("gt_classes", torch.tensor([-1, 0])), "gt_classes"),
        (lambda s: s["instances"].set("gt_masks", {"a": 1, "b": 2}), "gt_masks"),
    ],
)
def test_malformed_samples_raise_naming_the_image_and_key(change, key):
    sample = _sample()
    change(sample)
    with pytest.raises(TorchvisionTargetError, match=key) as info:
        to_torchvision_detection(sample, label_offset=1)
    assert info.value.key == key and info.value.image == "x.jpg"
    assert "x.jpg" in str(info.value)


def test_batches_from_the_catmap_loader(shapes_name):
    mapper = DatasetMapper(True, augmentations=[RandomFlip()], use_instance_mask=True)
    loader = build_detection_train_loader(shapes_name, mapper=mapper, total_batch_size=2, seed=0)
    for batch in itertools.islice(loader, 3):
        images, targets = to_torchvision_batch(batch, label_offset=1)
        assert len(images) == len(targets) == 2
        for sample, image, target in zip(batch, images, targets, strict=True):
            n = len(sample["instances"])
            assert image.shape == sample["image"].shape and image.dtype == torch.float32
            assert target["boxes"].shape == (n, 4)
            assert torch.equal(target["labels"], sample["instances"].gt_classes + 1)
            assert target["masks"].shape == (n, *image.shape[1:])
            assert target["masks"].dtype == torch.uint8 and int(target["masks"].max()) == 1
            # every mask lies inside (or on the border of) its box
            for box, mask in zip(target["boxes"], target["masks"], strict=True):
                ys, xs = torch.nonzero(mask, as_tuple=True)
                assert float(xs.min()) >= float(box[0]) - 1 and float(xs.max()) <= float(box[2])
                assert float(ys.min()) >= float(box[1]) - 1 and float(ys.max()) <= float(box[3])


README_TORCHVISION_SNIPPET = """
import torch
from torchvision.models.detection import maskrcnn_resnet50_fpn

from catalog import MetadataCatalog
from mappers import DatasetMapper
from mappers.torchvision_targets import to_torchvision_batch
from samplers import build_detection_train_loader

classes = MetadataCatalog.get(dataset_name).thing_classes
model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, min_size=64, max_size=96,
                              num_classes=len(classes) + 1)  # + the background class 0
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
mapper = DatasetMapper(True, augmentations=[], use_instance_mask=True)
loader = build_detection_train_loader(dataset_name, mapper=mapper, total_batch_size=2, seed=0)
images, targets = to_torchvision_batch(next(iter(loader)), label_offset=1)  # 0: background
losses = model(images, targets)
loss = sum(losses.values())
optimizer.zero_grad()
loss.backward()
optimizer.step()
"""


def test_readme_snippet_trains_a_torchvision_mask_rcnn_one_step(shapes_name):
    import_or_skip("torchvision")
    DatasetCatalog.get(shapes_name)  # sets thing_classes
    torch.manual_seed(0)
    scope = {"dataset_name": shapes_name}
    exec(README_TORCHVISION_SNIPPET, scope)  # noqa: S102 - the README text, verbatim
    losses, model = scope["losses"], scope["model"]
    assert {"loss_classifier", "loss_box_reg", "loss_mask"} <= set(losses)
    assert all(bool(torch.isfinite(v)) for v in losses.values())
    assert float(scope["loss"]) > 0
    assert model.roi_heads.box_predictor.cls_score.out_features == len(
        MetadataCatalog.get(shapes_name).thing_classes
    ) + 1
    # the optimizer step changed the weights that received a gradient
    assert all(p.grad is not None for p in model.roi_heads.box_predictor.parameters())
