"""PolygonMasks: per instance, a list of polygons (flat float64 ``[x0, y0, x1, y1, ...]``).

Semantics follow detectron2's ``PolygonMasks``: the polygons stay numpy arrays on the CPU
(``to`` returns the same object), indexing accepts an int, a slice, a list of indices or a
bool / int tensor, and ``crop_and_resize`` rasterizes each instance's polygons inside its box
at the target resolution.

Example:
    >>> masks = PolygonMasks([[[0, 0, 4, 0, 4, 2, 0, 2]], [[1, 1, 3, 1, 2, 3]]])
    >>> masks.area().tolist(), masks.get_bounding_boxes().tensor.tolist()
    ([8.0, 2.0], [[0.0, 0.0, 4.0, 2.0], [1.0, 1.0, 3.0, 3.0]])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..mask_rasterize import polygons_to_bitmask
from ..polygon_geometry import clip_polygon, polygon_area
from ..structure_common import as_index, check_cat_parts, is_flat_polygon
from .boxes import Boxes
from .errors import StructureShapeError

__all__ = ["PolygonMasks", "clip_polygon", "polygon_area", "rasterize_polygons"]


def _as_polygon(polygon: Any, where: str) -> np.ndarray:
    if is_flat_polygon(polygon):
        if not np.isfinite(polygon.sum()):  # one reduction: NaN or inf anywhere shows here
            raise StructureShapeError(f"PolygonMasks: {where} has a non-finite coordinate")
        return polygon
    if isinstance(polygon, torch.Tensor):
        polygon = polygon.detach().cpu().numpy()
    try:
        arr = np.asarray(polygon, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise StructureShapeError(f"PolygonMasks: {where} is not a list of numbers") from None
    if arr.size % 2 != 0 or arr.size < 6:
        raise StructureShapeError(
            f"PolygonMasks: {where} has {arr.size} coordinates; a polygon needs an even count "
            "of at least 6"
        )
    if not np.isfinite(arr).all():
        raise StructureShapeError(f"PolygonMasks: {where} has a non-finite coordinate")
    return arr


def rasterize_polygons(polygons: Sequence[np.ndarray], height: int, width: int) -> np.ndarray:
    """Rasterize one instance's polygons into an HxW bool mask (COCO's rasterizer).

    Polygons are first clipped to one pixel around the image, so coordinates far outside
    the image (a polygon much larger than a crop box) are fine and cost nothing extra.

    Example:
        >>> int(rasterize_polygons([np.array([-50.0, -50, 2, -50, 2, 2, -50, 2])], 4, 4).sum())
        4
    """
    clipped = [clip_polygon(p, -1.0, -1.0, width + 1.0, height + 1.0) for p in polygons]
    clipped = [p for p in clipped if p.size >= 6]
    return polygons_to_bitmask(clipped, height, width).astype(bool)


class PolygonMasks:
    """Instance masks as polygons: ``polygons[i]`` is the list of polygons of instance i.

    Args:
        polygons: a list (one entry per instance) of lists of polygons; a polygon is a flat
            sequence ``[x0, y0, x1, y1, ...]`` (list, numpy array or tensor) of at least 3
            points. Stored as float64 numpy arrays.

    Raises:
        StructureShapeError: not a list of lists, or a polygon with fewer than 6 or an odd
            number of coordinates, or a non-finite coordinate.

    Example:
        >>> PolygonMasks([[[0, 0, 1, 0, 1, 1]]]).polygons[0][0].dtype
        dtype('float64')
    """

    def __init__(self, polygons: Sequence[Sequence[Any]]) -> None:
        if not isinstance(polygons, (list, tuple)):
            raise StructureShapeError(
                "PolygonMasks needs a list (one entry per instance) of lists of polygons, got "
                f"{type(polygons).__name__}"
            )
        result: list[list[np.ndarray]] = []
        for i, instance in enumerate(polygons):
            if not isinstance(instance, (list, tuple)):
                raise StructureShapeError(
                    f"PolygonMasks: instance {i} must be a list of polygons, got "
                    f"{type(instance).__name__}"
                )
            result.append(
                [_as_polygon(p, f"instance {i}, polygon {j}") for j, p in enumerate(instance)]
            )
        self.polygons: list[list[np.ndarray]] = result

    @classmethod
    def from_validated(cls, polygons: list[list[np.ndarray]]) -> PolygonMasks:
        """Wrap polygons that are already flat, finite float64 arrays of >= 6 even values
        (e.g. from :func:`mappers.annotations_to_instances`), without checking them again.

        Example:
            >>> len(PolygonMasks.from_validated([[np.zeros(6)]]))
            1
        """
        out = cls.__new__(cls)
        out.polygons = polygons
        return out

    def to(self, *args: Any, **kwargs: Any) -> PolygonMasks:
        """Return self: polygons always stay on the CPU (as in detectron2)."""
        return self

    @property
    def device(self) -> torch.device:
        """Always the CPU."""
        return torch.device("cpu")

    def get_bounding_boxes(self) -> Boxes:
        """The tight box around each instance's polygons (all zeros for no polygon).

        Example:
            >>> PolygonMasks([[[1, 2, 5, 2, 3, 7]], []]).get_bounding_boxes().tensor.tolist()
            [[1.0, 2.0, 5.0, 7.0], [0.0, 0.0, 0.0, 0.0]]
        """
        boxes = torch.zeros((len(self.polygons), 4), dtype=torch.float32)
        for i, instance in enumerate(self.polygons):
            if not instance:
                continue
            points = np.concatenate([p.reshape(-1, 2) for p in instance], axis=0)
            low, high = points.min(axis=0), points.max(axis=0)
            boxes[i] = torch.tensor([low[0], low[1], high[0], high[1]], dtype=torch.float32)
        return Boxes(boxes)

    def nonempty(self) -> torch.Tensor:
        """Bool tensor: whether each instance has at least one polygon."""
        return torch.tensor([len(p) > 0 for p in self.polygons], dtype=torch.bool)

    def area(self) -> torch.Tensor:
        """Per instance, the sum of its polygons' shoelace areas (float32 tensor).

        Overlapping polygons of one instance are counted twice, as in detectron2.
        """
        areas = [sum(polygon_area(p) for p in instance) for instance in self.polygons]
        return torch.tensor(areas, dtype=torch.float32)

    def crop_and_resize(self, boxes: torch.Tensor | Boxes, mask_size: int) -> torch.Tensor:
        """Rasterize instance i's polygons inside ``boxes[i]`` at ``mask_size`` x ``mask_size``.

        The box is mapped onto the M x M grid (x -> (x - x0) * M / max(x1 - x0, 0.1), same
        for y) and the moved polygons are rasterized; the result is an N x M x M bool tensor
        on the boxes' device.

        Raises:
            StructureShapeError: the number of boxes differs from the number of instances.

        Example:
            >>> m = PolygonMasks([[[0, 0, 8, 0, 8, 8, 0, 8]]])
            >>> bool(m.crop_and_resize(torch.tensor([[0.0, 0.0, 8.0, 8.0]]), 4).all())
            True
        """
        tensor = boxes.tensor if isinstance(boxes, Boxes) else torch.as_tensor(boxes)
        if tensor.dim() != 2 or tensor.shape[0] != len(self) or tensor.shape[1] != 4:
            raise StructureShapeError(
                f"PolygonMasks.crop_and_resize needs ({len(self)}, 4) boxes, got "
                f"{tuple(tensor.shape)}"
            )
        device = tensor.device
        out = torch.zeros((len(self), mask_size, mask_size), dtype=torch.bool)
        for i, (instance, box) in enumerate(
            zip(self.polygons, tensor.detach().cpu().tolist(), strict=True)
        ):
            x0, y0, x1, y1 = box
            sx = mask_size / max(x1 - x0, 0.1)
            sy = mask_size / max(y1 - y0, 0.1)
            moved = []
            for p in instance:
                q = p.copy()
                q[0::2] = (q[0::2] - x0) * sx
                q[1::2] = (q[1::2] - y0) * sy
                moved.append(q)
            out[i] = torch.from_numpy(rasterize_polygons(moved, mask_size, mask_size))
        return out.to(device)

    def __getitem__(self, item: Any) -> PolygonMasks:
        """Select instances by int, slice, list of indices, or bool / integer tensor or array.

        Raises:
            StructureIndexError: out of range, a mask of the wrong length, or no index.
        """
        index = as_index(item, len(self), "PolygonMasks")
        if isinstance(index, int):
            picked = [self.polygons[index]]
        elif isinstance(index, slice):
            picked = self.polygons[index]
        elif index.dtype == torch.bool:
            picked = list(itertools.compress(self.polygons, index.tolist()))
        else:
            picked = [self.polygons[i] for i in index.tolist()]
        out = PolygonMasks.__new__(PolygonMasks)
        out.polygons = list(picked)
        return out

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        """Yield each instance's list of polygons."""
        return iter(self.polygons)

    def __len__(self) -> int:
        return len(self.polygons)

    def __repr__(self) -> str:
        return f"PolygonMasks(num_instances={len(self.polygons)})"

    @classmethod
    def cat(cls, polymasks_list: Sequence[PolygonMasks]) -> PolygonMasks:
        """Concatenate PolygonMasks.

        Raises:
            StructureShapeError: not a list/tuple of PolygonMasks.

        Example:
            >>> a = PolygonMasks([[[0, 0, 1, 0, 1, 1]]]); len(PolygonMasks.cat([a, a]))
            2
        """
        check_cat_parts(polymasks_list, PolygonMasks)
        out = cls.__new__(cls)
        out.polygons = list(itertools.chain.from_iterable(m.polygons for m in polymasks_list))
        return out
