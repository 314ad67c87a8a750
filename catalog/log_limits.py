"""Rate-limited warnings: the first few of each kind, then one summary with counts.

A dataset with many bad records must not flood the log with one line per index per worker.
Every warning that can repeat per record goes through :func:`warn_limited` with a *kind* (a
short fixed string such as ``"MapDataset.refetch"``). The first :data:`FIRST_PER_KIND` of a kind
are logged as they come; the rest are only counted, and the process that created the counters
logs one summary line per kind when it exits (or when :func:`log_summary` is called).

The counters live in shared memory created by the first process that warns or calls
:func:`shared_counters` (normally the training process, before its DataLoader workers start):
forked workers inherit the mapping and spawned workers attach to it by the name the creator put
in ``CATMAP_WARNING_COUNTERS``, so "the first few" holds across all workers of a run. Two
workers racing on the same counter may log one line more than the limit; nothing is lost. The
counters are a 16 KiB anonymous memory file (``memfd``), which spawned processes open through
``/proc/<creator pid>/fd/<fd>``; the kernel frees it when the last process using it exits, so
nothing is left behind however the run ends. Without memfd, a 0600 file in ``/dev/shm`` is used
and removed when the creating process exits normally.

Example:
    >>> import logging
    >>> log = logging.getLogger("demo")
    >>> [warn_limited(log, "doc.example", "record %d is odd", i) for i in range(5)]
    [True, True, True, False, False]
    >>> counts()["doc.example"]
    5
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import mmap
import os
import secrets
import stat
import tempfile
import threading
import zlib

import numpy as np

__all__ = [
    "FIRST_PER_KIND",
    "counts",
    "log_summary",
    "register_kind",
    "reset_counts",
    "shared_counters",
    "warn_limited",
]

logger = logging.getLogger(__name__)

#: How many warnings of one kind are logged before the rest are only counted
#: (``CATMAP_WARNINGS_PER_KIND`` overrides it; 0 logs none, only the summary).
FIRST_PER_KIND = 3

_ENV = "CATMAP_WARNING_COUNTERS"
_SLOTS = 256
_NAME_BYTES = 56
_SIZE = _SLOTS * 8 + _SLOTS * _NAME_BYTES
_state_lock = threading.Lock()
_counters: np.ndarray | None = None
_names: np.ndarray | None = None
_map: mmap.mmap | None = None
_fd: int | None = None
_slots: dict[str, int] = {}  # this process's cache of kind -> slot
_OVERFLOW_SLOT = _SLOTS - 1
_owner: tuple[int, str] | None = None


def _first_per_kind() -> int:
    value = os.environ.get("CATMAP_WARNINGS_PER_KIND", "")
    return int(value) if value.isdigit() else FIRST_PER_KIND


def _slot(kind: str) -> int:
    return zlib.crc32(kind.encode()) % _SLOTS


def _attach(path: str) -> int | None:
    """Open the counters another process of this run created, or None if ``path`` is not one
    (only a catmap memfd or a ``catmap-warnings-*`` file of ours, of the exact size)."""
    try:
        if path.startswith("/proc/"):
            if not os.readlink(path).startswith("/memfd:catmap-warnings"):
                return None
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        elif os.path.basename(path).startswith("catmap-warnings-"):
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        else:
            return None
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size != _SIZE or info.st_uid != os.getuid():
        os.close(fd)
        return None
    return fd


def _create() -> tuple[int, str]:
    """A new zeroed counters file: (fd, the path other processes open it by)."""
    if hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd"):
        try:
            fd = os.memfd_create("catmap-warnings", os.MFD_CLOEXEC)
            os.ftruncate(fd, _SIZE)
            return fd, f"/proc/{os.getpid()}/fd/{fd}"
        except OSError:
            pass
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.path.join(directory, f"catmap-warnings-{os.getpid()}-{secrets.token_hex(6)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.ftruncate(fd, _SIZE)
    return fd, path


def _increment(slot: int) -> int:
    """Add one to a counter under a lock that excludes other processes (POSIX record lock)
    and other threads; returns the new count."""
    counters = shared_counters()
    fd, _ = _mapped()
    with _state_lock:
        fcntl.lockf(fd, fcntl.LOCK_EX, 8, slot * 8)
        try:
            counters[slot] += 1
            return int(counters[slot])
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 8, slot * 8)


def _mapped() -> tuple[int, np.ndarray]:
    """This process's counters file descriptor and name table (mapping them if needed)."""
    shared_counters()
    if _fd is None or _names is None:  # only after the creator's exit hook ran
        raise RuntimeError("catmap's warning counters are closed (the process is exiting)")
    return _fd, _names


