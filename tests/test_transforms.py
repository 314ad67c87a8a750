"""Tests for mappers.transforms.transform and the resize/flip backends."""

from __future__ import annotations

import numpy as np
import pytest

from mappers.transforms import (
    BlendTransform,
    CropTransform,
    HFlipTransform,
    NoOpTransform,
    PadTransform,
    ResizeTransform,
    Transform,
    TransformError,
    TransformList,
    VFlipTransform,
    resample as _backend,
)


def _image(h: int = 30, w: int = 40, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, c), dtype=np.uint8)


@pytest.fixture(params=["cv2", "pil", "torch"])
def backend(request, monkeypatch):
    """Run a test with OpenCV, with Pillow only, and with neither (torch fallback)."""
    if request.param == "cv2":
        if _backend.get_cv2() is None:
            pytest.skip("OpenCV not installed")
    else:
        monkeypatch.setattr(_backend, "get_cv2", lambda: None)
    if request.param == "torch":
        monkeypatch.setattr(_backend, "_get_pil_image", lambda: None)
    return request.param


# ---------------------------------------------------------------- exactness (issue examples)
def test_hflip_box_exactness():
    out = HFlipTransform(400).apply_box(np.array([[10, 10, 200, 300]]))
    assert out.tolist() == [[200.0, 10.0, 390.0, 300.0]]


def test_hflip_polygon_exactness():
    poly = np.array([10, 10, 100, 100, 100, 10], dtype=np.float64).reshape(-1, 2)
    (out,) = HFlipTransform(400).apply_polygons([poly])
    assert out.reshape(-1).tolist() == [390, 10, 300, 100, 300, 10]


def test_apply_coords_does_not_modify_input():
    coords = np.array([[1.0, 2.0], [3.0, 4.0]])
    before = coords.copy()
    for t in (
        HFlipTransform(10),
        VFlipTransform(10),
        ResizeTransform(10, 10, 20, 20),
        CropTransform(1, 1, 5, 5),
    ):
        t.apply_coords(coords)
    np.testing.assert_array_equal(coords, before)


def test_integer_coords_become_float():
    out = ResizeTransform(10, 10, 15, 15).apply_coords(np.array([[1, 1]]))
    assert out.dtype.kind == "f"
    assert out.tolist() == [[1.5, 1.5]]


# ---------------------------------------------------------------- flips
@pytest.mark.parametrize("c", [1, 3, 5])
def test_hflip_image_matches_numpy(c, backend):
    img = _image(c=c)
    out = HFlipTransform(40).apply_image(img)
    np.testing.assert_array_equal(out, img[:, ::-1])
    assert out.shape == img.shape


def test_flip_2d_and_batched_images():
    img = _image()[:, :, 0]
    np.testing.assert_array_equal(HFlipTransform(40).apply_image(img), img[:, ::-1])
    np.testing.assert_array_equal(VFlipTransform(30).apply_image(img), img[::-1])
    batch = np.stack([_image(seed=1), _image(seed=2)])
    np.testing.assert_array_equal(HFlipTransform(40).apply_image(batch), batch[:, :, ::-1])
    np.testing.assert_array_equal(VFlipTransform(30).apply_image(batch), batch[:, ::-1])


def test_vflip_coords_and_image():
    img = _image()
    np.testing.assert_array_equal(VFlipTransform(30).apply_image(img), img[::-1])
    assert VFlipTransform(30).apply_coords(np.array([[3.0, 5.0]])).tolist() == [[3.0, 25.0]]


def test_flip_of_noncontiguous_view():
    img = _image()[:, ::2]  # a non-contiguous view
    np.testing.assert_array_equal(HFlipTransform(20).apply_image(img), img[:, ::-1])


# ---------------------------------------------------------------- resize
def test_resize_image_shape_dtype_and_channels(backend):
    for c in (1, 3, 4):
        img = _image(c=c)
        out = ResizeTransform(30, 40, 45, 60).apply_image(img)
        assert out.shape == (45, 60, c)
        assert out.dtype == np.uint8
    gray = _image()[:, :, 0]
    assert ResizeTransform(30, 40, 15, 20).apply_image(gray).shape == (15, 20)


def test_resize_constant_image_stays_constant(backend):
    img = np.full((30, 40, 3), 77, np.uint8)
    out = ResizeTransform(30, 40, 61, 83).apply_image(img)
    assert np.all(out == 77)


