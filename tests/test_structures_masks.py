"""BitMasks, PolygonMasks and ROIMasks, from detectron2's documented behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mappers.structures import BitMasks, Boxes, PolygonMasks, ROIMasks
from mappers.structures import StructureIndexError, StructureShapeError

pytest.importorskip("pycocotools.mask")


def _square(x0: float, y0: float, x1: float, y1: float) -> list[float]:
    return [x0, y0, x1, y0, x1, y1, x0, y1]


# ------------------------------------------------------------------------------ BitMasks
def test_bitmasks_basics():
    data = torch.zeros(3, 5, 6, dtype=torch.uint8)
    data[0, 1:3, 2:5] = 7
    data[2, 4, 0] = 1
    masks = BitMasks(data)
    assert masks.tensor.dtype == torch.bool and masks.image_size == (5, 6) and len(masks) == 3
    assert masks.nonempty().tolist() == [True, False, True]
    assert masks.get_bounding_boxes().tensor.tolist() == [
        [2, 1, 5, 3],
        [0, 0, 0, 0],
        [0, 4, 1, 5],
    ]
    assert masks[0].tensor.shape == (1, 5, 6)
    assert masks[torch.tensor([True, False, True])].tensor.shape == (2, 5, 6)
    assert len(masks[1:]) == 2 and len(list(masks)) == 3
    assert repr(masks) == "BitMasks(num_instances=3)"
    assert len(BitMasks.cat([masks, masks[:1]])) == 4
    assert masks.to("cpu").device.type == "cpu"
    with pytest.raises(StructureShapeError):
        BitMasks(torch.zeros(5, 6))
    with pytest.raises(StructureShapeError):
        BitMasks.cat([masks, BitMasks(torch.zeros(1, 2, 2))])
    with pytest.raises(StructureIndexError):
        masks[3]


def test_bitmasks_from_polygons_matches_pycocotools():
    polys = PolygonMasks([[_square(1, 1, 4, 3)], [], [[0, 0, 6, 0, 0, 6]]])
    masks = BitMasks.from_polygon_masks(polys, 6, 7)
    assert masks.tensor.shape == (3, 6, 7)
    assert masks.tensor[0].nonzero().tolist() == [[r, c] for r in (1, 2) for c in (1, 2, 3)]
    assert not masks.tensor[1].any()
    from pycocotools import mask as mask_utils

    rle = mask_utils.frPyObjects([[0, 0, 6, 0, 0, 6]], 6, 7)
    expected = mask_utils.decode(mask_utils.merge(rle)).astype(bool)
    assert torch.equal(masks.tensor[2], torch.from_numpy(expected))
    # a list of lists of polygons works too, and far-away coordinates are clipped first
    far = BitMasks.from_polygon_masks([[_square(-1e5, -1e5, 2, 2)]], 4, 4)
    assert far.tensor[0].sum() == 4


def test_crop_and_resize_hand_example():
    data = torch.zeros(1, 4, 4, dtype=torch.bool)
    data[0, :, :2] = True  # left half
    masks = BitMasks(data)
    # a 2x2 box at the top-left: one sample per bin at pixel centres 0 and 1
    out = masks.crop_and_resize(torch.tensor([[0.0, 0.0, 2.0, 2.0]]), 2)
    assert out.tolist() == [[[True, True], [True, True]]]
    # the right half of the box (x 1..3): bins centred at x 1.5 (pixel 1) and 2.5 (pixel 2)
    out = masks.crop_and_resize(Boxes([[1.0, 0.0, 3.0, 4.0]]), 2)
    assert out.tolist() == [[[True, False], [True, False]]]
    assert BitMasks(torch.zeros(0, 4, 4)).crop_and_resize(torch.zeros(0, 4), 3).shape == (0, 3, 3)
    with pytest.raises(StructureShapeError):
        masks.crop_and_resize(torch.zeros(2, 4), 3)
    with pytest.raises(StructureShapeError):
        masks.crop_and_resize(torch.tensor([[0.0, 0.0, float("nan"), 1.0]]), 3)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_crop_and_resize_of_the_full_box_is_an_average_resize(size, fy, fx, seed):
    g = torch.Generator().manual_seed(seed)
    height, width = size * fy, size * fx
    data = torch.rand((2, height, width), generator=g) > 0.5
    out = BitMasks(data).crop_and_resize(torch.tensor([[0.0, 0.0, width, height]] * 2), size)
    pooled = F.avg_pool2d(data.float()[:, None], (fy, fx))[:, 0]
    assert torch.equal(out, pooled >= 0.5)


# -------------------------------------------------------------------------- PolygonMasks
def test_polygon_masks_basics():
    masks = PolygonMasks(
        [
            [_square(0, 0, 4, 2)],
            [[1, 1, 3, 1, 2, 3], np.array(_square(5, 5, 6, 6))],
            [],
        ]
    )
    assert all(p.dtype == np.float64 for inst in masks.polygons for p in inst)
    assert masks.area().tolist() == [8.0, 3.0, 0.0]  # 4*2; triangle 2*2/2 + 1
    assert masks.nonempty().tolist() == [True, True, False]
    assert masks.get_bounding_boxes().tensor.tolist() == [
        [0, 0, 4, 2],
        [1, 1, 6, 6],
        [0, 0, 0, 0],
    ]
    assert len(masks[0]) == 1 and isinstance(masks[0], PolygonMasks)
    assert len(masks[1:]) == 2
    assert len(masks[[2, 0]]) == 2 and masks[[2, 0]].polygons[0] == []
    assert len(masks[torch.tensor([True, False, True])]) == 2
    assert len(masks[np.array([1])]) == 1
    assert [len(p) for p in masks] == [1, 2, 0]
    assert len(PolygonMasks.cat([masks, masks[:1]])) == 4
    assert masks.to("cpu") is masks and masks.device.type == "cpu"
    assert repr(masks) == "PolygonMasks(num_instances=3)"
    for bad in ([[[0, 0, 1, 1]]], [[[0, 0, 1, 1, 2]]], [[0, 0, 1, 0, 1, 1]], "x"):
        with pytest.raises(StructureShapeError):
            PolygonMasks(bad)
    with pytest.raises(StructureShapeError, match="non-finite"):
        PolygonMasks([[[0, 0, float("nan"), 0, 1, 1]]])
    with pytest.raises(StructureShapeError, match="non-finite"):
        PolygonMasks([[np.array([0, 0, np.inf, 0, 1, 1], dtype=np.float64)]])


def test_polygon_crop_and_resize():
    masks = PolygonMasks([[_square(2, 2, 6, 6)], [_square(2, 2, 4, 6)]])
    boxes = torch.tensor([[2.0, 2.0, 6.0, 6.0], [2.0, 2.0, 6.0, 6.0]])
    out = masks.crop_and_resize(boxes, 4)
    assert out.dtype == torch.bool and out.shape == (2, 4, 4)
    assert out[0].all()
    assert out[1][:, :2].all() and not out[1][:, 2:].any()  # the left half of the box
    # a box much smaller than the polygon: everything is inside
    tiny = PolygonMasks([[_square(-1000, -1000, 1000, 1000)]])
    assert tiny.crop_and_resize(torch.tensor([[0.0, 0.0, 0.01, 0.01]]), 7).all()
    with pytest.raises(StructureShapeError):
        masks.crop_and_resize(boxes[:1], 4)


def test_polygon_and_bitmask_crops_agree_on_a_rectangle():
    poly = PolygonMasks([[_square(3, 2, 11, 10)]])
    bits = BitMasks.from_polygon_masks(poly, 16, 16)
    box = torch.tensor([[3.0, 2.0, 11.0, 10.0]])
    assert torch.equal(poly.crop_and_resize(box, 4), bits.crop_and_resize(box, 4))


# ------------------------------------------------------------------------------ ROIMasks
def test_roi_masks_paste_hand_example():
    roi = ROIMasks(torch.tensor([[[1.0, 0.0], [1.0, 0.0]]]))
    bit = roi.to_bitmasks(torch.tensor([[0.0, 0.0, 4.0, 4.0]]), 4, 5)
    assert isinstance(bit, BitMasks) and bit.image_size == (4, 5)
    # pixel centres 0.5 and 1.5 sample 0.75 of the set column, 2.5 samples 0.25
    assert bit.tensor[0].int().tolist() == [[1, 1, 0, 0, 0]] * 4
    soft = roi.to_bitmasks(Boxes([[0.0, 0.0, 4.0, 4.0]]), 4, 5, threshold=0.8)
    assert not soft.tensor.any()  # no pixel reaches 0.8


def test_roi_masks_basics_and_round_trip():
    square = torch.zeros(1, 8, 8, dtype=torch.bool)
    square[0, 2:6, 3:7] = True
    box = torch.tensor([[3.0, 2.0, 7.0, 6.0]])
    small = BitMasks(square).crop_and_resize(box, 4).float()
    pasted = ROIMasks(small).to_bitmasks(box, 8, 8)
    assert torch.equal(pasted.tensor, square)
    roi = ROIMasks(torch.zeros(3, 5, 5))
    assert len(roi) == 3 and len(roi[1:]) == 2 and roi[0].tensor.shape == (1, 5, 5)
    assert roi.to("cpu").device.type == "cpu"
    with pytest.raises(StructureShapeError):
        ROIMasks(torch.zeros(5, 5))
    with pytest.raises(StructureShapeError):
        roi.to_bitmasks(torch.zeros(2, 4), 5, 5)