def shared_counters() -> np.ndarray:
    """The per-kind counters of this run (created, or attached from the parent, on first use).

    Call it in the training process before starting DataLoader workers so that spawned workers
    share the counters; the loader builders do.
    """
    global _counters, _names, _map, _owner, _fd
    with _state_lock:
        if _counters is not None:
            return _counters
        path = os.environ.get(_ENV, "")
        fd = _attach(path) if path else None
        if fd is None:  # first process of the run, or its creator has exited
            fd, path = _create()
            os.environ[_ENV] = path
            _owner = (os.getpid(), path)
            atexit.register(_close_owner)
        _fd = fd
        _slots.clear()
        mapped = mmap.mmap(fd, _SIZE)
        _map = mapped
        _counters = np.ndarray((_SLOTS,), dtype=np.int64, buffer=mapped)
        _names = np.ndarray((_SLOTS, _NAME_BYTES), dtype=np.uint8, buffer=mapped,
                            offset=_SLOTS * 8)
        return _counters


def register_kind(kind: str) -> int:
    """The slot of ``kind``'s counter, claimed with its name on first use (so every process
    can name it); kinds whose hashes collide take the next free slot (open addressing, under a
    lock that excludes other processes)."""
    shared_counters()
    slot = _slots.get(kind)
    if slot is not None:
        return slot
    fd, names = _mapped()
    encoded = kind.encode()[:_NAME_BYTES]
    name_row = np.zeros(_NAME_BYTES, dtype=np.uint8)
    name_row[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    names_offset = _SLOTS * 8
    with _state_lock:
        fcntl.lockf(fd, fcntl.LOCK_EX, _SLOTS * _NAME_BYTES, names_offset)
        try:
            start = _slot(kind)
            for probe in range(_SLOTS):
                slot = (start + probe) % _SLOTS
                row = names[slot]
                if not row.any():
                    row[:] = name_row  # a free slot: claim it
                    break
                if np.array_equal(row, name_row):
                    break
            else:
                slot = _OVERFLOW_SLOT  # every slot taken: count with the last one
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, _SLOTS * _NAME_BYTES, names_offset)
    _slots[kind] = slot
    return slot


def warn_limited(log: logging.Logger, kind: str, message: str, *args: object) -> bool:
    """Log ``message % args`` as a warning unless this kind was logged enough times already.

    Args:
        log: the logger of the module that warns.
        kind: a short fixed name for the kind of warning (counted together).
        message: the %-format message.
        *args: its arguments.

    Returns:
        True if the warning was logged, False if it was only counted.
    """
    number = _increment(register_kind(kind))
    limit = _first_per_kind()
    if number > limit:
        return False
    if number == limit:
        message += " (further warnings of this kind are counted and summarized at exit)"
    log.warning(message, *args)
    return True


def reset_counts() -> None:
    """Set every counter of this run back to zero (kinds keep their slots); for tests, which
    each expect to see the first warnings of a kind.

    Example:
        >>> reset_counts(); counts()
        {}
    """
    counters = shared_counters()
    with _state_lock:
        counters[:] = 0


def counts() -> dict[str, int]:
    """Warnings counted so far per kind, in all processes sharing the counters.

    Example:
        >>> isinstance(counts(), dict)
        True
    """
    counters = shared_counters()
    _, names = _mapped()
    result = {}
    for slot in np.flatnonzero(counters):
        name = bytes(names[slot]).rstrip(b"\0").decode(errors="replace") or f"slot {slot}"
        result[name] = int(counters[slot])
    return result


def log_summary() -> dict[str, int]:
    """Log one line per kind whose count passed the limit; returns the suppressed counts."""
    limit = _first_per_kind()
    suppressed = {kind: n - limit for kind, n in counts().items() if n > limit}
    for kind, number in suppressed.items():
        logger.warning("%d more warnings of kind %r were not logged (%d in all)",
                       number, kind, number + limit)
    return suppressed


def _close_owner() -> None:
    global _counters, _names, _map
    if _owner is None or _owner[0] != os.getpid() or _map is None:
        return
    try:
        log_summary()
    finally:
        _counters = _names = None
        if not _owner[1].startswith("/proc/"):  # a memfd needs no removal
            try:
                os.unlink(_owner[1])
            except OSError:
                pass
        if os.environ.get(_ENV) == _owner[1]:
            del os.environ[_ENV]