def test_resize_upscale_close_across_backends(monkeypatch):
    img = _image(seed=3)
    reference = ResizeTransform(30, 40, 60, 80).apply_image(img).astype(np.int32)
    monkeypatch.setattr(_backend, "get_cv2", lambda: None)
    monkeypatch.setattr(_backend, "_get_pil_image", lambda: None)
    torch_out = ResizeTransform(30, 40, 60, 80).apply_image(img).astype(np.int32)
    # OpenCV and torch both sample at pixel centres; they differ by rounding only.
    assert np.abs(reference - torch_out).max() <= 1


def test_resize_float_image_and_many_channels(backend):
    img = np.random.default_rng(0).random((10, 12, 6)).astype(np.float32)
    out = ResizeTransform(10, 12, 20, 24).apply_image(img)
    assert out.shape == (20, 24, 6) and out.dtype == np.float32
    assert out.min() >= img.min() - 1e-5 and out.max() <= img.max() + 1e-5


def test_resize_segmentation_is_nearest_and_keeps_labels(backend):
    seg = np.random.default_rng(0).integers(0, 5, size=(30, 40)).astype(np.int64)
    t = ResizeTransform(30, 40, 60, 80)
    out = t.apply_segmentation(seg)
    assert out.shape == (60, 80) and out.dtype == np.int64
    # 2x upscale with nearest: each label becomes a 2x2 block.
    np.testing.assert_array_equal(out[::2, ::2], seg)
    np.testing.assert_array_equal(out[1::2, 1::2], seg)
    assert set(np.unique(out)) <= set(np.unique(seg))


def test_resize_interp_nearest_on_image():
    img = _image()
    out = ResizeTransform(30, 40, 60, 80, interp=0).apply_image(img)
    np.testing.assert_array_equal(out[::2, ::2], img)
    out2 = ResizeTransform(30, 40, 60, 80).apply_image(img, interp="nearest")
    np.testing.assert_array_equal(out, out2)


def test_resize_wrong_image_size_is_error():
    with pytest.raises(TransformError, match=r"\(30, 40\).*\(31, 40, 3\)"):
        ResizeTransform(30, 40, 60, 80).apply_image(_image(31, 40))
    with pytest.raises(TransformError, match="segmentation"):
        ResizeTransform(30, 40, 60, 80).apply_segmentation(np.zeros((5, 5), np.uint8))


def test_resize_invalid_arguments():
    with pytest.raises(ValueError, match="new_h"):
        ResizeTransform(10, 10, 0, 5)
    with pytest.raises(ValueError, match="unknown interpolation"):
        ResizeTransform(10, 10, 5, 5, interp="sharpest")


def test_resize_bool_mask_and_hamming():
    mask = np.zeros((10, 10), bool)
    mask[2:8, 2:8] = True
    out = ResizeTransform(10, 10, 20, 20, interp="bilinear").apply_image(mask)
    assert out.dtype == np.bool_ and out.shape == (20, 20)
    out = ResizeTransform(30, 40, 15, 20, interp=5).apply_image(_image())
    assert out.shape == (15, 20, 3)


def test_resize_of_flipped_view(backend):
    img = _image()
    view = img[:, ::-1]
    a = ResizeTransform(30, 40, 45, 60).apply_image(view)
    b = ResizeTransform(30, 40, 45, 60).apply_image(np.ascontiguousarray(view))
    np.testing.assert_array_equal(a, b)


def test_resize_coords_and_inverse_round_trip():
    t = ResizeTransform(30, 40, 45, 100)
    coords = np.array([[0.0, 0.0], [40.0, 30.0], [10.5, 7.25]])
    moved = t.apply_coords(coords)
    np.testing.assert_allclose(moved, [[0, 0], [100, 45], [26.25, 10.875]])
    np.testing.assert_allclose(t.inverse().apply_coords(moved), coords)
    assert t.inverse().apply_image(t.apply_image(_image())).shape == (30, 40, 3)


# ---------------------------------------------------------------- crop / pad
def test_crop_image_is_view_and_coords_shift():
    img = _image()
    t = CropTransform(5, 6, 10, 12)
    out = t.apply_image(img)
    np.testing.assert_array_equal(out, img[6:18, 5:15])
    assert np.shares_memory(out, img)
    assert t.apply_coords(np.array([[5.0, 6.0]])).tolist() == [[0.0, 0.0]]
    batch = np.stack([img, img])
    assert t.apply_image(batch).shape == (2, 12, 10, 3)


def test_crop_polygon_clipped_to_window():
    t = CropTransform(10, 10, 20, 20)
    square = np.array([[0, 0], [40, 0], [40, 40], [0, 40]], dtype=np.float64)
    (out,) = t.apply_polygons([square])
    xs, ys = out[:, 0], out[:, 1]
    assert xs.min() == 0 and xs.max() == 20 and ys.min() == 0 and ys.max() == 20
    area = 0.5 * abs(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1)))
    assert area == pytest.approx(400.0)


