"""The cache directory: where entries live, whose entries are read, one builder per key.

Rules (see also :mod:`catalog.records_file` for the entry format and its MAC):

- The directory (``$CATMAP_CACHE_DIR``, default ``~/.cache/catmap``) and the parents the
  cache creates are made 0700. A directory owned by another user, or writable by group or
  others, is not used (one :class:`CacheSkippedWarning` per process says why) unless the user
  opts into a shared cache with ``CATMAP_CACHE_SHARED=1`` or ``DiskCache(shared=True)``.
- Entries are opened with ``O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`` relative to the
  checked directory descriptor; anything but a regular file of this user that group and
  others cannot write is skipped with a warning (never blocks on a FIFO, never follows a
  symlink). In a shared cache, other users' entries are copied into private memory first.
- Nothing of an entry is unpickled before its MAC verifies under this user's secret
  (:mod:`catalog.cache_secret`; a shared cache needs a shared key file) for the key looked up.
- Writes go to a temporary file created ``O_EXCL`` in the directory, signed while written
  and renamed into place; the records are then mapped from the descriptor that was written
  through (never re-opened by path). Entries are not fsync-ed: the cache is rebuilt from the
  sources whenever needed, and an entry a crash left torn fails its MAC on the next lookup
  and is rebuilt (waiting for the disk would add seconds to every cold load).
- One process per machine builds an entry while the others wait: a ``filelock`` per key in
  the directory; the entry is looked up again once the lock is held. A process that waits
  longer than ``CATMAP_CACHE_LOCK_TIMEOUT`` (default 30 min) for another one builds the
  records itself, without the cache, with a warning: a stuck builder never hangs the others.
- When no usable directory or key file exists (no home directory, read-only file system),
  loading goes on without the cache, with one warning per process.
"""

from __future__ import annotations

import binascii
import contextlib
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import filelock

from .cache_config import (
    CacheCorruptWarning,
    CacheSkippedWarning,
    CacheUnavailableError,
    cache_dir,
    cache_enabled,
    lock_timeout,
    shared_enabled,
    warn_once,
)
from .cache_key import CACHE_SUFFIX, CacheKey
from .cache_listing import CacheEntry, clear_entries, list_entries, remove_idle_lock
from .cache_secret import CacheKeyFileError, load_secret, make_private_dirs
from .errors import CacheError
from .records_file import (
    CacheCorruptError,
    UnsafeEntryError,
    decode_extra,
    open_entry,
    write_serialized,
)
from .records_map import MappedFile, _list_from_mapped, _mapped_or_close
from .serialized_list import SerializedList

__all__ = [
    "CacheCorruptWarning",
    "CacheSkippedWarning",
    "CacheUnavailableError",
    "DiskCache",
    "cache_dir",
    "cache_enabled",
    "shared_enabled",
]

logger = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"
_LOCK_SUFFIX = ".lock"
_LOCK_LOG_EVERY = 60.0  # seconds between "still waiting" log lines
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC

Loaded = tuple[SerializedList, dict[str, Any]]


def _dir_problem(st: os.stat_result) -> str | None:
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"has mode {st.st_mode & 0o777:o}: group or others can write it"
    return None


