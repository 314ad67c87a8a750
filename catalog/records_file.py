"""The records file: a SerializedList in one file, signed, and memory-mapped back.

File layout (little-endian)::

    0   magic  b"CATMAPC2"
    8   u64    length of the JSON header
    16  u32    flags (bit 0: signed), u32 CRC-32 of the JSON header
    24  32 B   key digest: SHA-256 of the cache key the entry was written for (zero if unsigned)
    56  32 B   MAC over bytes 0..56 and 88..end (:mod:`catalog.entry_mac`; zero if unsigned)
    88  JSON header: format, catmap version, name, key, array table, payload size,
        payload CRC-32 (or null), extra (pickled data stored next to the records, base64)
    ... zero padding to a 4096-byte boundary, then the payload: the fourteen arrays (record
        buffer and offsets, record columns, annotation columns), each starting on a 64-byte
        boundary.

A cache entry is *signed*: its MAC covers every byte of the file but the MAC itself, and
binds the key digest, so an entry copied to another key's name, or written by anyone without
this user's secret (:mod:`catalog.cache_secret`), is refused before any byte of it is
unpickled. The MAC is computed while the file is written and checked on the very descriptor
that is then mapped (the file is never opened again by path in between). It also replaces
the payload CRC-32 as the corruption check of a cache hit (a 300 MB entry, fresh mapping,
``tools/bench_cache.py`` on a loaded 2-core machine with SHA extensions: HMAC-SHA256 0.28 s,
CRC-32 0.13 s; a whole hit 0.35 s). The payload CRC-32 is still written, as the identity
that :func:`~catalog.records_map.remap_file` checks; unsigned files (the local-rank shared
memory of :mod:`catalog.local_share`) are verified by it.

Mapping these files back, and who owns which descriptor, is :mod:`catalog.records_map`.
"""

from __future__ import annotations

import base64
import errno
import hmac
import json
import os
import pickle
import stat as stat_module
import struct
import tempfile
import time
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np

from .annotation_columns import ARRAY_NAMES as ANNOTATION_ARRAYS
from .entry_mac import EntryMac, entry_mac
from .errors import CacheError
from .serialized_list import SerializedList
from .version import __version__

__all__ = [
    "CacheCorruptError",
    "UnsafeEntryError",
    "decode_extra",
    "is_signed",
    "open_entry",
    "write_serialized",
]

_MAGIC = b"CATMAPC2"
_FORMAT = 3  # 3: the annotation columns (catalog.annotation_columns) after the record columns
_PREAMBLE = struct.Struct("<8sQII32s32s")  # magic, header len, flags, header crc, digest, mac
_MAC_START, _MAC_END = 56, 88
_SIGNED = 1
_PAYLOAD_ALIGN = 4096
_ARRAY_ALIGN = 64
_RECORD_ARRAYS = ("buffer", "ends", "heights", "widths", "category_ids", "iscrowd",
                  "category_offsets")  # fmt: skip
_ARRAY_NAMES = _RECORD_ARRAYS + ANNOTATION_ARRAYS
_DTYPES = {
    "kinds": np.dtype("<u1"),
    "schema_ids": np.dtype("<u1"),
    "value_offsets": np.dtype("<i8"),
    "values": np.dtype("<i4"),
    "shape_offsets": np.dtype("<i8"),
    "shapes": np.dtype("<i4"),
    "schemas": np.dtype("<u1"),
    "buffer": np.dtype("<u1"),
    "ends": np.dtype("<i8"),
    "heights": np.dtype("<i4"),
    "widths": np.dtype("<i4"),
    "category_ids": np.dtype("<i4"),
    "iscrowd": np.dtype("<u1"),
    "category_offsets": np.dtype("<i8"),
}
_SAFE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_COPY_CHUNK = 4 * 2**20


class CacheCorruptError(CacheError):
    """A cache file failed verification (truncated, wrong MAC or checksum, bad header)."""