def test_crop_polygon_partially_inside_keeps_area():
    t = CropTransform(0, 0, 10, 10)
    tri = np.array([[0, 0], [20, 0], [0, 20]], dtype=np.float64)
    (out,) = t.apply_polygons([tri])
    xs, ys = out[:, 0], out[:, 1]
    area = 0.5 * abs(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1)))
    assert area == pytest.approx(100.0)  # the whole window is inside the triangle


def test_crop_polygon_outside_is_dropped_inside_is_kept():
    t = CropTransform(10, 10, 20, 20)
    outside = np.array([[0, 0], [5, 0], [5, 5]], dtype=np.float64)
    inside = np.array([[12, 12], [20, 12], [20, 20]], dtype=np.float64)
    touching = np.array(
        [[0, 0], [10, 0], [10, 10], [0, 10]], dtype=np.float64
    )  # shares an edge corner only
    out = t.apply_polygons([outside, inside, touching])
    assert len(out) == 1
    np.testing.assert_allclose(out[0], inside - 10)


def test_crop_inverse_pads_back():
    img = _image()
    t = CropTransform(5, 6, 10, 12, orig_w=40, orig_h=30)
    back = t.inverse().apply_image(t.apply_image(img))
    assert back.shape == img.shape
    np.testing.assert_array_equal(back[6:18, 5:15], img[6:18, 5:15])
    assert back[0].sum() == 0
    coords = np.array([[7.0, 8.0]])
    np.testing.assert_allclose(t.inverse().apply_coords(t.apply_coords(coords)), coords)
    assert isinstance(t.inverse().inverse(), CropTransform)


def test_crop_inverse_without_original_size():
    with pytest.raises(NotImplementedError, match="orig_w"):
        CropTransform(0, 0, 5, 5).inverse()
    with pytest.raises(ValueError):
        CropTransform(0, 0, 0, 5)


def test_pad_segmentation_value():
    t = PadTransform(1, 1, 1, 1, orig_w=2, orig_h=2, seg_pad_value=255)
    out = t.apply_segmentation(np.zeros((2, 2), np.uint8))
    assert out.shape == (4, 4) and out[0, 0] == 255 and out[1, 1] == 0
    with pytest.raises(ValueError):
        PadTransform(-1, 0, 0, 0)


