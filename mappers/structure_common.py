"""What ``Instances``, the structures and the transforms share: index normalization, input
conversion, row selection, the argument check of ``cat``, flat polygon area and clipping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import torch

from .errors import StructureIndexError, StructureShapeError

__all__ = [
    "as_index",
    "as_tensor_of",
    "check_cat_parts",
    "clip_points",
    "clip_polygon",
    "is_flat_polygon",
    "is_int_index",
    "polygon_area",
    "select_rows",
    "TensorRows",
]


def is_int_index(item: Any) -> bool:
    """Whether ``item`` selects one element (an int or a 0-d integer tensor)."""
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
    """``item`` as an int, a slice, a 1-D bool mask or a 1-D int64 index tensor, checked
    against ``length`` (StructureIndexError naming ``owner`` otherwise).
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


def select_rows(tensor: torch.Tensor, item: Any, owner: str) -> torch.Tensor:
    """The rows of ``tensor`` that ``item`` selects (an int keeps a leading 1); may share memory."""
    index = as_index(item, int(tensor.shape[0]), owner)
    if isinstance(index, int):
        return tensor[index].unsqueeze(0)
    if isinstance(index, torch.Tensor):
        index = index.to(tensor.device)
    return tensor[index]


def check_cat_parts(parts: Any, cls: type, *, allow_empty: bool = True) -> Sequence[Any]:
    """Check that ``parts`` is a list/tuple of ``cls`` (non-empty unless ``allow_empty``)."""
    name = cls.__name__
    if not isinstance(parts, (list, tuple)):
        raise StructureShapeError(f"{name}.cat needs a list of {name}, got {type(parts).__name__}")
    if not parts and not allow_empty:
        raise StructureShapeError(f"{name}.cat needs a non-empty list of {name}")
    for i, part in enumerate(parts):
        if not isinstance(part, cls):
            raise StructureShapeError(
                f"{name}.cat: element {i} is a {type(part).__name__}, not {name}"
            )
    return parts


def as_tensor_of(data: Any, dtype: torch.dtype, owner: str, needs: str) -> torch.Tensor:
    """``data`` as a ``dtype`` tensor (tensors keep their device; others go to the CPU)."""
    if isinstance(data, torch.Tensor):
        return data.to(dtype)
    try:
        return torch.as_tensor(data, dtype=dtype, device=torch.device("cpu"))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise StructureShapeError(
            f"{owner} needs {needs}, got {type(data).__name__} ({exc})"
        ) from None


def is_flat_polygon(polygon: Any) -> bool:
    """Whether ``polygon`` is already a flat float64 array of an even count >= 6 (the form
    polygons have after a transform; only finiteness is left to check).
    """
    return (
        type(polygon) is np.ndarray
        and polygon.dtype == np.float64
        and polygon.ndim == 1
        and polygon.size >= 6
        and polygon.size % 2 == 0
    )


class TensorRows:
    """What a structure holding one ``tensor`` row per instance shares: ``device``, ``len``,
    ``to``, indexing (an int gives one row) and a short repr.
    """

    tensor: torch.Tensor

    @property
    def device(self) -> torch.device:
        """The device of ``tensor``."""
        return self.tensor.device

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """A structure of the same class with ``tensor.to(*args, **kwargs)``."""
        return type(self)(self.tensor.to(*args, **kwargs))  # type: ignore[call-arg]

    def __getitem__(self, item: Any) -> Self:
        rows = select_rows(self.tensor, item, type(self).__name__)
        return type(self)(rows)  # type: ignore[call-arg]

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_instances={len(self)})"


def polygon_area(polygon: np.ndarray) -> float:
    """Area of one flat polygon by the shoelace formula (absolute value)."""
    x, y = polygon[0::2], polygon[1::2]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _clip_axis(points: np.ndarray, axis: int, bound: float, keep_above: bool) -> np.ndarray:
    """One Sutherland-Hodgman pass of an Nx2 closed polygon against x or y = bound."""
    if len(points) == 0:
        return points
    values = points[:, axis]
    inside = values >= bound if keep_above else values <= bound
    if inside.all() or not inside.any():
        return points if inside.all() else points[:0]
    nxt = np.roll(points, -1, axis=0)
    crosses = inside != np.roll(inside, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(crosses, (bound - values) / (nxt[:, axis] - values), 0.0)
    crossing = points + t[:, None] * (nxt - points)
    crossing[:, axis] = bound
    stacked = np.stack([points, crossing], axis=1).reshape(-1, 2)
    return stacked[np.stack([inside, crosses], axis=1).reshape(-1)]


def clip_points(points: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Clip an Nx2 closed polygon to [x0, x1] x [y0, y1]: ``points`` itself when nothing is cut,
    0x2 when nothing is left; pieces stay one polygon joined along the border (same mask).
    """
    for axis, bound, above in ((0, x0, True), (0, x1, False), (1, y0, True), (1, y1, False)):
        points = _clip_axis(points, axis, bound, above)
        if len(points) == 0:
            break
    return points


def clip_polygon(polygon: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Clip a flat polygon to [x0, x1] x [y0, y1]; may return an empty array."""
    return clip_points(polygon.reshape(-1, 2), x0, y0, x1, y1).reshape(-1)
