"""RotatedBoxes and the exact rotated IoU, against hand values and an independent clipper."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mappers.structures import Boxes, RotatedBoxes, pairwise_iou
from mappers.structures import StructureShapeError, pairwise_iou_rotated
from mappers.structures.boxes import rotated_corners


def test_constructor_and_basic_methods():
    r = RotatedBoxes([[5, 5, 4, 2, 30], [1, 1, 0, 3, 0]])
    assert r.tensor.dtype == torch.float32 and r.tensor.shape == (2, 5)
    assert RotatedBoxes([]).tensor.shape == (0, 5)
    with pytest.raises(StructureShapeError):
        RotatedBoxes([[1, 2, 3, 4]])
    assert isinstance(r, Boxes)  # as in detectron2
    assert r.area().tolist() == [8.0, 0.0]
    assert r.nonempty().tolist() == [True, False]
    assert r.get_centers().tolist() == [[5.0, 5.0], [1.0, 1.0]]
    assert isinstance(r[0], RotatedBoxes) and r[0].tensor.shape == (1, 5)
    assert r[torch.tensor([False, True])].tensor[:, 2].tolist() == [0.0]
    assert len(RotatedBoxes.cat([r, r[:1]])) == 3
    assert isinstance(r.clone(), RotatedBoxes) and isinstance(r.to("cpu"), RotatedBoxes)


def test_normalize_angles_range():
    r = RotatedBoxes([[0, 0, 1, 1, a] for a in (180, -180, 540, 359, -181, 0)])
    r.normalize_angles()
    assert r.tensor[:, 4].tolist() == [-180.0, -180.0, -180.0, -1.0, 179.0, 0.0]


def test_clip_only_nearly_horizontal_boxes():
    # box 0: angle 0.5 (clipped), box 1: 30 (kept), box 2: 360 -> 0 (clipped)
    r = RotatedBoxes([[2, 5, 10, 4, 0.5], [2, 5, 10, 4, 30], [8, 8, 6, 6, 360]])
    r.clip((10, 9))  # height 10, width 9
    # box 0: x from -3..7 -> 0..7 => cx 3.5, w 7; y 3..7 inside
    assert r.tensor[0].tolist() == pytest.approx([3.5, 5, 7, 4, 0.5])
    assert r.tensor[1].tolist() == pytest.approx([2, 5, 10, 4, 30])
    # box 2: x 5..11 -> 5..9 => cx 7, w 4; y 5..11 -> 5..10 => cy 7.5, h 5; angle 0
    assert r.tensor[2].tolist() == pytest.approx([7, 7.5, 4, 5, 0])


def test_inside_box_uses_the_enclosing_box():
    # 8x2 at angle 0: x 1..9, y 4..6; at 90: x 4..6, y 1..9 (height 8 -> 9 is not < 8)
    r = RotatedBoxes([[5, 5, 8, 2, 0], [5, 5, 8, 2, 90]])
    assert r.inside_box((8, 10)).tolist() == [True, False]
    assert r.inside_box((8, 10), boundary_threshold=2).tolist() == [True, True]


def test_scale_even_and_uneven():
    r = RotatedBoxes([[1, 2, 4, 2, 30]])
    r.scale(2.0, 2.0)  # even scaling: centre and sides double, angle kept
    assert r.tensor[0].tolist() == pytest.approx([2, 4, 8, 4, 30], abs=1e-5)
    r = RotatedBoxes([[1, 1, 2, 4, 0]])
    r.scale(3.0, 0.5)  # angle 0: w scales by sx, h by sy
    assert r.tensor[0].tolist() == pytest.approx([3, 0.5, 6, 2, 0], abs=1e-5)


def test_corners_follow_the_documented_convention():
    # angle 90: the width direction (cos a, -sin a) points up (-y) in image coordinates
    corners = rotated_corners(torch.tensor([[0.0, 0.0, 4.0, 2.0, 90.0]], dtype=torch.float64))
    np.testing.assert_allclose(corners[0].numpy(), [[-1, 2], [-1, -2], [1, -2], [1, 2]], atol=1e-12)


def test_rotated_iou_hand_values():
    a = RotatedBoxes([[0, 0, 2, 2, 0]])
    b = RotatedBoxes([[1, 0, 2, 2, 0], [0, 0, 2, 2, 45], [0, 0, 2, 2, 90], [5, 5, 1, 1, 10]])
    iou = pairwise_iou(a, b)[0].tolist()
    # shift by half: 2 / 6; 45°: a regular octagon of inradius 1, area 8 tan(22.5°)
    octagon = 8 * math.tan(math.pi / 8)
    assert iou == pytest.approx([1 / 3, octagon / (8 - octagon), 1.0, 0.0], abs=1e-6)
    assert pairwise_iou_rotated(a, RotatedBoxes([])).shape == (1, 0)
    with pytest.raises(StructureShapeError):
        pairwise_iou_rotated(a, Boxes([[0, 0, 1, 1]]))


def _reference_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Sutherland-Hodgman clipping of box a's corners by box b's edges (independent path)."""

    def corners(box):
        cx, cy, w, h, angle = box
        t = math.radians(angle)
        c, s = math.cos(t), math.sin(t)
        return [
            (cx + dx * c + dy * s, cy - dx * s + dy * c)
            for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
        ]

    def signed_area(poly):
        return (
            sum(
                poly[i][0] * poly[(i + 1) % len(poly)][1]
                - poly[(i + 1) % len(poly)][0] * poly[i][1]
                for i in range(len(poly))
            )
            / 2
        )

    clipper = corners(b)
    if signed_area(clipper) < 0:
        clipper = clipper[::-1]
    out = corners(a)
    for i in range(4):
        (ax, ay), (bx, by) = clipper[i], clipper[(i + 1) % 4]
        side = [(bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax) for p in out]
        new = []
        for j in range(len(out)):
            p, q, sp, sq = out[j], out[(j + 1) % len(out)], side[j], side[(j + 1) % len(out)]
            if sp >= 0:
                new.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                new.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
        out = new
        if not out:
            return 0.0
    inter = abs(signed_area(out))
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def test_rotated_iou_matches_an_independent_clipper():
    rng = np.random.default_rng(1234)
    a = np.c_[rng.uniform(0, 10, (40, 2)), rng.uniform(0.5, 6, (40, 2)), rng.uniform(-180, 180, 40)]
    b = np.c_[rng.uniform(0, 10, (30, 2)), rng.uniform(0.5, 6, (30, 2)), rng.uniform(-180, 180, 30)]
    b[:5] = a[:5]  # identical boxes
    a, b = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    iou = pairwise_iou(RotatedBoxes(a), RotatedBoxes(b)).numpy()
    ref = np.array([[_reference_iou(x, y) for y in b] for x in a])
    np.testing.assert_allclose(iou, ref, atol=2e-6)
    assert (iou > 0).sum() > 100  # the sample has many overlapping pairs


