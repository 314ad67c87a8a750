"""The mapper's fast paths equal the general paths.

* AugmentationList.plan draws the same transforms, from the same generator calls, as
  AugmentationList on the image itself;
* apply_planned_image's direct OpenCV calls give the same pixels as the transforms' generic
  apply_image (flip first, as the planned path always did);
* the transforms' vectorized apply_box equals the generic path through the corners;
* annotations_to_training_instances' batched boxes are bit-identical to the per-annotation path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.box_mode import BoxMode
from catalog._common import RecordFormatError
from mappers import (
    annotations_to_instances,
    filter_empty_instances,
    transform_instance_annotations,
)
from mappers import transforms as T
from mappers.random_state import use_generator
from mappers.annotations import annotations_to_training_instances
from mappers.dataset_mapper import apply_planned_image as apply_planned


def plan_transforms(augs, shape):
    return T.AugmentationList(augs).plan(shape)


def box_only_instances(annotations, transforms, size, filter_empty):
    return annotations_to_training_instances(
        annotations, transforms, size, filter_empty=filter_empty
    )


def _corners_apply_box(transforms, boxes):
    """The generic path: boxes through their 4 corners (Transform.apply_box) for each geometric
    transform; pixel-only transforms give the boxes back as they are, by definition."""
    for tfm in transforms:
        if isinstance(tfm, (T.NoOpTransform, T.BlendTransform)):
            boxes = tfm.apply_box(boxes)
        else:
            boxes = T.Transform.apply_box(tfm, boxes)
    return boxes

H, W = 37, 53


def _augmentation_lists() -> list[list[T.Augmentation]]:
    return [
        [T.ResizeShortestEdge((20, 80), 100), T.RandomFlip()],
        [T.ResizeShortestEdge((24, 32, 0), 60, "choice"), T.RandomFlip(prob=0.7)],
        [T.RandomFlip(prob=1.0, horizontal=False, vertical=True), T.Resize((30, 20))],
        [T.RandomFlip(), T.RandomFlip(), T.Resize(19), T.ResizeShortestEdge(40, 45)],
        [T.RandomFlip(prob=0.0)],
        [],
    ]


def _generic(image: np.ndarray, planned: list[T.Transform]) -> np.ndarray:
    """The planned order (flips first, then resizes) through the transforms' generic code."""
    flips = [t for t in planned if isinstance(t, (T.HFlipTransform, T.VFlipTransform))]
    resizes = [t for t in planned if isinstance(t, T.ResizeTransform)]
    for tfm in flips:
        image = tfm.apply_image(image)
    for tfm in resizes:
        image = tfm.apply_image(image)
    return np.ascontiguousarray(image)


@pytest.mark.parametrize("augs", _augmentation_lists())
def test_plan_draws_what_augmentation_list_draws(augs):
    image = np.zeros((H, W, 3), np.uint8)
    for seed in range(12):
        with use_generator(np.random.default_rng(seed)) as rng:
            plan = plan_transforms(augs, image.shape)
            after_plan = rng.random()
        aug_input = T.AugInput(image.copy())
        general = T.AugmentationList(augs)(aug_input, rng=np.random.default_rng(seed))
        after_general = np.random.default_rng(seed)
        T.AugmentationList(augs)(T.AugInput(image.copy()), rng=after_general)
        assert plan is not None
        assert [repr(t) for t in plan] == [repr(t) for t in general.transforms]
        assert plan.output_size(H, W) == aug_input.image.shape[:2]
        assert after_plan == after_general.random()  # the same number of draws


