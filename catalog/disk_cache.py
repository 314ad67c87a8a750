"""A verified on-disk cache of serialized datasets, loaded by memory-mapping.

Parsing a large annotation file takes seconds to tens of seconds; the records it yields never
change while the file does not. This module stores a :class:`~catalog.SerializedList` in one
file and maps it back in milliseconds: the record buffer, its offsets and its columns are
numpy views of the mapped file, so every process (ranks and DataLoader workers) shares the
same page-cache pages and ``spawn``/``forkserver`` workers re-map the file instead of
receiving a copy.

File layout (little-endian)::

    0   magic  b"CATMAPC1"
    8   u64    length of the JSON header
    16  u32    CRC-32 of the JSON header, u32 zero
    24  JSON header: format, catmap version, name, key, array table, payload size,
        payload CRC-32 (or null), extra (pickled data stored next to the records, base64)
    ... zero padding to a 4096-byte boundary, then the payload: the seven arrays, each
        starting on a 64-byte boundary.

A file is served only when the magic, the header checksum, the total size and the payload
checksum all match; anything else is reported as :class:`CacheCorruptError`, and
:func:`load_with_cache` then warns, deletes the file and rebuilds it. Writes go to a
temporary file in the cache directory that is renamed into place, so a reader never sees a
half-written file and two processes building the same entry both end with a valid one.

Environment:
    ``CATMAP_CACHE_DIR``: the cache directory (default ``~/.cache/catmap``).
    ``CATMAP_CACHE``: ``0`` / ``false`` / ``off`` / ``no`` turns the cache off everywhere.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import mmap
import os
import pickle
import re
import struct
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .errors import CacheError
from .serialized_list import RecordColumns, SerializedList
from .version import __version__

__all__ = [
    "CACHE_SUFFIX",
    "apply_loader_metadata",
    "load_entry",
    "CacheCorruptError",
    "CacheCorruptWarning",
    "CacheEntry",
    "CacheKey",
    "DiskCache",
    "MappedFile",
    "cache_dir",
    "cache_enabled",
    "file_fingerprint",
    "load_with_cache",
    "map_serialized",
    "remap_file",
    "write_serialized",
]

logger = logging.getLogger(__name__)

#: File name suffix of cache entries.
CACHE_SUFFIX = ".catmap"
_MAGIC = b"CATMAPC1"
_FORMAT = 1
_PREAMBLE = struct.Struct("<8sQII")  # magic, header length, header crc32, zero
_PAYLOAD_ALIGN = 4096
_ARRAY_ALIGN = 64
_ARRAY_NAMES = (
    "buffer",
    "ends",
    "heights",
    "widths",
    "category_ids",
    "iscrowd",
    "category_offsets",
)
_DTYPES = {
    "buffer": np.dtype("<u1"),
    "ends": np.dtype("<i8"),
    "heights": np.dtype("<i4"),
    "widths": np.dtype("<i4"),
    "category_ids": np.dtype("<i4"),
    "iscrowd": np.dtype("<u1"),
    "category_offsets": np.dtype("<i8"),
}
_OFF_VALUES = {"0", "false", "off", "no"}
_TEMP_PREFIX = ".tmp-"


class CacheCorruptError(CacheError):
    """A cache file failed verification (truncated, wrong checksum, malformed header)."""


class CacheCorruptWarning(UserWarning):
    """Emitted when a corrupt cache file is found, deleted and rebuilt."""


# ---------------------------------------------------------------------------------------
# configuration


def cache_enabled(enabled: bool = True) -> bool:
    """Whether caching is on: ``enabled`` (a per-registration switch) and not ``CATMAP_CACHE=0``.

    Example:
        >>> cache_enabled(False)  # cache=False on the registration
        False
    """
    if not enabled:
        return False
    return os.environ.get("CATMAP_CACHE", "1").strip().lower() not in _OFF_VALUES


def cache_dir() -> Path:
    """The cache directory: ``$CATMAP_CACHE_DIR`` or ``~/.cache/catmap`` (not created here).

    Example:
        >>> cache_dir().name  # ~/.cache/catmap unless CATMAP_CACHE_DIR is set  # doctest: +SKIP
        'catmap'
    """
    configured = os.environ.get("CATMAP_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path("~/.cache/catmap").expanduser()


# ---------------------------------------------------------------------------------------
# file format


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _arrays_of(records: SerializedList) -> dict[str, np.ndarray]:
    cols = records.columns
    arrays = (records.buffer, records.ends, *cols.arrays())
    return {
        name: np.ascontiguousarray(arr, dtype=_DTYPES[name])
        for name, arr in zip(_ARRAY_NAMES, arrays, strict=True)
    }


def _layout(arrays: Mapping[str, np.ndarray]) -> tuple[list[dict[str, Any]], int]:
    table = []
    offset = 0
    for name in _ARRAY_NAMES:
        arr = arrays[name]
        offset = _align(offset, _ARRAY_ALIGN)
        table.append(
            {"name": name, "dtype": _DTYPES[name].str, "count": int(arr.size), "offset": offset}
        )
        offset += int(arr.nbytes)
    return table, offset


def _payload_chunks(
    arrays: Mapping[str, np.ndarray], table: list[dict[str, Any]]
) -> Iterable[memoryview]:
    """The payload bytes in order: each array preceded by its alignment padding."""
    position = 0
    for spec in table:
        pad = spec["offset"] - position
        if pad:
            yield memoryview(bytes(pad))
        arr = arrays[spec["name"]]
        if arr.nbytes:
            yield memoryview(arr).cast("B")
        position = spec["offset"] + arr.nbytes


def write_serialized(
    out: BinaryIO,
    records: SerializedList,
    *,
    key: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    checksum: bool = True,
) -> int:
    """Write ``records`` to a binary file object in the catmap cache format.

    Args:
        out: a binary file opened for writing, positioned at its start.
        records: the records to store.
        key: the cache key fields, stored in the header (shown by ``tools/cache.py``).
        extra: picklable data stored next to the records (e.g. metadata set by the loader).
        checksum: store the payload CRC-32 (verified when the file is mapped back).

    Returns:
        The number of bytes written.

    Example:
        >>> import io
        >>> buf = io.BytesIO(); n = write_serialized(buf, SerializedList([{"a": 1}]))
        >>> n == len(buf.getvalue())
        True
    """
    arrays = _arrays_of(records)
    table, payload_size = _layout(arrays)
    crc = None
    if checksum:
        crc = 0
        for chunk in _payload_chunks(arrays, table):
            crc = zlib.crc32(chunk, crc)
    header = {
        "format": _FORMAT,
        "catmap_version": __version__,
        "name": records.name,
        "num_records": len(records),
        "key": dict(key or {}),
        "arrays": table,
        "payload_size": payload_size,
        "payload_crc32": crc,
        "created": time.time(),
        "extra_pickle": base64.b64encode(pickle.dumps(dict(extra or {}))).decode("ascii"),
    }
    header_bytes = json.dumps(header, sort_keys=True).encode("utf-8")
    preamble = _PREAMBLE.pack(_MAGIC, len(header_bytes), zlib.crc32(header_bytes), 0)
    head_len = _PREAMBLE.size + len(header_bytes)
    payload_start = _align(head_len, _PAYLOAD_ALIGN)
    out.write(preamble)
    out.write(header_bytes)
    out.write(bytes(payload_start - head_len))
    for chunk in _payload_chunks(arrays, table):
        out.write(chunk)
    return payload_start + payload_size


def _read_header(view: memoryview | bytes, size: int, where: str) -> tuple[dict[str, Any], int]:
    """Parse and check the preamble and JSON header; return (header, payload start)."""
    if size < _PREAMBLE.size:
        raise CacheCorruptError(f"{where}: {size} bytes, too short for a catmap cache header")
    magic, header_len, header_crc, _ = _PREAMBLE.unpack_from(view, 0)
    if magic != _MAGIC:
        raise CacheCorruptError(f"{where}: not a catmap cache file (magic {magic!r})")
    head_end = _PREAMBLE.size + header_len
    if head_end > size:
        raise CacheCorruptError(
            f"{where}: truncated header ({size} bytes, header needs {head_end})"
        )
    header_bytes = bytes(view[_PREAMBLE.size : head_end])
    if zlib.crc32(header_bytes) != header_crc:
        raise CacheCorruptError(f"{where}: header checksum mismatch")
    try:
        header = json.loads(header_bytes)
    except ValueError as exc:
        raise CacheCorruptError(f"{where}: header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise CacheCorruptError(
            f"{where}: unsupported cache format {header.get('format') if isinstance(header, dict) else header!r}"
        )
    payload_start = _align(head_end, _PAYLOAD_ALIGN)
    expected = payload_start + int(header.get("payload_size", -1))
    if size != expected:
        raise CacheCorruptError(
            f"{where}: file is {size} bytes but its header says {expected} (truncated or overwritten)"
        )
    return header, payload_start


def _check_payload(
    view: memoryview, header: Mapping[str, Any], payload_start: int, where: str
) -> None:
    expected = header.get("payload_crc32")
    if expected is None:
        return
    crc = zlib.crc32(view[payload_start : payload_start + int(header["payload_size"])])
    if crc != expected:
        raise CacheCorruptError(
            f"{where}: payload checksum mismatch (stored {expected:#010x}, computed {crc:#010x})"
        )


def _extra_of(header: Mapping[str, Any], where: str) -> dict[str, Any]:
    encoded = header.get("extra_pickle")
    if not encoded:
        return {}
    try:
        extra = pickle.loads(base64.b64decode(encoded))
    except Exception as exc:  # a damaged header may fail in many ways
        raise CacheCorruptError(
            f"{where}: cannot decode the data stored with the records ({exc})"
        ) from exc
    if not isinstance(extra, dict):
        raise CacheCorruptError(f"{where}: the data stored with the records is not a dict")
    return extra


class MappedFile:
    """An open, read-only memory-mapped cache-format file (the owner of the mapped arrays).

    Keeps the file descriptor open so that other processes on the machine can map the very
    same file through ``/proc/<pid>/fd/<fd>`` (even after it was deleted or replaced).

    Attributes:
        fd: the open file descriptor.
        path: the file's path when it has one (``None`` for anonymous memory files).
        size: the file size in bytes.
        device, inode: identify the file.
        header: the parsed JSON header.
    """

    def __init__(self, fd: int, path: str | None, where: str, *, verify: bool) -> None:
        self.fd = fd
        self.path = path
        stat = os.fstat(fd)
        self.size = stat.st_size
        self.device = stat.st_dev
        self.inode = stat.st_ino
        if self.size < _PREAMBLE.size:
            raise CacheCorruptError(
                f"{where}: {self.size} bytes, too short for a catmap cache header"
            )
        self._mmap = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
        view = memoryview(self._mmap)
        try:
            self.header, self.payload_start = _read_header(view, self.size, where)
            if verify:
                _check_payload(view, self.header, self.payload_start, where)
        finally:
            view.release()

    def arrays(self, where: str) -> dict[str, np.ndarray]:
        """numpy views of the stored arrays (read-only, backed by the mapping)."""
        out: dict[str, np.ndarray] = {}
        table = self.header.get("arrays")
        if not isinstance(table, list) or [s.get("name") for s in table] != list(_ARRAY_NAMES):
            raise CacheCorruptError(f"{where}: malformed array table in the header")
        payload_size = int(self.header["payload_size"])
        for spec in table:
            name = spec["name"]
            dtype = _DTYPES[name]
            count, offset = int(spec["count"]), int(spec["offset"])
            if spec.get("dtype") != dtype.str or count < 0 or offset < 0:
                raise CacheCorruptError(f"{where}: malformed entry {spec!r} in the array table")
            if offset + count * dtype.itemsize > payload_size:
                raise CacheCorruptError(f"{where}: array {name!r} runs past the payload")
            out[name] = np.frombuffer(
                self._mmap, dtype=dtype, count=count, offset=self.payload_start + offset
            )
        return out

    def close_fd(self) -> None:
        """Close the file descriptor (the mapping stays valid while arrays use it)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):  # already closed (e.g. at interpreter exit)
                os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close_fd()


