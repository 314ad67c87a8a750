"""Shared-memory slabs: how a batch crosses from a worker to the training process.

A worker packs a batch into a slab: a *skeleton* (the structure, each array replaced by a
:class:`_Ref`) plus the arrays' bytes, one region per field across samples. The main process
rebuilds each array as a view of its mapping (no copy); a slab is reused once the batch
unpacked from it dies. Without a free slab a batch travels pickled.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import mmap
import os
import pickle
import secrets
import threading
import warnings
import weakref
from collections.abc import Callable
from multiprocessing import reduction
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch

from catalog._common import check_int, warn_limited
from mappers.instances import Instances
from mappers.structures import TRANSPORTABLE_STRUCTURES

from .errors import TransportError

T = TypeVar("T")


def value_class(cls: type[T]) -> type[T]:
    """A slotted dataclass of ``cls`` (``eq=False``) that pickles as ``(cls, field values)``
    (read at C speed: per array, per batch) unless ``cls`` has its own ``__reduce__``."""
    made: Any = dataclasses.dataclass(slots=True, eq=False)(cls)
    if "__reduce__" not in cls.__dict__:
        values = attrgetter(*made.__slots__)
        single = len(made.__slots__) == 1

        def __reduce__(self: Any) -> tuple[Any, ...]:
            return (made, (values(self),) if single else values(self))

        made.__reduce__ = __reduce__
    return made


# ---------------------------------------------------------------- packing a batch
#: Byte alignment of every region in the arena (a cache line; any dtype views cleanly).
ALIGNMENT = 64
#: Nesting deeper than this is left to pickling.
_MAX_DEPTH = 24
#: numpy dtype kinds packed (bool, signed, unsigned, float, complex).
_NUMPY_KINDS = frozenset("biufc")
_TORCH_DTYPES: dict[str, torch.dtype] = {
    str(d): d
    for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64,
              torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64)
}
#: One name object per dtype, so that pickle writes each name once per batch (memo).
_DTYPE_NAMES = {dtype: name for name, dtype in _TORCH_DTYPES.items()}


@value_class
class _Ref:
    """One array in the skeleton; ``kind`` "t" (torch, offset in elements) or "n" (numpy, bytes)."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0


@value_class
class _InstancesNode:
    """An Instances (ours, a subclass, or another library's, e.g. detectron2's), rebuilt as ``cls``."""
    cls: type
    image_size: tuple[int, int]
    fields: dict[str, Any]


@value_class
class _StructureNode:
    """A structure (``Boxes``, ``PolygonMasks`` ...), rebuilt without calling its constructor."""
    cls: type
    state: dict[str, Any]


_STRUCTURES = frozenset(TRANSPORTABLE_STRUCTURES)
#: Whether a class is Instances-like, decided once per class (see :func:`_instances_like`).
_INSTANCES_LIKE: dict[type, bool] = {Instances: True, str: False, int: False, float: False}


def _instances_like(kind: type) -> bool:
    """A subclass of our Instances, or a class named ``Instances`` with ``get_fields`` and
    ``image_size`` (detectron2's), that pickles by name (so the main process can import it)."""
    known = _INSTANCES_LIKE.get(kind)
    if known is None:
        try:
            known = ((issubclass(kind, Instances) or kind.__name__ == "Instances")
                     and callable(getattr(kind, "get_fields", None)) and hasattr(kind, "image_size")
                     and pickle.loads(pickle.dumps(kind)) is kind)
        except Exception:  # a class that pickle cannot find by name travels pickled whole
            known = False
        _INSTANCES_LIKE[kind] = known
    return known


class Region(NamedTuple):
    """One byte range of the arena: ``rows`` arrays stacked along dimension 0 (worker side)."""
    offset: int
    nbytes: int
    kind: str
    dtype: str
    shape: tuple[int, ...]
    rows: tuple[int, ...] | None


class BatchPlan(NamedTuple):
    skeleton: Any
    regions: list[Region]
    sources: list[list[Any]]
    nbytes: int


def _memory_order(value: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...] | None]:
    """(``value`` permuted into memory order, the permutation back), or ``(value, None)`` when
    no permutation makes it contiguous (it is then copied element by element)."""
    strides = value.stride()
    order = sorted(range(len(strides)), key=lambda d: (-strides[d], d))
    permuted = value.permute(order)
    if not permuted.is_contiguous():
        return value, None
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