# ---------------------------------------------------------------- blend
def test_blend_uint8_matches_float_formula():
    img = _image(seed=4)
    for src, sw, dw in ((0, -0.3, 1.3), (100.0, 0.5, 0.5), (0, 0.2, 0.8)):
        out = BlendTransform(src, sw, dw).apply_image(img)
        expected = np.clip(
            np.float32(sw) * np.float32(src) + np.float32(dw) * img.astype(np.float32), 0, 255
        ).astype(np.uint8)
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, expected)
    gray = img.astype(np.float32).mean(axis=2, keepdims=True)
    out = BlendTransform(gray, 0.5, 0.5).apply_image(img)
    expected = np.clip(0.5 * gray + 0.5 * img.astype(np.float32), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(out, expected)


def test_blend_leaves_geometry_alone():
    t = BlendTransform(0, 0.5, 0.5)
    boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert t.apply_box(boxes) is boxes
    assert isinstance(t.inverse(), NoOpTransform)
    assert "src_weight=0.5" in repr(t)


# ---------------------------------------------------------------- boxes, lists, inverse
def test_apply_box_through_corners_and_shapes():
    t = ResizeTransform(10, 10, 20, 5)
    assert t.apply_box([1, 2, 3, 4]).tolist() == [[0.5, 4.0, 1.5, 8.0]]
    assert t.apply_box(np.zeros((0, 4))).shape == (0, 4)
    with pytest.raises(TransformError, match="Nx4"):
        t.apply_box(np.zeros((2, 3)))
    with pytest.raises(TransformError, match="Nx2"):
        t.apply_coords(np.zeros((2, 3)))


def test_transform_list_flattens_adds_and_inverts():
    a, b, c = (
        HFlipTransform(40),
        ResizeTransform(30, 40, 60, 80),
        CropTransform(0, 0, 50, 50, 80, 60),
    )
    tl = TransformList([a, TransformList([b, c])])
    assert tl.transforms == [a, b, c]
    assert (a + b).transforms == [a, b]
    assert (tl + a).transforms == [a, b, c, a]
    assert (a + tl).transforms == [a, a, b, c]
    tl2 = TransformList([a])
    tl2 += TransformList([b])
    assert tl2.transforms == [a, b] and len(tl2) == 2 and tl2[1] is b
    assert isinstance(tl[0:2], TransformList)
    coords = np.array([[3.0, 4.0], [20.0, 10.0]])
    np.testing.assert_allclose(tl.inverse().apply_coords(tl.apply_coords(coords)), coords)
    assert [type(t) for t in tl.inverse()] == [PadTransform, ResizeTransform, HFlipTransform]
    with pytest.raises(TypeError, match="element 1"):
        TransformList([a, "flip"])


def test_transform_list_image_and_polygons_consistent():
    img = np.zeros((30, 40), np.uint8)
    img[5, 10] = 255  # a single bright pixel with top-left corner at (10, 5)
    tl = TransformList(
        [HFlipTransform(40), ResizeTransform(30, 40, 60, 80, interp=0), CropTransform(4, 2, 70, 50)]
    )
    out = tl.apply_image(img)
    ys, xs = np.nonzero(out)
    center = tl.apply_coords(np.array([[10.5, 5.5]]))[0]
    assert xs.min() <= center[0] <= xs.max() + 1 and ys.min() <= center[1] <= ys.max() + 1


def test_flip_inverse_is_itself_and_noop():
    for t in (HFlipTransform(40), VFlipTransform(30)):
        img = _image()
        np.testing.assert_array_equal(t.inverse().apply_image(t.apply_image(img)), img)
    noop = NoOpTransform()
    assert noop.inverse() is noop
    assert noop.apply_rotated_box("x") == "x"


def test_base_transform_not_invertible_and_register_type():
    class Shift(Transform):
        def __init__(self, dx):
            self.dx = dx

        def apply_image(self, img):
            return img

        def apply_coords(self, coords):
            out = np.asarray(coords, float).copy()
            out[:, 0] += self.dx
            return out

    with pytest.raises(NotImplementedError, match="Shift has no inverse"):
        Shift(1).inverse()

    @Shift.register_type("points")
    def apply_points(self, pts):
        return self.apply_coords(pts)

    assert Shift(2).apply_points(np.array([[0.0, 0.0]])).tolist() == [[2.0, 0.0]]
    tl = TransformList([Shift(1), Shift(2)])
    assert tl.apply_points(np.array([[0.0, 0.0]])).tolist() == [[3.0, 0.0]]
    with pytest.raises(ValueError):
        Shift.register_type("not valid")


def test_reprs():
    assert repr(HFlipTransform(400)) == "HFlipTransform(width=400)"
    assert (
        repr(ResizeTransform(480, 640, 800, 1067))
        == "ResizeTransform(h=480, w=640, new_h=800, new_w=1067)"
    )
    assert repr(CropTransform(1, 2, 3, 4)) == "CropTransform(x0=1, y0=2, w=3, h=4)"
    assert (
        repr(TransformList([NoOpTransform(), VFlipTransform(5)]))
        == "TransformList[NoOpTransform(), VFlipTransform(height=5)]"
    )


def test_normalize_interp():
    assert _backend.normalize_interp(3) == "bicubic"
    assert _backend.normalize_interp("AREA") == "box"
    with pytest.raises(ValueError):
        _backend.normalize_interp(42)
    with pytest.raises(ValueError, match="HxW"):
        _backend.resize_array(np.zeros((2, 2, 2, 2)), 1, 1, "bilinear")


@pytest.mark.parametrize("c", [None, 1, 3])
def test_as_contiguous_of_flipped_views(c, backend):
    img = _image(c=c or 1)
    if c is None:
        img = img[:, :, 0]
    for view in (img[:, ::-1], img[::-1], img[::-1, ::-1], img[:, ::2]):
        out = _backend.as_contiguous(view)
        assert out.flags.c_contiguous and out.shape == view.shape
        np.testing.assert_array_equal(out, view)
    assert _backend.as_contiguous(img) is img


def test_flip_returns_view_without_copy():
    img = _image()
    out = HFlipTransform(40).apply_image(img)
    assert np.shares_memory(out, img)


def test_bench_transforms_tool_runs(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "bench_transforms.py"
    spec = importlib.util.spec_from_file_location("bench_transforms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch

    cv2 = _backend.get_cv2()
    threads = (torch.get_num_threads(), cv2.getNumThreads() if cv2 is not None else None)
    try:
        assert module.main(["--repeats", "1", "--annotations", "3"]) == 0
    finally:
        torch.set_num_threads(threads[0])
        if cv2 is not None:
            cv2.setNumThreads(threads[1])
    out = capsys.readouterr().out
    assert "3 annotations -> Instances" in out and "speed-up" in out
