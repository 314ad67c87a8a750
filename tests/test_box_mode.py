"""BoxMode: detectron2's values and conversion for lists, numpy arrays and tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from catalog import BoxMode


def test_values_match_detectron2():
    assert [(m.name, int(m)) for m in BoxMode] == [
        ("XYXY_ABS", 0),
        ("XYWH_ABS", 1),
        ("XYXY_REL", 2),
        ("XYWH_REL", 3),
        ("XYWHA_ABS", 4),
    ]


def test_list_roundtrip_and_int_modes():
    xyxy = BoxMode.convert([10, 20, 30, 60], BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
    assert xyxy == [10.0, 20.0, 40.0, 80.0]
    assert BoxMode.convert(xyxy, 0, 1) == [10.0, 20.0, 30.0, 60.0]
    assert BoxMode.convert((1, 2, 3, 4), BoxMode.XYWH_ABS, BoxMode.XYXY_ABS) == (1, 2, 4, 6)


def test_same_mode_returns_input_unchanged():
    box = [1, 2, 3, 4]
    assert BoxMode.convert(box, BoxMode.XYXY_ABS, BoxMode.XYXY_ABS) is box


def test_numpy_batch_keeps_float_dtype():
    boxes = np.array([[0, 0, 10, 20], [5, 5, 6, 8]], dtype=np.float32)
    out = BoxMode.convert(boxes, BoxMode.XYXY_ABS, BoxMode.XYWH_ABS)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0, 0, 10, 20], [5, 5, 1, 3]])
    assert boxes[1, 2] == 6  # input untouched


def test_numpy_int_input_keeps_int_dtype():  # detectron2 keeps the input's dtype
    out = BoxMode.convert(np.array([[0, 0, 3, 4]]), BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
    assert out.dtype == np.int64
    np.testing.assert_allclose(out, [[0, 0, 3, 4]])


def test_tensor_input_gives_tensor():
    boxes = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    out = BoxMode.convert(boxes, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    assert out.tolist() == [[1.0, 2.0, 4.0, 6.0]]
    ints = BoxMode.convert(torch.tensor([1, 2, 3, 4]), BoxMode.XYWH_ABS, BoxMode.XYXY_ABS)
    assert ints.dtype == torch.int64 and ints.tolist() == [1, 2, 4, 6]


def test_rotated_boxes():
    # angle 0: axis-aligned
    out = BoxMode.convert([10, 10, 4, 2, 0], BoxMode.XYWHA_ABS, BoxMode.XYXY_ABS)
    assert out == pytest.approx([8, 9, 12, 11])
    # angle 90: width and height swap
    out = BoxMode.convert([10, 10, 4, 2, 90], BoxMode.XYWHA_ABS, BoxMode.XYXY_ABS)
    assert out == pytest.approx([9, 8, 11, 12])
    xywh = BoxMode.convert([10, 10, 4, 2, 0], BoxMode.XYWHA_ABS, BoxMode.XYWH_ABS)
    assert xywh == pytest.approx([8, 9, 4, 2])
    assert BoxMode.convert([8, 9, 12, 11], BoxMode.XYXY_ABS, BoxMode.XYWHA_ABS) == pytest.approx(
        [10, 10, 4, 2, 0]
    )
    assert BoxMode.convert([8, 9, 4, 2], BoxMode.XYWH_ABS, BoxMode.XYWHA_ABS) == pytest.approx(
        [10, 10, 4, 2, 0]
    )


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (BoxMode.XYXY_REL, BoxMode.XYXY_ABS),
        (BoxMode.XYXY_ABS, BoxMode.XYWH_REL),
        (BoxMode.XYWH_REL, BoxMode.XYWHA_ABS),
    ],
)
def test_relative_modes_need_image_size(src, dst):
    with pytest.raises(ValueError, match="image size"):
        BoxMode.convert([0.1, 0.1, 0.5, 0.5], src, dst)


@pytest.mark.parametrize(
    ("box", "src"),
    [
        ([1, 2, 3], BoxMode.XYXY_ABS),
        ([1, 2, 3, 4], BoxMode.XYWHA_ABS),
        (np.zeros((2, 5)), BoxMode.XYWH_ABS),
    ],
)
def test_wrong_shape_is_value_error(box, src):
    dst = BoxMode.XYXY_ABS if src != BoxMode.XYXY_ABS else BoxMode.XYWH_ABS
    with pytest.raises(ValueError, match="numbers"):
        BoxMode.convert(box, src, dst)


def test_unknown_mode_value():
    with pytest.raises(ValueError):
        BoxMode.convert([1, 2, 3, 4], 7, BoxMode.XYXY_ABS)
