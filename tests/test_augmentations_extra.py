"""Tests for the extra transforms: RotationTransform, ExtentTransform, ColorTransform,
PILColorTransform, the affine warp, and rotated boxes through every transform."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mappers.transforms import (
    BlendTransform,
    ColorTransform,
    CropTransform,
    ExtentTransform,
    HFlipTransform,
    NoOpTransform,
    PadTransform,
    PILColorTransform,
    ResizeTransform,
    RotationTransform,
    TransformError,
    TransformList,
    Transform,
    VFlipTransform,
)
from mappers.transforms import transform_affine as _warp


# ---------------------------------------------------------------- helpers
def rasterize(polygon: np.ndarray, h: int, w: int) -> np.ndarray:
    """Pixels whose centre lies inside the polygon (even-odd rule)."""
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    inside = np.zeros((h, w), dtype=bool)
    pts = np.asarray(polygon, dtype=np.float64)
    for (x1, y1), (x2, y2) in zip(pts, np.roll(pts, -1, axis=0), strict=True):
        crosses = (y1 > ys) != (y2 > ys)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_at = x1 + (ys - y1) * (x2 - x1) / (y2 - y1)
        inside ^= crosses & (xs < x_at)
    return inside


def _shift_or(mask: np.ndarray) -> np.ndarray:
    out = mask.copy()
    padded = np.pad(mask, 1)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            out |= padded[dy : dy + mask.shape[0], dx : dx + mask.shape[1]]
    return out


def assert_masks_within_a_pixel(a: np.ndarray, b: np.ndarray) -> None:
    """Every pixel where the masks differ touches the boundary of both (8-neighbourhood)."""
    assert a.shape == b.shape
    differ = a ^ b
    for m in (a, b):
        boundary = _shift_or(m) & _shift_or(~m)
        assert not (differ & ~boundary).any(), "masks differ by more than one pixel"
    assert a.sum() > 0 and b.sum() > 0


def box_of(mask: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float64)


def rbox_corners(boxes: np.ndarray) -> np.ndarray:
    """Nx4x2 corners of rotated boxes (cx, cy, w, h, angle ccw in degrees)."""
    t = np.deg2rad(boxes[:, 4])
    u = np.stack([np.cos(t), -np.sin(t)], 1) * boxes[:, 2:3] / 2
    v = np.stack([np.sin(t), np.cos(t)], 1) * boxes[:, 3:4] / 2
    c = boxes[:, :2]
    return np.stack([c - u - v, c + u - v, c + u + v, c - u + v], axis=1)


def same_corner_sets(a: np.ndarray, b: np.ndarray, atol: float = 1e-6) -> bool:
    for pa, pb in zip(a, b, strict=True):
        d = np.linalg.norm(pa[:, None, :] - pb[None, :, :], axis=2)
        if not (d.min(axis=1) < atol).all():
            return False
    return True


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


# ---------------------------------------------------------------- RotationTransform
def test_rotation_90_matches_rot90_for_image_and_segmentation():
    img = _image(20, 30)
    seg = np.arange(600, dtype=np.int32).reshape(20, 30)
    t = RotationTransform(20, 30, 90)
    assert (t.bound_h, t.bound_w) == (30, 20)
    np.testing.assert_array_equal(t.apply_image(img), np.rot90(img))
    np.testing.assert_array_equal(t.apply_segmentation(seg), np.rot90(seg))
    # A point at the top-right corner goes to the top-left corner (counter-clockwise).
    np.testing.assert_allclose(t.apply_coords(np.array([[30.0, 0.0]])), [[0.0, 0.0]], atol=1e-9)


def test_rotation_identity_angles_are_noops():
    img = _image(5, 6)
    t = RotationTransform(5, 6, 720)
    assert t.apply_image(img) is img
    np.testing.assert_array_equal(t.apply_coords([[1.0, 2.0]]), [[1.0, 2.0]])


@pytest.mark.parametrize("expand", [True, False])
@pytest.mark.parametrize("angle", [17.0, -120.0, 45.0])
def test_rotation_box_drawn_into_image_lands_on_transformed_box(angle, expand):
    h, w = 40, 50
    mask = np.zeros((h, w), dtype=np.uint8)
    mask[12:24, 18:30] = 1  # box [18, 12, 30, 24]
    t = RotationTransform(h, w, angle, expand=expand, center=(20.0, 15.0))
    moved = t.apply_segmentation(mask)
    assert moved.shape == (t.bound_h, t.bound_w) and moved.dtype == np.uint8
    assert set(np.unique(moved)) <= {0, 1}  # nearest neighbour only
    box = t.apply_box(np.array([[18.0, 12.0, 30.0, 24.0]]))[0]
    np.testing.assert_allclose(box_of(moved > 0), box, atol=1.0)
    # The exact shape: polygon transformed then rasterized == rasterized then transformed.
    square = np.array([[18.0, 12.0], [30.0, 12.0], [30.0, 24.0], [18.0, 24.0]])
    poly = t.apply_polygons([square])[0]
    assert_masks_within_a_pixel(rasterize(poly, t.bound_h, t.bound_w), moved > 0)


def test_rotation_keypoints_follow_the_image():
    h, w = 40, 40
    seg = np.zeros((h, w), dtype=np.int32)
    points = np.array([[10.5, 8.5], [30.5, 12.5], [20.5, 33.5]])
    for label, (x, y) in enumerate(points, start=1):
        seg[int(y) - 1 : int(y) + 2, int(x) - 1 : int(x) + 2] = label
    t = RotationTransform(h, w, 33.0)
    moved = t.apply_segmentation(seg)
    new_points = t.apply_coords(points)
    for label, (x, y) in enumerate(new_points, start=1):
        ys, xs = np.nonzero(moved == label)
        assert abs(xs.mean() + 0.5 - x) < 1.0 and abs(ys.mean() + 0.5 - y) < 1.0


def test_rotation_bitmask_stays_bool_and_fill_values():
    mask = np.ones((10, 16), dtype=bool)
    t = RotationTransform(10, 16, 30, pad_value=7, seg_pad_value=255)
    out = t.apply_segmentation(mask)
    assert out.dtype == np.bool_ and out.any() and not out.all()  # outside: False, not 255
    seg = t.apply_segmentation(np.ones((10, 16), np.uint8))
    assert set(np.unique(seg)) == {1, 255}
    img = t.apply_image(np.zeros((10, 16, 3), np.uint8))
    assert img[0, 0].tolist() == [7, 7, 7]


@pytest.mark.parametrize("angle", [10.0, 33.3, 90.0, -75.0, 181.0])
def test_rotation_inverse_round_trips_coords(angle):
    t = RotationTransform(31, 47, angle)
    pts = np.array([[0.0, 0.0], [47.0, 31.0], [12.25, 7.5], [23.5, 15.5]])
    inv = t.inverse()
    assert isinstance(inv, TransformList)
    np.testing.assert_allclose(inv.apply_coords(t.apply_coords(pts)), pts, atol=1e-9)
    back = inv.apply_image(t.apply_image(_image(31, 47)))
    assert back.shape == (31, 47, 3)


def test_rotation_without_expand_has_no_inverse_and_checks_inputs():
    with pytest.raises(NotImplementedError, match="expand"):
        RotationTransform(10, 10, 30, expand=False).inverse()
    with pytest.raises(TransformError, match="size"):
        RotationTransform(10, 10, 30).apply_image(np.zeros((11, 10), np.uint8))
    with pytest.raises(ValueError, match="angle"):
        RotationTransform(10, 10, float("nan"))
    with pytest.raises(ValueError, match=r"\(h, w\) must be"):
        RotationTransform(0, 10, 5)
    with pytest.raises(ValueError, match="interpolation"):
        RotationTransform(10, 10, 5, interp=9)


def test_rotation_interp_flags_follow_opencv_numbering():
    img = _image(12, 12)
    nearest = RotationTransform(12, 12, 30, interp=0).apply_image(img)
    by_name = RotationTransform(12, 12, 30, interp="nearest").apply_image(img)
    np.testing.assert_array_equal(nearest, by_name)
    assert set(np.unique(nearest)) <= set(np.unique(img)) | {0}
    linear = RotationTransform(12, 12, 30, interp=1).apply_image(img)
    assert not np.array_equal(linear, nearest)


# ---------------------------------------------------------------- warp backends
def test_numpy_bilinear_warp_matches_opencv():
    cv2 = _warp.get_cv2()
    if cv2 is None:
        pytest.skip("OpenCV not installed")
    t = RotationTransform(25, 35, 27)
    for img in (_image(25, 35), np.random.default_rng(1).random((25, 35)).astype(np.float32)):
        ours = _warp._warp_bilinear_numpy(img, t.matrix, t.bound_h, t.bound_w, 0)
        ref = _warp._warp_cv2(cv2, img, t.matrix, t.bound_h, t.bound_w, "bilinear", 0)
        assert np.abs(ours.astype(np.float64) - ref).max() <= 1.0


def test_warp_without_opencv(monkeypatch):
    monkeypatch.setattr(_warp, "get_cv2", lambda: None)
    img = _image(20, 30)
    t = RotationTransform(20, 30, 90)
    np.testing.assert_array_equal(t.apply_image(img), np.rot90(img))
    with pytest.raises(TransformError, match="OpenCV"):
        RotationTransform(20, 30, 10, interp="bicubic").apply_image(img)


def test_warp_rejects_bad_arguments():
    with pytest.raises(TransformError, match="singular"):
        _warp.warp_affine(np.zeros((2, 2)), np.zeros((2, 3)), 2, 2, "nearest")
    with pytest.raises(TransformError, match="output size"):
        _warp.warp_affine(np.zeros((2, 2)), np.eye(2, 3), 0, 2, "nearest")
    with pytest.raises(TransformError, match="HxW"):
        _warp.warp_affine(np.zeros((2, 2, 2, 2)), np.eye(2, 3), 2, 2, "nearest")


# ---------------------------------------------------------------- ExtentTransform
def test_extent_with_whole_offsets_is_a_padded_crop():
    img = _image(10, 10)
    t = ExtentTransform((-2, -3, 8, 7), (10, 10), fill=9)
    out = t.apply_image(img)
    np.testing.assert_array_equal(out[3:, 2:], img[:7, :8])
    assert (out[:3] == 9).all() and (out[:, :2] == 9).all()
    seg = t.apply_segmentation(np.ones((10, 10), np.int64))
    assert seg[0, 0] == 0 and seg[5, 5] == 1
    np.testing.assert_allclose(t.apply_coords([[0.0, 0.0], [8.0, 7.0]]), [[2, 3], [10, 10]])


def test_extent_scaled_box_and_polygon_consistency():
    h, w = 32, 48
    mask = np.zeros((h, w), np.uint8)
    mask[8:20, 10:30] = 1
    t = ExtentTransform((4.0, 2.0, 36.0, 30.0), (56, 64))
    moved = t.apply_segmentation(mask)
    assert moved.shape == (56, 64)
    np.testing.assert_allclose(box_of(moved > 0), t.apply_box([[10, 8, 30, 20]])[0], atol=1.0)
    square = np.array([[10.0, 8.0], [30.0, 8.0], [30.0, 20.0], [10.0, 20.0]])
    assert_masks_within_a_pixel(rasterize(t.apply_polygons([square])[0], 56, 64), moved > 0)


def test_extent_validation_and_no_inverse():
    with pytest.raises(ValueError, match="empty"):
        ExtentTransform((5, 5, 5, 10), (4, 4))
    with pytest.raises(ValueError, match="output_size"):
        ExtentTransform((0, 0, 5, 5), (0, 4))
    with pytest.raises(NotImplementedError):
        ExtentTransform((0, 0, 5, 5), (4, 4)).inverse()


# ---------------------------------------------------------------- colour transforms
def test_color_transform_changes_pixels_only():
    t = ColorTransform(lambda img: 255 - img)
    img = _image(4, 5)
    np.testing.assert_array_equal(t.apply_image(img), 255 - img)
    boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert t.apply_box(boxes) is boxes
    seg = np.ones((4, 5), np.int32)
    assert t.apply_segmentation(seg) is seg
    rboxes = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert t.apply_rotated_box(rboxes) is rboxes
    assert isinstance(t.inverse(), NoOpTransform)
    with pytest.raises(ValueError, match="callable"):
        ColorTransform(3)
    with pytest.raises(TransformError, match="size"):
        ColorTransform(lambda img: img[:2]).apply_image(img)


def test_pil_color_transform():
    from PIL import ImageEnhance, ImageOps

    img = _image(6, 7)
    np.testing.assert_array_equal(PILColorTransform(ImageOps.invert).apply_image(img), 255 - img)
    gray = img[:, :, :1]
    out = PILColorTransform(lambda im: ImageEnhance.Brightness(im).enhance(0.5)).apply_image(gray)
    assert out.shape == (6, 7, 1) and out.dtype == np.uint8
    assert (out <= gray).all()
    with pytest.raises(TransformError, match="uint8"):
        PILColorTransform(ImageOps.invert).apply_image(img.astype(np.float32))


def test_new_transforms_pickle():
    for t in (
        RotationTransform(10, 12, 30, center=(2.0, 3.0)),
        ExtentTransform((0, 0, 5, 5), (4, 4)),
        PILColorTransform(np.asarray),
    ):
        clone = pickle.loads(pickle.dumps(t))
        np.testing.assert_allclose(clone.apply_coords([[1.0, 2.0]]), t.apply_coords([[1.0, 2.0]]))


# ---------------------------------------------------------------- rotated boxes
RB = np.array([[30.0, 40.0, 20.0, 10.0, 30.0], [5.0, 6.0, 4.0, 2.0, -100.0]])


def test_rotated_box_hflip_vflip_hand_computed():
    out = HFlipTransform(100).apply_rotated_box(RB)
    np.testing.assert_allclose(out, [[70, 40, 20, 10, -30], [95, 6, 4, 2, 100]])
    out = VFlipTransform(50).apply_rotated_box(RB)
    np.testing.assert_allclose(out, [[30, 10, 20, 10, -30], [5, 44, 4, 2, 100]])
    assert RB[0, 4] == 30.0  # input untouched


def test_rotated_box_resize_hand_computed():
    t = ResizeTransform(50, 100, 50, 200)  # sx = 2, sy = 1
    out = t.apply_rotated_box([[10.0, 20.0, 4.0, 2.0, 45.0]])
    # width axis (c, -s) -> (2c, -s): |.| = sqrt(2.5); height axis (s, c) -> (2s, c);
    # angle from the height axis: atan2(2s, c) = atan2(2, 1).
    expected = [20.0, 20.0, 4 * np.sqrt(2.5), 2 * np.sqrt(2.5), np.degrees(np.arctan2(2, 1))]
    np.testing.assert_allclose(out[0], expected)
    # Uniform scale: exact, the angle is kept.
    np.testing.assert_allclose(
        ResizeTransform(10, 10, 30, 30).apply_rotated_box([[1, 2, 3, 4, 60.0]]), [[3, 6, 9, 12, 60]]
    )


def test_rotated_box_rotation_hand_computed():
    t = RotationTransform(100, 100, 90, expand=False)  # (x, y) -> (y, 100 - x)
    out = t.apply_rotated_box([[70.0, 50.0, 10.0, 4.0, 0.0], [50.0, 20.0, 6.0, 2.0, 15.0]])
    np.testing.assert_allclose(out, [[50, 30, 10, 4, 90], [20, 50, 6, 2, 105]], atol=1e-9)


def test_rotated_box_crop_and_pad_hand_computed():
    out = CropTransform(5, 10, 50, 50).apply_rotated_box([[30.0, 40.0, 10.0, 4.0, 270.0]])
    np.testing.assert_allclose(out, [[25, 30, 10, 4, 270]], atol=1e-9)
    out = PadTransform(1, 2, 0, 0).apply_rotated_box([[30.0, 40.0, 10.0, 4.0, -30.0]])
    np.testing.assert_allclose(out, [[31, 42, 10, 4, -30]], atol=1e-9)


@pytest.mark.parametrize(
    "t",
    [
        HFlipTransform(64),
        VFlipTransform(48),
        ResizeTransform(48, 64, 96, 128),
        CropTransform(3, 4, 30, 30),
        RotationTransform(48, 64, 37.0),
        RotationTransform(48, 64, -128.0, expand=False, center=(10.0, 5.0)),
        ExtentTransform((-3.0, 2.0, 61.0, 34.0), (64, 128)),
        TransformList([HFlipTransform(64), RotationTransform(48, 64, 20.0)]),
    ],
    ids=repr,
)
def test_rotated_box_corners_move_with_the_transform(t):
    boxes = np.array([[20.0, 15.0, 12.0, 6.0, 25.0], [40.0, 30.0, 8.0, 8.0, -170.0]])
    moved = t.apply_rotated_box(boxes)
    assert same_corner_sets(
        rbox_corners(moved), t.apply_coords(rbox_corners(boxes).reshape(-1, 2)).reshape(-1, 4, 2)
    )


def test_rotated_box_generic_rule_agrees_with_exact_rules():
    boxes = np.array([[20.0, 15.0, 12.0, 6.0, 25.0], [40.0, 30.0, 8.0, 3.0, -170.0]])
    rot = RotationTransform(48, 64, 37.0)
    np.testing.assert_allclose(Transform.apply_rotated_box(rot, boxes), rot.apply_rotated_box(boxes), atol=1e-9)
    # A non-uniform ExtentTransform follows the same rule as ResizeTransform.
    extent = ExtentTransform((0.0, 0.0, 64.0, 48.0), (48, 128))
    resize = ResizeTransform(48, 64, 48, 128)
    np.testing.assert_allclose(
        extent.apply_rotated_box(boxes[:1]), resize.apply_rotated_box(boxes[:1]), atol=1e-9
    )


def test_rotated_box_input_forms():
    assert HFlipTransform(10).apply_rotated_box(np.zeros((0, 5))).shape == (0, 5)
    one = HFlipTransform(10).apply_rotated_box([1, 2, 3, 4, 5])
    assert one.shape == (1, 5)
    with pytest.raises(TransformError, match="Nx5"):
        CropTransform(0, 0, 5, 5).apply_rotated_box(np.zeros((2, 4)))
    blend = BlendTransform(0, 0.5, 0.5)
    assert blend.apply_rotated_box("unchanged") == "unchanged"


def test_rotated_box_register_type_still_overrides():
    class Shift(CropTransform):
        pass

    Shift.register_type("rotated_box", lambda self, boxes: "custom")
    assert Shift(0, 0, 1, 1).apply_rotated_box(RB) == "custom"
    assert TransformList([Shift(0, 0, 1, 1)]).apply_rotated_box(RB) == "custom"


def test_output_sizes():
    t = RotationTransform(20, 30, 30)
    assert t.output_size(20, 30) == (t.bound_h, t.bound_w)
    assert t.output_size(21, 30) is None
    assert RotationTransform(20, 30, 360).output_size(7, 9) == (7, 9)
    e = ExtentTransform((0, 0, 5, 5), (4, 6))
    assert e.output_size == (4, 6) and e.output_size(100, 100) == (4, 6)
    assert pickle.loads(pickle.dumps(e)).output_size == (4, 6)
    assert "output_size=(4, 6)" in repr(e)
    assert ColorTransform(np.negative).output_size(3, 4) == (3, 4)


@settings(max_examples=150, deadline=None)
@given(
    h=st.integers(1, 60),
    w=st.integers(1, 60),
    angle=st.floats(-720, 720, allow_nan=False),
    box=st.tuples(
        st.floats(-50, 100),
        st.floats(-50, 100),
        st.floats(0, 40),
        st.floats(0, 40),
        st.floats(-360, 360),
    ),
)
def test_rotation_property_inverse_and_rotated_box_corners(h, w, angle, box):
    t = RotationTransform(h, w, angle)
    pts = np.array([[0.0, 0.0], [w, h], [box[0], box[1]]])
    if angle % 360 != 0:
        np.testing.assert_allclose(t.inverse().apply_coords(t.apply_coords(pts)), pts, atol=1e-6)
    boxes = np.array([box], dtype=np.float64)
    moved = t.apply_rotated_box(boxes)
    np.testing.assert_allclose(moved[:, 2:4], boxes[:, 2:4])
    corners = t.apply_coords(rbox_corners(boxes).reshape(-1, 2)).reshape(-1, 4, 2)
    assert same_corner_sets(rbox_corners(moved), corners, atol=1e-6)
