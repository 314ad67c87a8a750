"""The per-user secret that signs catmap cache entries.

Cache entries hold pickled records, and unpickling runs code. An entry is therefore only
read when its HMAC-SHA256 (see :mod:`catalog.records_file`) verifies under a 32-byte secret
that only this user can read. The secret is created once with :func:`os.urandom` and kept,
as 64 hexadecimal digits, in ``$CATMAP_CACHE_KEY_FILE``, else
``$XDG_CONFIG_HOME/catmap/cache.key``, else ``~/.config/catmap/cache.key`` (mode 0600; the
directories catmap creates for it are 0700).

The key file is opened without following a symbolic link and without blocking, and must be
a regular file owned by this user that no other user can read or write (with ``shared``
set, a key file of another user or readable by the group is accepted, so that a team can
share one cache by sharing one key file; it must still not be writable by group or others).

Example:
    >>> import os, tempfile
    >>> os.environ["CATMAP_CACHE_KEY_FILE"] = os.path.join(tempfile.mkdtemp(), "k")
    >>> len(load_secret()) == 32 and load_secret() == load_secret()
    True
    >>> del os.environ["CATMAP_CACHE_KEY_FILE"]
"""

from __future__ import annotations

import binascii
import contextlib
import os
import stat as stat_module
from pathlib import Path

from .errors import CacheError, CatmapErrorWithFields

__all__ = ["CacheKeyFileError", "key_file_path", "load_secret", "make_private_dirs"]

_SECRET_BYTES = 32
_MAX_KEY_FILE = 4096
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CacheKeyFileError(CacheError, CatmapErrorWithFields):
    """The cache key file is missing and cannot be created, or is not safe to use.

    Attributes:
        path: the key file.
    """

    field_names = ("path",)


def key_file_path() -> Path:
    """Where the secret lives (see the module docstring).

    Raises:
        CacheKeyFileError: no override is set and the home directory is unknown.

    Example:
        >>> key_file_path().name  # doctest: +SKIP
        'cache.key'
    """
    configured = os.environ.get("CATMAP_CACHE_KEY_FILE")
    if configured:
        return Path(configured).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME")
    if config_home and os.path.isabs(config_home):
        return Path(config_home) / "catmap" / "cache.key"
    try:
        return Path("~").expanduser() / ".config" / "catmap" / "cache.key"
    except RuntimeError as exc:  # no HOME and no password entry
        raise CacheKeyFileError(f"cannot place the cache key file: {exc}") from exc


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each one 0700 (never loosening the mode
    of a directory that exists already).

    Raises:
        OSError: a directory cannot be created.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()) / "a" / "b"; make_private_dirs(d)
        >>> oct(d.stat().st_mode & 0o777), oct(d.parent.stat().st_mode & 0o777)
        ('0o700', '0o700')
    """
    missing = []
    current = directory
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a concurrent process made it
            os.mkdir(path, 0o700)


def _check_key_file(fd: int, path: Path, *, shared: bool) -> None:
    st = os.fstat(fd)
    if not stat_module.S_ISREG(st.st_mode):
        raise CacheKeyFileError(f"cache key file {path} is not a regular file", path=str(path))
    if not shared and st.st_uid != os.getuid():
        raise CacheKeyFileError(
            f"cache key file {path} belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.getuid()}); set CATMAP_CACHE_SHARED=1 to share a team cache",
            path=str(path),
        )
    loose = 0o022 if shared else 0o077
    if st.st_mode & loose:
        raise CacheKeyFileError(
            f"cache key file {path} has mode {st.st_mode & 0o777:o}: "
            f"{'group or others can write it' if shared else 'other users can read or write it'}"
            f" (chmod 600 {path})",
            path=str(path),
        )


def _read_secret(path: Path, *, shared: bool) -> bytes:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        _check_key_file(fd, path, shared=shared)
        data = os.read(fd, _MAX_KEY_FILE)
    finally:
        os.close(fd)
    try:
        secret = binascii.unhexlify(data.strip())
    except (binascii.Error, ValueError) as exc:
        raise CacheKeyFileError(
            f"cache key file {path} does not hold hexadecimal digits ({exc}); delete it to "
            "make a new one (every cache entry is then rebuilt)",
            path=str(path),
        ) from exc
    if len(secret) != _SECRET_BYTES:
        raise CacheKeyFileError(
            f"cache key file {path} holds {len(secret)} bytes, expected {_SECRET_BYTES}; delete "
            "it to make a new one",
            path=str(path),
        )
    return secret


def _create_secret(path: Path) -> None:
    """Write a new secret atomically: a 0600 temporary file linked to ``path`` (the link
    fails when another process created the key first, and that key is kept)."""
    make_private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{binascii.hexlify(os.urandom(6)).decode()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, binascii.hexlify(os.urandom(_SECRET_BYTES)) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def load_secret(*, shared: bool = False, create: bool = True) -> bytes:
    """The 32-byte secret of this user's cache, created on first use.

    Args:
        shared: accept a key file owned by another user or readable by the group.
        create: create the key file when it does not exist.

    Raises:
        CacheKeyFileError: the key file is unsafe, malformed or cannot be created.

    Example:
        >>> import os, tempfile
        >>> os.environ["CATMAP_CACHE_KEY_FILE"] = os.path.join(tempfile.mkdtemp(), "k")
        >>> secret = load_secret()
        >>> oct(os.stat(os.environ["CATMAP_CACHE_KEY_FILE"]).st_mode & 0o777), len(secret)
        ('0o600', 32)
        >>> del os.environ["CATMAP_CACHE_KEY_FILE"]
    """
    path = key_file_path()
    try:
        return _read_secret(path, shared=shared)
    except FileNotFoundError:
        if not create:
            raise CacheKeyFileError(f"no cache key file at {path}", path=str(path)) from None
    except OSError as exc:
        raise CacheKeyFileError(
            f"cannot read the cache key file {path}: {exc}", path=str(path)
        ) from exc
    try:
        _create_secret(path)
        return _read_secret(path, shared=shared)
    except OSError as exc:
        raise CacheKeyFileError(
            f"cannot create the cache key file {path}: {exc}", path=str(path)
        ) from exc
