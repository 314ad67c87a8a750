"""Instance masks with detectron2's semantics: PolygonMasks (per instance, flat float64
polygons on the CPU), BitMasks (NxHxW bool), ROIMasks (NxMxM inside boxes) and pasting.

Example:
    >>> masks = PolygonMasks([[[0, 0, 4, 0, 4, 2, 0, 2]], [[1, 1, 3, 1, 2, 3]]])
    >>> masks.area().tolist(), masks.get_bounding_boxes().tensor.tolist()
    ([8.0, 2.0], [[0.0, 0.0, 4.0, 2.0], [1.0, 1.0, 3.0, 3.0]])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import StructureShapeError
from ..geometry_checks import polygons_to_bitmask
from ..structure_common import (
    TensorRows,
    as_index,
    as_tensor_of,
    check_cat_parts,
    clip_polygon,
    is_flat_polygon,
    polygon_area,
)
from .boxes import Boxes


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
    """One instance's polygons as an HxW bool mask (COCO's rasterizer), clipped first to one
    pixel around the image so far-out coordinates cost nothing.
    """
    clipped = [clip_polygon(p, -1.0, -1.0, width + 1.0, height + 1.0) for p in polygons]
    clipped = [p for p in clipped if p.size >= 6]
    return polygons_to_bitmask(clipped, height, width).astype(bool)


class PolygonMasks:
    """Instance masks as polygons: ``polygons[i]`` lists instance i's flat float64 polygons."""

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
        """The tight box around each instance's polygons (all zeros for no polygon)."""
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
        return torch.tensor(list(map(len, self.polygons)), dtype=torch.int64) > 0

    def area(self) -> torch.Tensor:
        """Per instance, the sum of its polygons' shoelace areas (float32 tensor).

        Overlapping polygons of one instance are counted twice, as in detectron2."""
        areas = [sum(polygon_area(p) for p in instance) for instance in self.polygons]
        return torch.tensor(areas, dtype=torch.float32)

    def crop_and_resize(self, boxes: torch.Tensor | Boxes, mask_size: int) -> torch.Tensor:
        """Rasterize instance i's polygons moved into ``boxes[i]`` on an M x M grid
        (x -> (x - x0) * M / max(x1 - x0, 0.1)); an N x M x M bool tensor on the boxes' device.
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
        """Select instances by int, slice, list of indices, or bool / integer tensor or array."""
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
        """Concatenate PolygonMasks."""
        check_cat_parts(polymasks_list, PolygonMasks)
        out = cls.__new__(cls)
        out.polygons = list(itertools.chain.from_iterable(m.polygons for m in polymasks_list))
        return out


def _as_bool_masks(tensor: Any) -> torch.Tensor:
    data = as_tensor_of(tensor, torch.bool, "BitMasks", "an (N, H, W) array")
    if data.dim() != 3:
        raise StructureShapeError(f"BitMasks needs an (N, H, W) tensor, got {tuple(data.shape)}")
    return data


class BitMasks(TensorRows):
    """Instance masks stored in ``tensor``, an NxHxW bool tensor (non-zero input is set)."""

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
        all zeros for an empty mask."""
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
        """Each mask's box resampled to M x M by ROIAlign (aligned, adaptive sampling) and
        thresholded at 0.5, as detectron2's mask targets.
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
        """Rasterize polygon masks (a PolygonMasks or a list of lists of polygons)."""
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
        """Concatenate BitMasks of the same image size."""
        check_cat_parts(bitmasks_list, BitMasks, allow_empty=False)
        for i, masks in enumerate(bitmasks_list):
            if masks.image_size != bitmasks_list[0].image_size:
                raise StructureShapeError(
                    f"BitMasks.cat: element {i} has size {masks.image_size}, element 0 has "
                    f"{bitmasks_list[0].image_size}"
                )
        return cls(torch.cat([m.tensor for m in bitmasks_list], dim=0))


def paste_masks_in_image(
    masks: torch.Tensor,
    boxes: torch.Tensor | Boxes,
    image_shape: tuple[int, int],
    threshold: float = 0.5,
) -> torch.Tensor:
    """Paste N masks (N x M x M, values in [0, 1]) into an image of ``image_shape`` (h, w)."""
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
    """N masks, each M x M predicted inside its own box (``tensor``: N x M x M)."""

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
        :func:`paste_masks_in_image`."""
        return BitMasks(paste_masks_in_image(self.tensor, boxes, (height, width), threshold))


# ROIAlign of whole masks (aligned=True, sampling_ratio=0): bilinear sampling on a regular
# grid is separable, so each box is rows @ mask @ cols.T over the part it covers.
#: Most bilinear samples along one axis of one box (bounds the work a huge box causes).
_MAX_SAMPLES = 1 << 22


def sample_weights(start: float, length: float, size: int, bins: int) -> torch.Tensor:
    """The ``bins x size`` matrix averaging the bilinear samples of each bin along one axis."""
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
    """Crop ``boxes[i]`` out of ``masks[i]`` and resample it to ``mask_size`` x ``mask_size``."""
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
