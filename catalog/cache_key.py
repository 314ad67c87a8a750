"""What a cached dataset depends on: :class:`CacheKey` and the source files' stamps.

A source file is stamped with its device, inode, size, ``st_mtime_ns`` and ``st_ctime_ns``.
The ctime changes on every write (and every metadata change) and cannot be set back with
``os.utime``, so an edit that keeps the size and restores the mtime still changes the stamp.

The one gap is a file system with coarse timestamps (one second or more), where two writes
within one tick leave the same ctime. A file whose ctime is less than
:data:`RECENT_CHANGE_NS` old is therefore also stamped with a CRC-32 of its whole content
(zlib.crc32 in 4 MiB chunks, the fastest by measurement: 0.15 s for a 315 MB file in the
page cache; ``tools/bench_cache.py``). Any later write gets a ctime at least that much
newer, so an older file needs no digest, and a cache lookup on an unchanged dataset reads
nothing but the stat. (A file stamped with a digest while fresh and without one later is
rebuilt once.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat as stat_module
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .version import __version__

__all__ = ["CACHE_SUFFIX", "CacheKey", "source_stamp"]

#: File name suffix of cache entries.
CACHE_SUFFIX = ".catmap"
_DIGEST_CHUNK = 4 * 2**20
_SOURCE_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
#: A source changed more recently than this (ns) is stamped with a content digest too.
RECENT_CHANGE_NS = 10 * 10**9


def _crc_of_fd(fd: int) -> str:
    crc = 0
    buffer = bytearray(_DIGEST_CHUNK)
    view = memoryview(buffer)
    with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = zlib.crc32(view[:n], crc)
    return f"crc32:{crc:08x}"


def source_stamp(path: str | os.PathLike[str], *, digest: bool | None = None) -> tuple:
    """``(absolute path, size, mtime_ns, ctime_ns, content digest, device, inode)``.

    The file is opened without blocking and stat-ed on the open descriptor. The content
    digest is ``""`` unless the file changed less than :data:`RECENT_CHANGE_NS` ago (or
    ``digest=True``).

    Raises:
        OSError: the file cannot be opened, or is not a regular file (a FIFO, a directory).

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(); _ = f.write(b"abc"); f.flush()
        >>> source_stamp(f.name)[1], source_stamp(f.name)[4]
        (3, 'crc32:352441c2')
        >>> source_stamp(f.name, digest=False)[4]
        ''
    """
    abs_path = os.path.abspath(os.fspath(path))
    fd = os.open(abs_path, _SOURCE_OPEN)
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise OSError(f"{abs_path} is not a regular file; it cannot be a cache key source")
        if digest is None:
            digest = time.time_ns() - int(st.st_ctime_ns) < RECENT_CHANGE_NS
        content = _crc_of_fd(fd) if digest else ""
    finally:
        os.close(fd)
    return (
        abs_path,
        int(st.st_size),
        int(st.st_mtime_ns),
        int(st.st_ctime_ns),
        content,
        int(st.st_dev),
        int(st.st_ino),
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(
        f"loader option value {value!r} of type {type(value).__name__} cannot be part of a "
        "cache key (use JSON-compatible options or cache=False)"
    )


@dataclass(frozen=True)
class CacheKey:
    """What a cached dataset depends on.

    Attributes:
        name: the dataset name (part of the file name, for humans).
        loader: identifies the loading function and its record format (e.g. ``"coco"``).
        sources: :func:`source_stamp` of each source file.
        options: the loader options, canonical JSON.
        version: the catmap version.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(suffix=".json")
        >>> k = CacheKey.build("d", [f.name], loader="coco", options={"root": "/img"})
        >>> k.loader, len(k.sources), len(k.key_digest())
        ('coco', 1, 32)
    """

    name: str
    loader: str
    sources: tuple[tuple[str, int, int, int, str], ...]
    options: str
    version: str = __version__

    def fields(self) -> dict[str, Any]:
        """The key as a JSON-serializable dict (stored in the file header)."""
        return {
            "name": self.name,
            "loader": self.loader,
            "sources": [list(s) for s in self.sources],
            "options": self.options,
            "version": self.version,
        }

    def key_digest(self) -> bytes:
        """SHA-256 of every field (the MAC of an entry binds it)."""
        data = json.dumps(self.fields(), sort_keys=True).encode("utf-8")
        return hashlib.sha256(data).digest()

    def identity_digest(self) -> str:
        """Hash of what identifies the entry across edits of its source files (loader,
        options, source paths, not their content): the entries that share it are versions of
        one dataset, and writing a new one removes the older ones."""
        parts = [self.loader, self.options, *(s[0] for s in self.sources)]
        return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:10]

    def digest(self) -> str:
        """Hash of every field (in the file name)."""
        return self.key_digest().hex()[:20]

    def file_name(self) -> str:
        """``<name>-<identity digest>-<digest>.catmap``."""
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("._")[:80] or "dataset"
        return f"{slug}-{self.identity_digest()}-{self.digest()}{CACHE_SUFFIX}"

    @classmethod
    def build(
        cls,
        name: str,
        sources: Sequence[str | os.PathLike[str]],
        *,
        loader: str,
        options: Mapping[str, Any] | None = None,
    ) -> CacheKey:
        """Make a key by stamping the source files (:func:`source_stamp`).

        Raises:
            OSError: a source file cannot be read or is not a regular file.
            TypeError: an option value is not JSON-serializable (paths become strings).
        """
        options_json = json.dumps(dict(options or {}), sort_keys=True, default=_json_default)
        stamps = tuple(source_stamp(source) for source in sources)
        return cls(name=name, loader=loader, sources=stamps, options=options_json)