def test_rotated_iou_works_in_chunks(monkeypatch):
    import mappers.structures.boxes as boxes_module

    rng = np.random.default_rng(5)
    boxes = RotatedBoxes(
        np.c_[rng.uniform(0, 5, (9, 2)), rng.uniform(1, 3, (9, 2)), rng.uniform(-90, 90, 9)]
    )
    whole = pairwise_iou(boxes, boxes)
    monkeypatch.setattr(boxes_module, "_PAIRS_PER_CHUNK", 7)
    torch.testing.assert_close(pairwise_iou(boxes, boxes), whole)


rotated_strategy = st.lists(
    st.tuples(
        st.floats(0, 20),
        st.floats(0, 20),
        st.floats(0.5, 10),
        st.floats(0.5, 10),
        st.floats(-180, 180),
    ),
    min_size=1,
    max_size=6,
).map(RotatedBoxes)


@settings(max_examples=100, deadline=None)
@given(rotated_strategy, rotated_strategy)
def test_rotated_iou_properties(a, b):
    iou = pairwise_iou(a, b)
    assert bool(((iou >= 0) & (iou <= 1)).all())
    torch.testing.assert_close(iou, pairwise_iou(b, a).T, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.diagonal(pairwise_iou(a, a)), torch.ones(len(a)), atol=1e-5, rtol=1e-5
    )
    # rotating both boxes of every pair by 90° about the origin keeps the IoU
    turned = a.tensor.clone()
    turned[:, 0], turned[:, 1] = a.tensor[:, 1], -a.tensor[:, 0]
    turned[:, 4] += 90
    turned_b = b.tensor.clone()
    turned_b[:, 0], turned_b[:, 1] = b.tensor[:, 1], -b.tensor[:, 0]
    turned_b[:, 4] += 90
    torch.testing.assert_close(
        pairwise_iou(RotatedBoxes(turned), RotatedBoxes(turned_b)), iou, atol=1e-4, rtol=1e-4
    )


def test_rotated_iou_edge_cases():
    a = RotatedBoxes([[0, 0, 4, 4, 30], [0, 0, 2, 2, 0], [1, 2, 3, 4, 10]])
    b = RotatedBoxes([[0, 0, 1, 1, -10], [2, 0, 2, 2, 0], [1, 2, 3, 4, 190], [0, 0, 0, 3, 0]])
    iou = pairwise_iou(a, b)
    assert iou[0, 0].item() == pytest.approx(1 / 16, abs=1e-6)  # contained: area ratio
    assert iou[1, 1].item() == pytest.approx(0.0, abs=1e-6)  # edges touch: no area
    assert iou[2, 2].item() == pytest.approx(1.0, abs=1e-5)  # 180° apart: the same box
    assert iou[:, 3].tolist() == [0.0, 0.0, 0.0]  # a box without area
