"""Keypoints (heatmap targets) and ImageList (padding), from detectron2's documented behaviour."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mappers.structures import Boxes, ImageList, Keypoints
from mappers.structures import StructureIndexError, StructureShapeError


def test_keypoints_basics():
    kps = Keypoints([[[1, 2, 2], [3, 4, 1]], [[5, 6, 0], [7, 8, 2]]])
    assert kps.tensor.dtype == torch.float32 and kps.tensor.shape == (2, 2, 3) and len(kps) == 2
    assert kps[1].tensor.shape == (1, 2, 3) and kps[1].tensor[0, 0, 0] == 5
    assert len(kps[torch.tensor([True, False])]) == 1 and len(kps[:0]) == 0
    assert len(Keypoints.cat([kps, kps[:1]])) == 3
    assert kps.to("cpu").device.type == "cpu"
    assert repr(kps) == "Keypoints(num_instances=2)"
    with pytest.raises(StructureShapeError):
        Keypoints(torch.zeros(2, 3))
    with pytest.raises(StructureShapeError):
        Keypoints.cat([kps, Keypoints(torch.zeros(1, 3, 3))])
    with pytest.raises(StructureIndexError):
        kps[2]


def test_to_heatmap_hand_examples():
    kps = Keypoints(
        [
            [[1.5, 2.5, 2], [4.0, 0.0, 2], [-0.1, 1.0, 2], [2.0, 2.0, 0]],
            [[13.0, 22.5, 1], [18.0, 24.0, 2], [17.9, 19.9, 2], [10.0, 20.0, 2]],
        ]
    )
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [10.0, 20.0, 18.0, 24.0]])
    heatmaps, valid = kps.to_heatmap(boxes, 4)
    # box 0 (scale 1): (1.5, 2.5) -> cell (1, 2) -> 2*4+1 = 9; x == x1 -> last column 3;
    #   x < x0 -> invalid; v == 0 -> invalid
    # box 1 (scale x 0.5, y 1): (13, 22.5) -> (1, 2) -> 9; the bottom-right corner -> 15;
    #   y 19.9 < y0 -> invalid; the top-left corner -> 0 (valid)
    assert heatmaps.tolist() == [[9, 3, 0, 0], [9, 15, 0, 0]]
    assert valid.tolist() == [[1, 1, 0, 0], [1, 1, 0, 1]]
    same = kps.to_heatmap(Boxes(boxes), 4)
    assert torch.equal(same[0], heatmaps) and torch.equal(same[1], valid)
    with pytest.raises(StructureShapeError):
        kps.to_heatmap(boxes[:1], 4)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 0.999), st.floats(0, 0.999)), min_size=1, max_size=5),
    st.integers(1, 64),
)
def test_to_heatmap_cells_contain_their_points(points, size):
    box = torch.tensor([[10.0, 20.0, 42.0, 36.0]])  # 32 x 16
    xy = torch.tensor(points, dtype=torch.float64)
    kps = torch.zeros(1, len(points), 3)
    kps[0, :, 0] = (10 + xy[:, 0] * 32).float()
    kps[0, :, 1] = (20 + xy[:, 1] * 16).float()
    kps[0, :, 2] = 2
    heatmaps, valid = Keypoints(kps).to_heatmap(box, size)
    assert valid.all()
    cx, cy = heatmaps[0] % size, heatmaps[0] // size
    # each cell [c, c + 1) * (box side / size) holds its keypoint
    rel_x = (kps[0, :, 0] - 10) / 32 * size
    rel_y = (kps[0, :, 1] - 20) / 16 * size
    assert bool(((cx <= rel_x) & (rel_x < cx + 1)).all())
    assert bool(((cy <= rel_y) & (rel_y < cy + 1)).all())


def test_image_list_padding_and_sizes():
    a = torch.full((3, 5, 7), 1.0)
    b = torch.full((3, 6, 4), 2.0)
    images = ImageList.from_tensors([a, b], size_divisibility=4, pad_value=-1.0)
    assert images.tensor.shape == (2, 3, 8, 8) and images.image_sizes == [(5, 7), (6, 4)]
    assert len(images) == 2
    assert torch.equal(images[0], a) and torch.equal(images[1], b)
    assert (images.tensor[0, :, 5:, :] == -1).all() and (images.tensor[0, :, :, 7:] == -1).all()
    assert (images.tensor[1, :, :, 4:] == -1).all()
    assert images.to("cpu").tensor.shape == (2, 3, 8, 8)
    with pytest.raises(StructureIndexError):
        images[2]
    with pytest.raises(StructureIndexError):
        images[0:1]


def test_image_list_single_no_divisibility_and_constraints():
    one = ImageList.from_tensors([torch.ones(1, 3, 5, dtype=torch.uint8)], pad_value=9)
    assert one.tensor.shape == (1, 1, 3, 5) and one.tensor.dtype == torch.uint8
    two = ImageList.from_tensors([torch.ones(2, 3), torch.ones(3, 2)])  # 2-D images
    assert two.tensor.shape == (2, 3, 3) and two.tensor[0, 2, 0] == 0
    square = ImageList.from_tensors(
        [torch.ones(3, 5, 7)], size_divisibility=3, padding_constraints={"square_size": 10}
    )
    assert square.tensor.shape == (1, 3, 12, 12)  # square 10, then rounded up to 12 (by 3)
    overridden = ImageList.from_tensors(
        [torch.ones(3, 5, 7)], size_divisibility=3, padding_constraints={"size_divisibility": 8}
    )
    assert overridden.tensor.shape == (1, 3, 8, 8)
    with pytest.raises(StructureShapeError):
        ImageList.from_tensors([])
    with pytest.raises(StructureShapeError):
        ImageList.from_tensors([torch.ones(3, 4, 4), torch.ones(1, 4, 4)])
    with pytest.raises(StructureShapeError):
        ImageList.from_tensors([torch.ones(3, 5, 7)], padding_constraints={"square_size": 6})


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=4),
    st.integers(0, 9),
    st.floats(-5, 5, allow_nan=False),
)
def test_image_list_divisibility_property(sizes, divisibility, pad):
    tensors = [torch.rand(2, h, w) for h, w in sizes]
    images = ImageList.from_tensors(tensors, size_divisibility=divisibility, pad_value=pad)
    height, width = images.tensor.shape[-2:]
    max_h, max_w = max(h for h, _ in sizes), max(w for _, w in sizes)
    if divisibility > 1:
        assert height % divisibility == 0 and width % divisibility == 0
        assert max_h <= height < max_h + divisibility and max_w <= width < max_w + divisibility
    else:
        assert (height, width) == (max_h, max_w)
    for i, t in enumerate(tensors):
        assert torch.equal(images[i], t)
        padded = images.tensor[i].clone()
        padded[:, : t.shape[1], : t.shape[2]] = pad
        assert bool((padded == torch.tensor(pad, dtype=padded.dtype)).all())
