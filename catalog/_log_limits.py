"""Rate-limited warnings shared by every process of a run (re-exported by
:mod:`catalog._common`).

A dataset with many bad records must not log one line per index per worker: the first
FIRST_PER_KIND warnings of a kind are logged, the rest counted, and the process that created
the counters logs one summary per kind at exit. The counters live in a 16 KiB memfd that
forked workers inherit and spawned ones open through /proc/<creator pid>/fd/<fd> (named in
CATMAP_WARNING_COUNTERS); the kernel frees it when the last user exits. Without memfd, a
0600 file in /dev/shm is used and removed at the creator's exit.
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

logger = logging.getLogger(__name__)

#: Warnings of one kind logged before the rest are only counted (CATMAP_WARNINGS_PER_KIND).
FIRST_PER_KIND = 3
_ENV = "CATMAP_WARNING_COUNTERS"
_SLOTS = 256
_NAME_BYTES = 56
_SIZE = _SLOTS * 8 + _SLOTS * _NAME_BYTES
_OVERFLOW_SLOT = _SLOTS - 1
_state_lock = threading.Lock()
_counters: np.ndarray | None = None
_names: np.ndarray | None = None
_map: mmap.mmap | None = None
_fd: int | None = None
_slots: dict[str, int] = {}  # this process's cache of kind -> slot
_owner: tuple[int, str] | None = None


def _first_per_kind() -> int:
    value = os.environ.get("CATMAP_WARNINGS_PER_KIND", "")
    return int(value) if value.isdigit() else FIRST_PER_KIND


def _slot(kind: str) -> int:
    return zlib.crc32(kind.encode()) % _SLOTS


def _attach_counters(path: str) -> int | None:
    """Open the counters another process of this run created, or None if ``path`` is not a
    catmap memfd or ``catmap-warnings-*`` file of ours of the exact size."""
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


def _create_counters() -> tuple[int, str]:
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


def shared_counters() -> np.ndarray:
    """The per-kind counters of this run, created or attached on first use. The loader
    builders call it in the training process before workers start, so spawned workers share
    them."""
    global _counters, _names, _map, _owner, _fd
    with _state_lock:
        if _counters is not None:
            return _counters
        path = os.environ.get(_ENV, "")
        fd = _attach_counters(path) if path else None
        if fd is None:  # first process of the run, or its creator has exited
            fd, path = _create_counters()
            os.environ[_ENV] = path
            _owner = (os.getpid(), path)
            atexit.register(_close_owner)
        _fd = fd
        _slots.clear()
        _map = mmap.mmap(fd, _SIZE)
        _counters = np.ndarray((_SLOTS,), dtype=np.int64, buffer=_map)
        _names = np.ndarray((_SLOTS, _NAME_BYTES), dtype=np.uint8, buffer=_map, offset=_SLOTS * 8)
        return _counters


def _mapped() -> tuple[int, np.ndarray]:
    shared_counters()
    if _fd is None or _names is None:  # only after the creator's exit hook ran
        raise RuntimeError("catmap's warning counters are closed (the process is exiting)")
    return _fd, _names


def register_kind(kind: str) -> int:
    """The slot of ``kind``'s counter, claimed with its name on first use (open addressing
    under a lock that excludes other processes)."""
    shared_counters()
    slot = _slots.get(kind)
    if slot is not None:
        return slot
    fd, names = _mapped()
    encoded = kind.encode()[:_NAME_BYTES]
    name_row = np.zeros(_NAME_BYTES, dtype=np.uint8)
    name_row[: len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    with _state_lock:
        fcntl.lockf(fd, fcntl.LOCK_EX, _SLOTS * _NAME_BYTES, _SLOTS * 8)
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
            fcntl.lockf(fd, fcntl.LOCK_UN, _SLOTS * _NAME_BYTES, _SLOTS * 8)
    _slots[kind] = slot
    return slot


def warn_limited(log: logging.Logger, kind: str, message: str, *args: object) -> bool:
    """Log ``message % args`` unless ``kind`` (a short fixed name) was logged enough times in
    this run; returns whether it was logged.

    Example:
        >>> log = logging.getLogger("demo")
        >>> [warn_limited(log, "doc.example", "record %d is odd", i) for i in range(5)]
        [True, True, True, False, False]
        >>> counts()["doc.example"]
        5
    """
    counters = shared_counters()
    slot = register_kind(kind)
    fd, _ = _mapped()
    with _state_lock:
        fcntl.lockf(fd, fcntl.LOCK_EX, 8, slot * 8)
        try:
            counters[slot] += 1
            number = int(counters[slot])
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 8, slot * 8)
    limit = _first_per_kind()
    if number > limit:
        return False
    if number == limit:
        message += " (further warnings of this kind are counted and summarized at exit)"
    log.warning(message, *args)
    return True


def reset_counts() -> None:
    """Set every counter of this run back to zero (for tests)."""
    counters = shared_counters()
    with _state_lock:
        counters[:] = 0


def counts() -> dict[str, int]:
    """Warnings counted so far per kind, in all processes sharing the counters."""
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
    global _counters, _names
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
