"""How batches travel from loader workers to the training process, and what a fault becomes.

``transport="slab"`` (default with workers on Linux) writes each batch into a shared slab
(:mod:`samplers.slabs`): a plain DataLoader spends ~1 ms of main-process CPU per image on
shared-memory tensors. A worker exception travels whole (:class:`WorkerFailure`); a
:class:`ProgressBoard` names the worker and index behind a timeout or a dead worker.
"""

from __future__ import annotations

import functools
import logging
import mmap
import operator
import os
import pickle
import re
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import reduction
from typing import Any

import numpy as np
from torch.utils.data import Sampler, get_worker_info
from torch.utils.data._utils.pin_memory import pin_memory as _pin_batch

from catalog._common import check_float
from mappers.dataset_mapper import image_output_space
from mappers.errors import add_context

from .errors import BatchPickleError, LoaderTimeoutError, LoaderWorkerError, SamplerConfigError, TransportError, WorkerExitedError
from .slabs import (
    DEFAULT_SLAB_BYTES, ReceivedBatch, SlabBatch, SlabPool, SlabSpace, SlabWriter, Ticket,
    transport_supported,
    value_class,
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- worker faults
def _where(worker_id: int | None, index: int | None) -> str:
    text = f"DataLoader worker {worker_id}"
    return text + (f", dataset index {index}" if index is not None else "")


@value_class
class WorkerFailure:
    """An exception raised in a worker, on its way to the main process."""

    payload: bytes | None
    type_name: str
    message: str
    trace: str
    worker_id: int | None
    index: int | None
    ticket: Any = None

    @classmethod
    def capture(cls, exc: BaseException, *, worker_id: int | None, index: int | None,
                ticket: Any = None) -> WorkerFailure:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            payload: bytes | None = pickle.dumps(exc)
            pickle.loads(payload)  # an exception whose constructor needs more args fails here
        except Exception:
            payload = None
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return cls(payload, name, str(exc), trace, worker_id, index, ticket)

    def to_exception(self) -> BaseException:
        """The exception to raise in the main process (original type where possible)."""
        where = _where(self.worker_id, self.index)
        exc: Any = None
        if self.payload is not None:
            try:
                exc = pickle.loads(self.payload)
            except Exception:
                exc = None
        if not isinstance(exc, Exception):
            return LoaderWorkerError(
                f"{self.type_name} in {where}: {self.message}\n{self.trace}",
                worker_id=self.worker_id, index=self.index, exc_type=self.type_name,
            )
        add_context(exc, where)
        exc.add_note(f"Traceback in {where}:\n{self.trace}")
        return exc


class ProgressBoard:
    """One int64 slot per worker in shared memory: the dataset index it maps now (-1: none)."""

    def __init__(self, num_workers: int, fd: int | None = None) -> None:
        self.num_workers = num_workers
        size = max(num_workers, 1) * 8
        fresh = fd is None
        if fd is None:
            fd = os.memfd_create("catmap-progress", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
        self._fd = fd
        self._map = mmap.mmap(fd, size)
        self._slots = np.frombuffer(self._map, dtype=np.int64)
        if fresh:
            self._slots[:] = -1

    def __reduce__(self) -> tuple[Any, ...]:
        return (_open_board, (self.num_workers, reduction.DupFd(self._fd)))

    def set(self, worker_id: int, index: int) -> None:
        if 0 <= worker_id < self.num_workers:
            self._slots[worker_id] = index

    def get(self, worker_id: int | None) -> int | None:
        if worker_id is None or not 0 <= worker_id < self.num_workers:
            return None
        value = int(self._slots[worker_id])
        return value if value >= 0 else None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_board(num_workers: int, dupfd: Any) -> ProgressBoard:
    return ProgressBoard(num_workers, dupfd.detach())


def _waiting_for(iterator: Any) -> int | None:
    """The worker id torch's iterator waits on (private torch state)."""
    info = getattr(iterator, "_task_info", {}).get(getattr(iterator, "_rcvd_idx", -1))
    return int(info[0]) if info else None


def convert_loader_error(exc: BaseException, iterator: Any, board: ProgressBoard | None,
                         timeout: float) -> BaseException | None:
    """A typed error for torch's timeout / dead-worker ``RuntimeError``, else None."""
    if not isinstance(exc, RuntimeError):
        return None
    message = str(exc)
    if message.startswith("DataLoader timed out"):
        worker_id = _waiting_for(iterator)
        index = board.get(worker_id) if board is not None else None
        return LoaderTimeoutError(
            f"no batch within timeout={timeout} s: waiting for {_where(worker_id, index)}"
            f"{'' if index is not None else ' (not mapping any sample)'}; raise the loader's "
            "timeout, or pass timeout=0 to wait forever",
            worker_id=worker_id, index=index, timeout=timeout,
        )
    if message.startswith("DataLoader worker (pid"):
        found = re.match(r"DataLoader worker \(pid(?:\(s\))?\s+([\d,\s]+)\)", message)
        pids = [int(p) for p in re.findall(r"\d+", found.group(1))] if found else []
        workers = list(getattr(iterator, "_workers", []))
        worker_id = next((i for i, w in enumerate(workers) if w.pid in pids), None)
        index = board.get(worker_id) if board is not None else None
        return WorkerExitedError(
            f"{_where(worker_id, index)} (pid {pids[0] if pids else '?'}) exited unexpectedly: "
            f"{message}",
            worker_id=worker_id, pid=pids[0] if pids else None, index=index,
        )
    return None


# ---------------------------------------------------------------- the transport
#: Seconds a loader waits for one batch from its workers before LoaderTimeoutError.
DEFAULT_TIMEOUT = 300.0
#: Accepted values of the loaders' ``transport`` option.
TRANSPORTS = ("auto", "slab", "dataloader")
#: Slabs beyond the batches in flight: the batch the caller holds, the one before it, spares.
_SPARE_SLABS = 4


@value_class
class ChainedWorkerInit:
    """A picklable ``worker_init_fn``: catmap's seeding first, then the user's function."""

    first: Callable[[int], Any]
    then: Callable[[int], Any]

    def __call__(self, worker_id: int) -> None:
        self.first(worker_id)
        self.then(worker_id)


def trivial_batch_collator(batch: list[Any]) -> list[Any]:
    """A ``collate_fn`` returning the batch as the list of samples it is (the default; with it,
    ``DatasetMapper`` resizes images straight into the batch's slab, which a collate that
    copies them would waste)."""
    return batch


@value_class
class _Fetched:
    """Samples of one batch from WorkerDataset to TransportCollate (in a worker)."""

    ticket: Ticket | None
    samples: list[Any]
    indices: list[int | None]
    space: SlabSpace | None


def _worker_id() -> int | None:
    info = get_worker_info()
    return info.id if info is not None else None


def _dataset_index(key: Any) -> int | None:
    try:
        return operator.index(key[0] if type(key) is tuple else key)
    except (TypeError, IndexError):
        return None


class WorkerDataset:
    """The dataset in the workers: fetches a batch of keys (after an optional slab ticket),
    records progress, turns an exception into a :class:`WorkerFailure`.
    """

    def __init__(self, dataset: Any, board: ProgressBoard | None,
                 writer: SlabWriter | None = None) -> None:
        self.dataset = dataset
        self.board = board
        self.writer = writer

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        return self.dataset[key]

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        ticket = None
        if keys and type(keys[0]) is Ticket:
            ticket, keys = keys[0], keys[1:]
        worker, board, dataset = _worker_id(), self.board, self.dataset
        progress = (functools.partial(board.set, worker)  # names the sample a hang is in
                    if board is not None and worker is not None else None)
        samples, indices, index = [], [], None
        # with a slab, DatasetMapper resizes each image straight into it
        space = self.writer.space(ticket) if ticket is not None and self.writer else None
        token = image_output_space.set(space)
        try:
            prepare = getattr(dataset, "prepare_keys", None)  # a batch's seeds, made together
            for key in keys if prepare is None else prepare(keys, progress):
                index = _dataset_index(key)
                indices.append(index)
                if progress is not None and index is not None:
                    progress(index)
                samples.append(dataset[key])
        except Exception as exc:
            if progress is not None:
                progress(-1)
            return [WorkerFailure.capture(exc, worker_id=worker, index=index, ticket=ticket)]
        finally:
            image_output_space.reset(token)
        return [_Fetched(ticket, samples, indices, space)]

    def __repr__(self) -> str:
        return f"WorkerDataset({self.dataset!r})"


class TransportCollate:
    """The ``collate_fn`` of both transports: the user's collate, then (with a ticket) the slab."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any], writer: SlabWriter | None,
                 board: ProgressBoard | None) -> None:
        self.collate_fn = collate_fn
        self.writer = writer
        self.board = board

    def __call__(self, data: list[Any]) -> Any:
        item = data[0] if len(data) == 1 else None
        if type(item) is WorkerFailure:
            return item
        if type(item) is not _Fetched:
            return self.collate_fn(data)
        worker = _worker_id()
        try:
            batch = self.collate_fn(item.samples)
            if self.writer is not None and item.ticket is not None:
                batch = self.writer.write(item.ticket, batch, item.space)
            return batch if worker is None else _Outgoing(batch, worker, item.indices, item.ticket)
        except Exception as exc:
            return WorkerFailure.capture(exc, worker_id=worker, index=None, ticket=item.ticket)
        finally:
            if self.board is not None and worker is not None:
                self.board.set(worker, -1)


def _unpicklable_key(value: Any, path: str = "batch", depth: int = 0) -> str:
    """The path of the innermost value in ``value`` that fails to pickle (a failure path only)."""
    if type(value) is SlabBatch:
        return _unpicklable_key(value.skeleton, path, depth)
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    elif hasattr(value, "__dict__"):
        items = ((f".{name}", v) for name, v in vars(value).items())
    else:
        return path
    for key, item in items:
        inner = f"{path}{key}" if type(key) is str and key[:1] == "." else f"{path}[{key!r}]"
        try:
            reduction.ForkingPickler.dumps(item)
        except Exception:
            return _unpicklable_key(item, inner, depth + 1) if depth < 8 else inner
    return path


class _Outgoing:
    """A batch leaving a worker, pickled by the queue's feeder thread: a batch that fails to
    pickle there would only be printed, and the main process would wait for it until the
    timeout. Pickled here first, it becomes a :class:`WorkerFailure` instead."""

    __slots__ = ("batch", "worker_id", "indices", "ticket")

    def __init__(self, batch: Any, worker_id: int, indices: list[int | None], ticket: Any) -> None:
        self.batch, self.worker_id, self.indices, self.ticket = batch, worker_id, indices, ticket

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            return (pickle.loads, (bytes(reduction.ForkingPickler.dumps(self.batch)),))
        except Exception as exc:
            key = _unpicklable_key(self.batch)
            error = BatchPickleError(
                f"the batch of dataset indices {self.indices} cannot be sent from DataLoader "
                f"worker {self.worker_id}: {key} cannot be pickled ({type(exc).__name__}: {exc}); "
                "a mapper must return picklable values (no lambdas, locks, open files)",
                worker_id=self.worker_id, index=self.indices[0] if self.indices else None, key=key,
            )
            return WorkerFailure.capture(error, worker_id=self.worker_id, index=error.index,
                                         ticket=self.ticket).__reduce__()


class TicketedBatchSampler(Sampler[list[Any]]):
    """Puts a slab ticket in front of each index batch (none when no slab is free)."""

    def __init__(self, inner: Any, pool: SlabPool) -> None:
        self.inner = inner
        self.pool = pool
        self.generation = 0

    def __iter__(self) -> Iterator[list[Any]]:
        self.generation += 1
        return self._batches(self.generation)

    def _batches(self, generation: int) -> Iterator[list[Any]]:
        # the DataLoader hands an iterator's k-th index batch to worker k % num_workers
        pool = self.pool
        for lane, batch in enumerate(self.inner):
            ticket = pool.assign(generation, lane)
            yield batch if ticket is None else [ticket, *batch]

    def __len__(self) -> int:
        return len(self.inner)


class LoaderTransport:
    """Everything a loader with workers needs besides the DataLoader itself."""

    def __init__(self, *, transport: Any = "auto", num_workers: int = 0,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory: bool = False, timeout: Any = None, slabs: int | None = None,
                 slab_bytes: int = DEFAULT_SLAB_BYTES) -> None:
        if transport not in TRANSPORTS:
            raise SamplerConfigError(
                f"loader: transport must be one of {TRANSPORTS}, got {transport!r}")
        if transport == "slab" and num_workers and not transport_supported():
            raise SamplerConfigError(
                "loader: transport='slab' needs os.memfd_create (Linux); use transport='auto'")
        # "auto" off Linux: the DataLoader's own transport
        self.kind = "slab" if num_workers and transport != "dataloader" and transport_supported() else "dataloader"
        # seconds for one batch: None gives DEFAULT_TIMEOUT with workers (0 without); 0: forever
        self.timeout = (
            (DEFAULT_TIMEOUT if num_workers > 0 else 0.0) if timeout is None
            else check_float(timeout, "timeout (seconds)", minimum=0, finite=False,
                             error=SamplerConfigError, where="loader"))
        self.num_workers = num_workers
        self.persistent_workers = bool(persistent_workers) and num_workers > 0
        self.pin_memory = bool(pin_memory)
        self.board = (ProgressBoard(num_workers)
                      if num_workers > 0 and transport_supported() else None)
        self.pool: SlabPool | None = None
        if self.kind == "slab":
            count = slabs if slabs is not None else num_workers * (prefetch_factor or 2) + _SPARE_SLABS
            self.pool = SlabPool(count, slab_bytes=slab_bytes, pin_memory=self.pin_memory,
                                 lanes=num_workers)
        self._sampler: TicketedBatchSampler | None = None

    def dataloader_kwargs(self, dataset: Any, batch_sampler: Any,
                          collate_fn: Callable[[list[Any]], Any]) -> dict[str, Any]:
        """The DataLoader arguments with workers (without, a plain DataLoader needs none)."""
        if self.pool is not None:
            self._sampler = TicketedBatchSampler(batch_sampler, self.pool)
            batch_sampler = self._sampler
        writer = self.pool.writer if self.pool is not None else None
        placing = writer if collate_fn is trivial_batch_collator else None
        return {"dataset": WorkerDataset(dataset, self.board, placing), "batch_sampler": batch_sampler,
                "collate_fn": TransportCollate(collate_fn, writer, self.board),
                "pin_memory": self.pin_memory and self.pool is None, "timeout": self.timeout}

    def iterate(self, loader: Any) -> Iterator[Any]:
        iterator = iter(loader)
        generation = self._sampler.generation if self._sampler is not None else 0
        return self._batches(loader, iterator, generation)

    def _batches(self, loader: Any, iterator: Any, generation: int) -> Iterator[Any]:
        workers_failed = False
        try:
            while True:
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                except RuntimeError as exc:
                    typed = convert_loader_error(exc, iterator, self.board, self.timeout)
                    if typed is None:
                        raise
                    workers_failed = True
                    # torch's frames hold batches that arrived out of order: let them go
                    traceback.clear_frames(exc.__traceback__)
                    raise typed from exc
                yield self.receive(item)
        finally:
            self._finish(loader, iterator, generation, workers_failed)

    def receive(self, item: Any) -> Any:
        kind = type(item)
        if kind is ReceivedBatch:
            return item.unpack()
        if kind is WorkerFailure:
            ticket = item.ticket
            if ticket is not None and self.pool is not None:
                self.pool.release(ticket.slab, ticket.serial)
            raise item.to_exception()
        if kind is SlabBatch:
            raise TransportError(
                f"a batch arrived for slab {item.slab} of a closed loader (pool {item.token})")
        if self.pool is not None and self.pool.pin_memory:
            return _pin_batch(item)
        return item

    def _finish(self, loader: Any, iterator: Any, generation: int, workers_failed: bool) -> None:
        """Stop the workers (unless persistent and healthy); free slabs that never came back."""
        if self.persistent_workers and not workers_failed:
            return
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        buffered = getattr(iterator, "_task_info", None)
        if isinstance(buffered, dict):
            buffered.clear()  # batches that arrived out of order and will never be delivered
        if workers_failed and getattr(loader, "_iterator", None) is iterator:
            loader._iterator = None  # persistent workers died: the next iter() starts new ones
        workers = getattr(iterator, "_workers", [])
        if self.pool is not None and not any(w.is_alive() for w in workers):
            freed = self.pool.reclaim(generation)
            if freed:
                logger.debug("freed %d slabs of batches that never arrived", freed)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.board is not None:
            self.board.close()

    def __repr__(self) -> str:
        return f"LoaderTransport({self.kind!r}, timeout={self.timeout}, pool={self.pool!r})"