class DiskCache:
    """The cache directory: look entries up, build them once, store them, list and clear them.

    Args:
        directory: where the files live (default :func:`cache_dir`).
        shared: accept a directory and entries of other users (still only entries whose MAC
            verifies under this user's key file); default ``CATMAP_CACHE_SHARED``.

    Raises:
        CacheUnavailableError: no ``directory`` and no default (no home directory).

    Example:
        >>> import tempfile, os
        >>> os.environ["CATMAP_CACHE_KEY_FILE"] = os.path.join(tempfile.mkdtemp(), "k")
        >>> cache = DiskCache(os.path.join(tempfile.mkdtemp(), "c"))
        >>> f = tempfile.NamedTemporaryFile(suffix=".json")
        >>> key = CacheKey.build("toy", [f.name], loader="toy")
        >>> cache.load(key) is None
        True
        >>> records, extra = cache.store(key, SerializedList([{"a": 1}]), extra={"k": 2})
        >>> records[0], cache.load(key)[1], oct(cache.directory.stat().st_mode & 0o777)
        ({'a': 1}, {'k': 2}, '0o700')
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, shared: bool | None = None
    ) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else cache_dir()
        self.shared = shared_enabled(shared)

    def path_of(self, key: CacheKey) -> Path:
        """Where the entry for ``key`` lives."""
        return self.directory / key.file_name()

    # ------------------------------------------------------------------ directory, secret
    def _open_dir(self, *, create: bool) -> int | None:
        """A descriptor of the checked directory (``None``: absent and not ``create``)."""
        where = str(self.directory)
        try:
            if create:
                make_private_dirs(self.directory)
            dfd = os.open(self.directory, _DIR_OPEN)
        except FileNotFoundError:
            if create:
                raise CacheUnavailableError(
                    f"cannot create the cache directory {where}", directory=where
                ) from None
            return None
        except OSError as exc:
            raise CacheUnavailableError(
                f"cannot use the cache directory {where}: {exc}", directory=where
            ) from exc
        problem = _dir_problem(os.fstat(dfd))
        if problem is not None and not self.shared:
            os.close(dfd)
            raise CacheUnavailableError(
                f"the cache directory {where} {problem}, so another user could plant entries "
                f"in it; it is not used (chmod 700 {where}, or set CATMAP_CACHE_SHARED=1 for a "
                "team cache with a shared key file)",
                directory=where,
            )
        return dfd

    def check_directory(self) -> str | None:
        """Why the directory would not be used (``None``: usable, or absent).

        Example:
            >>> import tempfile; DiskCache(tempfile.mkdtemp()).check_directory() is None
            True
        """
        try:
            dfd = self._open_dir(create=False)
        except CacheError as exc:
            return str(exc)
        if dfd is not None:
            os.close(dfd)
        return None

    def _secret(self) -> bytes:
        return load_secret(shared=self.shared)

    def _skip(self, exc: CacheError) -> None:
        warn_once(
            f"{self.directory}:{type(exc).__name__}",
            f"catmap cache skipped: {exc}; loading without the cache",
        )

    # ------------------------------------------------------------------ entries
    def _load_in(self, dfd: int, key: CacheKey, secret: bytes) -> Loaded | None:
        name = key.file_name()
        where = str(self.directory / name)
        start = time.perf_counter()
        try:
            fd = open_entry(name, dir_fd=dfd, shared=self.shared)
        except FileNotFoundError:
            return None
        except UnsafeEntryError as exc:
            warnings.warn(
                f"catmap cache entry of dataset {key.name!r} skipped and rebuilt: {exc}",
                CacheSkippedWarning,
                stacklevel=4,
            )
            return None
        except OSError as exc:
            logger.warning("cannot read cache entry %s of dataset %r: %s", where, key.name, exc)
            return None
        try:
            mapped = MappedFile(
                fd, where, where, verify=True, secret=secret, key_digest=key.key_digest()
            )
        except CacheCorruptError as exc:
            self._discard_corrupt(dfd, name, fd, key, exc)
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if mapped.header.get("key") != key.fields():
                raise CacheCorruptError(f"{where}: the header names another key")
            extra = decode_extra(mapped.header, where)  # only after the MAC verified
            records = _list_from_mapped(mapped, key.name, where, shared=self.shared)
        except CacheCorruptError as exc:
            self._discard_corrupt(dfd, name, mapped.fd, key, exc)
            return None
        logger.info(
            "loaded %d records of %r from cache %s in %.3f s",
            len(records), key.name, where, time.perf_counter() - start,
        )  # fmt: skip
        return records, extra

    def _discard_corrupt(
        self, dfd: int, name: str, fd: int, key: CacheKey, exc: CacheCorruptError
    ) -> None:
        """Warn, and unlink the entry if ``name`` still is the file behind ``fd``."""
        warnings.warn(
            f"catmap cache entry for dataset {key.name!r} is corrupt or not signed for this "
            f"key and will be rebuilt: {exc}",
            CacheCorruptWarning,
            stacklevel=5,
        )
        with contextlib.suppress(OSError):
            here, now = os.fstat(fd), os.stat(name, dir_fd=dfd, follow_symlinks=False)
            same = (here.st_dev, here.st_ino) == (now.st_dev, now.st_ino)
            if same and here.st_uid == os.getuid():  # a teammate's entry is theirs to remove
                os.unlink(name, dir_fd=dfd)

    def _store_in(
        self, dfd: int, key: CacheKey, records: SerializedList, extra: Mapping[str, Any],
        secret: bytes,
    ) -> Loaded:  # fmt: skip
        name = key.file_name()
        where = str(self.directory / name)
        tmp = f"{_TEMP_PREFIX}{name}.{os.getpid()}.{binascii.hexlify(os.urandom(6)).decode()}"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o640 if self.shared else 0o600, dir_fd=dfd)
        except OSError as exc:
            raise CacheError(
                f"cannot write the cache of dataset {key.name!r} in {self.directory}: {exc}"
            ) from exc
        try:
            with os.fdopen(os.dup(fd), "wb") as out:
                write_serialized(
                    out, records, key=key.fields(), extra=extra, secret=secret,
                    key_digest=key.key_digest(),
                )  # fmt: skip
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(exc, OSError):
                raise CacheError(
                    f"cannot write the cache of dataset {key.name!r} to {where}: {exc}"
                ) from exc
            raise
        # Map the descriptor written through: whoever renames another file over the name
        # now changes nothing we read.
        mapped = _mapped_or_close(fd, where, where, verify=False)
        self._remove_stale(key, keep=self.directory / name)
        logger.info("cached %d records of %r in %s", len(records), key.name, where)
        return _list_from_mapped(mapped, key.name, where, shared=self.shared), dict(extra)

    def _remove_stale(self, key: CacheKey, keep: Path) -> None:
        prefix = keep.name[: -len(CACHE_SUFFIX) - 21]  # "<slug>-<identity digest>"
        for other in self.directory.glob(f"{prefix}-*{CACHE_SUFFIX}"):
            if other != keep:
                logger.info("removing stale cache entry %s of %r", other, key.name)
                _remove(other)
                remove_idle_lock(other.with_name(other.name + _LOCK_SUFFIX))

    @contextlib.contextmanager
    def _lock(self, key: CacheKey) -> Iterator[bool]:
        """Hold the entry's build lock; yields False when another process kept it past
        :func:`~catalog.cache_config.lock_timeout` (the caller then builds without the cache)."""
        path = str(self.directory / (key.file_name() + _LOCK_SUFFIX))
        lock = filelock.FileLock(path, mode=0o640 if self.shared else 0o600)
        try:
            held = self._acquire(lock, key, path)
        except OSError as exc:
            warn_once(f"lock:{self.directory}", f"catmap cache: cannot lock {path} ({exc})")
            yield True
            return
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    @staticmethod
    def _acquire(lock: filelock.FileLock, key: CacheKey, path: str) -> bool:
        try:
            lock.acquire(timeout=0)
            return True
        except filelock.Timeout:
            pass
        limit = lock_timeout()
        waited = 0.0
        while waited < limit:
            logger.info(
                "waiting for another process to build the cache of %r (%.0f s of %.0f s)",
                key.name, waited, limit,
            )  # fmt: skip
            step = min(_LOCK_LOG_EVERY, limit - waited)
            try:
                lock.acquire(timeout=step)
                return True
            except filelock.Timeout:
                waited += step
        warn_once(
            f"lock-timeout:{path}",
            f"catmap cache: another process has held {path} for {limit:.0f} s "
            f"(CATMAP_CACHE_LOCK_TIMEOUT); building {key.name!r} here without the cache",
        )
        return False

    # ------------------------------------------------------------------ public API
    def entries(self) -> list[CacheEntry]:
        """Every entry, newest first (headers only; see :mod:`catalog.cache_listing`).

        Raises:
            CacheError: the directory is not trusted (another user's, or writable by others).
        """
        return list_entries(self)

    def clear(self, *, name: str | None = None, stale_only: bool = False) -> list[Path]:
        """Delete entries: all, one dataset's (``name``) or those that can no longer be used
        (``stale_only``: source changed, other catmap version, unreadable header).

        Returns:
            The deleted entries (and temporary files older than an hour).

        Raises:
            CacheError: the directory is not trusted.
        """
        return clear_entries(self, name=name, stale_only=stale_only)

    def load(self, key: CacheKey) -> Loaded | None:
        """The cached records and extra data for ``key``, or ``None`` when absent or skipped.

        A corrupt or foreign entry is reported with a :class:`CacheCorruptWarning` and
        deleted; an unsafe path (FIFO, symlink, another user's file) with a
        :class:`CacheSkippedWarning`; ``None`` is then returned so the caller rebuilds it.
        """
        try:
            dfd = self._open_dir(create=False)
            if dfd is None:
                return None
            try:
                return self._load_in(dfd, key, self._secret())
            finally:
                os.close(dfd)
        except (CacheUnavailableError, CacheKeyFileError) as exc:
            self._skip(exc)
            return None

    def store(
        self, key: CacheKey, records: SerializedList, extra: Mapping[str, Any] | None = None
    ) -> Loaded:
        """Write ``records`` for ``key`` atomically and return them mapped from the file.

        Older entries built from the same sources and options (stale versions) are removed.

        Raises:
            CacheError: the directory, key file or entry could not be used or written (the
                message says where and why).
        """
        dfd = self._open_dir(create=True)
        try:
            return self._store_in(dfd, key, records, dict(extra or {}), self._secret())
        finally:
            os.close(dfd)

    def get_or_build(
        self,
        key: CacheKey,
        build: Callable[[], Loaded],
        *,
        cacheable: Callable[[SerializedList, dict[str, Any]], bool] | None = None,
    ) -> Loaded:
        """The records of ``key`` from the cache, else from ``build()`` (stored when
        ``cacheable(records, extra)`` allows). One process per machine builds a key while the
        others wait for it; cache problems warn and fall back to ``build()``.

        Example:
            >>> import tempfile, os
            >>> os.environ["CATMAP_CACHE_KEY_FILE"] = os.path.join(tempfile.mkdtemp(), "k")
            >>> cache = DiskCache(tempfile.mkdtemp())
            >>> f = tempfile.NamedTemporaryFile(suffix=".json")
            >>> key = CacheKey.build("toy", [f.name], loader="toy")
            >>> build = lambda: (SerializedList([{"a": 1}]), {})
            >>> cache.get_or_build(key, build)[0][0], cache.load(key) is not None
            ({'a': 1}, True)
        """
        try:
            dfd = self._open_dir(create=True)
        except CacheUnavailableError as exc:
            self._skip(exc)
            return build()
        try:
            try:
                secret = self._secret()
            except CacheKeyFileError as exc:
                self._skip(exc)
                return build()
            hit = self._load_in(dfd, key, secret)
            if hit is not None:
                return hit
            with self._lock(key) as held:
                if not held:
                    return build()
                hit = self._load_in(dfd, key, secret)
                if hit is not None:
                    return hit
                records, extra = build()
                if cacheable is not None and not cacheable(records, extra):
                    return records, extra
                try:
                    return self._store_in(dfd, key, records, extra, secret)
                except CacheError as exc:
                    warn_once(f"store:{self.directory}", f"{exc}; continuing without the cache")
                    return records, extra
        finally:
            os.close(dfd)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("cannot remove %s: %s", path, exc)
