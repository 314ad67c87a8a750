"""Pairwise box measures: intersection, IoU (axis-aligned and rotated), IoA.

Example:
    >>> a = Boxes([[0, 0, 2, 2]]); b = Boxes([[1, 0, 3, 2], [5, 5, 6, 6]])
    >>> pairwise_intersection(a, b).tolist(), pairwise_ioa(a, b).tolist()
    ([[2.0, 0.0]], [[0.5, 0.0]])
"""

from __future__ import annotations

import torch

from .boxes import Boxes
from .errors import StructureShapeError
from .rotated_boxes import RotatedBoxes
from .rotated_iou import pairwise_iou_rotated_tensors

__all__ = [
    "matched_pairwise_iou",
    "pairwise_intersection",
    "pairwise_ioa",
    "pairwise_iou",
    "pairwise_iou_rotated",
]


def _check_boxes(name: str, *pairs: tuple[str, object]) -> None:
    for label, value in pairs:
        if type(value) is not Boxes:
            raise StructureShapeError(f"{name}: {label} must be Boxes, got {type(value).__name__}")


def pairwise_intersection(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """Intersection area of every pair of boxes, an NxM tensor (0 where they do not meet).

    Example:
        >>> pairwise_intersection(Boxes([[0, 0, 4, 4]]), Boxes([[2, 2, 8, 8]])).tolist()
        [[4.0]]
    """
    _check_boxes("pairwise_intersection", ("boxes1", boxes1), ("boxes2", boxes2))
    a, b = boxes1.tensor, boxes2.tensor
    size = torch.min(a[:, None, 2:], b[:, 2:]) - torch.max(a[:, None, :2], b[:, :2])
    return size.clamp_(min=0).prod(dim=2)


def pairwise_iou(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """Intersection over union of every pair of boxes, an NxM tensor in [0, 1].

    Pairs that do not intersect (and boxes without area) give 0. Two
    :class:`RotatedBoxes` are compared exactly as rotated rectangles
    (:func:`pairwise_iou_rotated`).

    Raises:
        StructureShapeError: the arguments are not both Boxes or both RotatedBoxes.

    Example:
        >>> pairwise_iou(Boxes([[0, 0, 2, 2]]), Boxes([[0, 0, 2, 2], [1, 0, 3, 2]])).tolist()
        [[1.0, 0.3333333432674408]]
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
    """Intersection over the area of ``boxes2`` for every pair, an NxM tensor.

    Example:
        >>> pairwise_ioa(Boxes([[0, 0, 10, 10]]), Boxes([[5, 5, 7, 7], [8, 0, 12, 1]])).tolist()
        [[1.0, 0.5]]
    """
    _check_boxes("pairwise_ioa", ("boxes1", boxes1), ("boxes2", boxes2))
    area2 = boxes2.area()
    inter = pairwise_intersection(boxes1, boxes2)
    positive = inter > 0
    safe = torch.where(positive, area2[None, :].expand_as(inter), torch.ones_like(inter))
    return torch.where(positive, inter / safe, 0.0)


def matched_pairwise_iou(boxes1: Boxes, boxes2: Boxes) -> torch.Tensor:
    """IoU of ``boxes1[i]`` with ``boxes2[i]`` for each i, an N tensor.

    Raises:
        StructureShapeError: the two have different lengths, or are not Boxes.

    Example:
        >>> matched_pairwise_iou(Boxes([[0, 0, 2, 2]]), Boxes([[1, 0, 3, 2]])).tolist()
        [0.3333333432674408]
    """
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
    """Exact IoU of every pair of rotated boxes, an NxM float32 tensor in [0, 1].

    Takes RotatedBoxes (as ``detectron2.structures.pairwise_iou_rotated``) or raw Nx5
    tensors (as ``detectron2.layers.pairwise_iou_rotated``). The intersection polygon of
    each pair is computed exactly (up to float64 rounding), in O(N * M) time and bounded
    memory (see :mod:`mappers.structures.rotated_iou`).

    Raises:
        StructureShapeError: an argument is neither RotatedBoxes nor an Nx5 tensor.

    Example:
        >>> a = RotatedBoxes([[0, 0, 2, 2, 0]]); b = RotatedBoxes([[0, 0, 2, 2, 90]])
        >>> round(pairwise_iou_rotated(a, b).item(), 5)
        1.0
        >>> pairwise_iou_rotated(torch.zeros(0, 5), torch.zeros(3, 5)).shape
        torch.Size([0, 3])
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
    return pairwise_iou_rotated_tensors(tensors[0], tensors[1])
