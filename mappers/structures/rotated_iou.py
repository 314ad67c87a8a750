"""Exact IoU of rotated boxes by convex polygon intersection, vectorized in torch.

The intersection of two rectangles is a convex polygon whose vertices are among: the
corners of each box that lie inside the other, and the crossing points of their edges
(4 + 4 + 16 candidates). The polygon is rebuilt by sorting the valid candidates by angle
around their mean (which lies inside the convex polygon) and its area is the shoelace sum;
invalid candidates are replaced by the first sorted vertex, adding zero-length edges only.
This is the same construction as detectron2's C++ kernel, done for all pairs at once in
float64.

Complexity: O(N * M) for a cheap test of every pair (do the circumscribed circles meet?),
then, for the pairs that pass, 24 candidate points and a sort of 24 values each. Pairs are
processed in chunks of at most ``_PAIRS_PER_CHUNK`` so memory stays bounded (~40 MB per
chunk) whatever N and M are.

Example:
    >>> a = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0]])
    >>> b = torch.tensor([[1.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, 45.0]])
    >>> [round(v, 4) for v in pairwise_iou_rotated_tensors(a, b)[0].tolist()]
    [0.3333, 0.7071]
"""

from __future__ import annotations

import torch

from .rotated_boxes import rotated_corners

__all__ = ["pairwise_iou_rotated_tensors"]

#: Box pairs handled per vectorized step (bounds the temporary memory).
_PAIRS_PER_CHUNK = 32768
#: Relative tolerance for "corner inside box" and "edges cross" tests.
_EPS = 1e-9


def _inside(points: torch.Tensor, boxes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Whether each of ``points`` (P x K x 2) is inside the box of its pair (P x 5)."""
    rel = points - boxes[:, None, :2]
    theta = torch.deg2rad(boxes[:, 4])
    cos, sin = torch.cos(theta)[:, None], torch.sin(theta)[:, None]
    along_w = rel[..., 0] * cos - rel[..., 1] * sin
    along_h = rel[..., 0] * sin + rel[..., 1] * cos
    tol = _EPS * scale[:, None]
    return (along_w.abs() <= boxes[:, None, 2] / 2 + tol) & (
        along_h.abs() <= boxes[:, None, 3] / 2 + tol
    )


def _edge_crossings(
    corners_a: torch.Tensor, corners_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crossing points of every edge of A with every edge of B: (P x 16 x 2, P x 16 valid)."""
    a0 = corners_a[:, :, None, :]
    a1 = torch.roll(corners_a, -1, dims=1)[:, :, None, :]
    b0 = corners_b[:, None, :, :]
    b1 = torch.roll(corners_b, -1, dims=1)[:, None, :, :]
    da, db = a1 - a0, b1 - b0
    denom = da[..., 0] * db[..., 1] - da[..., 1] * db[..., 0]
    diff = b0 - a0
    t_num = diff[..., 0] * db[..., 1] - diff[..., 1] * db[..., 0]
    s_num = diff[..., 0] * da[..., 1] - diff[..., 1] * da[..., 0]
    parallel = denom.abs() <= 1e-14 * (da.norm(dim=-1) * db.norm(dim=-1) + 1e-300)
    safe = torch.where(parallel, torch.ones_like(denom), denom)
    t, s = t_num / safe, s_num / safe
    valid = (~parallel) & (t >= -_EPS) & (t <= 1 + _EPS) & (s >= -_EPS) & (s <= 1 + _EPS)
    points = a0 + t[..., None] * da
    p = points.shape[0]
    return points.reshape(p, 16, 2), valid.reshape(p, 16)


def _intersection_areas(boxes_a: torch.Tensor, boxes_b: torch.Tensor) -> torch.Tensor:
    """Intersection area of each pair (boxes_a[i], boxes_b[i]), float64 P-vector."""
    corners_a = rotated_corners(boxes_a)
    corners_b = rotated_corners(boxes_b)
    scale = torch.maximum(boxes_a[:, 2:4].abs().amax(1), boxes_b[:, 2:4].abs().amax(1)) + 1.0
    crossing, crossing_ok = _edge_crossings(corners_a, corners_b)
    points = torch.cat((corners_a, corners_b, crossing), dim=1)
    valid = torch.cat(
        (_inside(corners_a, boxes_b, scale), _inside(corners_b, boxes_a, scale), crossing_ok),
        dim=1,
    )
    count = valid.sum(dim=1)
    weights = valid.to(points.dtype)
    centre = (points * weights[..., None]).sum(1) / count.clamp(min=1)[:, None].to(points.dtype)
    rel = points - centre[:, None, :]
    angle = torch.atan2(rel[..., 1], rel[..., 0])
    angle = torch.where(valid, angle, torch.full_like(angle, float("inf")))
    order = torch.argsort(angle, dim=1)
    rel = torch.gather(rel, 1, order[..., None].expand(-1, -1, 2))
    sorted_valid = torch.gather(valid, 1, order)
    rel = torch.where(sorted_valid[..., None], rel, rel[:, :1, :])
    nxt = torch.roll(rel, -1, dims=1)
    cross = rel[..., 0] * nxt[..., 1] - rel[..., 1] * nxt[..., 0]
    area = cross.sum(dim=1).abs() / 2
    return torch.where(count >= 3, area, torch.zeros_like(area))


def pairwise_iou_rotated_tensors(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """IoU of every pair of rotated boxes given as Nx5 and Mx5 tensors; an NxM float32 tensor.

    Boxes with no area give IoU 0 with everything. Computed in float64 on the inputs'
    device, returned as float32.
    """
    n, m = boxes1.shape[0], boxes2.shape[0]
    out = torch.zeros((n, m), dtype=torch.float32, device=boxes1.device)
    if n == 0 or m == 0:
        return out
    a = boxes1.to(torch.float64)
    b = boxes2.to(boxes1.device, torch.float64)
    area_a = a[:, 2] * a[:, 3]
    area_b = b[:, 2] * b[:, 3]
    # Only pairs whose circumscribed circles meet can intersect; the others keep IoU 0.
    radius_a = torch.hypot(a[:, 2], a[:, 3]) / 2
    radius_b = torch.hypot(b[:, 2], b[:, 3]) / 2
    rows_per_chunk = max(1, _PAIRS_PER_CHUNK // m)
    for start in range(0, n, rows_per_chunk):
        stop = min(n, start + rows_per_chunk)
        distance = torch.cdist(a[start:stop, :2], b[:, :2])
        near = (distance <= radius_a[start:stop, None] + radius_b[None, :] + 1e-9) & (
            (area_a[start:stop, None] > 0) & (area_b[None, :] > 0)
        )
        ia, ib = torch.nonzero(near, as_tuple=True)
        for first in range(0, ia.numel(), _PAIRS_PER_CHUNK):
            pa = ia[first : first + _PAIRS_PER_CHUNK] + start
            pb = ib[first : first + _PAIRS_PER_CHUNK]
            inter = _intersection_areas(a[pa], b[pb])
            union = area_a[pa] + area_b[pb] - inter
            positive = (inter > 0) & (union > 0)
            iou = torch.where(positive, inter / torch.where(positive, union, 1.0), 0.0)
            out[pa, pb] = iou.clamp(max=1.0).to(torch.float32)
    return out