class UnsafeEntryError(CacheError):
    """A cache path is not a regular file of this user (a FIFO, symlink, directory, or a file
    another user owns or can write), so it is not read.

    Attributes:
        path: the path.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _arrays_of(records: SerializedList) -> dict[str, np.ndarray]:
    buffer, ends, columns, annotations = records.storage()
    arrays = (buffer, ends, *columns.arrays(), *annotations.arrays())
    return {
        name: np.ascontiguousarray(arr, dtype=_DTYPES[name])
        for name, arr in zip(_ARRAY_NAMES, arrays, strict=True)
    }


def _layout(arrays: Mapping[str, np.ndarray]) -> tuple[list[dict[str, Any]], int]:
    table, offset = [], 0
    for name in _ARRAY_NAMES:
        offset = _align(offset, _ARRAY_ALIGN)
        count = int(arrays[name].size)
        table.append({"name": name, "dtype": _DTYPES[name].str, "count": count, "offset": offset})
        offset += int(arrays[name].nbytes)
    return table, offset


def _payload_chunks(
    arrays: Mapping[str, np.ndarray], table: list[dict[str, Any]]
) -> Iterable[memoryview]:
    """The payload bytes in order: each array preceded by its alignment padding."""
    position = 0
    for spec in table:
        if spec["offset"] > position:
            yield memoryview(bytes(spec["offset"] - position))
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
    secret: bytes | None = None,
    key_digest: bytes | None = None,
) -> int:
    """Write ``records`` to a seekable binary file object in the records file format.

    Args:
        out: a binary file opened for writing, positioned at its start.
        records: the records to store.
        key: the cache key fields, stored in the header (shown by ``tools/cache.py``).
        extra: picklable data stored next to the records (e.g. metadata set by the loader).
        checksum: store the payload CRC-32.
        secret: sign the file with this secret (HMAC-SHA256, computed while writing).
        key_digest: the 32-byte digest of the cache key the MAC binds (with ``secret``).

    Returns:
        The number of bytes written.

    Example:
        >>> import io
        >>> buf = io.BytesIO(); n = write_serialized(buf, SerializedList([{"a": 1}]))
        >>> n == len(buf.getvalue())
        True
    """
    if secret is not None and (key_digest is None or len(key_digest) != 32):
        raise ValueError("write_serialized: a signed file needs a 32-byte key_digest")
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
    flags = _SIGNED if secret is not None else 0
    digest = key_digest if secret is not None and key_digest is not None else bytes(32)
    preamble = _PREAMBLE.pack(
        _MAGIC, len(header_bytes), flags, zlib.crc32(header_bytes), digest, bytes(32)
    )
    mac = EntryMac(secret) if secret is not None else None
    head_len = _PREAMBLE.size + len(header_bytes)
    payload_start = _align(head_len, _PAYLOAD_ALIGN)
    pieces: Iterable[bytes | memoryview] = (
        header_bytes,
        bytes(payload_start - head_len),
        *_payload_chunks(arrays, table),
    )
    out.write(preamble)
    if mac is None:
        for piece in pieces:
            out.write(piece)
    else:
        mac.update_head(preamble[:_MAC_START])
        # hashing and writing both release the GIL: one thread hashes the pieces, in order,
        # while this one writes them
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="catmap-mac") as hasher:
            hashed = []
            for piece in pieces:
                hashed.append(hasher.submit(mac.update_body, piece))
                out.write(piece)
            for done in hashed:
                done.result()
        out.seek(_MAC_START)
        out.write(mac.digest())
        out.seek(0, os.SEEK_END)
    return payload_start + payload_size


def _entry_mac(secret: bytes, view: memoryview) -> bytes:
    return entry_mac(secret, view[:_MAC_START], view[_MAC_END:])


def _read_header(
    view: memoryview | bytes,
    size: int,
    where: str,
    *,
    secret: bytes | None = None,
    key_digest: bytes | None = None,
) -> tuple[dict[str, Any], int, bytes | None]:
    """Check the preamble (and the MAC when ``secret`` is given), parse the JSON header.

    Returns:
        ``(header, payload start, MAC)``; the MAC is ``None`` for unsigned files.
    """
    if size < _PREAMBLE.size:
        raise CacheCorruptError(f"{where}: {size} bytes, too short for a catmap cache header")
    magic, header_len, flags, header_crc, digest, stored_mac = _PREAMBLE.unpack_from(view, 0)
    if magic != _MAGIC:
        raise CacheCorruptError(f"{where}: not a catmap cache file (magic {magic!r})")
    signed = bool(flags & _SIGNED)
    if secret is not None:
        if not signed:
            raise CacheCorruptError(f"{where}: the entry is not signed (MAC missing)")
        if key_digest is not None and not hmac.compare_digest(digest, key_digest):
            raise CacheCorruptError(f"{where}: the entry was written for another cache key")
        if not isinstance(view, memoryview) or len(view) != size:
            raise CacheCorruptError(f"{where}: the MAC needs the whole file")
        if not hmac.compare_digest(_entry_mac(secret, view), stored_mac):
            raise CacheCorruptError(
                f"{where}: MAC mismatch (not written by this user with this key file, written "
                "for another key, or damaged)"
            )
    head_end = _PREAMBLE.size + header_len
    if head_end > size:
        raise CacheCorruptError(f"{where}: truncated header ({size} bytes, header needs {head_end})")
    header_bytes = bytes(view[_PREAMBLE.size : head_end])
    if zlib.crc32(header_bytes) != header_crc:
        raise CacheCorruptError(f"{where}: header checksum mismatch")
    try:
        header = json.loads(header_bytes)
    except ValueError as exc:
        raise CacheCorruptError(f"{where}: header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise CacheCorruptError(f"{where}: unsupported cache format {found!r}")
    payload_size = header.get("payload_size")
    if not isinstance(payload_size, int) or payload_size < 0:
        raise CacheCorruptError(f"{where}: malformed payload size {payload_size!r}")
    payload_start = _align(head_end, _PAYLOAD_ALIGN)
    if size != payload_start + payload_size:
        raise CacheCorruptError(
            f"{where}: file is {size} bytes but its header says {payload_start + payload_size} "
            "(truncated or overwritten)"
        )
    return header, payload_start, (stored_mac if signed else None)


def is_signed(fd: int) -> bool:
    """Whether the records file behind ``fd`` says it is signed (read from its preamble).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     _ = write_serialized(f, SerializedList([{"a": 1}])); f.flush()
        ...     is_signed(f.fileno())
        False
    """
    head = os.pread(fd, _PREAMBLE.size, 0)
    if len(head) < _PREAMBLE.size:
        return False
    magic, _, flags, _, _, _ = _PREAMBLE.unpack(head)
    return magic == _MAGIC and bool(flags & _SIGNED)


def _check_crc(view: memoryview, header: Mapping[str, Any], start: int, where: str) -> None:
    expected = header.get("payload_crc32")
    if expected is None:
        return
    crc = zlib.crc32(view[start : start + header["payload_size"]])
    if crc != expected:
        raise CacheCorruptError(
            f"{where}: payload checksum mismatch (stored {expected:#010x}, computed {crc:#010x})"
        )


def decode_extra(header: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Unpickle the data stored with the records. Call it only on a header whose MAC was
    verified (pickle runs code).

    Raises:
        CacheCorruptError: the data cannot be decoded or is not a dict.
    """
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


