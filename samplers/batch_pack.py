"""Pack a batch's tensors into one byte arena and rebuild them as views of it.

A worker turns a batch (any nesting of ``list`` / ``tuple`` / ``dict`` / ``Instances`` around
tensors and numpy arrays) into a *skeleton*, the same structure with every array replaced by a
small :class:`_Ref`, and a list of *regions*, byte ranges of the arena. Arrays of the same
field across the samples of a batch (same key path, dtype, trailing shape, C order) share one
region: the gt boxes of a whole batch are one ``N x 4`` block with per-sample row counts.
The main process rebuilds every array as a view of the arena (no copy). Anything else
(strings, ints, tensor subclasses, objects) stays in the skeleton and is pickled as usual.


Example:
    >>> import numpy as np, torch
    >>> batch = [{"image": torch.arange(6).view(2, 3), "boxes": np.ones((2, 4))}]
    >>> plan = plan_batch(batch)
    >>> arena = torch.zeros(plan.nbytes, dtype=torch.uint8)
    >>> write_batch(plan, arena, arena.numpy())
    >>> out = unpack_batch(plan.skeleton, arena.numpy())
    >>> torch.equal(out[0]["image"], batch[0]["image"]), out[0]["boxes"].shape
    (True, (2, 4))
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from mappers.instances import Instances
from mappers.structures import TRANSPORTABLE_STRUCTURES

from .value_class import value_class

__all__ = ["BatchPlan", "Region", "plan_batch", "unpack_batch", "write_batch"]

#: Byte alignment of every region in the arena (a cache line; any dtype views cleanly).
ALIGNMENT = 64
#: Nesting deeper than this is left to pickling.
_MAX_DEPTH = 24
#: numpy dtype kinds packed (bool, signed, unsigned, float, complex).
_NUMPY_KINDS = frozenset("biufc")
_TORCH_DTYPES: dict[str, torch.dtype] = {
    str(d): d
    for d in (
        torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
        torch.float16, torch.bfloat16, torch.float32, torch.float64,
        torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64,
    )
}


#: One name object per dtype, so that pickle writes each name once per batch (memo).
_DTYPE_NAMES = {dtype: name for name, dtype in _TORCH_DTYPES.items()}


@value_class
class _Ref:
    """Stands in the skeleton for one array: ``kind`` ("t" torch / "n" numpy), dtype name,
    shape, strides (in elements) and offset in the arena (in elements for torch, bytes for
    numpy).
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0


@value_class
class _InstancesNode:
    """Stands in the skeleton for an ``Instances`` (its fields packed like any dict)."""

    image_size: tuple[int, int]
    fields: dict[str, Any]


@value_class
class _StructureNode:
    """Stands in the skeleton for a structure (``Boxes``, ``BitMasks``, ``PolygonMasks`` ...):
    its class and its attributes, packed like a dict; rebuilt without calling the constructor.
    """

    cls: type
    state: dict[str, Any]


_STRUCTURES = frozenset(TRANSPORTABLE_STRUCTURES)


class Region(NamedTuple):
    """One byte range of the arena: ``rows`` arrays stacked along dimension 0 (worker side)."""

    offset: int
    nbytes: int
    kind: str
    dtype: str
    shape: tuple[int, ...]
    rows: tuple[int, ...] | None


class BatchPlan(NamedTuple):
    """What :func:`plan_batch` found: the skeleton, the regions, the arrays to copy in."""

    skeleton: Any
    regions: list[Region]
    sources: list[list[Any]]
    nbytes: int


def _tensor_layout(value: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...] | None]:
    """(a contiguous tensor in memory order, the permutation back to ``value``'s order)."""
    if value.is_contiguous():
        return value, None
    order = sorted(range(value.dim()), key=lambda d: (-value.stride(d), d))
    permuted = value.permute(order)
    if not permuted.is_contiguous():
        return value.contiguous(), None
    inverse = [0] * len(order)
    for position, dim in enumerate(order):
        inverse[dim] = position
    return permuted, tuple(inverse)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


class _Planner:
    """Collects arrays into regions while copying the structure into a skeleton."""

    def __init__(self) -> None:
        self.groups: dict[Any, int] = {}
        # per region: [kind, dtype, itemsize, memory shape of the first array, refs, sources]
        self.regions: list[list[Any]] = []

    def add(self, key: Any, kind: str, dtype: str, itemsize: int, array: Any,
            perm: tuple[int, ...] | None) -> _Ref:
        region = self.groups.get(key) if key is not None else None
        if region is None:
            region = len(self.regions)
            if key is not None:
                self.groups[key] = region
            self.regions.append([kind, dtype, itemsize, tuple(array.shape), [], []])
        shape = tuple(array.shape)
        stride = _c_strides(shape)
        if perm is not None:
            shape = tuple(shape[p] for p in perm)
            stride = tuple(stride[p] for p in perm)
        ref = _Ref(kind, dtype, shape, stride)
        self.regions[region][4].append(ref)
        self.regions[region][5].append(array)
        return ref

    def walk(self, value: Any, path: tuple[Any, ...], depth: int) -> Any:
        kind = type(value)
        if kind is torch.Tensor:
            name = _DTYPE_NAMES.get(value.dtype)
            if (name is None or value.layout != torch.strided or value.device.type != "cpu"
                    or value.requires_grad):
                return value
            data, perm = _tensor_layout(value)
            key = (path, "t", data.dtype, tuple(data.shape[1:])) if perm is None else None
            if data.dim() == 0:
                key = None
            return self.add(key, "t", name, data.element_size(), data, perm)
        if kind is np.ndarray:
            if value.dtype.kind not in _NUMPY_KINDS or not value.dtype.isnative:
                return value
            data = value if value.flags.c_contiguous else value.copy(order="C")
            key = (path, "n", data.dtype.str, data.shape[1:]) if data.ndim else None
            return self.add(key, "n", data.dtype.str, data.dtype.itemsize, data, None)
        if depth >= _MAX_DEPTH:
            return value
        if kind is list:
            return [self.walk(v, path, depth + 1) for v in value]
        if kind is dict:
            return {k: self.walk(v, (*path, k), depth + 1) for k, v in value.items()}
        if kind is tuple:
            return tuple(self.walk(v, path, depth + 1) for v in value)
        if kind is Instances:
            fields = {
                name: self.walk(v, (*path, "<instances>", name), depth + 1)
                for name, v in value.get_fields().items()
            }
            return _InstancesNode(value.image_size, fields)
        if kind in _STRUCTURES:
            state = {
                name: self.walk(v, (*path, kind.__name__, name), depth + 1)
                for name, v in vars(value).items()
            }
            return _StructureNode(kind, state)
        return value