class SlabSpace:
    """Space in a batch's slab handed out while the batch is mapped (``DatasetMapper`` resizes
    its output image straight into it: see ``mappers.dataset_mapper.image_output_space``);
    :func:`plan_batch` refers to those arrays where they are and lays the rest out after them.

    Example:
        >>> space = SlabSpace(lambda need: np.zeros(need, np.uint8))
        >>> space((2, 3), np.float32).shape, space.top
        ((2, 3), 24)
    """

    def __init__(self, arena: Callable[[int], np.ndarray]) -> None:
        self.arena = arena  # need -> the slab's bytes, at least ``need`` of them
        self.top = 0
        self.placed: dict[int, int] = {}  # data address -> offset in the slab
        self._bytes: np.ndarray | None = None
        self._address = 0  # of self._bytes

    def __call__(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        dtype = np.dtype(dtype)
        start = -(-self.top // ALIGNMENT) * ALIGNMENT
        stop = start + math.prod(shape) * dtype.itemsize
        if stop > MAX_SLAB_BYTES:
            return None  # numpy's memory; the batch is copied as usual
        arena = self.arena(stop)
        if arena is not self._bytes:  # the first call, or the slab grew and was mapped again
            self._bytes, self._address = arena, arena.ctypes.data
        self.placed[self._address + start] = start
        self.top = stop
        return arena[start:stop].view(dtype).reshape(shape)


class _Planner:
    """Collects arrays into regions while copying the structure into a skeleton."""

    def __init__(self, space: SlabSpace | None = None) -> None:
        self.placed = space.placed if space is not None else {}
        self.groups: dict[Any, int] = {}
        # per region: [kind, dtype, itemsize, memory shape of the first array, refs, sources]
        self.regions: list[list[Any]] = []

    def add(self, key: Any, kind: str, dtype: str, itemsize: int, array: Any,
            shape: tuple[int, ...], perm: tuple[int, ...] | None) -> _Ref:
        region = self.groups.get(key) if key is not None else None
        if region is None:
            region = len(self.regions)
            if key is not None:
                self.groups[key] = region
            self.regions.append([kind, dtype, itemsize, shape, [], []])
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
            if name is None or not value.is_cpu or value.layout is not torch.strided or value.requires_grad:
                return value
            start = self.placed.get(value.untyped_storage().data_ptr()) if self.placed else None
            if start is not None:  # already in the slab (SlabSpace): refer to it there
                ref = _Ref("t", name, tuple(value.shape), tuple(value.stride()))
                ref.offset = start // value.element_size() + value.storage_offset()
                return ref
            perm = None
            if not value.is_contiguous():
                value, perm = _memory_order(value)
            shape = tuple(value.shape)
            key = (path, name, shape[1:]) if shape and perm is None else None
            return self.add(key, "t", name, value.element_size(), value, shape, perm)
        if kind is np.ndarray:
            dtype = value.dtype
            if dtype.kind not in _NUMPY_KINDS or not dtype.isnative:
                return value
            shape = value.shape
            key = (path, dtype.str, shape[1:]) if shape else None
            return self.add(key, "n", dtype.str, dtype.itemsize, value, shape, None)
        if depth >= _MAX_DEPTH:
            return value
        if kind is list:
            return [self.walk(v, path, depth + 1) for v in value]
        if kind is dict:
            return {k: self.walk(v, (*path, k), depth + 1) for k, v in value.items()}
        if kind is tuple:
            return tuple(self.walk(v, path, depth + 1) for v in value)
        if kind in _STRUCTURES:
            state = {name: self.walk(v, (*path, kind.__name__, name), depth + 1)
                     for name, v in vars(value).items()}
            return _StructureNode(kind, state)
        if _instances_like(kind):
            fields = {name: self.walk(v, (*path, "<instances>", name), depth + 1)
                      for name, v in value.get_fields().items()}
            return _InstancesNode(kind, tuple(value.image_size), fields)
        return value


def plan_batch(batch: Any, space: SlabSpace | None = None) -> BatchPlan:
    """Find the arrays of ``batch`` and lay them out in an arena (after ``space``'s arrays,
    which stay where they are)."""
    planner = _Planner(space)
    skeleton = planner.walk(batch, (), 0)
    regions: list[Region] = []
    sources_of: list[list[Any]] = []
    offset = -(-space.top // ALIGNMENT) * ALIGNMENT if space is not None else 0
    for kind, dtype, itemsize, first_shape, refs, sources in planner.regions:
        if len(sources) == 1:
            shape, rows = first_shape, None
        else:
            rows = tuple(ref.shape[0] for ref in refs)  # several arrays: none permuted
            shape = (sum(rows), *first_shape[1:])
        row_elements = math.prod(first_shape[1:])
        row = 0
        for ref in refs:
            if kind == "t":
                ref.offset = offset // itemsize + row * row_elements
            else:
                ref.offset = offset + row * row_elements * itemsize
            row += ref.shape[0] if ref.shape else 1
        nbytes = math.prod(shape) * itemsize
        regions.append(Region(offset, nbytes, kind, dtype, shape, rows))
        sources_of.append(sources)
        offset += -(-nbytes // ALIGNMENT) * ALIGNMENT
    return BatchPlan(skeleton, regions, sources_of, offset)


def write_batch(plan: BatchPlan, arena: torch.Tensor, arena_np: np.ndarray) -> None:
    """Copy the arrays of ``plan`` into ``arena`` (uint8 tensor) / ``arena_np`` (same bytes)."""
    for region, sources in zip(plan.regions, plan.sources, strict=True):
        start, stop = region.offset, region.offset + region.nbytes
        if region.kind == "t":
            target = arena[start:stop].view(_TORCH_DTYPES[region.dtype]).view(region.shape)
            stack, copy = torch.cat, torch.Tensor.copy_
        else:
            target = arena_np[start:stop].view(region.dtype).reshape(region.shape)
            stack, copy = np.concatenate, np.copyto
        if region.rows is None:
            copy(target, sources[0])
        else:  # the batch's arrays of one key, stacked by one call
            stack(sources, out=target)


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
            stop = ref.offset + math.prod(ref.shape) * dtype.itemsize
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
        fields = {}
        for name, value in node.fields.items():
            fields[name] = _fill(value, views)
        if node.cls is not Instances:
            return node.cls(node.image_size, **fields)
        instances = Instances(node.image_size)
        instances.get_fields().update(fields)
        return instances
    if kind is _StructureNode and node.cls in _STRUCTURES:
        structure = node.cls.__new__(node.cls)
        structure.__dict__.update({k: _fill(v, views) for k, v in node.state.items()})
        return structure
    return node


def unpack_batch(skeleton: Any, base: np.ndarray) -> Any:
    """Rebuild a batch from its skeleton, every array a view of the uint8 array ``base``."""
    return _fill(skeleton, _Views(base))


# ---------------------------------------------------------------- the slab pool
logger = logging.getLogger(__name__)

#: Default (virtual, sparse) size of a slab; a larger batch grows its slab.
DEFAULT_SLAB_BYTES = 256 << 20
#: A batch larger than this travels pickled instead.
MAX_SLAB_BYTES = 16 << 30
_PAGE = mmap.PAGESIZE
_FREE, _ASSIGNED, _RECEIVED = 0, 1, 2

#: Pools of this process by token, so that a handle unpickled here finds its pool.
_POOLS: weakref.WeakValueDictionary[str, SlabPool] = weakref.WeakValueDictionary()


def transport_supported() -> bool:
    """Whether this platform has anonymous shared files (Linux ``memfd_create``)."""
    return hasattr(os, "memfd_create")


@value_class
class Ticket:
    slab: int
    serial: int


@value_class
class SlabBatch:
    """What a worker returns for a batch written into a slab."""
    token: str
    slab: int
    serial: int
    nbytes: int
    skeleton: Any

    def __reduce__(self) -> tuple[Any, ...]:
        return (_receive, (self.token, self.slab, self.serial, self.nbytes, self.skeleton))


def _receive(token: str, slab: int, serial: int, nbytes: int, skeleton: Any) -> Any:
    handle = SlabBatch(token, slab, serial, nbytes, skeleton)
    pool = _POOLS.get(token)
    return pool.receive(handle) if pool is not None else handle


class ReceivedBatch:
    """A handle in the main process; dropped without :meth:`unpack`, it frees its slab."""

    __slots__ = ("pool", "handle", "__weakref__")

    def __init__(self, pool: SlabPool, handle: SlabBatch) -> None:
        self.pool: SlabPool | None = pool
        self.handle = handle

    def unpack(self) -> Any:
        pool, handle = self.pool, self.handle
        if pool is None:
            raise TransportError(f"batch in slab {handle.slab} was already unpacked")
        self.pool = None
        return pool.unpack(handle)

    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            self.pool = None
            pool.release(self.handle.slab, self.handle.serial)


class SlabWriter:
    """The worker side of a pool: maps slabs once per process."""

    def __init__(self, token: str, fds: list[int]) -> None:
        self.token = token
        self.fds = fds
        self._pid = -1
        self._maps: dict[int, tuple[mmap.mmap, torch.Tensor, np.ndarray]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # spawn / forkserver workers: the file descriptors travel with the process start.
        return (_open_writer, (self.token, [reduction.DupFd(fd) for fd in self.fds]))

    def _arena(self, slab: int, need: int) -> tuple[torch.Tensor, np.ndarray]:
        if self._pid != os.getpid():
            self._pid, self._maps = os.getpid(), {}
        entry = self._maps.get(slab)
        if entry is None or len(entry[0]) < need:
            fd = self.fds[slab]
            size = os.fstat(fd).st_size
            if size < need:
                size = -(-max(need, 2 * size) // _PAGE) * _PAGE
                os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
            arena_np = np.frombuffer(mapping, dtype=np.uint8)
            entry = self._maps[slab] = (mapping, torch.from_numpy(arena_np), arena_np)
        return entry[1], entry[2]

    def space(self, ticket: Ticket) -> SlabSpace:
        """Space in ``ticket``'s slab for the arrays of the batch being mapped."""
        return SlabSpace(lambda need: self._arena(ticket.slab, need)[1])

    def write(self, ticket: Ticket | None, batch: Any, space: SlabSpace | None = None) -> Any:
        if ticket is None:
            return batch
        plan = plan_batch(batch, space)
        if plan.nbytes > MAX_SLAB_BYTES:
            warn_limited(logger, "transport.oversized_batch",
                         "a batch of %d bytes travels pickled (slab limit %d)",
                         plan.nbytes, MAX_SLAB_BYTES)
            return SlabBatch(self.token, ticket.slab, ticket.serial, 0, batch)
        if plan.nbytes:
            arena, arena_np = self._arena(ticket.slab, plan.nbytes)
            write_batch(plan, arena, arena_np)
        return SlabBatch(self.token, ticket.slab, ticket.serial, plan.nbytes, plan.skeleton)


def _open_writer(token: str, dupfds: list[Any]) -> SlabWriter:
    return SlabWriter(token, [dupfd.detach() for dupfd in dupfds])


class SlabPool:
    """``num_slabs`` shared slabs of ``slab_bytes`` (virtual, sparse) each; slab ``s`` serves
    lane (worker) ``s % lanes`` first: a process's first write to a slab faults in each page
    (~10,000 for 16 training images), once per worker, not per (worker, slab) pair."""

    def __init__(self, num_slabs: int, *, slab_bytes: int = DEFAULT_SLAB_BYTES,
                 pin_memory: bool = False, lanes: int = 1) -> None:
        if not transport_supported():
            raise TransportError("the slab transport needs os.memfd_create (Linux)")
        num_slabs = check_int(num_slabs, "num_slabs", minimum=1, error=ValueError, where="SlabPool")
        slab_bytes = check_int(slab_bytes, "slab_bytes", minimum=_PAGE, error=ValueError, where="SlabPool")
        self.token = secrets.token_hex(8)
        self.slab_bytes = -(-slab_bytes // _PAGE) * _PAGE
        # re-entrant: a batch freed by the garbage collector inside a locked section
        # releases its slab from the same thread
        self._lock = threading.RLock()
        self._fds: list[int] = []
        try:
            for slab in range(num_slabs):
                fd = os.memfd_create(f"catmap-slab-{slab}", os.MFD_CLOEXEC)
                self._fds.append(fd)
                os.ftruncate(fd, self.slab_bytes)
        except OSError as exc:
            self._close_fds()
            raise TransportError(f"SlabPool: cannot create {num_slabs} shared slabs: {exc}") from exc
        self._maps: list[mmap.mmap | None] = [None] * num_slabs
        self._state = [_FREE] * num_slabs
        self._serial = [0] * num_slabs
        self._generation = [0] * num_slabs
        self.lanes = check_int(lanes, "lanes", minimum=1, error=ValueError, where="SlabPool")
        self._free: list[list[int]] = [[] for _ in range(self.lanes)]
        for slab in range(num_slabs - 1, -1, -1):
            self._free[slab % self.lanes].append(slab)
        self._next_serial = 0
        self._closed = False
        self._pinned: dict[int, tuple[int, int]] = {}
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if pin_memory and not self.pin_memory:
            warnings.warn("pin_memory=True but no CUDA device is available: batches are not pinned",
                          stacklevel=2)
        self.fallbacks = 0
        self.writer = SlabWriter(self.token, list(self._fds))  # the workers' side
        _POOLS[self.token] = self

    @property
    def num_slabs(self) -> int:
        return len(self._state)

    def free_count(self) -> int:
        """Slabs neither in flight nor held by a live batch."""
        with self._lock:
            return sum(map(len, self._free))

    def assign(self, generation: int, lane: int = 0) -> Ticket | None:
        """A free slab (``lane``'s own if it has one) for the next batch of iterator
        ``generation``; None when none is free: the batch travels pickled."""
        with self._lock:
            free = self._free[lane % self.lanes]
            if not free:
                free = max(self._free, key=len)
            if self._closed or not free:
                self.fallbacks += 1
                return None
            slab = free.pop()
            self._next_serial += 1
            self._state[slab] = _ASSIGNED
            self._serial[slab] = self._next_serial
            self._generation[slab] = generation
            return Ticket(slab, self._next_serial)

    def receive(self, handle: SlabBatch) -> ReceivedBatch:
        with self._lock:
            if self._serial[handle.slab] == handle.serial and self._state[handle.slab] == _ASSIGNED:
                self._state[handle.slab] = _RECEIVED
            else:
                raise TransportError(
                    f"a batch arrived for slab {handle.slab} serial {handle.serial}, which is no "
                    "longer assigned to it (the loader was reset while the batch was in flight)")
        return ReceivedBatch(self, handle)

    def release(self, slab: int, serial: int) -> None:
        with self._lock:
            if self._serial[slab] != serial or self._state[slab] == _FREE:
                return
            self._state[slab] = _FREE
            if self._closed:
                self._drop(slab)
            else:
                self._free[slab % self.lanes].append(slab)

    def reclaim(self, generation: int) -> int:
        """Free (and count) the slabs of ``generation`` whose batch never came; workers are dead."""
        freed = 0
        with self._lock:
            for slab, state in enumerate(self._state):
                if state == _ASSIGNED and self._generation[slab] == generation:
                    self._state[slab] = _FREE
                    self._serial[slab] = 0
                    freed += 1
                    if self._closed:
                        self._drop(slab)
                    else:
                        self._free[slab % self.lanes].append(slab)
        return freed

    def _mapping(self, slab: int, nbytes: int) -> mmap.mmap:
        mapping = self._maps[slab]
        if mapping is None or len(mapping) < nbytes:
            self._unpin(slab)
            size = os.fstat(self._fds[slab]).st_size
            mapping = self._maps[slab] = mmap.mmap(self._fds[slab], max(size, nbytes))
        return mapping

    def unpack(self, handle: SlabBatch) -> Any:
        slab, serial, nbytes = handle.slab, handle.serial, handle.nbytes
        if nbytes == 0:
            self.release(slab, serial)
            return unpack_batch(handle.skeleton, np.empty(0, dtype=np.uint8))
        with self._lock:
            if self._closed:
                raise TransportError(f"the loader was closed; slab {slab} is gone")
            mapping = self._mapping(slab, nbytes)
            if self.pin_memory:
                self._pin(slab, mapping, nbytes)
        base = np.frombuffer(mapping, dtype=np.uint8, count=nbytes)
        weakref.finalize(base, self.release, slab, serial)
        return unpack_batch(handle.skeleton, base)

    def _pin(self, slab: int, mapping: mmap.mmap, nbytes: int) -> None:
        pinned = self._pinned.get(slab)
        if pinned is not None and pinned[1] >= nbytes:
            return
        self._unpin(slab)
        size = min(len(mapping), -(-(nbytes + nbytes // 4) // (2 << 20)) * (2 << 20))
        pointer = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
        result = torch.cuda.cudart().cudaHostRegister(pointer, size, 0)
        code = int(getattr(result, "value", result))
        if code != 0:
            warnings.warn(f"cudaHostRegister failed ({code}); batches are not pinned", stacklevel=2)
            self.pin_memory = False
            return
        self._pinned[slab] = (pointer, size)

    def _unpin(self, slab: int) -> None:
        pinned = self._pinned.pop(slab, None)
        if pinned is not None:
            torch.cuda.cudart().cudaHostUnregister(pinned[0])

    def _drop(self, slab: int) -> None:
        self._unpin(slab)
        self._maps[slab] = None

    def _close_fds(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []

    def close(self) -> None:
        """Unmap free slabs now, held ones when their batch dies."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for slab, state in enumerate(self._state):
                if state == _FREE:
                    self._drop(slab)
            self._free = [[] for _ in range(self.lanes)]
            self._close_fds()
        _POOLS.pop(self.token, None)

    def __repr__(self) -> str:
        return (f"SlabPool({self.num_slabs} slabs, {self.free_count()} free, "
                f"fallbacks={self.fallbacks}, pinned={self.pin_memory})")