def _private_copy(fd: int) -> int:
    """A new descriptor holding a private copy of the file behind ``fd`` (which stays open)."""
    if hasattr(os, "memfd_create"):
        copy = os.memfd_create("catmap-entry-copy", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux
        copy, tmp_name = tempfile.mkstemp(prefix="catmap-copy-")
        os.unlink(tmp_name)
    try:
        offset = 0
        while chunk := os.pread(fd, _COPY_CHUNK, offset):
            os.write(copy, chunk)
            offset += len(chunk)
    except BaseException:
        os.close(copy)
        raise
    return copy


def open_entry(
    name: str | os.PathLike[str], *, dir_fd: int | None = None, shared: bool = False
) -> int:
    """Open a cache entry for reading without following a symlink or blocking.

    The file must be a regular file owned by this user that group and others cannot write.
    With ``shared``, another user's file (or a writable one) is accepted but copied into
    private memory first, so that nobody can change it after its MAC is checked.

    Returns:
        A descriptor the caller owns.

    Raises:
        FileNotFoundError: nothing at ``name``.
        UnsafeEntryError: a symlink, FIFO, directory or device, or an untrusted file.
        OSError: it cannot be opened.

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); os.mkfifo(os.path.join(d, "f"))
        >>> open_entry(os.path.join(d, "f"))
        Traceback (most recent call last):
        catalog.records_file.UnsafeEntryError: ... is not a regular file (a FIFO); not read
    """
    where = os.fspath(name)
    try:
        fd = os.open(name, _SAFE_OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEntryError(f"{where} is a symbolic link; not read", path=where) from exc
        raise
    copy = None
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat_module.S_ISFIFO(st.st_mode) else (
                "a directory" if stat_module.S_ISDIR(st.st_mode) else "a special file"
            )
            raise UnsafeEntryError(f"{where} is not a regular file ({kind}); not read", path=where)
        foreign = st.st_uid != os.getuid() or bool(st.st_mode & 0o022)
        if foreign and not shared:
            raise UnsafeEntryError(
                f"{where} belongs to uid {st.st_uid} with mode {st.st_mode & 0o777:o}: another "
                "user could have written it; not read (CATMAP_CACHE_SHARED=1 reads a shared "
                "cache)",
                path=where,
            )
        if foreign:
            copy = _private_copy(fd)
    except BaseException:
        os.close(fd)
        raise
    if copy is None:
        return fd
    os.close(fd)
    return copy
