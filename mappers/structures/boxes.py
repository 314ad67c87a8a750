"""Boxes: N axis-aligned boxes as an Nx4 float32 tensor in (x0, y0, x1, y1) absolute pixels.

The semantics follow detectron2's ``Boxes``: the tensor is always float32 (other inputs are
converted), an empty input becomes a (0, 4) tensor, ``clip`` and ``scale`` change the boxes in
place, and indexing returns new ``Boxes`` that may share memory with the original.

Example:
    >>> boxes = Boxes([[0, 0, 10, 20], [5, 5, 5, 9]])
    >>> boxes.area().tolist(), boxes.nonempty().tolist()
    ([200.0, 0.0], [True, False])
    >>> len(boxes[1:]), boxes[0].tensor.shape
    (1, torch.Size([1, 4]))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Self

import torch

from ..structure_common import TensorRows, as_tensor_of, check_cat_parts
from .errors import StructureShapeError

__all__ = ["Boxes"]


def _as_float_boxes(tensor: Any, columns: int, owner: str) -> torch.Tensor:
    """Convert ``tensor`` to a float32 (N, columns) tensor (empty → (0, columns))."""
    data = as_tensor_of(tensor, torch.float32, owner, f"an (N, {columns}) array of numbers")
    if data.numel() == 0:
        data = data.reshape((-1, columns)).to(dtype=torch.float32)
    if data.dim() != 2 or data.size(-1) != columns:
        raise StructureShapeError(
            f"{owner} needs an (N, {columns}) tensor, got shape {tuple(data.shape)}"
        )
    return data


class Boxes(TensorRows):
    """N axis-aligned boxes stored in ``tensor``, an Nx4 float32 tensor of (x0, y0, x1, y1).

    Args:
        tensor: an Nx4 tensor, array or nested list. Tensors keep their device; other
            inputs go to the CPU. Anything with no elements becomes a (0, 4) tensor.

    Raises:
        StructureShapeError: the input is not Nx4 (or cannot be read as numbers).

    Example:
        >>> Boxes(torch.tensor([[1, 2, 3, 4]])).tensor.dtype
        torch.float32
        >>> Boxes([]).tensor.shape
        torch.Size([0, 4])
    """

    def __init__(self, tensor: Any) -> None:
        self.tensor: torch.Tensor = _as_float_boxes(tensor, 4, "Boxes")

    def clone(self) -> Self:
        """Return a copy that shares no memory with these boxes.

        Example:
            >>> Boxes([[0, 0, 1, 1]]).clone().to("cpu").device.type
            'cpu'
        """
        return type(self)(self.tensor.clone())

    def area(self) -> torch.Tensor:
        """Area of every box, (x1 - x0) * (y1 - y0), as an N tensor (negative if inverted).

        Example:
            >>> Boxes([[0, 0, 2, 3]]).area().tolist()
            [6.0]
        """
        box = self.tensor
        return (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])

    def clip(self, box_size: tuple[int, int]) -> None:
        """Clip the boxes, in place, to an image of ``box_size`` = (height, width).

        x coordinates are clamped to [0, width], y coordinates to [0, height].

        Raises:
            StructureShapeError: a coordinate is infinite or NaN.

        Example:
            >>> b = Boxes([[-5, 2, 30, 40]]); b.clip((20, 10)); b.tensor.tolist()
            [[0.0, 2.0, 10.0, 20.0]]
        """
        if not bool(torch.isfinite(self.tensor).all()):
            raise StructureShapeError("Boxes.clip: the box tensor contains infinite or NaN values")
        h, w = box_size
        x0 = self.tensor[:, 0].clamp(min=0, max=w)
        y0 = self.tensor[:, 1].clamp(min=0, max=h)
        x1 = self.tensor[:, 2].clamp(min=0, max=w)
        y1 = self.tensor[:, 3].clamp(min=0, max=h)
        self.tensor = torch.stack((x0, y0, x1, y1), dim=-1)

    def nonempty(self, threshold: float = 0.0) -> torch.Tensor:
        """Bool mask of the boxes whose width and height are both greater than ``threshold``.

        Example:
            >>> Boxes([[0, 0, 1, 1], [0, 0, 0, 1]]).nonempty().tolist()
            [True, False]
        """
        box = self.tensor
        widths = box[:, 2] - box[:, 0]
        heights = box[:, 3] - box[:, 1]
        return (widths > threshold) & (heights > threshold)

    def inside_box(self, box_size: tuple[int, int], boundary_threshold: int = 0) -> torch.Tensor:
        """Bool mask of the boxes inside an image of ``box_size`` = (height, width).

        A box is inside when x0, y0 >= -threshold, x1 < width + threshold and
        y1 < height + threshold.

        Example:
            >>> Boxes([[0, 0, 9, 9], [0, 0, 10, 5]]).inside_box((10, 10)).tolist()
            [True, False]
        """
        height, width = box_size
        t = boundary_threshold
        return (
            (self.tensor[..., 0] >= -t)
            & (self.tensor[..., 1] >= -t)
            & (self.tensor[..., 2] < width + t)
            & (self.tensor[..., 3] < height + t)
        )

    def get_centers(self) -> torch.Tensor:
        """Centres of the boxes as an Nx2 tensor of (x, y).

        Example:
            >>> Boxes([[0, 0, 4, 2]]).get_centers().tolist()
            [[2.0, 1.0]]
        """
        return (self.tensor[:, :2] + self.tensor[:, 2:]) / 2

    def scale(self, scale_x: float, scale_y: float) -> None:
        """Multiply x coordinates by ``scale_x`` and y coordinates by ``scale_y``, in place.

        Example:
            >>> b = Boxes([[1, 1, 2, 2]]); b.scale(2, 3); b.tensor.tolist()
            [[2.0, 3.0, 4.0, 6.0]]
        """
        self.tensor[:, 0::2] *= scale_x
        self.tensor[:, 1::2] *= scale_y

    @classmethod
    def cat(cls, boxes_list: Sequence[Boxes]) -> Boxes:
        """Concatenate a list of Boxes into one (an empty list gives empty Boxes).

        Raises:
            StructureShapeError: the argument is not a list/tuple of Boxes.

        Example:
            >>> len(Boxes.cat([Boxes([[0, 0, 1, 1]]), Boxes([[1, 1, 2, 2]])]))
            2
        """
        if len(check_cat_parts(boxes_list, cls)) == 0:
            return cls(torch.empty(0))
        return cls(torch.cat([b.tensor for b in boxes_list], dim=0))

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Yield each box as a tensor of 4 numbers."""
        yield from self.tensor

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tensor})"