def plan_batch(batch: Any) -> BatchPlan:
    """Find the arrays of ``batch`` and lay them out in an arena."""
    planner = _Planner()
    skeleton = planner.walk(batch, (), 0)
    regions: list[Region] = []
    sources_of: list[list[Any]] = []
    offset = 0
    for kind, dtype, itemsize, first_shape, refs, sources in planner.regions:
        if len(sources) == 1:
            shape, rows = first_shape, None
        else:
            rows = tuple(int(source.shape[0]) for source in sources)
            shape = (sum(rows), *first_shape[1:])
        row_elements = _numel(first_shape[1:])
        row = 0
        for ref, source in zip(refs, sources, strict=True):
            if kind == "t":
                ref.offset = offset // itemsize + row * row_elements
            else:
                ref.offset = offset + row * row_elements * itemsize
            row += int(source.shape[0]) if source.ndim else 1
        nbytes = _numel(shape) * itemsize
        regions.append(Region(offset, nbytes, kind, dtype, tuple(shape), rows))
        sources_of.append(sources)
        offset += -(-nbytes // ALIGNMENT) * ALIGNMENT
    return BatchPlan(skeleton, regions, sources_of, offset)


def write_batch(plan: BatchPlan, arena: torch.Tensor, arena_np: np.ndarray) -> None:
    """Copy the arrays of ``plan`` into ``arena`` (a uint8 tensor) / ``arena_np`` (the same
    bytes as a numpy uint8 array), at the regions' offsets.
    """
    for region, sources in zip(plan.regions, plan.sources, strict=True):
        start, stop = region.offset, region.offset + region.nbytes
        if region.kind == "t":
            target = arena[start:stop].view(_TORCH_DTYPES[region.dtype]).view(region.shape)
        else:
            target = arena_np[start:stop].view(region.dtype).reshape(region.shape)
        if region.rows is None:
            _copy(target, sources[0])
            continue
        row = 0
        for source, rows in zip(sources, region.rows, strict=True):
            _copy(target[row:row + rows], source)
            row += rows


def _copy(target: Any, source: Any) -> None:
    if isinstance(target, torch.Tensor):
        target.copy_(source)
    else:
        np.copyto(target, source)


class _Views:
    """Per-batch typed views of the arena, made once per dtype."""

    __slots__ = ("base", "base_t", "typed")

    def __init__(self, base: np.ndarray) -> None:
        self.base = base
        self.base_t = torch.from_numpy(base)
        self.typed: dict[str, torch.Tensor] = {"torch.uint8": self.base_t}

    def tensor(self, ref: _Ref) -> Any:
        if ref.kind == "n":
            dtype = np.dtype(ref.dtype)
            stop = ref.offset + _numel(ref.shape) * dtype.itemsize
            return self.base[ref.offset:stop].view(dtype).reshape(ref.shape)
        if not self.base.size:  # an empty batch arena: only empty tensors refer to it
            return torch.empty(ref.shape, dtype=_TORCH_DTYPES[ref.dtype])
        typed = self.typed.get(ref.dtype)
        if typed is None:
            typed = self.typed[ref.dtype] = self.base_t.view(_TORCH_DTYPES[ref.dtype])
        return typed.as_strided(ref.shape, ref.stride, ref.offset)


def _fill(node: Any, views: _Views) -> Any:
    kind = type(node)
    if kind is _Ref:
        return views.tensor(node)
    if kind is list:
        return [_fill(v, views) for v in node]
    if kind is dict:
        return {k: _fill(v, views) for k, v in node.items()}
    if kind is tuple:
        return tuple(_fill(v, views) for v in node)
    if kind is _InstancesNode:
        instances = Instances(node.image_size)
        fields = instances.get_fields()
        for name, value in node.fields.items():
            fields[name] = _fill(value, views)
        return instances
    if kind is _StructureNode and node.cls in _STRUCTURES:
        structure = node.cls.__new__(node.cls)
        structure.__dict__.update({k: _fill(v, views) for k, v in node.state.items()})
        return structure
    return node


def unpack_batch(skeleton: Any, base: np.ndarray) -> Any:
    """Rebuild a batch from its skeleton, every array a view of ``base``, a uint8 array of
    at least the plan's ``nbytes`` (a multiple of ``ALIGNMENT``) bytes.
    """
    return _fill(skeleton, _Views(base))
