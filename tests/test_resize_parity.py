"""Resizing gives detectron2's pixels by default (Pillow's resize for uint8 images, torch's
interpolate for float ones); ``backend="opencv"`` keeps OpenCV's faster, different pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from mappers import transforms as T
from mappers.dataset_mapper import apply_planned_image
from mappers.transforms.resample import get_cv2

MODES = {"nearest": 0, "bilinear": 2, "bicubic": 3, "lanczos": 1, "box": 4, "hamming": 5}
# (out_h, out_w) from 120x160: shrink, shrink 3.7x, enlarge, enlarge one side / shrink the other
SIZES = [(60, 80), (32, 43), (200, 267), (150, 90)]


def _photo_like(h: int = 120, w: int = 160, c: int = 3, seed: int = 0) -> np.ndarray:
    """A noisy gradient: smooth structure plus sensor-like noise, as in photographs."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [x * 1.2 + y * 0.4, 255 - x * 1.1, 60 + y * 1.3 + np.sin(x / 7) * 30][:c]
    noise = np.random.default_rng(seed).normal(0, 22, (h, w, c))
    return np.clip(np.stack(planes, -1) + noise, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_default_resize_is_pillows_within_two_levels(mode, size, channels):
    img = _photo_like(c=channels)
    source = img[:, :, 0] if channels == 1 else img
    expected = np.asarray(Image.fromarray(source).resize(size[::-1], MODES[mode])).astype(int)
    out = T.ResizeTransform(120, 160, *size, interp=MODES[mode]).apply_image(img)
    assert out.shape == (*size, channels) and out.dtype == np.uint8
    got = (out[:, :, 0] if channels == 1 else out).astype(int)
    assert np.abs(got - expected).max() <= 2


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_float_images_resize_as_torch_interpolate(mode):
    img = _photo_like().astype(np.float32) / 255
    out = T.ResizeTransform(120, 160, 50, 230, interp=mode).apply_image(img)
    x = torch.from_numpy(img).permute(2, 0, 1)[None]
    corners = None if mode == "nearest" else False
    expected = F.interpolate(x, (50, 230), mode=mode, align_corners=corners)[0].permute(1, 2, 0)
    np.testing.assert_array_equal(out, expected.numpy())


def test_segmentation_maps_follow_pillows_nearest_exactly():
    seg = np.random.default_rng(1).integers(0, 200, (120, 160), dtype=np.uint8)
    for size in SIZES:
        out = T.ResizeTransform(120, 160, *size).apply_segmentation(seg)
        np.testing.assert_array_equal(out, np.asarray(Image.fromarray(seg).resize(size[::-1], 0)))


@pytest.mark.skipif(get_cv2() is None, reason="OpenCV not installed")
def test_opencv_backend_keeps_the_opencv_pixels_and_differs_when_shrinking():
    cv2 = get_cv2()
    img = _photo_like()
    fast = T.ResizeTransform(120, 160, 40, 53, backend="opencv").apply_image(img)
    np.testing.assert_array_equal(fast, cv2.resize(img, (53, 40), interpolation=cv2.INTER_LINEAR))
    default = T.ResizeTransform(120, 160, 40, 53).apply_image(img)
    assert np.abs(fast.astype(int) - default).max() > 2  # Pillow antialiases, OpenCV does not
    with pytest.raises(ValueError, match="backend"):
        T.ResizeShortestEdge(100, backend="cuda")
    aug = T.ResizeShortestEdge(100, 1000, backend="opencv")
    assert aug.get_transform(img).backend == "opencv" and "backend='opencv'" in repr(aug)


@pytest.mark.skipif(get_cv2() is None, reason="OpenCV not installed")
@pytest.mark.parametrize("backend", ["pil", "opencv"])
def test_mapper_fast_path_enlarging_is_flip_then_opencv_resize_bit_for_bit(backend):
    """The planned path (detectron2's default enlarging sizes: both backends) is exactly
    cv2.flip then cv2.resize, as before the Pillow-parity change."""
    cv2 = get_cv2()
    img = _photo_like(c=3, seed=5)
    plan = [T.ResizeTransform(120, 160, 200, 267, backend=backend), T.HFlipTransform(267)]
    expected = cv2.resize(cv2.flip(img, 1), (267, 200), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(apply_planned_image(img.copy(), plan, owned=True), expected)
