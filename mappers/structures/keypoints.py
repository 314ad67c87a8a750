"""Keypoints: an NxKx3 float32 tensor of (x, y, visibility), COCO visibility (0, 1, 2).

Example:
    >>> kps = Keypoints([[[1.5, 2.5, 2], [9.0, 9.0, 0]]])
    >>> heatmaps, valid = kps.to_heatmap(torch.tensor([[0.0, 0.0, 4.0, 4.0]]), 4)
    >>> heatmaps.tolist(), valid.tolist()
    ([[9, 0]], [[1, 0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import StructureShapeError
from ..structure_common import TensorRows, as_tensor_of, check_cat_parts
from .boxes import Boxes


def keypoints_to_heatmap(
    keypoints: torch.Tensor, rois: torch.Tensor, heatmap_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heatmap cell ``y * S + x`` of each keypoint in its box (x -> floor((x - x0) * S /
    (x1 - x0)), the right / bottom edge in cell S - 1) and whether it is valid."""
    if rois.numel() == 0:
        empty = torch.zeros((0, keypoints.shape[1] if keypoints.dim() == 3 else 0))
        return empty.long(), empty.long()
    x0, y0 = rois[:, 0][:, None], rois[:, 1][:, None]
    scale_x = heatmap_size / (rois[:, 2] - rois[:, 0])[:, None]
    scale_y = heatmap_size / (rois[:, 3] - rois[:, 1])[:, None]
    x, y = keypoints[..., 0], keypoints[..., 1]
    on_right = x == rois[:, 2][:, None]
    on_bottom = y == rois[:, 3][:, None]
    cell_x = ((x - x0) * scale_x).floor().long()
    cell_y = ((y - y0) * scale_y).floor().long()
    cell_x[on_right] = heatmap_size - 1
    cell_y[on_bottom] = heatmap_size - 1
    inside = (cell_x >= 0) & (cell_y >= 0) & (cell_x < heatmap_size) & (cell_y < heatmap_size)
    valid = (inside & (keypoints[..., 2] > 0)).long()
    return (cell_y * heatmap_size + cell_x) * valid, valid


class Keypoints(TensorRows):
    """Keypoints of N instances stored in ``tensor``, an NxKx3 float32 tensor."""

    def __init__(self, keypoints: Any) -> None:
        tensor = as_tensor_of(keypoints, torch.float32, "Keypoints", "an (N, K, 3) array")
        if tensor.dim() != 3 or tensor.shape[2] != 3:
            raise StructureShapeError(
                f"Keypoints needs an (N, K, 3) tensor, got {tuple(tensor.shape)}"
            )
        self.tensor: torch.Tensor = tensor

    def to_heatmap(
        self, boxes: torch.Tensor | Boxes, heatmap_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Heatmap targets of the keypoints in their boxes; see :func:`keypoints_to_heatmap`."""
        rois = boxes.tensor if isinstance(boxes, Boxes) else torch.as_tensor(boxes)
        if rois.dim() != 2 or rois.shape != (len(self), 4):
            raise StructureShapeError(
                f"Keypoints.to_heatmap needs ({len(self)}, 4) boxes, got {tuple(rois.shape)}"
            )
        return keypoints_to_heatmap(self.tensor, rois.to(self.tensor.device), heatmap_size)

    @staticmethod
    def cat(keypoints_list: Sequence[Keypoints]) -> Keypoints:
        """Concatenate Keypoints with the same K."""
        check_cat_parts(keypoints_list, Keypoints, allow_empty=False)
        try:
            return Keypoints(torch.cat([k.tensor for k in keypoints_list], dim=0))
        except RuntimeError as exc:
            raise StructureShapeError(f"Keypoints.cat: shapes differ ({exc})") from None
