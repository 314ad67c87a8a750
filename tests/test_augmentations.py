"""Tests for mappers.transforms augmentations, AugInput and mappers.random_state."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest
import torch

from mappers import random_state
from mappers.random_state import get_generator, seed_generator, use_generator
from mappers.transforms import (
    AugInput,
    Augmentation,
    AugmentationList,
    CropTransform,
    HFlipTransform,
    NoOpTransform,
    RandomApply,
    RandomBrightness,
    RandomContrast,
    RandomCrop,
    RandomFlip,
    RandomSaturation,
    Resize,
    ResizeShortestEdge,
    ResizeTransform,
    TransformList,
    VFlipTransform,
)


def _image(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- AugInput
def test_auginput_transforms_image_boxes_and_sem_seg_in_place():
    img = _image()
    seg = np.arange(48 * 64, dtype=np.int32).reshape(48, 64)
    aug_input = AugInput(img, boxes=np.array([[0.0, 0.0, 10.0, 20.0]]), sem_seg=seg)
    aug_input.transform(HFlipTransform(64))
    np.testing.assert_array_equal(aug_input.image, img[:, ::-1])
    assert aug_input.boxes.tolist() == [[54.0, 0.0, 64.0, 20.0]]
    np.testing.assert_array_equal(aug_input.sem_seg, seg[:, ::-1])
    assert "boxes=(1, 4)" in repr(aug_input)


def test_auginput_validation():
    with pytest.raises(TypeError, match="numpy array"):
        AugInput([[1, 2]])
    with pytest.raises(ValueError, match="HxW"):
        AugInput(np.zeros((2, 2, 2, 2), np.uint8))
    with pytest.raises(ValueError, match="sem_seg"):
        AugInput(np.zeros((4, 4), np.uint8), sem_seg=np.zeros((3, 4)))


def test_apply_augmentations_returns_transforms():
    aug_input = AugInput(_image())
    tfms = aug_input.apply_augmentations([Resize((24, 32)), HFlipTransform(32)])
    assert isinstance(tfms, TransformList)
    assert [type(t) for t in tfms] == [ResizeTransform, HFlipTransform]
    assert aug_input.image.shape == (24, 32, 3)


def test_missing_input_is_attribute_error_naming_it():
    class NeedsKeypoints(Augmentation):
        def get_transform(self, image, keypoints):
            return NoOpTransform()

    with pytest.raises(AttributeError, match=r"NeedsKeypoints.*'keypoints'.*AugInput"):
        NeedsKeypoints()(AugInput(_image()))


def test_augmentation_receives_named_inputs_and_custom_auginput():
    seen = {}

    class UsesBoxes(Augmentation):
        def get_transform(self, boxes, image):
            seen["boxes"], seen["image"] = boxes, image.shape
            return NoOpTransform()

    class WithDepth(AugInput):
        def __init__(self, image, depth):
            super().__init__(image)
            self.depth = depth

    class UsesDepth(Augmentation):
        def get_transform(self, depth):
            seen["depth"] = depth
            return NoOpTransform()

    UsesBoxes()(AugInput(_image(), boxes=np.zeros((2, 4))))
    assert seen["boxes"].shape == (2, 4) and seen["image"] == (48, 64, 3)
    UsesDepth()(WithDepth(_image(), depth=7))
    assert seen["depth"] == 7


def test_get_transform_must_return_transform():
    class Bad(Augmentation):
        def get_transform(self, image):
            return "flip"

    with pytest.raises(TypeError, match="Bad.get_transform returned a str"):
        Bad()(AugInput(_image()))

    class VarArgs(Augmentation):
        def get_transform(self, *args):
            return NoOpTransform()

    with pytest.raises(TypeError, match="input_args"):
        VarArgs()(AugInput(_image()))


# ---------------------------------------------------------------- RandomFlip
def test_random_flip_prob_one_and_zero():
    img = _image()
    aug_input = AugInput(img)
    t = RandomFlip(prob=1.0)(aug_input)
    assert isinstance(t, HFlipTransform) and t.width == 64
    np.testing.assert_array_equal(aug_input.image, img[:, ::-1])
    t = RandomFlip(1.0, horizontal=False, vertical=True)(AugInput(img))
    assert isinstance(t, VFlipTransform) and t.height == 48
    assert isinstance(RandomFlip(prob=0.0)(AugInput(img)), NoOpTransform)


def test_random_flip_frequency_follows_prob():
    aug = RandomFlip(prob=0.3)
    rng = _rng(1)
    flips = sum(
        isinstance(aug(AugInput(_image(8, 8)), rng=rng), HFlipTransform) for _ in range(2000)
    )
    assert 500 < flips < 700


def test_random_flip_validation():
    with pytest.raises(ValueError, match="prob"):
        RandomFlip(prob=1.5)
    with pytest.raises(ValueError, match="exactly one"):
        RandomFlip(horizontal=True, vertical=True)
    with pytest.raises(ValueError, match="exactly one"):
        RandomFlip(horizontal=False)


# ---------------------------------------------------------------- resizes
def test_resize_shortest_edge_detectron2_sizes():
    assert ResizeShortestEdge.get_output_shape(480, 640, 800, 1333) == (800, 1067)
    assert ResizeShortestEdge.get_output_shape(640, 480, 800, 1333) == (1067, 800)
    assert ResizeShortestEdge.get_output_shape(100, 1000, 800, 1333) == (133, 1333)
    aug_input = AugInput(_image(48, 64))
    t = ResizeShortestEdge(96, 1000)(aug_input)
    assert isinstance(t, ResizeTransform) and (t.new_h, t.new_w) == (96, 128)
    assert aug_input.image.shape == (96, 128, 3)


def test_resize_shortest_edge_sampling_styles():
    rng = _rng(2)
    aug = ResizeShortestEdge((20, 30), sample_style="range")
    with use_generator(rng):
        sizes = {aug.get_transform(_image(48, 64)).new_h for _ in range(300)}
    assert sizes == set(range(20, 31))
    aug = ResizeShortestEdge([16, 32, 40], sample_style="choice")
    with use_generator(rng):
        sizes = {aug.get_transform(_image(48, 64)).new_h for _ in range(100)}
    assert sizes == {16, 32, 40}
    assert isinstance(ResizeShortestEdge(0)(AugInput(_image())), NoOpTransform)


def test_resize_shortest_edge_validation():
    with pytest.raises(ValueError, match="sample_style"):
        ResizeShortestEdge(800, sample_style="uniform")
    with pytest.raises(ValueError, match=r"\(min, max\)"):
        ResizeShortestEdge([640, 672, 704], sample_style="range")
    with pytest.raises(ValueError, match="min > max"):
        ResizeShortestEdge((800, 600))
    with pytest.raises(ValueError, match="max_size"):
        ResizeShortestEdge(800, max_size=0)


def test_resize_fixed_shape():
    t = Resize(32)(AugInput(_image()))
    assert (t.new_h, t.new_w) == (32, 32)
    t = Resize((10, 20), interp=0)(AugInput(_image()))
    assert (t.new_h, t.new_w, t.interp) == (10, 20, 0)
    with pytest.raises(ValueError):
        Resize((0, 10))
    with pytest.raises(ValueError):
        Resize((1, 2, 3))


# ---------------------------------------------------------------- RandomCrop
@pytest.mark.parametrize(
    "crop_type,crop_size,check",
    [
        ("relative", (0.5, 0.25), lambda h, w: (h, w) == (24, 16)),
        ("relative_range", (0.5, 0.5), lambda h, w: 24 <= h <= 48 and 32 <= w <= 64),
        ("absolute", (20, 100), lambda h, w: (h, w) == (20, 64)),
        ("absolute_range", (10, 30), lambda h, w: 10 <= h <= 30 and 10 <= w <= 30),
    ],
)
def test_random_crop_types(crop_type, crop_size, check):
    rng = _rng(3)
    img = _image()
    for _ in range(30):
        aug_input = AugInput(img)
        t = RandomCrop(crop_type, crop_size)(aug_input, rng=rng)
        assert isinstance(t, CropTransform)
        assert check(t.h, t.w)
        assert 0 <= t.x0 <= 64 - t.w and 0 <= t.y0 <= 48 - t.h
        np.testing.assert_array_equal(aug_input.image, img[t.y0 : t.y0 + t.h, t.x0 : t.x0 + t.w])
        assert (t.orig_w, t.orig_h) == (64, 48)


def test_random_crop_validation():
    with pytest.raises(ValueError, match="crop_type"):
        RandomCrop("fraction", (0.5, 0.5))
    with pytest.raises(ValueError, match="positive"):
        RandomCrop("relative", (0.0, 0.5))
    with pytest.raises(ValueError, match="positive integers"):
        RandomCrop("absolute", (10.5, 3))
    with pytest.raises(ValueError, match="min > max"):
        RandomCrop("absolute_range", (30, 10))
    with pytest.raises(ValueError, match="pair"):
        RandomCrop("absolute", (1, 2, 3))


# ---------------------------------------------------------------- colour
def test_color_augmentations_change_pixels_not_boxes():
    img = _image()
    boxes = np.array([[1.0, 2.0, 30.0, 40.0]])
    for aug in (RandomBrightness(0.5, 0.5), RandomContrast(0.5, 0.5), RandomSaturation(0.0, 0.0)):
        aug_input = AugInput(img, boxes=boxes.copy())
        aug(aug_input)
        assert aug_input.image.dtype == np.uint8
        assert not np.array_equal(aug_input.image, img)
        np.testing.assert_array_equal(aug_input.boxes, boxes)


def test_brightness_and_saturation_values():
    img = np.full((2, 2, 3), 200, np.uint8)
    aug_input = AugInput(img)
    RandomBrightness(0.5, 0.5)(aug_input)
    assert np.all(aug_input.image == 100)
    colour = np.zeros((1, 1, 3), np.uint8)
    colour[..., 0] = 255
    aug_input = AugInput(colour)
    RandomSaturation(0.0, 0.0)(aug_input)  # fully desaturated: every channel is the gray value
    assert aug_input.image.tolist() == [[[76, 76, 76]]]
    aug_input = AugInput(colour.copy())
    RandomSaturation(0.0, 0.0, image_format="BGR")(aug_input)
    assert aug_input.image.tolist() == [[[29, 29, 29]]]


def test_color_augmentation_validation():
    with pytest.raises(ValueError, match="must not exceed"):
        RandomContrast(1.5, 0.5)
    with pytest.raises(ValueError, match="non-negative"):
        RandomBrightness(-1.0, 1.0)
    with pytest.raises(ValueError, match="image_format"):
        RandomSaturation(0.5, 1.5, image_format="HSV")
    with pytest.raises(ValueError, match="HxWx3"):
        RandomSaturation(0.5, 1.5)(AugInput(np.zeros((4, 4), np.uint8)))


# ---------------------------------------------------------------- RandomApply
@pytest.mark.parametrize("prob", [-0.1, 1.01, "high", None])
def test_random_apply_prob_validation(prob):
    with pytest.raises(ValueError, match="prob"):
        RandomApply(RandomFlip(), prob=prob)


def test_random_apply_behaviour():
    with pytest.raises(TypeError):
        RandomApply("flip", 0.5)
    always = RandomApply(RandomFlip(prob=1.0), prob=1.0)
    assert isinstance(always(AugInput(_image())), HFlipTransform)
    never = RandomApply(HFlipTransform(64), prob=0.0)
    assert isinstance(never(AugInput(_image())), NoOpTransform)
    t = RandomApply(HFlipTransform(64), prob=1.0).get_transform(_image())
    assert isinstance(t, HFlipTransform)
    rng = _rng(5)
    hits = sum(
        isinstance(
            RandomApply(HFlipTransform(8), 0.25)(AugInput(_image(8, 8)), rng=rng), HFlipTransform
        )
        for _ in range(2000)
    )
    assert 420 < hits < 580
    assert RandomApply(Resize(4), 0.5).input_args == ("image",)
    nested = RandomApply(AugmentationList([Resize(4)]), prob=1.0)
    aug_input = AugInput(_image())
    nested(aug_input)
    assert aug_input.image.shape == (4, 4, 3)


# ---------------------------------------------------------------- AugmentationList
def test_augmentation_list_nested_and_transforms_applied_in_order():
    img = _image()
    augs = AugmentationList(
        [[Resize((24, 32)), [RandomFlip(prob=1.0)]], CropTransform(0, 0, 16, 12)]
    )
    aug_input = AugInput(img, boxes=np.array([[0.0, 0.0, 16.0, 12.0]]))
    tfms = augs(aug_input)
    assert [type(t) for t in tfms] == [ResizeTransform, HFlipTransform, CropTransform]
    assert aug_input.image.shape == (12, 16, 3)
    # the box covered the top-left quarter; after resize+flip it is the top-right one
    assert aug_input.boxes.tolist() == [[24.0, 0.0, 32.0, 6.0]]
    expected = tfms.apply_image(img)
    np.testing.assert_array_equal(aug_input.image, expected)
    with pytest.raises(TypeError, match="augmentation 1"):
        AugmentationList([RandomFlip(), 3])
    with pytest.raises(TypeError, match="AugInput"):
        augs.get_transform(img)
    assert len(augs) == 2


def test_reprs():
    assert repr(RandomFlip(prob=0.5)) == "RandomFlip(prob=0.5)"
    assert repr(RandomFlip()) == "RandomFlip()"  # detectron2: defaults left out
    augs = AugmentationList([RandomFlip(prob=0.5), ResizeShortestEdge((640, 800), 1333, "choice")])
    assert repr(augs) == (
        "AugmentationList[RandomFlip(prob=0.5), "
        "ResizeShortestEdge(short_edge_length=(640, 800), max_size=1333, sample_style='choice')]"
    )
    assert (
        repr(RandomCrop("relative", (0.5, 0.5)))
        == "RandomCrop(crop_type='relative', crop_size=(0.5, 0.5))"
    )
    assert repr(RandomApply(RandomBrightness(0.9, 1.1), prob=0.2)) == (
        "RandomApply(tfm_or_aug=RandomBrightness(intensity_min=0.9, intensity_max=1.1), prob=0.2)"
    )
    assert (
        repr(AugmentationList([HFlipTransform(3)])) == "AugmentationList[HFlipTransform(width=3)]"
    )


# ---------------------------------------------------------------- determinism / random state
def _draw_sequence(rng=None):
    augs = AugmentationList(
        [
            ResizeShortestEdge((16, 40), 200),
            RandomFlip(),
            RandomCrop("relative_range", (0.3, 0.3)),
            RandomBrightness(0.5, 1.5),
        ]
    )
    out = []
    for i in range(10):
        aug_input = AugInput(_image(seed=i))
        out.append(repr(augs(aug_input, rng=rng)))
        out.append(aug_input.image.tobytes())
    return out


def test_determinism_given_seed_generator():
    seed_generator(123)
    first = _draw_sequence()
    seed_generator(123)
    assert _draw_sequence() == first
    seed_generator(124)
    assert _draw_sequence() != first


def test_determinism_given_explicit_rng_ignores_process_generator():
    first = _draw_sequence(_rng(9))
    get_generator().random(17)  # disturb the process generator
    assert _draw_sequence(_rng(9)) == first
    assert _draw_sequence(_rng(10)) != first


def test_use_generator_scope_and_validation():
    g = _rng(0)
    before = get_generator()
    with use_generator(g):
        assert get_generator() is g
        with use_generator(None):
            assert get_generator() is g
    assert get_generator() is before
    with pytest.raises(TypeError, match="Generator"):
        with use_generator(np.random.RandomState(0)):
            pass


def test_seed_generator_validation():
    with pytest.raises(TypeError):
        seed_generator("1")
    with pytest.raises(TypeError):
        seed_generator(True)
    with pytest.raises(ValueError):
        seed_generator(-1)


def test_default_generator_follows_torch_manual_seed():
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(11)
        a = get_generator().random(3)
        torch.manual_seed(12)
        c = get_generator().random(3)
        torch.manual_seed(11)  # a different seed than the last: the generator restarts
        b = get_generator().random(3)
    finally:
        torch.random.set_rng_state(state)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_global_numpy_state_untouched():
    np.random.seed(0)
    expected = np.random.random()
    np.random.seed(0)
    _draw_sequence()
    seed_generator(1)
    _draw_sequence()
    assert np.random.random() == expected


def _child_draw(queue):
    queue.put((os.getpid(), get_generator().random(4).tolist()))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_forked_child_recreates_generator():
    seed_generator(5)
    parent_next = np.random.default_rng(5).random(4).tolist()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_draw, args=(queue,))
    proc.start()
    pid, values = queue.get(timeout=60)
    proc.join(timeout=60)
    assert pid != os.getpid()
    assert values != parent_next  # the child did not replay the parent's explicit seed
    assert get_generator().random(4).tolist() == parent_next


class _FlipDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        aug = AugmentationList([RandomCrop("absolute_range", (2, 30)), RandomFlip()])
        return repr(aug(AugInput(_image(seed=index))))


def _loader_draws(workers: int, seed: int) -> list[str]:
    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(
        _FlipDataset(),
        batch_size=None,
        num_workers=workers,
        multiprocessing_context="fork" if workers else None,
    )
    return list(loader)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_dataloader_workers_differ_and_torch_seed_reproduces():
    state = torch.random.get_rng_state()
    try:
        a = _loader_draws(2, seed=0)
        b = _loader_draws(2, seed=0)
        c = _loader_draws(2, seed=1)
    finally:
        torch.random.set_rng_state(state)
    assert a == b
    assert a != c
    # worker 0 serves indices 0, 2, 4, 6 and worker 1 the others: their draws differ
    assert a[0::2] != a[1::2]
    assert random_state._process[1] == os.getpid()


def test_apply_augmentations_function():
    from mappers.transforms import apply_augmentations

    image, tfms = apply_augmentations([Resize((24, 32)), RandomFlip(prob=1.0)], _image())
    assert image.shape == (24, 32, 3) and [type(t) for t in tfms] == [
        ResizeTransform,
        HFlipTransform,
    ]
    aug_input = AugInput(_image())
    result, tfms = apply_augmentations([Resize((12, 16))], aug_input)
    assert result is aug_input and aug_input.image.shape == (12, 16, 3)
