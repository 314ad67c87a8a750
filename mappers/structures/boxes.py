"""Boxes (Nx4 XYXY float32), RotatedBoxes (Nx5 cx, cy, w, h, angle in degrees
counter-clockwise) and their pairwise measures, with detectron2's semantics.

Example:
    >>> boxes = Boxes([[0, 0, 10, 20], [5, 5, 5, 9]])
    >>> boxes.area().tolist(), boxes.nonempty().tolist()
    ([200.0, 0.0], [True, False])
    >>> pairwise_iou(Boxes([[0, 0, 2, 2]]), Boxes([[1, 0, 3, 2]])).tolist()
    [[0.3333333432674408]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Self

import torch

from ..errors import StructureShapeError
from ..structure_common import TensorRows, as_tensor_of, check_cat_parts


def _as_float_boxes(tensor: Any, columns: int, owner: str) -> torch.Tensor:
    """Convert ``tensor`` to a float32 (N, columns) tensor (empty → (0, columns))."""
    if type(tensor) is torch.Tensor and tensor.dtype == torch.float32 and tensor.dim() == 2 \
            and tensor.size(1) == columns:  # already one (a mapper's boxes): no conversion
        return tensor
    data = as_tensor_of(tensor, torch.float32, owner, f"an (N, {columns}) array of numbers")
    if data.numel() == 0:
        data = data.reshape((-1, columns)).to(dtype=torch.float32)
    if data.dim() != 2 or data.size(-1) != columns:
        raise StructureShapeError(
            f"{owner} needs an (N, {columns}) tensor, got shape {tuple(data.shape)}"
        )
    return data


class Boxes(TensorRows):
    """N boxes stored in ``tensor``, an Nx4 float32 tensor of (x0, y0, x1, y1)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor: torch.Tensor = _as_float_boxes(tensor, 4, "Boxes")

    def clone(self) -> Self:
        """Return a copy that shares no memory with these boxes."""
        return type(self)(self.tensor.clone())

    def area(self) -> torch.Tensor:
        """Area of every box, (x1 - x0) * (y1 - y0), as an N tensor (negative if inverted)."""
        box = self.tensor
        return (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])

    def clip(self, box_size: tuple[int, int]) -> None:
        """Clip the boxes, in place, to an image of ``box_size`` = (height, width).

        x coordinates are clamped to [0, width], y coordinates to [0, height]."""
        if not bool(torch.isfinite(self.tensor).all()):
            raise StructureShapeError("Boxes.clip: the box tensor contains infinite or NaN values")
        h, w = box_size
        x0 = self.tensor[:, 0].clamp(min=0, max=w)
        y0 = self.tensor[:, 1].clamp(min=0, max=h)
        x1 = self.tensor[:, 2].clamp(min=0, max=w)
        y1 = self.tensor[:, 3].clamp(min=0, max=h)
        self.tensor = torch.stack((x0, y0, x1, y1), dim=-1)

    def nonempty(self, threshold: float = 0.0) -> torch.Tensor:
        """Bool mask of the boxes whose width and height are both greater than ``threshold``."""
        box = self.tensor
        widths = box[:, 2] - box[:, 0]
        heights = box[:, 3] - box[:, 1]
        return (widths > threshold) & (heights > threshold)

    def inside_box(self, box_size: tuple[int, int], boundary_threshold: int = 0) -> torch.Tensor:
        """Bool mask: x0, y0 >= -t, x1 < width + t and y1 < height + t."""
        height, width = box_size
        t = boundary_threshold
        return (
            (self.tensor[..., 0] >= -t)
            & (self.tensor[..., 1] >= -t)
            & (self.tensor[..., 2] < width + t)
            & (self.tensor[..., 3] < height + t)
        )

    def get_centers(self) -> torch.Tensor:
        """Centres of the boxes as an Nx2 tensor of (x, y)."""
        return (self.tensor[:, :2] + self.tensor[:, 2:]) / 2

    def scale(self, scale_x: float, scale_y: float) -> None:
        """Multiply x coordinates by ``scale_x`` and y coordinates by ``scale_y``, in place."""
        self.tensor[:, 0::2] *= scale_x
        self.tensor[:, 1::2] *= scale_y

    @classmethod
    def cat(cls, boxes_list: Sequence[Boxes]) -> Boxes:
        """Concatenate a list of Boxes into one (an empty list gives empty Boxes)."""
        if len(check_cat_parts(boxes_list, cls)) == 0:
            return cls(torch.empty(0))
        return cls(torch.cat([b.tensor for b in boxes_list], dim=0))

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Yield each box as a tensor of 4 numbers."""
        yield from self.tensor

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tensor})"


def rotated_corners(tensor: torch.Tensor) -> torch.Tensor:
    """The 4 corners of each rotated box (Nx4x2, input dtype), in the order of
    (-w/2, -h/2), (w/2, -h/2), (w/2, h/2), (-w/2, h/2) before the rotation.
    """
    cx, cy, w, h, angle = tensor.unbind(-1)
    theta = angle * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    signs = torch.tensor(
        [[-0.5, -0.5], [0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]],
        dtype=tensor.dtype,
        device=tensor.device,
    )
    dx = signs[:, 0] * w[:, None]
    dy = signs[:, 1] * h[:, None]
    x = cx[:, None] + dx * cos[:, None] + dy * sin[:, None]
    y = cy[:, None] - dx * sin[:, None] + dy * cos[:, None]
    return torch.stack((x, y), dim=-1)


class RotatedBoxes(Boxes):
    """N rotated boxes stored in ``tensor``, an Nx5 float32 tensor of (cx, cy, w, h, angle)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = _as_float_boxes(tensor, 5, "RotatedBoxes")

    def area(self) -> torch.Tensor:
        """Area of every box, w * h."""
        return self.tensor[:, 2] * self.tensor[:, 3]

    def normalize_angles(self) -> None:
        """Bring every angle into [-180, 180), in place."""
        self.tensor[:, 4] = (self.tensor[:, 4] + 180.0) % 360.0 - 180.0

    def clip(self, box_size: tuple[int, int], clip_angle_threshold: float = 1.0) -> None:
        """Clip, in place, the boxes within ``clip_angle_threshold`` degrees of horizontal (after
        normalizing angles) as axis-aligned boxes, never enlarged; the others are left as is."""
        if not bool(torch.isfinite(self.tensor).all()):
            raise StructureShapeError(
                "RotatedBoxes.clip: the box tensor contains infinite or NaN values"
            )
        h, w = box_size
        self.normalize_angles()
        idx = torch.where(self.tensor[:, 4].abs() <= clip_angle_threshold)[0]
        if idx.numel() == 0:
            return
        rows = self.tensor[idx]
        x0 = (rows[:, 0] - rows[:, 2] / 2.0).clamp(min=0, max=w)
        y0 = (rows[:, 1] - rows[:, 3] / 2.0).clamp(min=0, max=h)
        x1 = (rows[:, 0] + rows[:, 2] / 2.0).clamp(min=0, max=w)
        y1 = (rows[:, 1] + rows[:, 3] / 2.0).clamp(min=0, max=h)
        rows[:, 0] = (x0 + x1) / 2.0
        rows[:, 1] = (y0 + y1) / 2.0
        # never wider or taller than before (rounding in cx +- w/2 could add an ulp)
        rows[:, 2] = torch.minimum(rows[:, 2], x1 - x0)
        rows[:, 3] = torch.minimum(rows[:, 3], y1 - y0)
        self.tensor[idx] = rows

    def nonempty(self, threshold: float = 0.0) -> torch.Tensor:
        """Bool mask of the boxes whose w and h are both greater than ``threshold``."""
        return (self.tensor[:, 2] > threshold) & (self.tensor[:, 3] > threshold)

    def inside_box(self, box_size: tuple[int, int], boundary_threshold: int = 0) -> torch.Tensor:
        """Bool mask of the boxes whose axis-aligned enclosing box lies inside the image."""
        height, width = box_size
        t = boundary_threshold
        cx, cy = self.tensor[..., 0], self.tensor[..., 1]
        half_w, half_h = self.tensor[..., 2] / 2.0, self.tensor[..., 3] / 2.0
        theta = self.tensor[..., 4] * (math.pi / 180.0)
        c, s = torch.abs(torch.cos(theta)), torch.abs(torch.sin(theta))
        dx = c * half_w + s * half_h
        dy = c * half_h + s * half_w
        return (cx - dx >= -t) & (cy - dy >= -t) & (cx + dx < width + t) & (cy + dy < height + t)

    def get_centers(self) -> torch.Tensor:
        """Centres of the boxes as an Nx2 tensor of (cx, cy)."""
        return self.tensor[:, :2]

    def scale(self, scale_x: float, scale_y: float) -> None:
        """Scale in place as detectron2 does: the centre scales, w and h become the lengths of
        the scaled axes and the angle that of the scaled height axis (exact when sx == sy).
        """
        self.tensor[:, 0] *= scale_x
        self.tensor[:, 1] *= scale_y
        theta = self.tensor[:, 4] * (math.pi / 180.0)
        c, s = torch.cos(theta), torch.sin(theta)
        self.tensor[:, 2] *= torch.sqrt((scale_x * c) ** 2 + (scale_y * s) ** 2)
        self.tensor[:, 3] *= torch.sqrt((scale_x * s) ** 2 + (scale_y * c) ** 2)
        self.tensor[:, 4] = torch.atan2(scale_x * s, scale_y * c) * (180.0 / math.pi)


