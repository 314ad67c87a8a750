"""ROIAlign of whole masks in pure torch (the sampling of detectron2's mask targets).

The convention is ROIAlign with ``aligned=True`` and an adaptive sampling ratio
(``sampling_ratio=0``), as detectron2's ``BitMasks.crop_and_resize`` uses:

* pixel (i, j) of a mask has its centre at continuous coordinate (j + 0.5, i + 0.5), so a box
  (x0, y0, x1, y1) starts at continuous x0 - 0.5 in the "index" frame where pixel centres
  are integers;
* the box is cut into ``mask_size`` x ``mask_size`` bins; each bin averages a regular grid
  of ``ceil(box_h / mask_size)`` x ``ceil(box_w / mask_size)`` bilinear samples taken at the
  centres of its sub-cells;
* a sample more than one pixel outside the mask counts as 0; within that margin it is
  clamped to the border pixel.

Bilinear sampling on a regular grid is separable, so each box is two small matrix products,
``rows @ mask @ cols.T``, over the part of the mask the box covers. Cost per box:
O(mask_size * box_h * box_w) at worst (plus the weight matrices).

Example:
    >>> mask = torch.zeros(1, 4, 4); mask[0, :2, :2] = 1
    >>> roi_align_masks(mask, torch.tensor([[0.0, 0.0, 4.0, 4.0]]), 2)[0].tolist()
    [[1.0, 0.0], [0.0, 0.0]]
"""

from __future__ import annotations

import math

import torch

from .errors import StructureShapeError

__all__ = ["roi_align_masks", "sample_weights"]

#: Most bilinear samples along one axis of one box (bounds the work a huge box causes).
_MAX_SAMPLES = 1 << 22


def sample_weights(start: float, length: float, size: int, bins: int) -> torch.Tensor:
    """The ``bins x size`` matrix averaging the bilinear samples of each bin along one axis.

    Args:
        start: box start in continuous image coordinates (e.g. x0).
        length: box length (x1 - x0); a box with no length gives all-zero weights.
        size: the mask's extent along this axis (W or H).
        bins: the output size along this axis.

    Raises:
        StructureShapeError: a non-finite coordinate, or a box so long that it would need
            more than 4M samples along the axis.

    Example:
        >>> sample_weights(0.0, 4.0, 4, 2).tolist()
        [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]
    """
    if not (math.isfinite(start) and math.isfinite(length)):
        raise StructureShapeError(
            f"crop_and_resize: box coordinates must be finite, got start {start}, length {length}"
        )
    weights = torch.zeros((bins, size), dtype=torch.float64)
    grid = math.ceil(length / bins) if length > 0 else 0
    if grid * bins > _MAX_SAMPLES:
        raise StructureShapeError(
            f"crop_and_resize: a box of length {length} needs {grid * bins} samples per axis, "
            f"more than the limit {_MAX_SAMPLES}"
        )
    if grid <= 0 or size <= 0:
        return weights
    bin_len = length / bins
    offsets = (torch.arange(grid, dtype=torch.float64) + 0.5) * (bin_len / grid)
    coords = (start - 0.5) + torch.arange(bins, dtype=torch.float64)[:, None] * bin_len
    coords = (coords + offsets[None, :]).reshape(-1)
    inside = (coords >= -1.0) & (coords <= size)
    coords = coords.clamp(min=0.0)
    low = coords.floor().long()
    at_end = low >= size - 1
    low = torch.where(at_end, torch.full_like(low, size - 1), low)
    high = torch.where(at_end, low, low + 1)
    frac = torch.where(at_end, torch.zeros_like(coords), coords - low.to(coords.dtype))
    valid = inside.to(torch.float64) / grid
    rows = torch.arange(bins).repeat_interleave(grid)
    weights.index_put_((rows, low), (1.0 - frac) * valid, accumulate=True)
    weights.index_put_((rows, high), frac * valid, accumulate=True)
    return weights


def _span(weights: torch.Tensor) -> tuple[int, int]:
    used = torch.nonzero(weights.abs().sum(0) > 0).flatten()
    if used.numel() == 0:
        return 0, 0
    return int(used[0]), int(used[-1]) + 1


def roi_align_masks(masks: torch.Tensor, boxes: torch.Tensor, mask_size: int) -> torch.Tensor:
    """Crop ``boxes[i]`` out of ``masks[i]`` and resample it to ``mask_size`` x ``mask_size``.

    Args:
        masks: N x H x W tensor (any real dtype; read as float).
        boxes: N x 4 tensor of (x0, y0, x1, y1) in the masks' pixel coordinates.
        mask_size: output side M.

    Returns:
        N x M x M float32 tensor on ``masks.device`` (values are averages of the mask).
    """
    n, height, width = masks.shape
    out = torch.zeros((n, mask_size, mask_size), dtype=torch.float32, device=masks.device)
    boxes64 = boxes.detach().to("cpu", torch.float64)
    for i in range(n):
        x0, y0, x1, y1 = boxes64[i].tolist()
        rows = sample_weights(y0, y1 - y0, height, mask_size)
        cols = sample_weights(x0, x1 - x0, width, mask_size)
        r0, r1 = _span(rows)
        c0, c1 = _span(cols)
        if r1 <= r0 or c1 <= c0:
            continue
        part = masks[i, r0:r1, c0:c1].to(torch.float64)
        # contiguous operands: strided float64 matmuls take a much slower path on CPU
        rows_d = rows[:, r0:r1].contiguous().to(masks.device)
        cols_d = cols[:, c0:c1].T.contiguous().to(masks.device)
        out[i] = ((rows_d @ part) @ cols_d).to(torch.float32)
    return out
