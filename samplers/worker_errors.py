"""Loader worker faults end in typed errors that name the worker and the dataset index.

* :class:`WorkerFailure` carries an exception raised in a worker to the main process whole
  (pickled: a ``CatmapError`` keeps its type and fields, e.g. ``RefetchExhaustedError.index``),
  where it is raised with ``[DataLoader worker W, dataset index I]`` added to its message and
  the worker's traceback as a note. torch's own re-raise rebuilds ``type(msg)`` and loses the
  fields. An exception that cannot be pickled arrives as :class:`LoaderWorkerError`.
* :class:`ProgressBoard`: each worker writes the dataset index it is mapping into a small
  shared array, so a timeout or a dead worker can name it.
* :func:`convert_loader_error` turns torch's ``RuntimeError`` for a timeout into
  ``samplers.errors.LoaderTimeoutError`` and for a dead worker into :class:`WorkerExitedError`.


Example:
    >>> try:
    ...     raise KeyError("file_name")
    ... except KeyError as exc:
    ...     failure = WorkerFailure.capture(exc, worker_id=1, index=7)
    >>> error = failure.to_exception()
    >>> type(error).__name__, "worker 1, dataset index 7" in str(error)
    ('KeyError', True)
"""

from __future__ import annotations

import mmap
import os
import pickle
import re
import traceback
from multiprocessing import reduction
from typing import Any

import numpy as np

from mappers.exception_context import add_context

from .errors import LoaderTimeoutError, SamplerErrorWithFields
from .value_class import value_class

__all__ = [
    "LoaderWorkerError",
    "ProgressBoard",
    "WorkerExitedError",
    "WorkerFailure",
    "convert_loader_error",
]


class LoaderWorkerError(SamplerErrorWithFields, RuntimeError):
    """An exception raised in a loader worker that could not be sent whole (not picklable)."""

    field_names = ("worker_id", "index", "exc_type")

    def __init__(self, message: str, *, worker_id: int | None = None, index: int | None = None,
                 exc_type: str | None = None) -> None:
        super().__init__(message, worker_id=worker_id, index=index, exc_type=exc_type)


class WorkerExitedError(SamplerErrorWithFields, RuntimeError):
    """A loader worker process died (killed, out of memory, crashed in native code)."""

    field_names = ("worker_id", "pid", "index")

    def __init__(self, message: str, *, worker_id: int | None = None, pid: int | None = None,
                 index: int | None = None) -> None:
        super().__init__(message, worker_id=worker_id, pid=pid, index=index)


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
        """Record ``exc`` (in the worker)."""
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
    """One int64 slot per worker in anonymous shared memory: the dataset index it maps now
    (-1: between batches).


    Example:
        >>> board = ProgressBoard(2)
        >>> board.set(1, 42); board.get(1), board.get(0)
        (42, None)
    """

    def __init__(self, num_workers: int, fd: int | None = None) -> None:
        self.num_workers = num_workers
        size = max(num_workers, 1) * 8
        if fd is None:
            fd = os.memfd_create("catmap-progress", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
        self._fd = fd
        self._map = mmap.mmap(fd, size)
        self._slots = np.frombuffer(self._map, dtype=np.int64)
        self._slots[:] = -1

    def __reduce__(self) -> tuple[Any, ...]:
        return (_open_board, (self.num_workers, reduction.DupFd(self._fd)))

    def set(self, worker_id: int, index: int) -> None:
        """Record that ``worker_id`` now maps ``index`` (-1: idle)."""
        if 0 <= worker_id < self.num_workers:
            self._slots[worker_id] = index

    def get(self, worker_id: int | None) -> int | None:
        """The index ``worker_id`` is mapping, or None when idle or unknown."""
        if worker_id is None or not 0 <= worker_id < self.num_workers:
            return None
        value = int(self._slots[worker_id])
        return value if value >= 0 else None

    def close(self) -> None:
        """Close the main process's file descriptor (the mapping goes with the object)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_board(num_workers: int, dupfd: Any) -> ProgressBoard:
    board = ProgressBoard.__new__(ProgressBoard)
    board.num_workers = num_workers
    board._fd = dupfd.detach()
    board._map = mmap.mmap(board._fd, max(num_workers, 1) * 8)
    board._slots = np.frombuffer(board._map, dtype=np.int64)
    return board


def _waiting_for(iterator: Any) -> int | None:
    """The worker id the torch iterator waits on for its next batch (private torch state)."""
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
