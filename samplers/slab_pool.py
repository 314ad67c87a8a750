"""A pool of shared-memory slabs that carry batches from loader workers to the main process.

Each slab is an anonymous shared file (``memfd_create``: nothing in ``/dev/shm``, gone when the
last process closes it) created once per loader, before the workers start, and mapped once
in each process. The main process owns all bookkeeping: it *assigns* a free slab to each index
batch it sends to a worker (a :class:`Ticket` travels with the indices), the worker writes the
batch's arrays into that slab (:class:`SlabWriter`) and returns a small :class:`SlabBatch`
handle, and the main process rebuilds the batch as views of its own mapping of the slab
(:meth:`ReceivedBatch.unpack`). The slab goes back to the free list only when nothing
references the batch any more (a ``weakref.finalize`` on the array every view hangs from); a
batch the user keeps never changes. When no slab is free, the batch travels the ordinary,
pickled way. Slabs are sparse files: memory is used only up to the largest batch written, and
a batch larger than a slab grows it (``ftruncate``; the main process maps the larger file
once).


Example:
    >>> pool = SlabPool(2, slab_bytes=1 << 20)
    >>> ticket = pool.assign(generation=1)
    >>> handle = pool.writer().write(ticket, [{"x": np.arange(4)}])
    >>> batch = pool.receive(handle).unpack()
    >>> batch[0]["x"].tolist(), pool.free_count()
    ([0, 1, 2, 3], 1)
    >>> del batch; pool.free_count()
    2
    >>> pool.close()
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import threading
import warnings
import weakref
from multiprocessing import reduction
from typing import Any

import numpy as np
import torch

from catalog.log_limits import warn_limited
from catalog.validation import check_int

from .batch_pack import plan_batch, unpack_batch, write_batch
from .errors import SamplerError
from .value_class import value_class

__all__ = ["ReceivedBatch", "SlabBatch", "SlabPool", "SlabWriter", "Ticket", "TransportError"]

logger = logging.getLogger(__name__)

#: Default (virtual, sparse) size of a slab; a larger batch grows its slab.
DEFAULT_SLAB_BYTES = 256 << 20
#: A batch larger than this travels pickled instead.
MAX_SLAB_BYTES = 16 << 30
_PAGE = mmap.PAGESIZE
_FREE, _ASSIGNED, _RECEIVED = 0, 1, 2

#: Pools of this process by token, so that a handle unpickled here finds its pool.
_POOLS: weakref.WeakValueDictionary[str, SlabPool] = weakref.WeakValueDictionary()


class TransportError(SamplerError, RuntimeError):
    """A batch handle cannot be turned into a batch (its loader was closed, or it is stale)."""


def transport_supported() -> bool:
    """Whether this platform has anonymous shared files (Linux ``memfd_create``)."""
    return hasattr(os, "memfd_create")


@value_class
class Ticket:
    """Slab ``slab`` for the batch numbered ``serial`` (sent to a worker with the indices)."""

    slab: int
    serial: int


@value_class
class SlabBatch:
    """What a worker returns for a batch written into a slab: where, how big, the skeleton."""

    token: str
    slab: int
    serial: int
    nbytes: int
    skeleton: Any

    def __reduce__(self) -> tuple[Any, ...]:
        return (_receive, (self.token, self.slab, self.serial, self.nbytes, self.skeleton))


def _receive(token: str, slab: int, serial: int, nbytes: int, skeleton: Any) -> Any:
    """Unpickling a SlabBatch in the process that owns its pool gives a ReceivedBatch."""
    handle = SlabBatch(token, slab, serial, nbytes, skeleton)
    pool = _POOLS.get(token)
    return pool.receive(handle) if pool is not None else handle


class ReceivedBatch:
    """A handle that arrived in the main process. :meth:`unpack` gives the batch; a handle
    dropped without unpacking (a prefetched batch nobody asked for) frees its slab.
    """

    __slots__ = ("pool", "handle", "__weakref__")

    def __init__(self, pool: SlabPool, handle: SlabBatch) -> None:
        self.pool: SlabPool | None = pool
        self.handle = handle

    def unpack(self) -> Any:
        """The batch, every array a view of the slab (no copy)."""
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
    """The worker side of a pool: maps slabs once per process and writes batches into them."""

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
                size = max(need, 2 * size)
                size = -(-size // _PAGE) * _PAGE
                os.ftruncate(fd, size)
            self._maps.pop(slab, None)
            mapping = mmap.mmap(fd, size)
            arena_np = np.frombuffer(mapping, dtype=np.uint8)
            entry = (mapping, torch.from_numpy(arena_np), arena_np)
            self._maps[slab] = entry
        return entry[1], entry[2]

    def write(self, ticket: Ticket | None, batch: Any) -> Any:
        """Write ``batch`` into the ticket's slab and return its :class:`SlabBatch`; without a
        ticket, or for a batch larger than ``MAX_SLAB_BYTES``, return ``batch`` itself.
        """
        if ticket is None:
            return batch
        plan = plan_batch(batch)
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
    """``num_slabs`` shared slabs of ``slab_bytes`` (virtual) each; see the module docstring."""

    def __init__(self, num_slabs: int, *, slab_bytes: int = DEFAULT_SLAB_BYTES,
                 pin_memory: bool = False) -> None:
        if not transport_supported():
            raise TransportError("the slab transport needs os.memfd_create (Linux)")
        num_slabs = check_int(num_slabs, "num_slabs", minimum=1, error=ValueError, where="SlabPool")
        slab_bytes = check_int(
            slab_bytes, "slab_bytes", minimum=_PAGE, error=ValueError, where="SlabPool"
        )
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
        self._free = list(range(num_slabs - 1, -1, -1))
        self._next_serial = 0
        self._closed = False
        self._pinned: dict[int, tuple[int, int]] = {}
        self.pin_memory = bool(pin_memory) and self._cuda_ok()
        self.fallbacks = 0
        self._writer = SlabWriter(self.token, list(self._fds))
        _POOLS[self.token] = self

    @staticmethod
    def _cuda_ok() -> bool:
        if torch.cuda.is_available():
            return True
        warnings.warn("pin_memory=True but no CUDA device is available: batches are not pinned",
                      stacklevel=3)
        return False

    @property
    def num_slabs(self) -> int:
        """Number of slabs."""
        return len(self._state)

    def writer(self) -> SlabWriter:
        """The picklable worker side of this pool."""
        return self._writer

    def free_count(self) -> int:
        """Slabs neither in flight nor held by a live batch."""
        with self._lock:
            return len(self._free)

    def assign(self, generation: int) -> Ticket | None:
        """A free slab for the next batch of iterator ``generation``, or None (the batch then
        travels pickled).
        """
        with self._lock:
            if self._closed or not self._free:
                self.fallbacks += 1
                return None
            slab = self._free.pop()
            self._next_serial += 1
            self._state[slab] = _ASSIGNED
            self._serial[slab] = self._next_serial
            self._generation[slab] = generation
            return Ticket(slab, self._next_serial)

    def receive(self, handle: SlabBatch) -> ReceivedBatch:
        """Take a handle that arrived from a worker (called by unpickling)."""
        with self._lock:
            if self._serial[handle.slab] == handle.serial and self._state[handle.slab] == _ASSIGNED:
                self._state[handle.slab] = _RECEIVED
            else:
                raise TransportError(
                    f"a batch arrived for slab {handle.slab} serial {handle.serial}, which is no "
                    "longer assigned to it (the loader was reset while the batch was in flight)"
                )
        return ReceivedBatch(self, handle)

    def release(self, slab: int, serial: int) -> None:
        """Return a slab to the free list (no-op unless ``serial`` is its current batch)."""
        with self._lock:
            if self._serial[slab] != serial or self._state[slab] == _FREE:
                return
            self._state[slab] = _FREE
            if self._closed:
                self._drop(slab)
            else:
                self._free.append(slab)

    def reclaim(self, generation: int) -> int:
        """Free the slabs assigned in ``generation`` whose batch never arrived; call only once
        the workers of that generation are dead. Returns how many were freed.
        """
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
                        self._free.append(slab)
        return freed

    def _mapping(self, slab: int, nbytes: int) -> mmap.mmap:
        mapping = self._maps[slab]
        if mapping is None or len(mapping) < nbytes:
            self._unpin(slab)
            size = os.fstat(self._fds[slab]).st_size
            mapping = self._maps[slab] = mmap.mmap(self._fds[slab], max(size, nbytes))
        return mapping

    def unpack(self, handle: SlabBatch) -> Any:
        """The batch of a received handle as views of the slab (see :class:`ReceivedBatch`)."""
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
            warnings.warn(f"cudaHostRegister failed ({code}); batches are not pinned",
                          stacklevel=2)
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
        """Close the pool: free slabs are unmapped now, held ones when their batch dies. The
        shared files disappear once the workers have exited too.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for slab, state in enumerate(self._state):
                if state == _FREE:
                    self._drop(slab)
            self._free = []
            self._close_fds()
        _POOLS.pop(self.token, None)

    def __repr__(self) -> str:
        return (f"SlabPool({self.num_slabs} slabs, {self.free_count()} free, "
                f"fallbacks={self.fallbacks}, pinned={self.pin_memory})")
