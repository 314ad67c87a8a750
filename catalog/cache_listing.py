"""Listing and clearing the cache directory (``DiskCache.entries`` / ``DiskCache.clear``,
``tools/cache.py``).

Listing reads only each entry's JSON header (never its pickled data, never its payload),
through the same safe open as a lookup: no symlink is followed, no FIFO blocks, and a
directory that lookups would skip (another user's, or writable by group or others) is not
listed or cleared unless the cache is shared. In a shared cache only this user's entries are
cleared.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat as stat_module
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from .cache_key import CACHE_SUFFIX
from .errors import CacheError
from .records_file import _PREAMBLE, _SAFE_OPEN, CacheCorruptError, _read_header
from .version import __version__

if TYPE_CHECKING:
    from .cache_dir import DiskCache

__all__ = ["CacheEntry", "clear_entries", "list_entries"]

logger = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"
_LOCK_SUFFIX = ".lock"
_MAX_HEADER = 64 * 2**20


@dataclass
class CacheEntry:
    """One file of the cache directory, as listed by ``DiskCache.entries``.

    Attributes:
        path: the file.
        size: its size in bytes.
        name: the dataset name stored in its header (``None`` when unreadable).
        num_records: the number of records (``None`` when unreadable).
        sources: the source files it was built from.
        created: when it was written (seconds since the epoch).
        valid: whether the header passed its checks (the MAC and payload are checked on
            lookup, not here).
        stale: a source file changed or vanished since (the entry will not be used again).
        error: why the entry is invalid or not read, if it is.
        owner: the uid owning the file.

    Example:
        >>> CacheEntry(Path("/c/x.catmap"), 10).valid
        False
    """

    path: Path
    size: int
    name: str | None = None
    num_records: int | None = None
    sources: list[str] = field(default_factory=list)
    created: float | None = None
    valid: bool = False
    stale: bool = False
    error: str | None = None
    owner: int | None = None


def _source_changed(source: list) -> bool:
    if len(source) < 4 or not isinstance(source[0], str):
        return True
    path, size, mtime, ctime = source[:4]
    try:
        st = os.stat(path)
    except OSError:
        return True
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (size, mtime, ctime)


def describe_entry(path: Path, *, shared: bool) -> CacheEntry:
    """Read the header of the entry at ``path`` (safely: see the module docstring)."""
    entry = CacheEntry(path=path, size=0)
    try:
        fd = os.open(path, _SAFE_OPEN)
    except OSError as exc:
        entry.error = f"not read: {exc.strerror or exc}"
        return entry
    try:
        st = os.fstat(fd)
        entry.size, entry.owner = st.st_size, st.st_uid
        if not stat_module.S_ISREG(st.st_mode):
            entry.error = "not a regular file; never read"
            return entry
        if not shared and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            entry.error = f"uid {st.st_uid}, mode {st.st_mode & 0o777:o}: never read"
            return entry
        head = os.pread(fd, _PREAMBLE.size, 0)
        if len(head) == _PREAMBLE.size:
            head += os.pread(fd, min(_PREAMBLE.unpack(head)[1], _MAX_HEADER), _PREAMBLE.size)
        header, _, _ = _read_header(head, st.st_size, str(path))
    except (OSError, CacheCorruptError) as exc:
        entry.error = str(exc)
        return entry
    finally:
        os.close(fd)
    entry.valid = True
    entry.name = header.get("name") if isinstance(header.get("name"), str) else None
    num = header.get("num_records")
    entry.num_records = num if isinstance(num, int) else None
    created = header.get("created")
    entry.created = float(created) if isinstance(created, (int, float)) else None
    key = header.get("key") if isinstance(header.get("key"), dict) else {}
    sources = key.get("sources") if isinstance(key.get("sources"), list) else []
    entry.sources = [s[0] for s in sources if isinstance(s, list) and s and isinstance(s[0], str)]
    entry.stale = key.get("version") != __version__ or any(
        not isinstance(s, list) or _source_changed(s) for s in sources
    )
    return entry


def list_entries(cache: DiskCache) -> list[CacheEntry]:
    """Every entry of ``cache``, newest first (headers only).

    Raises:
        CacheError: the directory is not trusted (see ``DiskCache.check_directory``).
    """
    problem = cache.check_directory()
    if problem is not None:
        raise CacheError(problem)
    if not cache.directory.is_dir():
        return []
    out = [
        describe_entry(path, shared=cache.shared)
        for path in cache.directory.glob(f"*{CACHE_SUFFIX}")
        if not path.name.startswith(_TEMP_PREFIX)
    ]
    out.sort(key=lambda e: (e.created or 0.0, str(e.path)), reverse=True)
    return out


def _remove(path: Path) -> bool:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("cannot remove %s: %s", path, exc)
        return False
    return True


def remove_idle_lock(path: Path) -> bool:
    """Remove a lock file nobody holds (a holder keeps its lock: the file stays)."""
    lock = filelock.FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except (filelock.Timeout, OSError):
        return False
    try:
        return _remove(path)
    finally:
        lock.release()


def clear_entries(
    cache: DiskCache, *, name: str | None = None, stale_only: bool = False
) -> list[Path]:
    """Delete entries of ``cache`` (and, when clearing every dataset, temporary files older
    than an hour and idle lock files). Removing a mapped entry is safe: the processes using
    it keep the file until they let it go.

    Returns:
        The deleted entries and temporary files.

    Raises:
        CacheError: the directory is not trusted.
    """
    removed = []
    for entry in list_entries(cache):
        if name is not None and entry.name != name:
            continue
        if stale_only and entry.valid and not entry.stale:
            continue
        if entry.owner is not None and entry.owner != os.getuid():
            continue  # another user's entry in a shared cache
        if _remove(entry.path):
            removed.append(entry.path)
    if name is not None or stale_only or not cache.directory.is_dir():
        return removed
    now = time.time()
    for tmp in cache.directory.glob(f"{_TEMP_PREFIX}*"):
        with contextlib.suppress(OSError):
            st = tmp.lstat()
            if st.st_uid == os.getuid() and now - st.st_mtime > 3600 and _remove(tmp):
                removed.append(tmp)
    for lock in cache.directory.glob(f"*{CACHE_SUFFIX}{_LOCK_SUFFIX}"):
        with contextlib.suppress(OSError):
            if lock.lstat().st_uid == os.getuid():
                remove_idle_lock(lock)  # bookkeeping: not in the returned list
    return removed
