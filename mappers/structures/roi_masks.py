"""ROIMasks: N masks of M x M predicted inside N boxes, and pasting them into the image.

Pasting follows detectron2's ``paste_masks_in_image``: image pixel (x, y) has its centre at
(x + 0.5, y + 0.5); inside box (x0, y0, x1, y1) that point falls at
``(x + 0.5 - x0) / (x1 - x0) * M`` along the mask, where the mask's M cells cover the box
edge to edge (``grid_sample`` with ``align_corners=False``, zero outside). The sampled value
is thresholded (``>= threshold``) into a bool mask.

Example:
    >>> roi = ROIMasks(torch.ones(1, 2, 2))
    >>> roi.to_bitmasks(torch.tensor([[1.0, 1.0, 3.0, 3.0]]), 4, 4).tensor[0].int().tolist()
    [[0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..structure_common import TensorRows
from .bitmasks import BitMasks
from .boxes import Boxes
from .errors import StructureShapeError

__all__ = ["ROIMasks", "paste_masks_in_image"]


def paste_masks_in_image(
    masks: torch.Tensor,
    boxes: torch.Tensor | Boxes,
    image_shape: tuple[int, int],
    threshold: float = 0.5,
) -> torch.Tensor:
    """Paste N masks (N x M x M, values in [0, 1]) into an image of ``image_shape`` (h, w).

    Args:
        masks: N x Mh x Mw float (or bool) masks, one per box.
        boxes: N x 4 tensor or Boxes of (x0, y0, x1, y1) in image pixels.
        image_shape: (height, width) of the image.
        threshold: pixels with a sampled value ``>= threshold`` are set. A negative threshold
            returns the sampled values instead, as uint8 in [0, 255] (detectron2's soft mode).

    Returns:
        N x H x W bool tensor (uint8 for a negative threshold), on the masks' device.

    Raises:
        StructureShapeError: the numbers of masks and boxes differ, or a box is not finite.
    """
    box_tensor = boxes.tensor if isinstance(boxes, Boxes) else torch.as_tensor(boxes)
    if masks.dim() != 3 or box_tensor.dim() != 2 or box_tensor.shape != (masks.shape[0], 4):
        raise StructureShapeError(
            f"paste_masks_in_image needs N x M x M masks and N x 4 boxes, got "
            f"{tuple(masks.shape)} and {tuple(box_tensor.shape)}"
        )
    if not bool(torch.isfinite(box_tensor).all()):
        raise StructureShapeError("paste_masks_in_image: box coordinates must be finite")
    height, width = int(image_shape[0]), int(image_shape[1])
    soft = threshold < 0
    dtype = torch.uint8 if soft else torch.bool
    out = torch.zeros((masks.shape[0], height, width), dtype=dtype, device=masks.device)
    boxes64 = box_tensor.detach().to("cpu", torch.float64).tolist()
    for i, (x0, y0, x1, y1) in enumerate(boxes64):
        # Pixels more than one pixel outside the box sample only zero padding.
        c0, c1 = max(math.floor(x0) - 1, 0), min(math.ceil(x1) + 1, width)
        r0, r1 = max(math.floor(y0) - 1, 0), min(math.ceil(y1) + 1, height)
        if c1 <= c0 or r1 <= r0 or x1 <= x0 or y1 <= y0:
            continue
        xs = torch.arange(c0, c1, dtype=torch.float64) + 0.5
        ys = torch.arange(r0, r1, dtype=torch.float64) + 0.5
        gx = ((xs - x0) / (x1 - x0) * 2 - 1).to(torch.float32)
        gy = ((ys - y0) / (y1 - y0) * 2 - 1).to(torch.float32)
        grid = torch.stack(
            (gx[None, :].expand(len(gy), -1), gy[:, None].expand(-1, len(gx))), dim=-1
        ).to(masks.device)
        sampled = F.grid_sample(
            masks[i][None, None].to(torch.float32), grid[None], align_corners=False
        )[0, 0]
        if soft:
            out[i, r0:r1, c0:c1] = (sampled * 255).to(torch.uint8)
        else:
            out[i, r0:r1, c0:c1] = sampled >= threshold
    return out


class ROIMasks(TensorRows):
    """N masks, each of M x M predicted inside its own box (``tensor``: N x M x M).

    Args:
        tensor: an N x M x M tensor (float probabilities or bool).

    Raises:
        StructureShapeError: the tensor is not three-dimensional.

    Example:
        >>> len(ROIMasks(torch.zeros(3, 28, 28)))
        3
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        tensor = torch.as_tensor(tensor)
        if tensor.dim() != 3:
            raise StructureShapeError(
                f"ROIMasks needs an (N, M, M) tensor, got {tuple(tensor.shape)}"
            )
        self.tensor = tensor

    def to_bitmasks(
        self, boxes: torch.Tensor | Boxes, height: int, width: int, threshold: float = 0.5
    ) -> BitMasks:
        """Paste every mask into its box on a (height, width) image; see
        :func:`paste_masks_in_image`.

        Example:
            >>> ROIMasks(torch.ones(1, 4, 4)).to_bitmasks(
            ...     torch.tensor([[0.0, 0.0, 2.0, 2.0]]), 3, 3).tensor.sum().item()
            4
        """
        return BitMasks(paste_masks_in_image(self.tensor, boxes, (height, width), threshold))
