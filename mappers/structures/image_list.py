"""ImageList: images of different sizes padded into one batch tensor, with their true sizes.

Example:
    >>> images = ImageList.from_tensors([torch.ones(3, 5, 7), torch.ones(3, 6, 4)],
    ...                                 size_divisibility=4, pad_value=-1.0)
    >>> tuple(images.tensor.shape), images.image_sizes, images[1].shape
    ((2, 3, 8, 8), [(5, 7), (6, 4)], torch.Size([3, 6, 4]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from catalog._common import is_int

from ..errors import StructureIndexError, StructureShapeError


class ImageList:
    """A batch of images padded to one size (``tensor``: N x ... x H x W) and their sizes."""

    def __init__(self, tensor: torch.Tensor, image_sizes: Sequence[tuple[int, int]]) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 3:
            raise StructureShapeError(
                "ImageList needs an N x ... x H x W tensor, got "
                f"{tuple(getattr(tensor, 'shape', ())) or type(tensor).__name__}"
            )
        sizes = [(int(h), int(w)) for h, w in image_sizes]
        if len(sizes) != tensor.shape[0]:
            raise StructureShapeError(
                f"ImageList: {tensor.shape[0]} images but {len(sizes)} image sizes"
            )
        height, width = tensor.shape[-2], tensor.shape[-1]
        for i, (h, w) in enumerate(sizes):
            if h > height or w > width or h < 0 or w < 0:
                raise StructureShapeError(
                    f"ImageList: image {i} has size {(h, w)}, which does not fit the padded "
                    f"size {(height, width)}"
                )
        self.tensor = tensor
        self.image_sizes: list[tuple[int, int]] = sizes

    def __len__(self) -> int:
        return len(self.image_sizes)

    def __getitem__(self, idx: int) -> torch.Tensor:
        """The image ``idx`` without its padding (a view of ``tensor``)."""
        if not is_int(idx):
            raise StructureIndexError(f"ImageList is indexed by an int, got {type(idx).__name__}")
        if not -len(self) <= idx < len(self):
            raise StructureIndexError(f"ImageList index {idx} out of range for {len(self)}")
        h, w = self.image_sizes[idx]
        return self.tensor[idx, ..., :h, :w]

    def to(self, *args: Any, **kwargs: Any) -> ImageList:
        """Return the batch moved/cast as ``Tensor.to`` would."""
        return ImageList(self.tensor.to(*args, **kwargs), self.image_sizes)

    @property
    def device(self) -> torch.device:
        """The device of ``tensor``."""
        return self.tensor.device

    def __repr__(self) -> str:
        return f"ImageList(num_images={len(self)}, tensor_shape={tuple(self.tensor.shape)})"

    @staticmethod
    def from_tensors(
        tensors: Sequence[torch.Tensor],
        size_divisibility: int = 0,
        pad_value: float = 0.0,
        padding_constraints: Mapping[str, int] | None = None,
    ) -> ImageList:
        """Pad images to the largest H and W (rounded up to ``size_divisibility``), bottom and
        right, with ``pad_value``; ``padding_constraints`` may set ``size_divisibility`` and a
        ``square_size``.
        """
        if not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
            raise StructureShapeError("ImageList.from_tensors needs a non-empty list of tensors")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.dim() < 2:
                raise StructureShapeError(
                    f"ImageList.from_tensors: element {i} must be a ... x H x W tensor, got "
                    f"{tuple(getattr(t, 'shape', ())) or type(t).__name__}"
                )
            if t.shape[:-2] != tensors[0].shape[:-2]:
                raise StructureShapeError(
                    f"ImageList.from_tensors: element {i} has leading shape "
                    f"{tuple(t.shape[:-2])}, element 0 has {tuple(tensors[0].shape[:-2])}"
                )
        image_sizes = [(int(t.shape[-2]), int(t.shape[-1])) for t in tensors]
        max_h = max(h for h, _ in image_sizes)
        max_w = max(w for _, w in image_sizes)
        if padding_constraints is not None:
            square = int(padding_constraints.get("square_size", 0))
            if square > 0:
                if max_h > square or max_w > square:
                    raise StructureShapeError(
                        f"ImageList.from_tensors: an image of {max_h}x{max_w} does not fit "
                        f"square_size {square}"
                    )
                max_h = max_w = square
            if "size_divisibility" in padding_constraints:
                size_divisibility = int(padding_constraints["size_divisibility"])
        if size_divisibility > 1:
            stride = int(size_divisibility)
            max_h = -(-max_h // stride) * stride
            max_w = -(-max_w // stride) * stride
        if len(tensors) == 1:
            h, w = image_sizes[0]
            padded = F.pad(tensors[0], [0, max_w - w, 0, max_h - h], value=pad_value)
            return ImageList(padded.unsqueeze(0).contiguous(), image_sizes)
        shape = (len(tensors), *tensors[0].shape[:-2], max_h, max_w)
        batch = tensors[0].new_full(shape, pad_value)
        for i, t in enumerate(tensors):
            batch[i, ..., : t.shape[-2], : t.shape[-1]].copy_(t)
        return ImageList(batch.contiguous(), image_sizes)
