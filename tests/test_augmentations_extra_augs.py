"""Tests for the extra augmentations: ResizeScale, FixedSizeCrop, RandomResize, RandomRotation,
RandomExtent, RandomLighting, RandomCrop_CategoryAreaConstraint, MinIoURandomCrop; their
consistency on images and annotations, determinism, and construction from config dicts."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

from catalog.box_mode import BoxMode
from mappers import transforms as T
from mappers.compose import ApplyAugmentations, Compose
from mappers.random_state import seed_generator, use_generator
from mappers.transforms import (
    AugInput,
    AugmentationList,
    CropTransform,
    ExtentTransform,
    FixedSizeCrop,
    MinIoURandomCrop,
    NoOpTransform,
    PadTransform,
    RandomCrop_CategoryAreaConstraint,
    RandomExtent,
    RandomLighting,
    RandomResize,
    RandomRotation,
    ResizeScale,
    ResizeTransform,
    RotationTransform,
    TransformList,
)

from .test_augmentations_extra import assert_masks_within_a_pixel, box_of, rasterize

NEW_AUGMENTATIONS = {
    "ResizeScale": {"min_scale": 0.5, "max_scale": 1.5, "target_height": 40, "target_width": 48},
    "FixedSizeCrop": {"crop_size": (32, 32), "pad_value": 0, "seg_pad_value": 255},
    "RandomResize": {"shape_list": [(20, 30), (40, 60)]},
    "RandomRotation": {"angle": [-30, 30]},
    "RandomExtent": {"scale_range": (0.8, 1.2), "shift_range": (0.2, 0.2)},
    "RandomLighting": {"scale": 0.5},
    "RandomCrop_CategoryAreaConstraint": {
        "crop_type": "absolute",
        "crop_size": (20, 20),
        "single_category_max_area": 0.8,
    },
    "MinIoURandomCrop": {"min_ious": (0.1, 0.3), "min_crop_size": 0.5},
}


def _image(h: int = 36, w: int = 44, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _sem_seg(h: int = 36, w: int = 44) -> np.ndarray:
    seg = np.zeros((h, w), np.int32)
    seg[:, w // 2 :] = 1
    seg[h // 2 :, : w // 3] = 2
    return seg


def _aug_input(**kwargs) -> AugInput:
    boxes = np.array([[6.0, 5.0, 20.0, 18.0], [24.0, 10.0, 40.0, 30.0]])
    return AugInput(_image(), boxes=boxes, sem_seg=_sem_seg(), **kwargs)


def _build(name: str):
    return getattr(T, name)(**NEW_AUGMENTATIONS[name])


# ---------------------------------------------------------------- names and configs
def test_new_names_are_exported():
    for name in (
        *NEW_AUGMENTATIONS,
        "RotationTransform",
        "ExtentTransform",
        "ColorTransform",
        "PILColorTransform",
    ):
        assert name in T.__all__ and hasattr(T, name)


@pytest.mark.parametrize("name", sorted(NEW_AUGMENTATIONS))
def test_built_from_config_dict_by_name(name):
    step = ApplyAugmentations([{"type": name, **NEW_AUGMENTATIONS[name]}])
    (aug,) = step.augmentations.augs
    assert type(aug).__name__ == name
    seed_generator(0)
    out = Compose(
        [
            {
                "type": "ApplyAugmentations",
                "augmentations": [{"type": name, **NEW_AUGMENTATIONS[name]}],
            }
        ]
    )({"image": _image(), "sem_seg": _sem_seg()})
    assert out["image"].ndim == 3 and out["sem_seg"].shape == out["image"].shape[:2]
    assert isinstance(out["transforms"], TransformList)


def test_transforms_usable_from_config_dict():
    step = ApplyAugmentations(
        [
            {"type": "RotationTransform", "h": 36, "w": 44, "angle": 90},
            {"type": "ColorTransform", "op": np.negative},
        ]
    )
    out = step({"image": _image().astype(np.float32)})
    np.testing.assert_array_equal(out["image"], -np.rot90(_image()).astype(np.float32))


@pytest.mark.parametrize("name", sorted(NEW_AUGMENTATIONS))
def test_same_generator_same_transform_and_pickle(name):
    aug = _build(name)
    results = []
    for _ in range(2):
        aug_input = _aug_input()
        tfm = aug(aug_input, rng=np.random.default_rng(123))
        results.append((repr(tfm), aug_input.image.copy(), aug_input.boxes.copy()))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_array_equal(results[0][2], results[1][2])
    clone = pickle.loads(pickle.dumps(aug))
    assert repr(clone.get_transform) and repr(clone) == repr(aug)


@pytest.mark.parametrize("name", sorted(n for n in NEW_AUGMENTATIONS if n != "RandomLighting"))
def test_draws_come_from_the_generator_only(name):
    aug = _build(name)
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    reprs = {repr(aug(_aug_input(), rng=np.random.default_rng(seed))) for seed in range(12)}
    assert len(reprs) > 1  # it is random ...
    assert (np.random.get_state()[1] == state).all()  # ... without the global numpy RNG


# ---------------------------------------------------------------- consistency
def _draw_scene(h: int, w: int):
    """A seg map with a box (label 1), a triangle (label 2) and three 3x3 keypoint blobs."""
    seg = np.zeros((h, w), np.uint8)
    seg[6:18, 8:22] = 1  # box [8, 6, 22, 18]
    triangle = np.array([[26.0, 8.0], [40.0, 30.0], [24.0, 28.0]])
    seg[rasterize(triangle, h, w)] = 2
    points = np.array([[12.5, 24.5], [30.5, 4.5], [20.5, 30.5]])
    for label, (x, y) in enumerate(points, start=3):
        seg[int(y) - 1 : int(y) + 2, int(x) - 1 : int(x) + 2] = label
    return seg, np.array([[8.0, 6.0, 22.0, 18.0]]), triangle, points


CONSISTENCY_CASES = [
    ("ResizeScale", 1),
    ("FixedSizeCrop", 2),
    ("RandomResize", 3),
    ("RandomRotation", 4),
    ("RandomExtent", 5),
    ("MinIoURandomCrop", 6),
]


@pytest.mark.parametrize("name,seed", CONSISTENCY_CASES)
def test_image_boxes_polygons_keypoints_and_sem_seg_agree(name, seed):
    h, w = 36, 44
    seg, box, triangle, points = _draw_scene(h, w)
    aug = _build(name)
    # Keep every shape inside the output.
    if name == "RandomExtent":
        aug = RandomExtent((0.8, 0.9), (0.1, 0.1))
    if name == "MinIoURandomCrop":
        aug = MinIoURandomCrop(min_ious=(0.1,), min_crop_size=0.95)
    aug_input = AugInput(_image(h, w), boxes=box.copy(), sem_seg=seg)
    tfm = aug(aug_input, rng=np.random.default_rng(seed))
    assert not isinstance(tfm, NoOpTransform), "pick a seed that transforms"
    out_seg = aug_input.sem_seg
    oh, ow = aug_input.image.shape[:2]
    assert out_seg.shape == (oh, ow)
    fill = {255} if name == "FixedSizeCrop" else {0}
    assert set(np.unique(out_seg)) <= set(np.unique(seg)) | fill  # nearest neighbour only
    # Box: the transformed box is the box of the transformed pixels.
    box_mask = out_seg == 1
    np.testing.assert_allclose(
        box_of(box_mask), np.clip(aug_input.boxes[0], 0, [ow, oh, ow, oh]), atol=1.0
    )
    # Polygon: rasterizing the transformed polygon gives the transformed mask, to a pixel.
    (poly,) = tfm.apply_polygons([triangle])
    assert_masks_within_a_pixel(rasterize(poly, oh, ow), out_seg == 2)
    # Keypoints land on their blobs.
    for label, (x, y) in enumerate(tfm.apply_coords(points), start=3):
        ys, xs = np.nonzero(out_seg == label)
        assert abs(xs.mean() + 0.5 - x) <= 1.0 and abs(ys.mean() + 0.5 - y) <= 1.0
    # Bitmasks go through apply_segmentation and stay bool.
    bitmask = tfm.apply_segmentation(seg == 2)
    assert bitmask.dtype == np.bool_
    assert_masks_within_a_pixel(bitmask, out_seg == 2)


# ---------------------------------------------------------------- per augmentation
def test_resize_scale_sizes_follow_the_target_box():
    img = np.zeros((30, 40, 3), np.uint8)
    t = ResizeScale(1.0, 1.0, 64, 64).get_transform(img)
    assert (t.new_h, t.new_w) == (48, 64)  # factor min(64/30, 64/40) = 1.6
    t = ResizeScale(0.5, 0.5, 15, 45).get_transform(np.zeros((10, 30), np.uint8))
    assert (t.new_h, t.new_w) == (8, 22)  # 7.5 and 22.5 rounded half to even
    t = ResizeScale(0.01, 0.01, 10, 10).get_transform(img)
    assert (t.new_h, t.new_w) == (1, 1)
    with pytest.raises(ValueError, match="min_scale"):
        ResizeScale(2.0, 1.0, 10, 10)


def test_lsj_pipeline_always_gives_the_crop_size_and_inverts():
    lsj = AugmentationList([ResizeScale(0.1, 2.0, 32, 32), FixedSizeCrop((32, 32), pad_value=7)])
    sizes = set()
    for seed in range(20):
        aug_input = AugInput(_image(24, 40), sem_seg=_sem_seg(24, 40))
        tfms = lsj(aug_input, rng=np.random.default_rng(seed))
        assert aug_input.image.shape == (32, 32, 3)
        assert aug_input.sem_seg.shape == (32, 32)
        sizes.add(tfms[0].new_h)
        pts = np.array([[1.0, 2.0], [20.0, 13.0]])
        np.testing.assert_allclose(tfms.inverse().apply_coords(tfms.apply_coords(pts)), pts)
    assert len(sizes) > 5


def test_fixed_size_crop_pads_right_and_bottom_with_the_pad_values():
    img = _image(10, 20)
    aug_input = AugInput(img, sem_seg=np.ones((10, 20), np.uint8))
    tfm = FixedSizeCrop((16, 12), pad_value=7, seg_pad_value=255)(
        aug_input, np.random.default_rng(0)
    )
    crop, pad = tfm.transforms
    assert isinstance(crop, CropTransform) and isinstance(pad, PadTransform)
    assert (crop.w, crop.h, pad.x1, pad.y1) == (12, 10, 0, 6)
    assert aug_input.image.shape == (16, 12, 3)
    np.testing.assert_array_equal(aug_input.image[:10], img[:, crop.x0 : crop.x0 + 12])
    assert (aug_input.image[10:] == 7).all() and (aug_input.sem_seg[10:] == 255).all()
    assert (aug_input.sem_seg[:10] == 1).all()
    no_pad = FixedSizeCrop((16, 12), pad=False).get_transform(img)
    assert no_pad.apply_image(img).shape == (10, 12, 3)


def test_fixed_size_crop_uses_one_draw_for_both_axes():
    img = np.zeros((50, 80, 3), np.uint8)
    for seed in range(5):
        crop = FixedSizeCrop((10, 20))(AugInput(img), np.random.default_rng(seed))[0]
        u = np.random.default_rng(seed).uniform(0.0, 1.0)
        assert (crop.x0, crop.y0) == (int(np.round(60 * u)), int(np.round(40 * u)))


def test_random_resize_picks_each_shape():
    aug = RandomResize([(20, 30), 16])
    seen = {
        (t.new_h, t.new_w)
        for t in (aug(AugInput(_image()), np.random.default_rng(s)) for s in range(20))
    }
    assert seen == {(20, 30), (16, 16)}
    with pytest.raises(ValueError, match="empty"):
        RandomResize([])


def test_random_rotation_sampling_styles_and_centres():
    img = _image(20, 40)
    t = RandomRotation([90, 180], sample_style="choice")(AugInput(img), np.random.default_rng(0))
    assert isinstance(t, RotationTransform) and t.angle in (90.0, 180.0)
    assert isinstance(RandomRotation(360).get_transform(img), NoOpTransform)
    t = RandomRotation(30, expand=False, center=[[0.25, 0.5], [0.25, 0.5]]).get_transform(img)
    assert t.center == (10.0, 10.0) and not t.expand
    t = RandomRotation(30, expand=False, center=[(0.0, 0.0), (1.0, 1.0)], sample_style="choice")
    centres = {t.get_transform(img).center for _ in range(30)}
    assert centres == {(0.0, 0.0), (40.0, 20.0)}
    for seed in range(10):
        r = RandomRotation([-10, 10])(AugInput(img), np.random.default_rng(seed))
        assert -10 <= r.angle <= 10 and r.expand
    with pytest.raises(ValueError, match="sample_style"):
        RandomRotation(10, sample_style="uniform")
    with pytest.raises(ValueError, match="range"):
        RandomRotation([1, 2, 3])


def test_random_extent_identity_and_shape():
    img = _image(20, 30)
    t = RandomExtent((1.0, 1.0), (0.0, 0.0))(AugInput(img), np.random.default_rng(0))
    assert isinstance(t, ExtentTransform) and t.output_size == (20, 30)
    np.testing.assert_array_equal(t.apply_image(img), img)
    np.testing.assert_allclose(t.apply_coords([[3.0, 4.0]]), [[3.0, 4.0]])
    t = RandomExtent((2.0, 2.0), (0.0, 0.0)).get_transform(img)
    assert t.output_size == (40, 60)
    out = t.apply_image(img)
    np.testing.assert_array_equal(out[10:30, 15:45], img)
    assert (out[:10] == 0).all()
    with pytest.raises(ValueError, match="scale_range"):
        RandomExtent((0.0, 1.0), (0, 0))


def test_random_lighting_adds_the_pca_offset():
    img = np.full((3, 4, 3), 100.0)
    aug = RandomLighting(0.5)
    out = aug(AugInput(img.copy()), np.random.default_rng(5))
    weights = np.random.default_rng(5).normal(0.0, 0.5, size=3)
    vecs = np.array(
        [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
    )
    offset = vecs @ (weights * np.array([0.2175, 0.0188, 0.0045]))
    np.testing.assert_allclose(out.apply_image(img), img + offset)
    bgr = RandomLighting(0.5, image_format="BGR")
    t_bgr = bgr(AugInput(img.copy()), np.random.default_rng(5))
    np.testing.assert_allclose(t_bgr.apply_image(img), img + offset[::-1])
    boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert out.apply_box(boxes) is boxes
    with pytest.raises(ValueError, match="HxWx3"):
        aug.get_transform(np.zeros((3, 4), np.uint8))
    with pytest.raises(ValueError, match="scale"):
        RandomLighting(-1.0)


def test_category_area_constraint_picks_a_balanced_window():
    seg = np.zeros((40, 40), np.int32)
    seg[:, 20:] = 1
    aug = RandomCrop_CategoryAreaConstraint("absolute", (20, 20), 0.75)
    for seed in range(20):
        t = aug(AugInput(_image(40, 40), sem_seg=seg), np.random.default_rng(seed))
        window = seg[t.y0 : t.y0 + 20, t.x0 : t.x0 + 20]
        _, counts = np.unique(window, return_counts=True)
        assert len(counts) == 2 and counts.max() < 0.75 * 400
        assert (t.orig_w, t.orig_h) == (40, 40)


def test_category_area_constraint_ignored_category_and_inputs():
    seg = np.full((30, 30), 255, np.int32)
    seg[:, :3] = 0
    seg[:, 27:] = 1
    aug = RandomCrop_CategoryAreaConstraint("absolute", (30, 30), 0.6, ignored_category=255)
    t = aug.get_transform(_image(30, 30), seg)  # 0 and 1 share the counted pixels equally
    assert (t.x0, t.y0, t.w, t.h) == (0, 0, 30, 30)
    with pytest.raises(ValueError, match="sem_seg"):
        aug.get_transform(_image(30, 30), None)
    # Disabled constraint: a plain RandomCrop that needs no sem_seg.
    plain = RandomCrop_CategoryAreaConstraint("absolute", (10, 10))
    assert plain.get_transform(_image(30, 30), None).w == 10


def _iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_min_iou_random_crop_windows_meet_the_threshold():
    boxes = np.array([[8.0, 6.0, 36.0, 30.0], [12.0, 10.0, 40.0, 32.0]])
    aug = MinIoURandomCrop(min_ious=(0.3,), min_crop_size=0.3)
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    found = 0
    for seed in range(30):
        with use_generator(np.random.default_rng(seed)):
            t = aug._try_crop(40, 50, boxes, 0.3)
        if t is None:
            continue
        found += 1
        patch = (t.x0, t.y0, t.x0 + t.w, t.y0 + t.h)
        # int(left + new_w) vs int(left) + int(new_w) may differ by one pixel.
        assert all(_iou(patch, b) >= 0.3 - 0.03 for b in boxes)
        assert any(patch[0] < cx < patch[2] and patch[1] < cy < patch[3] for cx, cy in centres)
        assert 0.5 * 0.9 <= t.h / t.w <= 2.0 * 1.1
        assert t.w >= 0.3 * 50 - 1 and t.h >= 0.3 * 40 - 1
    assert found > 20


def test_min_iou_random_crop_modes():
    boxes = np.array([[10.0, 10.0, 30.0, 26.0]])
    aug = MinIoURandomCrop(min_ious=(0.3,))
    kinds = [
        type(aug(AugInput(_image(40, 50), boxes=boxes), np.random.default_rng(s))).__name__
        for s in range(60)
    ]
    # Modes (1, 0.3, 0): "keep the image" about a third of the time.
    assert 8 <= kinds.count("NoOpTransform") <= 35 and "CropTransform" in kinds


def test_min_iou_random_crop_without_boxes_warns_once(caplog):
    aug = MinIoURandomCrop()
    with caplog.at_level(logging.WARNING, logger="mappers.transforms.augmentation_impl"):
        assert isinstance(aug(AugInput(_image())), NoOpTransform)
        assert isinstance(aug(AugInput(_image())), NoOpTransform)
    assert sum("no boxes" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(ValueError, match="min_ious"):
        MinIoURandomCrop(min_ious=(1.5,))
    with pytest.raises(ValueError, match="mode_trials"):
        MinIoURandomCrop(mode_trials=0)


def test_min_iou_random_crop_with_empty_boxes_still_crops():
    aug = MinIoURandomCrop(min_ious=(0.5,))
    kinds = {
        type(aug(AugInput(_image(), boxes=np.zeros((0, 4))), np.random.default_rng(s))).__name__
        for s in range(30)
    }
    assert kinds == {"CropTransform", "NoOpTransform"}


# ---------------------------------------------------------------- mapper integration
def test_compose_pipeline_with_rotation_keeps_boxes_on_the_object():
    h, w = 36, 44
    image = np.zeros((h, w, 3), np.uint8)
    image[6:18, 8:22] = 200
    record = {
        "image": image,
        "height": h,
        "width": w,
        "image_id": 1,
        "annotations": [
            {
                "bbox": [8, 6, 14, 12],
                "bbox_mode": BoxMode.XYWH_ABS,
                "category_id": 0,
                "segmentation": [[8, 6, 22, 6, 22, 18, 8, 18]],
            }
        ],
    }
    pipeline = Compose(
        [
            {
                "type": "ApplyAugmentations",
                "augmentations": [{"type": "RandomRotation", "angle": [90, 90]}],
            },
            {"type": "AnnotationsToInstances"},
        ]
    )
    out = pipeline(record)
    assert out["image"].shape == (w, h, 3)
    box = np.asarray(out["instances"].gt_boxes, dtype=np.float64)[0]
    np.testing.assert_allclose(box_of(out["image"][:, :, 0] > 100), box, atol=1.0)


def test_resize_transform_still_the_resize_of_resize_scale():
    t = ResizeScale(1.0, 1.0, 20, 20).get_transform(np.zeros((10, 10), np.uint8))
    assert isinstance(t, ResizeTransform) and (t.new_h, t.new_w) == (20, 20)


def test_shape_only_augmentations_plan_the_same_transforms():
    augs = AugmentationList(
        [
            ResizeScale(0.5, 2.0, 40, 40),
            FixedSizeCrop((40, 40)),
            RandomRotation([-20, 20]),
            RandomExtent((0.8, 1.2), (0.1, 0.1)),
            RandomResize([(30, 30), (20, 24)]),
            RandomLighting(0.1),
            RandomRotation([90, 90]),
        ]
    )
    for seed in range(5):
        planned = augs.plan((30, 50, 3), np.random.default_rng(seed))
        aug_input = AugInput(_image(30, 50))
        applied = augs(aug_input, rng=np.random.default_rng(seed))
        assert planned is not None and repr(planned) == repr(applied)
        assert planned.output_size(30, 50) == aug_input.image.shape[:2]
    # Those that read sem_seg or boxes cannot be planned.
    assert AugmentationList([MinIoURandomCrop()]).plan((30, 50, 3)) is None
    area = RandomCrop_CategoryAreaConstraint("absolute", (5, 5), 0.5)
    assert AugmentationList([area]).plan((30, 50, 3)) is None
