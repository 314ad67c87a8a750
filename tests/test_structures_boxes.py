"""Boxes, pairwise IoU / IoA / intersection and BoxMode, from detectron2's documented behaviour.

Expected values are computed by hand in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import BoxMode, BoxModeError
from mappers.structures import Boxes, pairwise_ioa, pairwise_iou
from mappers.structures import (
    StructureIndexError,
    StructureShapeError,
    matched_pairwise_iou,
    pairwise_intersection,
)


def test_constructor_converts_to_float32_and_reshapes_empty():
    assert Boxes([[1, 2, 3, 4]]).tensor.dtype == torch.float32
    assert Boxes(np.array([[1, 2, 3, 4]], dtype=np.float64)).tensor.dtype == torch.float32
    assert Boxes(torch.tensor([[1, 2, 3, 4]], dtype=torch.int64)).tensor.tolist() == [
        [1.0, 2.0, 3.0, 4.0]
    ]
    for empty in ([], torch.zeros(0), np.zeros((0,)), torch.zeros(0, 4)):
        assert Boxes(empty).tensor.shape == (0, 4)


@pytest.mark.parametrize("bad", [[[1, 2, 3]], [1, 2, 3, 4], torch.zeros(2, 4, 1), [["a"] * 4]])
def test_bad_shapes_are_typed_errors(bad):
    with pytest.raises(StructureShapeError):
        Boxes(bad)
    assert issubclass(StructureShapeError, ValueError)


def test_float32_tensor_is_shared_not_copied():
    data = torch.zeros(2, 4)
    boxes = Boxes(data)
    data[0, 0] = 5
    assert boxes.tensor[0, 0] == 5


def test_area_clip_nonempty_inside_centers_scale():
    boxes = Boxes([[0, 0, 10, 20], [5, 5, 5, 9], [-4, 3, 30, 12]])
    assert boxes.area().tolist() == [200.0, 0.0, 306.0]  # 10*20, 0*4, 34*9
    assert boxes.nonempty().tolist() == [True, False, True]
    assert boxes.nonempty(threshold=10).tolist() == [False, False, False]  # w 10 is not > 10
    assert boxes.inside_box((20, 30)).tolist() == [False, True, False]  # y1 20 is not < 20
    assert boxes.inside_box((21, 31)).tolist() == [True, True, False]  # x0 -4 < 0
    assert boxes.inside_box((21, 31), boundary_threshold=5).tolist() == [True, True, True]
    assert boxes.get_centers().tolist() == [[5.0, 10.0], [5.0, 7.0], [13.0, 7.5]]
    clipped = boxes.clone()
    clipped.clip((10, 25))  # (height, width)
    assert clipped.tensor.tolist() == [[0, 0, 10, 10], [5, 5, 5, 9], [0, 3, 25, 10]]
    assert boxes.tensor[2].tolist() == [-4, 3, 30, 12]  # clone shares nothing
    boxes.scale(2.0, 0.5)
    assert boxes.tensor[0].tolist() == [0.0, 0.0, 20.0, 10.0]


def test_clip_rejects_non_finite():
    with pytest.raises(StructureShapeError, match="infinite or NaN"):
        Boxes([[0, 0, float("inf"), 1]]).clip((5, 5))


def test_indexing_int_slice_mask_indices():
    boxes = Boxes(torch.arange(12, dtype=torch.float32).view(3, 4))
    one = boxes[1]
    assert isinstance(one, Boxes) and one.tensor.shape == (1, 4) and one.tensor[0, 0] == 4
    assert boxes[-1].tensor[0, 0] == 8
    assert boxes[torch.tensor(2)].tensor[0, 0] == 8
    assert boxes[1:].tensor[:, 0].tolist() == [4, 8]
    assert boxes[torch.tensor([True, False, True])].tensor[:, 0].tolist() == [0, 8]
    assert boxes[np.array([False, True, False])].tensor[:, 0].tolist() == [4]
    assert boxes[[2, 0]].tensor[:, 0].tolist() == [8, 0]
    assert boxes[torch.tensor([], dtype=torch.int64)].tensor.shape == (0, 4)
    for bad in (3, -4, [True, False], torch.tensor([0.5]), "a"):
        with pytest.raises(StructureIndexError):
            boxes[bad]
    assert issubclass(StructureIndexError, IndexError)


def test_len_iter_repr_cat_to_device():
    a = Boxes([[0, 0, 1, 1], [1, 1, 2, 2]])
    b = Boxes([[5, 5, 6, 6]])
    assert len(a) == 2 and [t.tolist() for t in a] == [[0, 0, 1, 1], [1, 1, 2, 2]]
    assert repr(b).startswith("Boxes(tensor(")
    cat = Boxes.cat([a, b])
    assert len(cat) == 3 and cat.tensor[2].tolist() == [5, 5, 6, 6]
    assert Boxes.cat([]).tensor.shape == (0, 4)
    with pytest.raises(StructureShapeError):
        Boxes.cat([a, torch.zeros(1, 4)])
    moved = a.to("cpu")
    assert isinstance(moved, Boxes) and moved.device == torch.device("cpu")


def test_pairwise_hand_values():
    a = Boxes([[0, 0, 2, 2], [0, 0, 4, 4]])
    b = Boxes([[1, 0, 3, 2], [10, 10, 11, 11], [1, 1, 2, 2]])
    # a0 ∩ b0 = [1,2]x[0,2] = 2; union 4 + 4 - 2 = 6
    # a1 ∩ b0 = 2 (b0 inside a1 in x 1..3, y 0..2 → 2*2 = 4); union 16 + 4 - 4 = 16
    inter = pairwise_intersection(a, b)
    assert inter.tolist() == [[2.0, 0.0, 1.0], [4.0, 0.0, 1.0]]
    iou = pairwise_iou(a, b)
    np.testing.assert_allclose(iou.numpy(), [[2 / 6, 0, 1 / 4], [4 / 16, 0, 1 / 16]], rtol=1e-6)
    ioa = pairwise_ioa(a, b)  # over the area of b: 4, 1, 1
    np.testing.assert_allclose(ioa.numpy(), [[0.5, 0, 1], [1, 0, 1]], rtol=1e-6)
    np.testing.assert_allclose(
        matched_pairwise_iou(a, Boxes([[1, 0, 3, 2], [0, 0, 4, 4]])).numpy(), [1 / 3, 1]
    )
    with pytest.raises(StructureShapeError):
        matched_pairwise_iou(a, b)
    assert pairwise_iou(Boxes([]), b).shape == (0, 3)


def test_degenerate_boxes_give_zero_not_nan():
    a = Boxes([[1, 1, 1, 1], [0, 0, 0, 5]])
    iou = pairwise_iou(a, a)
    assert not torch.isnan(iou).any() and iou.tolist() == [[0, 0], [0, 0]]
    assert not torch.isnan(pairwise_ioa(a, a)).any()


boxes_strategy = st.lists(
    st.tuples(
        st.floats(0, 100, allow_nan=False),
        st.floats(0, 100, allow_nan=False),
        st.floats(0.5, 50, allow_nan=False),
        st.floats(0.5, 50, allow_nan=False),
    ),
    min_size=1,
    max_size=8,
).map(lambda xs: Boxes([[x, y, x + w, y + h] for x, y, w, h in xs]))


@settings(max_examples=150, deadline=None)
@given(boxes_strategy, boxes_strategy)
def test_iou_properties(a, b):
    iou = pairwise_iou(a, b)
    assert iou.shape == (len(a), len(b))
    assert bool(((iou >= 0) & (iou <= 1 + 1e-6)).all())
    torch.testing.assert_close(iou, pairwise_iou(b, a).T)
    torch.testing.assert_close(torch.diagonal(pairwise_iou(a, a)), torch.ones(len(a)))
    ioa = pairwise_ioa(a, b)
    assert bool((ioa >= iou - 1e-6).all())  # area(b) <= union
    assert bool((ioa <= 1 + 1e-5).all())


# ------------------------------------------------------------------------------ BoxMode
def test_box_mode_keeps_container_and_dtype():
    assert BoxMode.convert([1, 2, 3, 4], BoxMode.XYWH_ABS, BoxMode.XYXY_ABS) == [1, 2, 4, 6]
    out = BoxMode.convert((1.5, 2, 3, 4), BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
    assert out == (1.5, 2.0, 4.5, 6.0) and isinstance(out, tuple)
    for dtype in (np.float16, np.float32, np.float64, np.int32, np.int64):
        arr = np.array([[1, 2, 3, 4]], dtype=dtype)
        res = BoxMode.convert(arr, BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
        assert isinstance(res, np.ndarray) and res.dtype == dtype
        assert res.tolist() == [[1, 2, 2, 2]]
        assert arr.tolist() == [[1, 2, 3, 4]]  # input untouched
    for dtype in (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64):
        t = torch.tensor([[1, 2, 3, 4]], dtype=dtype)
        res = BoxMode.convert(t, BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
        assert isinstance(res, torch.Tensor) and res.dtype == dtype
        assert res.tolist() == [[1, 2, 2, 2]] and t.tolist() == [[1, 2, 3, 4]]


def test_box_mode_rotated_conversions():
    # 30° rotation of a 4x2 box centred at (10, 10): |cos| 4 + |sin| 2 = 3.464 + 1 = 4.464
    xyxy = BoxMode.convert([10.0, 10.0, 4.0, 2.0, 30.0], BoxMode.XYWHA_ABS, BoxMode.XYXY_ABS)
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    w, h = 4 * c + 2 * s, 2 * c + 4 * s
    assert xyxy == pytest.approx([10 - w / 2, 10 - h / 2, 10 + w / 2, 10 + h / 2])
    rotated = BoxMode.convert(
        np.array([[8, 9, 12, 11]], dtype=np.float32), BoxMode.XYXY_ABS, BoxMode.XYWHA_ABS
    )
    assert rotated.dtype == np.float32 and rotated.tolist() == [[10, 10, 4, 2, 0]]
    t = torch.tensor([[10.0, 10.0, 4.0, 2.0, 90.0]], dtype=torch.float64)
    assert BoxMode.convert(t, BoxMode.XYWHA_ABS, BoxMode.XYWH_ABS)[0].tolist() == pytest.approx(
        [9.0, 8.0, 2.0, 4.0]
    )
    with pytest.raises(BoxModeError, match="5 numbers"):
        BoxMode.convert([1, 2, 3, 4], BoxMode.XYWHA_ABS, BoxMode.XYXY_ABS)


@pytest.mark.parametrize("mode", [BoxMode.XYXY_REL, BoxMode.XYWH_REL])
def test_relative_modes_are_typed_errors(mode):
    with pytest.raises(BoxModeError, match="relative"):
        BoxMode.convert([0.1, 0.1, 0.2, 0.2], mode, BoxMode.XYXY_ABS)
    with pytest.raises(ValueError):
        BoxMode.convert([0.1, 0.1, 0.2, 0.2], BoxMode.XYXY_ABS, mode)


finite = st.floats(-1e4, 1e4, allow_nan=False, width=32)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(finite, finite, st.floats(0, 1e3, width=32), st.floats(0, 1e3, width=32)),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["list", "tuple", "numpy32", "numpy64", "torch32", "torch64"]),
)
def test_box_mode_round_trips_keep_kind(rows, kind):
    xywh = np.array(rows, dtype=np.float64)
    box: object
    if kind == "list":
        box = xywh[0].tolist()
    elif kind == "tuple":
        box = tuple(xywh[0].tolist())
    elif kind.startswith("numpy"):
        box = xywh.astype(np.float32 if kind.endswith("32") else np.float64)
    else:
        box = torch.tensor(xywh, dtype=torch.float32 if kind.endswith("32") else torch.float64)
    for via in (BoxMode.XYXY_ABS, BoxMode.XYWHA_ABS):
        there = BoxMode.convert(box, BoxMode.XYWH_ABS, via)
        back = BoxMode.convert(there, via, BoxMode.XYWH_ABS)
        assert type(back) is type(box)
        if isinstance(box, (np.ndarray, torch.Tensor)):
            assert back.dtype == box.dtype and back.shape == box.shape
        got = np.asarray(back.tolist() if hasattr(back, "tolist") else back, dtype=np.float64)
        want = np.asarray(box.tolist() if hasattr(box, "tolist") else box, dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-2)


def test_box_mode_list_is_one_box():
    for container in (list, tuple):
        out = BoxMode.convert(container([50, 50, 30, 20, 0]), BoxMode.XYWHA_ABS, BoxMode.XYXY_ABS)
        assert type(out) is container and out == container([35, 40, 65, 60])
        with pytest.raises(BoxModeError, match="one XYXY_ABS box"):
            BoxMode.convert(container([[5.0, 5.0, 10.0, 10.0]]), BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
    out = BoxMode.convert([5.0, 5.0, 10.0, 10.0], BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
    assert out == [5.0, 5.0, 5.0, 5.0] and isinstance(out[0], float)