def _check_boxes(name: str, *pairs: tuple[str, object]) -> None:
    for label, value in pairs:
        if type(value) is not Boxes:
            raise StructureShapeError(f"{name}: {label} must be Boxes, got {type(value).__name__}")


def pairwise_intersection(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """Intersection area of every pair of boxes, an NxM tensor."""
    _check_boxes("pairwise_intersection", ("boxes1", boxes1), ("boxes2", boxes2))
    a, b = boxes1.tensor, boxes2.tensor
    size = torch.min(a[:, None, 2:], b[:, 2:]) - torch.max(a[:, None, :2], b[:, :2])
    return size.clamp_(min=0).prod(dim=2)


def pairwise_iou(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """IoU of every pair of boxes, an NxM tensor (0 for no overlap); RotatedBoxes are compared
    exactly as rotated rectangles.
    """
    if isinstance(boxes1, RotatedBoxes) or isinstance(boxes2, RotatedBoxes):
        return pairwise_iou_rotated(boxes1, boxes2)  # type: ignore[arg-type]
    _check_boxes("pairwise_iou", ("boxes1", boxes1), ("boxes2", boxes2))
    area1, area2 = boxes1.area(), boxes2.area()
    inter = pairwise_intersection(boxes1, boxes2)
    union = area1[:, None] + area2 - inter
    positive = inter > 0
    return torch.where(positive, inter / torch.where(positive, union, torch.ones_like(union)), 0.0)


def pairwise_ioa(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """Intersection over the area of ``boxes2`` for every pair, an NxM tensor."""
    _check_boxes("pairwise_ioa", ("boxes1", boxes1), ("boxes2", boxes2))
    area2 = boxes2.area()
    inter = pairwise_intersection(boxes1, boxes2)
    positive = inter > 0
    safe = torch.where(positive, area2[None, :].expand_as(inter), torch.ones_like(inter))
    return torch.where(positive, inter / safe, 0.0)


def matched_pairwise_iou(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """IoU of ``boxes1[i]`` with ``boxes2[i]`` for each i, an N tensor."""
    _check_boxes("matched_pairwise_iou", ("boxes1", boxes1), ("boxes2", boxes2))
    if len(boxes1) != len(boxes2):
        raise StructureShapeError(
            f"matched_pairwise_iou needs boxes of the same length, got {len(boxes1)} and "
            f"{len(boxes2)}"
        )
    a, b = boxes1.tensor, boxes2.tensor
    size = (torch.min(a[:, 2:], b[:, 2:]) - torch.max(a[:, :2], b[:, :2])).clamp(min=0)
    inter = size[:, 0] * size[:, 1]
    union = boxes1.area() + boxes2.area() - inter
    positive = inter > 0
    return torch.where(positive, inter / torch.where(positive, union, 1.0), 0.0)


def pairwise_iou_rotated(
    boxes1: RotatedBoxes | torch.Tensor, boxes2: RotatedBoxes | torch.Tensor
) -> torch.Tensor:
    """Exact IoU of every pair of rotated boxes (RotatedBoxes or Nx5 tensors), an NxM float32
    tensor, in O(N * M) time and bounded memory.

    Example:
        >>> a = RotatedBoxes([[0, 0, 2, 2, 0]]); b = RotatedBoxes([[0, 0, 2, 2, 90]])
        >>> round(pairwise_iou_rotated(a, b).item(), 5)
        1.0
    """
    tensors = []
    for label, value in (("boxes1", boxes1), ("boxes2", boxes2)):
        if isinstance(value, RotatedBoxes):
            tensors.append(value.tensor)
        elif isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == 5:
            tensors.append(value)
        else:
            raise StructureShapeError(
                f"pairwise_iou_rotated: {label} must be RotatedBoxes or an Nx5 tensor, got "
                f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}"
            )
    return _pairwise_iou_rotated_tensors(tensors[0], tensors[1])


# Exact rotated IoU: the intersection of two rectangles is a convex polygon whose vertices are
# among the corners of each inside the other and their edge crossings (4 + 4 + 16
# candidates), sorted by angle around their mean; shoelace area; float64, chunked pairs.
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


def _pairwise_iou_rotated_tensors(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """NxM float32 IoU, computed in float64 on the inputs' device (no area: 0)."""
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
