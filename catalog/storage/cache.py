"""The on-disk cache of serialized datasets (data-only records files), loaded by mmap.

- Key: loader, options, catmap version and each source's path, device, inode, size, mtime,
  ctime (plus a CRC-32 of a file changed in the last :data:`RECENT_CHANGE_NS`).
- Directory ``$CATMAP_CACHE_DIR`` (default ``~/.cache/catmap``), created 0700; one of another
  user or writable by others is skipped (one CacheSkippedWarning), as is any entry that is not
  a regular file of this user. A damaged entry warns (CacheCorruptWarning) and is rebuilt.
- Writes go to a temporary file renamed into place. One process per machine builds a key (a
  file lock); the others wait up to ``CATMAP_CACHE_LOCK_TIMEOUT`` s, then build uncached.
- ``CATMAP_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat as stat_module
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import filelock
import numpy as np

from .._common import CacheError, CatmapErrorWithFields, env_flag
from ..version import __version__
from .records import SerializedList
from .records_file import (
    CacheCorruptError,
    MappedFile,
    UnsafeEntryError,
    foreign,
    open_entry,
    read_header,
    write_records,
)

__all__ = ["CACHE_SUFFIX", "CacheCorruptError", "CacheCorruptWarning", "CacheEntry", "CacheKey",
           "CacheSettingError", "CacheSkippedWarning", "CacheUnavailableError", "DiskCache",
           "UnsafeEntryError", "cache_dir", "cache_enabled", "load_with_cache", "lock_timeout",
           "source_stamp"]

logger = logging.getLogger(__name__)

Loaded = tuple[SerializedList, dict[str, Any]]
#: File name suffix of cache entries.
CACHE_SUFFIX = ".catmap"
#: A source changed more recently than this (ns) is stamped with a content digest too.
RECENT_CHANGE_NS = 10 * 10**9
#: Seconds to wait for another process's build of the same entry (``CATMAP_CACHE_LOCK_TIMEOUT``).
DEFAULT_LOCK_TIMEOUT = 1800.0
_TEMP_PREFIX = ".tmp-"
_LOCK_SUFFIX = ".lock"
_LOCK_LOG_EVERY = 60.0
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
_WARNED: set[str] = set()


class CacheCorruptWarning(UserWarning):
    """A cache entry failed its checks (torn, damaged, another key's); it is rebuilt."""


class CacheSkippedWarning(UserWarning):
    """The cache, or one entry, was not used (unsafe or unusable); loading goes on."""


class CacheUnavailableError(CacheError, CatmapErrorWithFields):
    """The cache directory cannot be used (no home, not writable, or untrusted)."""

    field_names = ("directory",)


class CacheSettingError(CatmapErrorWithFields, CacheError, ValueError):
    """A cache environment variable holds a value catmap cannot use."""

    field_names = ("variable", "value")


def warn_once(tag: str, message: str, category: type[Warning] = CacheSkippedWarning) -> None:
    """Warn the first time ``tag`` is seen in this process (log it after)."""
    if tag in _WARNED:
        logger.debug("%s", message)
        return
    _WARNED.add(tag)
    warnings.warn(message, category, stacklevel=3)


def cache_enabled(enabled: bool = True) -> bool:
    """``enabled`` (the per-registration switch) and not ``CATMAP_CACHE=0``."""
    return bool(enabled) and env_flag("CATMAP_CACHE", default=True)


def cache_dir() -> Path:
    """``$CATMAP_CACHE_DIR`` or ``~/.cache/catmap`` (CacheUnavailableError without a home)."""
    return DiskCache().directory


def lock_timeout() -> float:
    """``CATMAP_CACHE_LOCK_TIMEOUT`` (seconds, > 0; else CacheSettingError) or the default."""
    value = os.environ.get("CATMAP_CACHE_LOCK_TIMEOUT", "").strip()
    if not value:
        return DEFAULT_LOCK_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise CacheSettingError(
            f"CATMAP_CACHE_LOCK_TIMEOUT={value!r} is not a positive number of seconds",
            variable="CATMAP_CACHE_LOCK_TIMEOUT", value=value)
    return seconds


def source_stamp(path: str | os.PathLike[str], *, digest: bool | None = None) -> tuple:
    """``(absolute path, size, mtime_ns, ctime_ns, content digest, device, inode)``; the
    digest is ``""`` unless the file changed in the last :data:`RECENT_CHANGE_NS` (or
    ``digest=True``). OSError for a file that is not regular (a FIFO is never read)."""
    abs_path = os.path.abspath(os.fspath(path))
    fd = os.open(abs_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise OSError(f"{abs_path} is not a regular file; it cannot be a cache key source")
        if digest is None:
            digest = time.time_ns() - st.st_ctime_ns < RECENT_CHANGE_NS
        content = ""
        if digest:
            crc = 0
            while chunk := os.read(fd, 4 * 2**20):
                crc = zlib.crc32(chunk, crc)
            content = f"crc32:{crc:08x}"
    finally:
        os.close(fd)
    return (abs_path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, content, st.st_dev, st.st_ino)


def _json_default(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(
        f"loader option value {value!r} of type {type(value).__name__} cannot be part of a "
        "cache key (use JSON-compatible options or cache=False)")


@dataclass(frozen=True)
class CacheKey:
    """What a cached dataset depends on.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(suffix=".json")
        >>> k = CacheKey.build("d", [f.name], loader="coco", options={"root": "/img"})
        >>> k.loader, len(k.sources), k.file_name().endswith(".catmap")
        ('coco', 1, True)
    """

    name: str
    loader: str
    sources: tuple[tuple, ...]
    options: str
    version: str = __version__

    def fields(self) -> dict[str, Any]:
        """The key as a data-only dict (stored in the entry's header)."""
        sources = list(map(list, self.sources))
        return {"name": self.name, "loader": self.loader, "sources": sources,
                "options": self.options, "version": self.version}  # fmt: skip

    def file_name(self) -> str:
        """``<name>-<identity>-<digest>.catmap``: the identity (loader, options, source paths)
        groups versions of one dataset, so writing one removes the older ones."""
        identity = "\0".join([self.loader, self.options, *map(itemgetter(0), self.sources)])
        whole = json.dumps(self.fields(), sort_keys=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("._")[:80] or "dataset"
        identity_digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:10]
        whole_digest = hashlib.sha256(whole.encode("utf-8")).hexdigest()[:20]
        return f"{slug}-{identity_digest}-{whole_digest}{CACHE_SUFFIX}"

    @classmethod
    def build(
        cls, name: str, sources: Sequence[str | os.PathLike[str]], *, loader: str,
        options: Mapping[str, Any] | None = None,
    ) -> CacheKey:  # fmt: skip
        """Stamp the source files (OSError: unreadable; TypeError: options not JSON)."""
        options_json = json.dumps(dict(options or {}), sort_keys=True, default=_json_default)
        stamps = tuple(map(source_stamp, sources))
        return cls(name=name, loader=loader, sources=stamps, options=options_json)


@dataclass
class CacheEntry:
    """One file of the cache directory, as listed by :meth:`DiskCache.entries`."""

    path: Path
    size: int
    name: str | None = None
    num_records: int | None = None
    sources: list[str] = field(default_factory=list)
    created: float | None = None
    valid: bool = False
    stale: bool = False
    error: str | None = None


def _stale(key: Any) -> bool:
    if not isinstance(key, dict) or key.get("version") != __version__:
        return True
    for source in key.get("sources") if isinstance(key.get("sources"), list) else [None]:
        if not isinstance(source, list) or len(source) < 4 or not isinstance(source[0], str):
            return True
        try:
            st = os.stat(source[0])
        except OSError:
            return True
        if [st.st_size, st.st_mtime_ns, st.st_ctime_ns] != source[1:4]:
            return True
    return False


def describe_entry(path: Path) -> CacheEntry:
    """The header of the entry at ``path``, read safely; never raises for an odd file."""
    entry = CacheEntry(path=path, size=0)
    try:
        with contextlib.suppress(OSError):
            entry.size = path.lstat().st_size
        fd = open_entry(path)
    except (OSError, CacheError) as exc:
        entry.error = f"not read: {exc}"
        return entry
    try:
        header = read_header(fd, str(path))[0]
    except Exception as exc:  # any odd file: listed with the reason, never a stop
        entry.error = str(exc)
        return entry
    finally:
        os.close(fd)
    name, num, created = header.get("name"), header.get("num_records"), header.get("created")
    key = header.get("key")
    sources = key.get("sources") if isinstance(key, dict) else None
    entry.valid = True
    entry.name = name if isinstance(name, str) else None
    entry.num_records = num if isinstance(num, int) else None
    entry.created = float(created) if isinstance(created, (int, float)) else None
    entry.sources = [s[0] for s in sources or [] if isinstance(s, list) and s
                     and isinstance(s[0], str)]  # fmt: skip
    entry.stale = _stale(key)
    return entry


def _remove(path: Path) -> bool:
    try:
        path.unlink(missing_ok=True)
        return True
    except OSError as exc:
        logger.warning("cannot remove %s: %s", path, exc)
        return False


def _remove_idle_lock(path: Path) -> None:
    lock = filelock.FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except (filelock.Timeout, OSError):
        return  # held: its holder keeps it
    try:
        _remove(path)
    finally:
        lock.release()


class DiskCache:
    """The cache directory: look entries up, build each once, store, list and clear them.

    Example:
        >>> import tempfile, os
        >>> cache = DiskCache(os.path.join(tempfile.mkdtemp(), "c"))
        >>> f = tempfile.NamedTemporaryFile(suffix=".json")
        >>> key = CacheKey.build("toy", [f.name], loader="toy")
        >>> build = lambda: (SerializedList([{"a": 1}]), {"k": 2})
        >>> cache.get_or_build(key, build)[0][0], cache.load(key)[1]
        ({'a': 1}, {'k': 2})
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        """``directory``, else :func:`cache_dir`."""
        if directory is None:
            directory = os.environ.get("CATMAP_CACHE_DIR") or "~/.cache/catmap"
        try:
            self.directory = Path(directory).expanduser()
        except RuntimeError as exc:  # no HOME and no password entry
            raise CacheUnavailableError(
                f"no cache directory: {exc} (set CATMAP_CACHE_DIR)") from exc

    def path_of(self, key: CacheKey) -> Path:
        return self.directory / key.file_name()

    def _open_dir(self, *, create: bool) -> int | None:
        """A descriptor of the checked directory (None: absent and not ``create``);
        CacheUnavailableError when it cannot be created or is not this user's alone."""
        where = str(self.directory)
        try:
            if create:
                missing = []
                path = self.directory
                while not path.exists() and path != path.parent:
                    missing.append(path)
                    path = path.parent
                for path in reversed(missing):
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(path, 0o700)
            dfd = os.open(self.directory, _DIR_OPEN)
        except FileNotFoundError:
            if not create:
                return None
            raise CacheUnavailableError(
                f"cannot create the cache directory {where}", directory=where) from None
        except OSError as exc:
            raise CacheUnavailableError(
                f"cannot use the cache directory {where}: {exc}", directory=where) from exc
        problem = foreign(os.fstat(dfd))
        if problem is not None:
            os.close(dfd)
            raise CacheUnavailableError(
                f"the cache directory {where} {problem}, so another user could plant entries "
                f"in it; it is not used (chmod 700 {where}, or set CATMAP_CACHE_DIR)",
                directory=where)
        return dfd

    def _load_in(self, dfd: int, key: CacheKey) -> Loaded | None:
        name = key.file_name()
        where = str(self.directory / name)
        start = time.perf_counter()
        try:
            fd = open_entry(name, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except UnsafeEntryError as exc:
            warnings.warn(f"catmap cache entry of dataset {key.name!r} skipped and rebuilt: {exc}",
                          CacheSkippedWarning, stacklevel=4)  # fmt: skip
            return None
        except OSError as exc:
            logger.warning("cannot read cache entry %s of dataset %r: %s", where, key.name, exc)
            return None
        try:
            mapped = MappedFile(fd, where, verify=True, path=where)
        except CacheCorruptError as exc:
            self._discard(dfd, name, fd, key, exc)
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if mapped.header.get("key") != key.fields():
                raise CacheCorruptError(f"{where}: the entry was written for another key")
            records = mapped.records(key.name)
        except CacheCorruptError as exc:
            self._discard(dfd, name, mapped.fd, key, exc)
            return None
        logger.info("loaded %d records of %r from cache %s in %.3f s", len(records), key.name,
                    where, time.perf_counter() - start)  # fmt: skip
        return records, dict(mapped.header["extra"])

    @staticmethod
    def _discard(dfd: int, name: str, fd: int, key: CacheKey, exc: CacheCorruptError) -> None:
        """Warn, and unlink the entry if ``name`` is still the file behind ``fd``."""
        warnings.warn(f"catmap cache entry of dataset {key.name!r} is damaged and will be "
                      f"rebuilt: {exc}", CacheCorruptWarning, stacklevel=5)  # fmt: skip
        with contextlib.suppress(OSError):
            here, now = os.fstat(fd), os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if (here.st_dev, here.st_ino) == (now.st_dev, now.st_ino):
                os.unlink(name, dir_fd=dfd)

    def _store_in(self, dfd: int, key: CacheKey, records: SerializedList,
                  extra: dict[str, Any]) -> Loaded:
        name = key.file_name()
        where = str(self.directory / name)
        tmp = f"{_TEMP_PREFIX}{name}.{os.getpid()}.{os.urandom(6).hex()}"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        except OSError as exc:
            raise CacheError(f"cannot write the cache of dataset {key.name!r} in "
                             f"{self.directory}: {exc}") from exc
        try:
            with open(fd, "wb", closefd=False) as out:
                write_records(out, records, key=key.fields(), extra=extra)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            # map the descriptor written through: a file renamed over the name changes nothing
            mapped = MappedFile(fd, where, verify=False, path=where)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(exc, OSError):
                raise CacheError(
                    f"cannot write the cache of dataset {key.name!r} to {where}: {exc}") from exc
            raise
        prefix = name[: -len(CACHE_SUFFIX) - 21]  # "<slug>-<identity>": older versions
        for other in self.directory.glob(f"{prefix}-*{CACHE_SUFFIX}"):
            if other.name != name:
                logger.info("removing stale cache entry %s of %r", other, key.name)
                _remove(other)
                _remove_idle_lock(other.with_name(other.name + _LOCK_SUFFIX))
        logger.info("cached %d records of %r in %s", len(records), key.name, where)
        return mapped.records(key.name), extra

    def _lock(self, key: CacheKey) -> filelock.FileLock | None:
        """The key's build lock, held (not held when it cannot be created: releasing it does
        nothing); None when another process held it past :func:`lock_timeout` (the caller
        then builds without the cache)."""
        path = str(self.directory / (key.file_name() + _LOCK_SUFFIX))
        lock = filelock.FileLock(path, mode=0o600)
        try:
            try:
                lock.acquire(timeout=0)
                return lock
            except filelock.Timeout:
                pass
            limit, waited = lock_timeout(), 0.0
            while waited < limit:
                logger.info("waiting for another process to build the cache of %r (%.0f s of "
                            "%.0f s)", key.name, waited, limit)  # fmt: skip
                step = min(_LOCK_LOG_EVERY, limit - waited)
                try:
                    lock.acquire(timeout=step)
                    return lock
                except filelock.Timeout:
                    waited += step
        except OSError as exc:
            warn_once(f"lock:{self.directory}", f"catmap cache: cannot lock {path} ({exc})")
            return lock
        warn_once(f"lock-timeout:{path}", f"catmap cache: another process has held {path} for "
                  f"{limit:.0f} s (CATMAP_CACHE_LOCK_TIMEOUT); building {key.name!r} here "
                  "without the cache")  # fmt: skip
        return None

    def _skip(self, exc: CacheError) -> None:
        warn_once(f"{self.directory}:{type(exc).__name__}",
                  f"catmap cache skipped: {exc}; loading without the cache")  # fmt: skip

    def load(self, key: CacheKey) -> Loaded | None:
        """The cached records and extra data of ``key``, or None (absent, skipped, damaged:
        damaged entries warn and are deleted)."""
        try:
            dfd = self._open_dir(create=False)
        except CacheUnavailableError as exc:
            self._skip(exc)
            return None
        if dfd is None:
            return None
        try:
            return self._load_in(dfd, key)
        finally:
            os.close(dfd)

    def store(self, key: CacheKey, records: SerializedList,
              extra: Mapping[str, Any] | None = None) -> Loaded:
        """Write ``records`` for ``key`` atomically; return them mapped from the file
        (CacheError when the directory or entry cannot be used or written)."""
        dfd = self._open_dir(create=True)
        try:
            return self._store_in(dfd, key, records, dict(extra or {}))
        finally:
            os.close(dfd)

    def get_or_build(self, key: CacheKey, build: Callable[[], Loaded]) -> Loaded:
        """The records of ``key`` from the cache, else from ``build()`` (stored unless a source
        changed while it ran). Cache problems warn and fall back to build."""
        try:
            dfd = self._open_dir(create=True)
        except CacheUnavailableError as exc:
            self._skip(exc)
            return build()
        try:
            hit = self._load_in(dfd, key)
            if hit is not None:
                return hit
            lock = self._lock(key)
            try:
                hit = self._load_in(dfd, key) if lock is not None else None
                if hit is not None:
                    return hit
                records, extra = build()
                if lock is None:
                    return records, extra
                paths = map(itemgetter(0), key.sources)
                try:
                    unchanged = tuple(map(source_stamp, paths)) == key.sources
                except OSError:
                    unchanged = False
                if not unchanged:
                    logger.warning("a source of %r changed while it was loading; not caching it",
                                   key.name)  # fmt: skip
                    return records, extra
                if not isinstance(records, SerializedList):
                    records = SerializedList(records, name=key.name)
                try:
                    return self._store_in(dfd, key, records, dict(extra or {}))
                except CacheError as exc:
                    warn_once(f"store:{self.directory}", f"{exc}; continuing without the cache")
                except TypeError as exc:  # extra (the loader's metadata) is not data-only
                    logger.info("not caching %r: %s", key.name, exc)
                return records, extra
            finally:
                if lock is not None:
                    lock.release()  # a no-op when not held
        finally:
            os.close(dfd)

    def entries(self) -> list[CacheEntry]:
        """Every entry, newest first (headers only; odd files are listed with an error;
        CacheError when the directory is not this user's alone)."""
        try:
            dfd = self._open_dir(create=False)
        except CacheError as exc:
            raise CacheError(str(exc)) from None
        if dfd is None or not self.directory.is_dir():
            return []
        os.close(dfd)
        out = [describe_entry(p) for p in self.directory.glob(f"*{CACHE_SUFFIX}")
               if not p.name.startswith(_TEMP_PREFIX)]  # fmt: skip
        out.sort(key=lambda e: (e.created or 0.0, str(e.path)), reverse=True)
        return out

    def clear(self, *, name: str | None = None, stale_only: bool = False) -> list[Path]:
        """Delete entries: all, one dataset's (``name``) or the unusable ones (``stale_only``),
        and with neither, temporary files older than an hour and idle locks."""
        removed = []
        for entry in self.entries():
            if name is not None and entry.name != name:
                continue
            if stale_only and entry.valid and not entry.stale:
                continue
            if _remove(entry.path):
                removed.append(entry.path)
        if name is not None or stale_only or not self.directory.is_dir():
            return removed
        for tmp in self.directory.glob(f"{_TEMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                if time.time() - tmp.lstat().st_mtime > 3600 and _remove(tmp):
                    removed.append(tmp)
        for lock in self.directory.glob(f"*{CACHE_SUFFIX}{_LOCK_SUFFIX}"):
            _remove_idle_lock(lock)
        return removed


def load_with_cache(
    name: str, sources: Sequence[str | os.PathLike[str]], build: Callable[[], Loaded], *,
    loader: str, options: Mapping[str, Any] | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> Loaded:  # fmt: skip
    """``build()`` (-> records, data-only extra dict) through the cache, keyed on ``loader``,
    ``options`` and the ``sources``; uncached when a source is unreadable or changed while
    loading, or options / extra are not data."""
    cache = None
    if env_flag("CATMAP_CACHE", default=True):
        try:
            key = CacheKey.build(name, sources, loader=loader, options=options)
            cache = DiskCache(directory)
        except (OSError, TypeError) as exc:
            logger.info("not caching %r: %s", name, exc)
        except CacheUnavailableError as exc:
            warn_once(f"no-dir:{type(exc).__name__}", f"catmap cache skipped: {exc}")
    records, extra = build() if cache is None else cache.get_or_build(key, build)
    if not isinstance(records, SerializedList):
        records = SerializedList(records, name=name)
    return records, dict(extra or {})