class MappedReopen:
    """A picklable callable that maps the same file again in another process.

    Pickled in process P, it records ``/proc/P/fd/<fd>`` (the exact same file, valid while P
    keeps it open, even if the path was deleted or replaced) and, for cache files, the path
    with the payload checksum as a fallback. Used as ``SerializedList`` ``reopen`` so that
    spawn / forkserver DataLoader workers map the file instead of receiving a copy.
    """

    def __init__(self, owner: MappedFile | None, name: str | None, remote: tuple | None = None):
        self._owner = owner
        self._name = name
        self._remote = remote

    def _remote_args(self) -> tuple[Any, ...]:
        if self._remote is not None:
            return self._remote
        o = self._owner
        if o is None:  # pragma: no cover - constructed with neither
            raise CacheError(f"nothing to re-map for {self._name!r}")
        return (
            os.getpid(),
            o.fd,
            o.device,
            o.inode,
            o.path,
            o.header.get("payload_crc32"),
            o.size,
            self._name,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (MappedReopen, (None, self._name, self._remote_args()))

    def __call__(self) -> SerializedList:
        if self._owner is not None:
            return _list_from_mapped(self._owner, self._name, self._owner.path or "mapped file")
        return remap_file(*self._remote_args())


def _list_from_mapped(owner: MappedFile, name: str | None, where: str) -> SerializedList:
    arrays = owner.arrays(where)
    try:
        columns = RecordColumns(*(arrays[n] for n in _ARRAY_NAMES[2:]))
        return SerializedList.from_arrays(
            arrays["buffer"],
            arrays["ends"],
            columns,
            name=name,
            reopen=MappedReopen(owner, name),
            owner=owner,
        )
    except ValueError as exc:
        raise CacheCorruptError(f"{where}: inconsistent arrays ({exc})") from exc


def _open_proc_fd(pid: int, fd: int, device: int, inode: int) -> int | None:
    proc_path = f"/proc/{pid}/fd/{fd}"
    try:
        new_fd = os.open(proc_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        logger.debug("could not open %s: %s", proc_path, exc)
        return None
    stat = os.fstat(new_fd)
    if (stat.st_dev, stat.st_ino) != (device, inode):
        os.close(new_fd)
        return None
    return new_fd


def remap_file(
    pid: int,
    fd: int,
    device: int,
    inode: int,
    path: str | None,
    payload_crc: int | None,
    size: int,
    name: str | None,
) -> SerializedList:
    """Map, in this process, a file that process ``pid`` holds open as ``fd``.

    Tries ``/proc/<pid>/fd/<fd>`` first (the very same file, checked by device and inode),
    then ``path`` (checked against ``size`` and ``payload_crc``).

    Raises:
        CacheError: neither works (the message says what was tried).
        CacheCorruptError: the file is not a valid catmap records file.

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x.catmap")
        >>> with open(p, "wb") as f: _ = write_serialized(f, SerializedList([{"a": 1}]))
        >>> st = os.stat(p)
        >>> remap_file(-1, -1, st.st_dev, st.st_ino, p, map_serialized(p)[1]["payload_crc32"],
        ...            st.st_size, "toy")[0]
        {'a': 1}
    """
    new_fd = _open_proc_fd(pid, fd, device, inode)
    if new_fd is not None:
        where = f"/proc/{pid}/fd/{fd}" + (f" ({path})" if path else "")
        return _list_from_mapped(MappedFile(new_fd, path, where, verify=False), name, where)
    if path is None:
        raise CacheError(
            f"cannot re-map the records of {name!r}: process {pid} no longer holds fd {fd} "
            "and the memory file has no path"
        )
    try:
        new_fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CacheError(f"cannot re-map the records of {name!r} from {path}: {exc}") from exc
    mapped = MappedFile(new_fd, path, path, verify=False)
    if mapped.size != size or mapped.header.get("payload_crc32") != payload_crc:
        raise CacheError(
            f"cannot re-map the records of {name!r}: {path} was replaced by a different file "
            f"(size {mapped.size} vs {size}, checksum "
            f"{mapped.header.get('payload_crc32')} vs {payload_crc})"
        )
    return _list_from_mapped(mapped, name, path)


def map_serialized(
    path: str | os.PathLike[str] | None = None,
    *,
    fd: int | None = None,
    name: str | None = None,
    verify: bool = True,
) -> tuple[SerializedList, dict[str, Any]]:
    """Memory-map a cache-format file and return its records and header.

    Args:
        path: the file to map (or give ``fd``).
        fd: an open file descriptor to map instead of ``path``; it is kept open by the
            returned list (duplicate it first if you need to keep yours).
        name: the dataset name for the returned list (default: the name in the header).
        verify: check the payload checksum (the header checksum and size are always checked).

    Returns:
        ``(records, header)``; ``records`` is backed by the mapping and re-maps the same
        file when sent to spawn / forkserver workers.

    Raises:
        CacheCorruptError: the file failed verification.
        OSError: the file cannot be opened.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.catmap")
        >>> with open(p, "wb") as f: _ = write_serialized(f, SerializedList([{"a": 1}]))
        >>> records, header = map_serialized(p); records[0], header["num_records"]
        ({'a': 1}, 1)
    """
    if fd is None:
        if path is None:
            raise TypeError("map_serialized needs a path or an fd")
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    where = os.fspath(path) if path is not None else f"fd {fd}"
    try:
        mapped = MappedFile(fd, os.fspath(path) if path is not None else None, where, verify=verify)
    except BaseException:
        os.close(fd)
        raise
    header = mapped.header
    records = _list_from_mapped(mapped, name if name is not None else header.get("name"), where)
    return records, header


# ---------------------------------------------------------------------------------------
# keys


@dataclass(frozen=True)
class CacheKey:
    """What a cached dataset depends on.

    Attributes:
        name: the dataset name (part of the file name, for humans).
        loader: identifies the loading function and its record format (e.g. ``"coco"``).
        sources: ``(absolute path, size, mtime_ns, content fingerprint)`` of each source
            file; the fingerprint (:func:`file_fingerprint`) catches rewrites that keep the
            size and land within the file system's timestamp granularity.
        options: the loader options, canonical JSON.
        version: the catmap version.
    """

    name: str
    loader: str
    sources: tuple[tuple[str, int, int, str], ...]
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

    def family_digest(self) -> str:
        """Hash of what does not change when a source file is edited (paths, loader, options)."""
        parts = [self.loader, self.options, *(s[0] for s in self.sources)]
        return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:10]

    def digest(self) -> str:
        """Hash of every field."""
        data = json.dumps(self.fields(), sort_keys=True).encode("utf-8")
        return hashlib.sha256(data).hexdigest()[:20]

    def file_name(self) -> str:
        """``<name>-<family digest>-<digest>.catmap``."""
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("._")[:80] or "dataset"
        return f"{slug}-{self.family_digest()}-{self.digest()}{CACHE_SUFFIX}"

    @classmethod
    def build(
        cls,
        name: str,
        sources: Sequence[str | os.PathLike[str]],
        *,
        loader: str,
        options: Mapping[str, Any] | None = None,
    ) -> CacheKey:
        """Make a key by stat-ing the source files.

        Raises:
            OSError: a source file cannot be stat-ed.
            TypeError: an option value is not JSON-serializable (paths become strings).

        Example:
            >>> import tempfile; f = tempfile.NamedTemporaryFile(suffix=".json")
            >>> k = CacheKey.build("d", [f.name], loader="coco", options={"root": "/img"})
            >>> k.loader, len(k.sources)
            ('coco', 1)
        """
        stamps = []
        for source in sources:
            path = os.path.abspath(os.fspath(source))
            stat = os.stat(path)
            stamps.append(
                (
                    path,
                    int(stat.st_size),
                    int(stat.st_mtime_ns),
                    file_fingerprint(path, stat.st_size),
                )
            )
        options_json = json.dumps(dict(options or {}), sort_keys=True, default=_json_default)
        return cls(name=name, loader=loader, sources=tuple(stamps), options=options_json)


#: Files up to this size are fingerprinted whole; larger ones by their head and tail.
FINGERPRINT_FULL_BYTES = 64 * 2**20
_FINGERPRINT_SAMPLE = 2**20


def file_fingerprint(path: str, size: int) -> str:
    """A CRC-32 of the file's content: all of it up to ``FINGERPRINT_FULL_BYTES``, else its
    first and last MiB (about a millisecond; the size and mtime cover the rest).

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(); _ = f.write(b"abc"); f.flush()
        >>> file_fingerprint(f.name, 3)
        'full:352441c2'
    """
    with open(path, "rb") as f:
        if size <= FINGERPRINT_FULL_BYTES:
            crc = 0
            while chunk := f.read(8 * 2**20):
                crc = zlib.crc32(chunk, crc)
            return f"full:{crc:08x}"
        crc = zlib.crc32(f.read(_FINGERPRINT_SAMPLE))
        f.seek(max(size - _FINGERPRINT_SAMPLE, 0))
        crc = zlib.crc32(f.read(_FINGERPRINT_SAMPLE), crc)
        return f"ends:{crc:08x}"


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


# ---------------------------------------------------------------------------------------
# the cache directory


@dataclass
class CacheEntry:
    """One file of the cache directory, as listed by :meth:`DiskCache.entries`.

    Attributes:
        path: the file.
        size: its size in bytes.
        name: the dataset name stored in its header (``None`` when unreadable).
        num_records: the number of records (``None`` when unreadable).
        sources: the source files it was built from.
        created: when it was written (seconds since the epoch).
        valid: whether the header passed its checks (the payload is not checked here).
        stale: a source file changed or vanished since (the entry will not be used again).
        error: why the header is invalid, if it is.
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


class DiskCache:
    """The cache directory: look entries up, store them atomically, list and clear them.

    Args:
        directory: where the files live (default :func:`cache_dir`).

    Example:
        >>> import tempfile
        >>> cache = DiskCache(tempfile.mkdtemp())
        >>> f = tempfile.NamedTemporaryFile(suffix=".json")
        >>> key = CacheKey.build("toy", [f.name], loader="toy")
        >>> cache.load(key) is None
        True
        >>> records, extra = cache.store(key, SerializedList([{"a": 1}]), extra={"k": 2})
        >>> records[0], cache.load(key)[1]
        ({'a': 1}, {'k': 2})
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else cache_dir()

    def path_of(self, key: CacheKey) -> Path:
        """Where the entry for ``key`` lives."""
        return self.directory / key.file_name()

    def load(self, key: CacheKey) -> tuple[SerializedList, dict[str, Any]] | None:
        """The cached records and extra data for ``key``, or ``None`` when absent.

        A corrupt file is deleted and reported with a :class:`CacheCorruptWarning`; ``None``
        is then returned so the caller rebuilds it.
        """
        path = self.path_of(key)
        start = time.perf_counter()
        try:
            records, header = map_serialized(path, name=key.name)
        except FileNotFoundError:
            return None
        except CacheCorruptError as exc:
            self._discard_corrupt(path, key, exc)
            return None
        except OSError as exc:
            logger.warning("cannot read cache entry %s of dataset %r: %s", path, key.name, exc)
            return None
        if header.get("key") != key.fields():
            # Same file name but a different key: a hash collision or a hand-edited file.
            logger.warning(
                "cache entry %s does not match dataset %r; rebuilding it", path, key.name
            )
            return None
        logger.info(
            "loaded %d records of %r from cache %s in %.3f s",
            len(records),
            key.name,
            path,
            time.perf_counter() - start,
        )
        try:
            extra = _extra_of(header, str(path))
        except CacheCorruptError as exc:
            self._discard_corrupt(path, key, exc)
            return None
        return records, extra

    def _discard_corrupt(self, path: Path, key: CacheKey, exc: CacheCorruptError) -> None:
        """Warn that the entry at ``path`` is corrupt and delete it, so that it is rebuilt."""
        warnings.warn(
            f"catmap cache entry for dataset {key.name!r} is corrupt and will be rebuilt: {exc}",
            CacheCorruptWarning,
            stacklevel=4,
        )
        self._remove(path)

    def store(
        self,
        key: CacheKey,
        records: SerializedList,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[SerializedList, dict[str, Any]]:
        """Write ``records`` for ``key`` atomically and return them mapped from the file.

        Older entries built from the same sources and options (stale versions) are removed.

        Raises:
            CacheError: the directory or file could not be written (the message says where
                and why).
        """
        path = self.path_of(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(
                prefix=_TEMP_PREFIX + path.name + ".", dir=self.directory
            )
        except OSError as exc:
            raise CacheError(
                f"cannot write the cache of dataset {key.name!r} in {self.directory}: {exc}"
            ) from exc
        try:
            with os.fdopen(fd, "wb") as out:
                write_serialized(out, records, key=key.fields(), extra=extra)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp_name, path)
        except OSError as exc:
            self._remove(Path(tmp_name))
            raise CacheError(
                f"cannot write the cache of dataset {key.name!r} to {path}: {exc}"
            ) from exc
        except BaseException:
            self._remove(Path(tmp_name))
            raise
        self._remove_stale(key, keep=path)
        logger.info("cached %d records of %r in %s", len(records), key.name, path)
        try:
            mapped, header = map_serialized(path, name=key.name, verify=False)
        except OSError as exc:
            # Another process replaced or removed it in between (e.g. as a stale version
            # after the source changed): the records are still good, serve them unmapped.
            logger.warning("cannot map the cache entry %s just written: %s", path, exc)
            return records, dict(extra or {})
        return mapped, _extra_of(header, str(path))

    def _remove_stale(self, key: CacheKey, keep: Path) -> None:
        prefix = keep.name[: -len(CACHE_SUFFIX) - 21]  # "<slug>-<family>"
        for other in self.directory.glob(f"{prefix}-*{CACHE_SUFFIX}"):
            if other != keep:
                logger.info("removing stale cache entry %s of %r", other, key.name)
                self._remove(other)

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("cannot remove %s: %s", path, exc)

    def entries(self) -> list[CacheEntry]:
        """Every cache file in the directory, newest first (headers only, payload unchecked)."""
        if not self.directory.is_dir():
            return []
        out = []
        for path in self.directory.glob(f"*{CACHE_SUFFIX}"):
            if path.name.startswith(_TEMP_PREFIX):
                continue
            out.append(self._describe(path))
        out.sort(key=lambda e: (e.created or 0.0, str(e.path)), reverse=True)
        return out

    @staticmethod
    def _describe(path: Path) -> CacheEntry:
        try:
            size = path.stat().st_size
        except OSError as exc:
            return CacheEntry(path=path, size=0, error=str(exc))
        entry = CacheEntry(path=path, size=size)
        try:
            with open(path, "rb") as f:
                preamble = f.read(_PREAMBLE.size)
                head = preamble
                if len(preamble) == _PREAMBLE.size:
                    header_len = _PREAMBLE.unpack(preamble)[1]
                    head += f.read(min(header_len, 64 * 2**20))
            header, _ = _read_header(head, size, str(path))
        except (OSError, CacheCorruptError, struct.error) as exc:
            entry.error = str(exc)
            return entry
        entry.valid = True
        entry.name = header.get("name")
        entry.num_records = header.get("num_records")
        entry.created = header.get("created")
        sources = (header.get("key") or {}).get("sources") or []
        entry.sources = [s[0] for s in sources]
        for src_path, src_size, src_mtime, *_ in sources:
            try:
                st = os.stat(src_path)
            except OSError:
                entry.stale = True
                break
            if (st.st_size, st.st_mtime_ns) != (src_size, src_mtime):
                entry.stale = True
                break
        if (header.get("key") or {}).get("version") != __version__:
            entry.stale = True
        return entry

    def clear(self, *, name: str | None = None, stale_only: bool = False) -> list[Path]:
        """Delete cache files (and leftover temporary files older than an hour).

        Args:
            name: only entries of this dataset.
            stale_only: only entries that can no longer be used (source changed, older
                catmap version, unreadable header).

        Returns:
            The deleted files.
        """
        removed = []
        for entry in self.entries():
            if name is not None and entry.name != name:
                continue
            if stale_only and entry.valid and not entry.stale:
                continue
            self._remove(entry.path)
            removed.append(entry.path)
        if name is None and self.directory.is_dir():
            now = time.time()
            for tmp in self.directory.glob(f"{_TEMP_PREFIX}*"):
                try:
                    if now - tmp.stat().st_mtime > 3600:
                        self._remove(tmp)
                        removed.append(tmp)
                except OSError:
                    continue
        return removed


# ---------------------------------------------------------------------------------------
# the entry point used by the catalog


def _as_serialized(records: Any, name: str) -> SerializedList:
    if isinstance(records, SerializedList):
        return records
    return SerializedList(records, name=name)


def load_with_cache(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    build: Callable[[], tuple[Any, Mapping[str, Any] | None]],
    *,
    loader: str,
    options: Mapping[str, Any] | None = None,
    enabled: bool = True,
    directory: str | os.PathLike[str] | None = None,
) -> tuple[SerializedList, dict[str, Any]]:
    """Load a file-backed dataset through the disk cache.

    On a hit the records are memory-mapped from the cache file (verified first); on a miss
    ``build()`` runs, its records are serialized and written to the cache, and the mapped
    file is returned. Caching problems never break loading: an unwritable directory or a
    non-serializable option logs a warning (or a debug message) and the built records are
    returned directly.

    Args:
        name: the dataset name.
        sources: the files the dataset is read from (their size and mtime are in the key).
        build: loads the dataset; returns ``(records, extra)`` where ``records`` is a list of
            dicts or a SerializedList and ``extra`` JSON-serializable data to keep with it
            (e.g. metadata the loader sets), or ``None``.
        loader: identifies the loader in the key (e.g. ``"coco"``).
        options: the loader options that change its output (JSON-compatible).
        enabled: the per-registration switch (``cache=False`` turns it off);
            ``CATMAP_CACHE=0`` turns it off everywhere.
        directory: the cache directory (default :func:`cache_dir`).

    Returns:
        ``(records, extra)``.

    Example:
        >>> import tempfile, json
        >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        >>> _ = f.write(json.dumps([{"a": 1}])); f.close()
        >>> build = lambda: (json.load(open(f.name)), {"classes": ["x"]})
        >>> d = tempfile.mkdtemp()
        >>> records, extra = load_with_cache("toy", [f.name], build, loader="json", directory=d)
        >>> records[0], extra
        ({'a': 1}, {'classes': ['x']})
    """
    if not cache_enabled(enabled):
        records, extra = build()
        return _as_serialized(records, name), dict(extra or {})
    try:
        key = CacheKey.build(name, sources, loader=loader, options=options)
    except OSError as exc:
        logger.debug("not caching %r: cannot stat its sources (%s)", name, exc)
        records, extra = build()
        return _as_serialized(records, name), dict(extra or {})
    except TypeError as exc:
        logger.info("not caching %r: %s", name, exc)
        records, extra = build()
        return _as_serialized(records, name), dict(extra or {})
    cache = DiskCache(directory)
    hit = cache.load(key)
    if hit is not None:
        return hit
    records, extra = build()
    serialized = _as_serialized(records, name)
    extra = dict(extra or {})
    try:
        after = CacheKey.build(name, sources, loader=loader, options=options)
    except OSError:
        after = None
    if after != key:
        logger.warning(
            "a source of dataset %r changed while it was loading; not caching this result", name
        )
        return serialized, extra
    try:
        pickle.dumps(extra)
    except Exception as exc:  # any pickling failure: keep the result, skip the cache
        logger.info("not caching %r: the data kept with it cannot be pickled (%s)", name, exc)
        return serialized, extra
    try:
        return cache.store(key, serialized, extra)
    except CacheError as exc:
        logger.warning("%s; continuing without the cache", exc)
        return serialized, extra


# ---------------------------------------------------------------------------------------
# catalog entries


def _metadata_snapshot(name: str) -> dict[str, Any]:
    from .metadata import MetadataCatalog

    return MetadataCatalog.get(name).as_dict() if name in MetadataCatalog else {}


def _metadata_changes(name: str, before: Mapping[str, Any]) -> dict[str, Any]:
    from .metadata import values_equal

    after = _metadata_snapshot(name)
    return {
        key: value
        for key, value in after.items()
        if key != "name" and (key not in before or not values_equal(before[key], value))
    }


def apply_loader_metadata(name: str, extra: Mapping[str, Any]) -> None:
    """Set the metadata a loader set when it ran (kept in ``extra["metadata"]``) on a process
    that got the records without running it (from the cache or from another local rank).

    Raises:
        MetadataConflictError: the metadata of ``name`` already holds different values.

    Example:
        >>> from catalog import MetadataCatalog
        >>> apply_loader_metadata("doc_meta", {"metadata": {"thing_classes": ["cat"]}})
        >>> MetadataCatalog.get("doc_meta").thing_classes
        ['cat']
        >>> MetadataCatalog.remove("doc_meta")
    """
    values = extra.get("metadata") or {}
    if values:
        from .metadata import MetadataCatalog

        MetadataCatalog.get(name).set(**values)


def load_entry(
    entry: Any,
    run_loader: Callable[[Any], SerializedList],
) -> tuple[SerializedList, dict[str, Any]]:
    """Load a DatasetCatalog entry, through the disk cache when the entry allows it.

    An entry is cached when it has a ``cache_key`` and ``source_files`` (file-backed
    registrations such as ``register_coco_instances``), its ``options`` do not hold
    ``cache=False`` and ``CATMAP_CACHE`` is not ``0``. The metadata the loader sets for the
    dataset is captured and stored with the records, and set again on a cache hit.

    Args:
        entry: a ``DatasetEntry`` (name, func, source_files, cache_key, options).
        run_loader: runs the entry's loader and returns its records serialized.

    Returns:
        ``(records, extra)`` where ``extra["metadata"]`` holds what the loader set.

    Example:
        >>> from catalog.dataset_catalog import DatasetEntry, as_serialized_list
        >>> entry = DatasetEntry("doc_plain", lambda: [{"a": 1}])  # no files: not cached
        >>> records, extra = load_entry(entry, lambda e: as_serialized_list(e.func(), e.name))
        >>> records[0], extra
        ({'a': 1}, {'metadata': {}})
    """
    name = entry.name

    def build() -> tuple[SerializedList, dict[str, Any]]:
        before = _metadata_snapshot(name)
        records = run_loader(entry)
        return records, {"metadata": _metadata_changes(name, before)}

    enabled = (
        entry.cache_key is not None
        and bool(entry.source_files)
        and bool(entry.options.get("cache", True))
    )
    if not cache_enabled(enabled):
        return build()
    cache_key = dict(entry.cache_key)
    records, extra = load_with_cache(
        name,
        entry.source_files,
        build,
        loader=str(cache_key.get("loader", "catalog")),
        options=cache_key,
    )
    apply_loader_metadata(name, extra)
    return records, extra
