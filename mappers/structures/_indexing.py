"""Index normalization shared by the structures (int, slice, bool mask, index list/array).

Example:
    >>> as_index([True, False, True], 3, "Boxes")
    tensor([ True, False,  True])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .errors import StructureIndexError

__all__ = ["as_index", "is_int_index"]


def is_int_index(item: Any) -> bool:
    """Whether ``item`` selects one element (a Python/numpy int or a 0-d integer tensor)."""
    if isinstance(item, (bool, np.bool_)):
        return False
    if isinstance(item, (int, np.integer)):
        return True
    return (
        isinstance(item, torch.Tensor)
        and item.dim() == 0
        and not item.dtype.is_floating_point
        and item.dtype != torch.bool
    )


def as_index(item: Any, length: int, owner: str) -> int | slice | torch.Tensor:
    """Turn ``item`` into an int, a slice, a 1-D bool mask or a 1-D int64 index tensor.

    Args:
        item: what the user indexed with.
        length: the number of elements of the structure.
        owner: the structure's name, for error messages.

    Raises:
        StructureIndexError: an int or index out of range, a mask of the wrong length, a
            float or multi-dimensional index, or an object that is no index.
    """
    if isinstance(item, (bool, np.bool_)):
        raise StructureIndexError(f"{owner} cannot be indexed by a single bool; use a bool mask")
    if is_int_index(item):
        index = int(item)
        if index >= length or index < -length:
            raise StructureIndexError(f"{owner} index {index} out of range for length {length}")
        return index % length
    if isinstance(item, slice):
        return item
    if isinstance(item, torch.Tensor):
        tensor = item
    else:
        try:
            arr = np.asarray(item)
        except (TypeError, ValueError):
            raise StructureIndexError(
                f"{owner} cannot be indexed by {type(item).__name__}"
            ) from None
        if arr.size == 0:
            arr = arr.astype(np.int64)
        if arr.dtype.kind not in "biu":
            raise StructureIndexError(
                f"{owner} cannot be indexed by {type(item).__name__} of dtype {arr.dtype}"
            )
        tensor = torch.from_numpy(np.ascontiguousarray(arr))
    if tensor.dtype == torch.bool:
        if tensor.dim() != 1 or tensor.numel() != length:
            raise StructureIndexError(
                f"{owner} bool mask must have shape ({length},), got {tuple(tensor.shape)}"
            )
        return tensor
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dim() != 1:
        raise StructureIndexError(
            f"{owner} index must be an int, a slice, a 1-D bool mask or 1-D integer indices; "
            f"got {tensor.dtype} of shape {tuple(tensor.shape)}"
        )
    tensor = tensor.to(torch.int64)
    if tensor.numel() and (int(tensor.max()) >= length or int(tensor.min()) < -length):
        raise StructureIndexError(f"{owner} index out of range for length {length}")
    return tensor