def test_plan_declines_a_resize_from_another_size_and_pixel_readers():
    class _Stale(T.Augmentation):
        shape_only = True

        def get_transform(self, image):
            return T.ResizeTransform(5, 5, 10, 10)

    assert plan_transforms([_Stale()], (H, W, 3)) is None
    assert plan_transforms([T.RandomContrast(0.5, 1.5)], (H, W, 3)) is None
    crop = plan_transforms([T.RandomCrop("absolute", (5, 7))], (H, W, 3))
    assert crop.output_size(H, W) == (5, 7)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    channels=st.sampled_from([1, 3, 4]),
    augs_index=st.integers(0, len(_augmentation_lists()) - 1),
    interp=st.sampled_from(["bilinear", 2, "linear", "bicubic", "nearest", "box"]),
)
def test_apply_planned_equals_generic_transforms(seed, channels, augs_index, interp):
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (H, W, channels), dtype=np.uint8)
    augs = _augmentation_lists()[augs_index]
    with use_generator(rng):
        plan = plan_transforms(augs, image.shape)
    planned = [
        T.ResizeTransform(t.h, t.w, t.new_h, t.new_w, interp)
        if isinstance(t, T.ResizeTransform)
        else t
        for t in plan
    ]
    fast = apply_planned(image.copy(), planned)
    assert fast.shape[:2] == plan.output_size(H, W)
    np.testing.assert_array_equal(fast, _generic(image, planned))


def test_apply_planned_from_a_reduced_decode_and_odd_inputs():
    rng = np.random.default_rng(0)
    full = T.ResizeTransform(80, 120, 30, 45)
    reduced = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)  # decoded at 1/2
    out = apply_planned(reduced, [T.HFlipTransform(120), full])
    expected = T.ResizeTransform(40, 60, 30, 45).apply_image(reduced[:, ::-1])
    np.testing.assert_array_equal(out, expected)
    # a non-contiguous view and a float image go through the generic code
    view = rng.integers(0, 256, (H, 2 * W, 3), dtype=np.uint8)[:, ::2]
    resize = T.ResizeTransform(H, W, 20, 30)
    np.testing.assert_array_equal(
        apply_planned(view, [T.VFlipTransform(H), resize]), _generic(view, [T.VFlipTransform(H), resize])
    )
    floats = rng.random((H, W, 3), dtype=np.float32)
    np.testing.assert_array_equal(
        apply_planned(floats, [T.HFlipTransform(W), resize]), _generic(floats, [T.HFlipTransform(W), resize])
    )
    # an unchanged size returns the (flipped) pixels, as resize_array does
    same = T.ResizeTransform(H, W, H, W)
    image = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    np.testing.assert_array_equal(apply_planned(image, [same, T.HFlipTransform(W)]), image[:, ::-1])
    with pytest.raises(T.TransformError):
        apply_planned(image, [T.ResizeTransform(H, W, 9, 9), T.ResizeTransform(H, W, 5, 5)])


_coord = st.floats(-60.0, 160.0, allow_nan=False, width=32)
_annotation = st.fixed_dictionaries(
    {
        "bbox": st.lists(_coord, min_size=4, max_size=4),
        "bbox_mode": st.sampled_from([BoxMode.XYXY_ABS, BoxMode.XYWH_ABS, 0, 1]),
        "category_id": st.integers(0, 79),
    },
    optional={"iscrowd": st.sampled_from([0, 1])},
)


def _reference(annotations, transforms, size, filter_empty):
    kept = [
        transform_instance_annotations(dict(a), transforms, size)
        for a in annotations
        if a.get("iscrowd", 0) == 0
    ]
    instances = annotations_to_instances(kept, size)
    return filter_empty_instances(instances) if filter_empty else instances


@settings(max_examples=120, deadline=None)
@given(
    annotations=st.lists(_annotation, max_size=12),
    seed=st.integers(0, 2**32 - 1),
    augs_index=st.integers(0, len(_augmentation_lists()) - 1),
    filter_empty=st.booleans(),
)
def test_box_only_instances_equal_per_annotation_path(annotations, seed, augs_index, filter_empty):
    with use_generator(np.random.default_rng(seed)):
        plan = plan_transforms(_augmentation_lists()[augs_index], (H, W, 3))
    size = plan.output_size(H, W)
    fast = box_only_instances([dict(a) for a in annotations], plan, size, filter_empty)
    slow = _reference(annotations, plan, size, filter_empty)
    assert fast.image_size == slow.image_size
    assert torch.equal(fast.gt_boxes.tensor, _tensor(slow.gt_boxes))
    assert torch.equal(fast.gt_classes, slow.gt_classes)
    assert fast.gt_boxes.tensor.dtype == torch.float32 and fast.gt_classes.dtype == torch.int64


