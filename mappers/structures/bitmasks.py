"""BitMasks: N instance masks as an NxHxW bool tensor.

Semantics follow detectron2's ``BitMasks``: any input is stored as bool (non-zero is set),
indexing with an int keeps a 1xHxW result, ``crop_and_resize`` samples each box with
ROIAlign (``aligned=True``, adaptive sampling; see :mod:`mappers.structures.roi_align`) and
thresholds at 0.5.

Example:
    >>> m = torch.zeros(2, 4, 6, dtype=torch.uint8); m[0, 1:3, 2:5] = 1
    >>> masks = BitMasks(m)
    >>> masks.image_size, masks.nonempty().tolist()
    ((4, 6), [True, False])
    >>> masks.get_bounding_boxes().tensor.tolist()
    [[2.0, 1.0, 5.0, 3.0], [0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..structure_common import TensorRows, as_tensor_of, check_cat_parts
from .boxes import Boxes
from .errors import StructureShapeError
from .polygon_masks import PolygonMasks, rasterize_polygons
from .roi_align import roi_align_masks

__all__ = ["BitMasks"]


def _as_bool_masks(tensor: Any) -> torch.Tensor:
    data = as_tensor_of(tensor, torch.bool, "BitMasks", "an (N, H, W) array")
    if data.dim() != 3:
        raise StructureShapeError(f"BitMasks needs an (N, H, W) tensor, got {tuple(data.shape)}")
    return data


class BitMasks(TensorRows):
    """Instance masks stored in ``tensor``, an NxHxW bool tensor.

    Args:
        tensor: an NxHxW tensor or array of any dtype (non-zero means set). Tensors keep
            their device.

    Raises:
        StructureShapeError: the input is not three-dimensional.

    Example:
        >>> BitMasks(torch.ones(1, 2, 3)).tensor.dtype
        torch.bool
    """

    def __init__(self, tensor: Any) -> None:
        self.tensor: torch.Tensor = _as_bool_masks(tensor)

    @property
    def image_size(self) -> tuple[int, int]:
        """(H, W) of the masks."""
        return int(self.tensor.shape[1]), int(self.tensor.shape[2])

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Yield each HxW mask."""
        yield from self.tensor

    def nonempty(self) -> torch.Tensor:
        """Bool tensor: whether each mask has at least one pixel set."""
        if len(self) == 0:
            return torch.zeros(0, dtype=torch.bool, device=self.device)
        return self.tensor.flatten(1).any(dim=1)

    def get_bounding_boxes(self) -> Boxes:
        """The tight box around each mask's set pixels (x1, y1 one past the last pixel);
        all zeros for an empty mask.

        Example:
            >>> m = torch.zeros(1, 5, 5, dtype=torch.bool); m[0, 2, 3] = True
            >>> BitMasks(m).get_bounding_boxes().tensor.tolist()
            [[3.0, 2.0, 4.0, 3.0]]
        """
        boxes = torch.zeros((len(self), 4), dtype=torch.float32, device=self.device)
        height, width = self.image_size
        if len(self) == 0 or height == 0 or width == 0:
            return Boxes(boxes)
        any_x = self.tensor.any(dim=1)
        any_y = self.tensor.any(dim=2)
        xs = torch.arange(width, device=self.device)
        ys = torch.arange(height, device=self.device)
        x0 = torch.where(any_x, xs, width).amin(dim=1)
        y0 = torch.where(any_y, ys, height).amin(dim=1)
        x1 = torch.where(any_x, xs + 1, 0).amax(dim=1)
        y1 = torch.where(any_y, ys + 1, 0).amax(dim=1)
        nonempty = self.nonempty()
        stacked = torch.stack((x0, y0, x1, y1), dim=1).to(torch.float32)
        boxes[nonempty] = stacked[nonempty]
        return Boxes(boxes)

    def crop_and_resize(self, boxes: torch.Tensor | Boxes, mask_size: int) -> torch.Tensor:
        """Crop each mask to its box and resample it to ``mask_size`` x ``mask_size``.

        Sampling is ROIAlign with ``aligned=True`` and an adaptive sampling grid (see
        :mod:`mappers.structures.roi_align`), thresholded at >= 0.5, as detectron2's mask
        targets. A box covering the whole mask with sides a multiple of ``mask_size`` gives
        the mask average-pooled by that factor.

        Args:
            boxes: Nx4 tensor (or Boxes) of (x0, y0, x1, y1), one per mask.
            mask_size: the output side M.

        Returns:
            N x M x M bool tensor on the masks' device.

        Raises:
            StructureShapeError: the number of boxes differs from the number of masks, or a
                box coordinate is not finite.

        Example:
            >>> m = torch.zeros(1, 4, 4, dtype=torch.bool); m[0, :2, :2] = True
            >>> BitMasks(m).crop_and_resize(torch.tensor([[0.0, 0.0, 4.0, 4.0]]), 2).tolist()
            [[[True, False], [False, False]]]
        """
        tensor = boxes.tensor if isinstance(boxes, Boxes) else torch.as_tensor(boxes)
        if tensor.dim() != 2 or tensor.shape[0] != len(self) or tensor.shape[1] != 4:
            raise StructureShapeError(
                f"BitMasks.crop_and_resize needs ({len(self)}, 4) boxes, got {tuple(tensor.shape)}"
            )
        sampled = roi_align_masks(self.tensor, tensor, int(mask_size))
        return sampled >= 0.5

    @staticmethod
    def from_polygon_masks(
        polygon_masks: PolygonMasks | Sequence[Sequence[Any]], height: int, width: int
    ) -> BitMasks:
        """Rasterize polygon masks (a PolygonMasks or a list of lists of polygons).

        Example:
            >>> BitMasks.from_polygon_masks([[[0, 0, 2, 0, 2, 2, 0, 2]]], 3, 3).tensor.sum().item()
            4
        """
        if not isinstance(polygon_masks, PolygonMasks):
            polygon_masks = PolygonMasks(polygon_masks)
        height, width = int(height), int(width)
        if height < 0 or width < 0:
            raise StructureShapeError(f"BitMasks: negative image size {height}x{width}")
        out = torch.zeros((len(polygon_masks), height, width), dtype=torch.bool)
        if height and width:
            for i, polygons in enumerate(polygon_masks.polygons):
                out[i] = torch.from_numpy(rasterize_polygons(polygons, height, width))
        return BitMasks(out)

    @classmethod
    def cat(cls, bitmasks_list: Sequence[BitMasks]) -> BitMasks:
        """Concatenate BitMasks of the same image size.

        Raises:
            StructureShapeError: not a non-empty list of BitMasks, or sizes differ.

        Example:
            >>> a = BitMasks(torch.zeros(1, 2, 2)); len(BitMasks.cat([a, a]))
            2
        """
        check_cat_parts(bitmasks_list, BitMasks, allow_empty=False)
        for i, masks in enumerate(bitmasks_list):
            if masks.image_size != bitmasks_list[0].image_size:
                raise StructureShapeError(
                    f"BitMasks.cat: element {i} has size {masks.image_size}, element 0 has "
                    f"{bitmasks_list[0].image_size}"
                )
        return cls(torch.cat([m.tensor for m in bitmasks_list], dim=0))
