"""detectron2 names and behaviours of the transform layer (issue 23)."""

import pickle

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from catalog.box_mode import BoxMode
from mappers import transforms as T
from mappers.random_state import use_generator
from mappers.structures import RotatedBoxes


def test_rotated_boxes_clip_never_enlarges_a_box():
    for seed in range(50):
        gen = torch.Generator().manual_seed(seed)
        boxes = torch.zeros(100, 5)
        boxes[:, :2] = torch.rand(100, 2, generator=gen) * 600 - 100
        boxes[:, 2:4] = torch.rand(100, 2, generator=gen) * 500
        boxes[:, 4] = torch.rand(100, generator=gen) * 3600 - 1800
        threshold = float(torch.rand(1, generator=gen)) * 180
        before = RotatedBoxes(boxes.clone())
        clipped = RotatedBoxes(boxes.clone())
        clipped.clip((500, 600), threshold)
        assert (clipped.tensor[:, 2] <= before.tensor[:, 2]).all()
        assert (clipped.tensor[:, 3] <= before.tensor[:, 3]).all()
        shrunk = clipped.area() < before.area()
        assert (clipped.tensor[shrunk, 4].abs() <= threshold).all()


def test_scale_transform_is_fvcore_torch_resize():
    img = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    t = T.ScaleTransform(30, 40, 45, 20, "bilinear")
    out = t.apply_image(img)
    x = torch.from_numpy(img).float().permute(2, 0, 1)[None]
    ref = F.interpolate(x, size=(45, 20), mode="bilinear", align_corners=False)
    np.testing.assert_array_equal(out, ref[0].permute(1, 2, 0).round().byte().numpy())
    assert t.apply_image(img[None].repeat(2, 0)).shape == (2, 45, 20, 3)
    assert t.apply_image(img[:, :, 0]).shape == (45, 20)
    seg = (img[:, :, 0] > 128).astype(np.int32)
    assert set(np.unique(t.apply_segmentation(seg))) <= {0, 1}
    np.testing.assert_allclose(t.apply_coords(np.array([[40.0, 30.0]])), [[20.0, 45.0]])
    assert isinstance(t.inverse(), T.ScaleTransform) and t.output_size(30, 40) == (45, 20)
    assert repr(t) == "ScaleTransform(h=30, w=40, new_h=45, new_w=20, interp='bilinear')"
    with pytest.raises(ValueError, match="interp"):
        T.ScaleTransform(1, 1, 2, 2, "lanczos")


def test_gen_crop_transform_with_instance():
    instance = {"bbox": [10, 10, 100, 100], "bbox_mode": BoxMode.XYXY_ABS}
    for seed in range(20):
        with use_generator(np.random.default_rng(seed)):
            t = T.gen_crop_transform_with_instance((10, 10), (150, 150), instance)
        assert isinstance(t, T.CropTransform) and (t.w, t.h) == (10, 10)
        assert t.x0 <= 55 <= t.x0 + t.w and t.y0 <= 55 <= t.y0 + t.h
    with pytest.raises(T.TransformError, match="outside"):
        T.gen_crop_transform_with_instance((10, 10), (15, 15), instance)
    with pytest.raises(T.TransformError, match="larger"):
        T.gen_crop_transform_with_instance((200, 10), (150, 150), instance)


def test_augmentation_reprs_are_detectron2s():
    assert str(T.RandomCrop("relative", (100, 100))) == (
        "RandomCrop(crop_type='relative', crop_size=(100, 100))"
    )
    t0, t1 = T.RandomFlip(prob=0.5), T.RandomFlip()
    assert (str(t0), str(t1)) == ("RandomFlip(prob=0.5)", "RandomFlip()")
    assert str(T.AugmentationList([t0, t1])) == f"AugmentationList[{t0}, {t1}]"
    assert repr(T.RandomApply(t1)) == "RandomApply(tfm_or_aug=RandomFlip())"
    # a pickle round trip keeps the repr
    assert [repr(pickle.loads(pickle.dumps(t))) for t in (t0, t1)] == [repr(t0), repr(t1)]


def test_random_crop_relative_accepts_what_detectron2_accepts():
    aug = T.RandomCrop("relative", (100, 100))
    with pytest.raises(ValueError, match="exceeds"):
        aug(T.AugInput(np.zeros((10, 10), np.uint8)))
    tfm = T.RandomCrop("relative_range", (1.0, 1.0))(T.AugInput(np.zeros((10, 12), np.uint8)))
    assert (tfm.h, tfm.w) == (10, 12)


def test_resize_shortest_edge_get_output_shape_is_scriptable():
    def f(image: torch.Tensor) -> torch.Tensor:
        newh, neww = T.ResizeShortestEdge.get_output_shape(
            image.shape[-2], image.shape[-1], 80, 133
        )
        return F.interpolate(image.unsqueeze(0), size=(newh, neww))

    scripted = torch.jit.script(f)
    for shape in ((3, 10, 10), (3, 8, 100)):
        x = torch.randn(*shape)
        assert torch.allclose(f(x), scripted(x))