def _tensor(boxes):
    """The Nx4 tensor of Boxes (annotations_to_instances may still give a plain tensor)."""
    return getattr(boxes, "tensor", boxes)


def test_box_only_instances_edge_cases():
    tfms = T.TransformList([T.ResizeTransform(H, W, 74, 106), T.HFlipTransform(106)])
    nan_box = {"bbox": [float("nan"), 1.0, 5.0, 5.0], "bbox_mode": 0, "category_id": 3}
    good = {"bbox": [1.0, 2.0, 10.0, 12.0], "bbox_mode": 0, "category_id": 1}
    fast = box_only_instances([dict(nan_box), dict(good)], tfms, (74, 106), True)
    slow = _reference([nan_box, good], tfms, (74, 106), True)
    assert torch.equal(fast.gt_boxes.tensor, _tensor(slow.gt_boxes))
    assert fast.gt_classes.tolist() == [1]
    # malformed values go to the per-annotation path, which names the key
    with pytest.raises(RecordFormatError, match="bbox"):
        box_only_instances([{"bbox": [1, 2, 3], "bbox_mode": 0, "category_id": 0}], tfms, (9, 9), True)
    with pytest.raises(RecordFormatError, match="bbox_mode"):
        box_only_instances([{"bbox": [1, 2, 3, 4], "category_id": 0}], tfms, (9, 9), True)
    # a crop (vectorized too) gives the per-annotation result
    crop = T.TransformList([T.ResizeTransform(H, W, 74, 106), T.CropTransform(5, 3, 40, 30)])
    fast = box_only_instances([dict(good)], crop, (30, 40), False)
    assert torch.equal(fast.gt_boxes.tensor, _tensor(_reference([good], crop, (30, 40), False).gt_boxes))
    empty = box_only_instances([], tfms, (74, 106), True)
    assert empty.gt_boxes.tensor.shape == (0, 4) and len(empty) == 0


_all_transforms = st.sampled_from(
    [
        T.ResizeTransform(H, W, 74, 106),
        T.ResizeTransform(H, W, 20, 9),
        T.HFlipTransform(W),
        T.VFlipTransform(H),
        T.CropTransform(5, 3, 40, 30),
        T.PadTransform(1, 2, 3, 4),
        T.NoOpTransform(),
        T.BlendTransform(0, 0.5, 0.5),
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    boxes=st.lists(st.lists(_coord, min_size=4, max_size=4), min_size=1, max_size=8),
    transforms=st.lists(_all_transforms, max_size=4),
    dtype=st.sampled_from([np.float64, np.float32, np.int64]),
)
def test_vectorized_apply_box_equals_the_corners_path(boxes, transforms, dtype):
    array = np.array(boxes).astype(dtype)
    before = array.copy()
    moved = T.TransformList(transforms).apply_box(array)
    np.testing.assert_array_equal(array, before)  # the input is not modified
    expected = _corners_apply_box(transforms, before)
    np.testing.assert_array_equal(moved, expected)
    assert np.asarray(moved).dtype == np.asarray(expected).dtype
    in_place = before.copy() if before.dtype.kind == "f" else before.astype(np.float64)
    start = in_place.copy()
    if T.TransformList(transforms).apply_box_inplace(in_place):
        np.testing.assert_array_equal(in_place, expected)
    else:  # only lists of pixel-only transforms keep their boxes as given
        assert all(isinstance(t, (T.NoOpTransform, T.BlendTransform)) for t in transforms)
        np.testing.assert_array_equal(in_place, start)
