"""The records file: a SerializedList in one file (a cache entry, or another rank's memory
file), memory-mapped back so every process shares the same pages.

Layout (little-endian)::

    0   magic b"CATMAPR2", u64 header length, u64 payload length, u32 CRC-32 of the header
    28  header: msgpack (data-only) dict: name, num_records, key, extra, created, arrays,
        chunk_size and chunk_crcs (the CRC-32 of each chunk_size bytes of the payload, u32)
    ... zero padding to 4096 bytes, then the payload: the record buffer, its offsets and the
        five column arrays, each on a 64-byte boundary

A verified open checks the header and the chunks of the offsets and columns (read whole by
samplers and filters); a chunk of the record buffer is checked the first time a record in it
is read in the process (:class:`ChunkCheck`), so opening costs the same at any size. The
checksums catch torn and damaged files, not attackers: the cache directory is private. Files
are replaced by rename, never truncated in place.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
import stat as stat_module
import struct
import time
import zlib
from collections.abc import Mapping
from typing import Any, BinaryIO

import msgspec
import numpy as np

from .._common import CacheError, CatmapErrorWithFields
from ..version import __version__
from .records import RecordColumns, SerializedList, decode, encode

__all__ = ["CacheCorruptError", "ChunkCheck", "MappedFile", "RecordsChunkError",
           "UnsafeEntryError", "foreign", "open_entry", "read_header", "write_records"]

logger = logging.getLogger(__name__)

_MAGIC = b"CATMAPR2"
_CHUNK = 1 << 20  # bytes of payload a checksum covers
_PREAMBLE = struct.Struct("<8sQQI")
_PAYLOAD_ALIGN = 4096
_ARRAY_ALIGN = 64
_MAX_HEADER = 64 * 2**20
_ARRAYS = {"buffer": np.dtype("<u1"), "ends": np.dtype("<i8"), "heights": np.dtype("<i4"),
           "widths": np.dtype("<i4"), "category_ids": np.dtype("<i4"), "iscrowd": np.dtype("<u1"),
           "category_offsets": np.dtype("<i8")}
_SAFE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CacheCorruptError(CacheError):
    """A records file failed its checks (truncated, wrong checksum, malformed header)."""


class RecordsChunkError(CacheCorruptError, CatmapErrorWithFields):
    """A chunk of a records file's payload failed its checksum when first read."""

    field_names = ("path", "chunk")


class UnsafeEntryError(CacheError):
    """A cache path is not a regular file of this user that others cannot write (a FIFO,
    symlink, directory, another user's file): it is not read."""


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def write_records(out: BinaryIO, records: SerializedList, *, key: Mapping[str, Any] | None = None,
                  extra: Mapping[str, Any] | None = None) -> int:
    """Write ``records`` and the data-only ``extra`` dict to a binary file; returns
    the bytes written (TypeError when ``key`` or ``extra`` is not data).

    Example:
        >>> import io
        >>> buf = io.BytesIO(); n = write_records(buf, SerializedList([{"a": 1}]))
        >>> n == len(buf.getvalue())
        True
    """
    arrays = [records.buffer, records.ends, *records.columns.arrays()]
    table, pieces, offset = [], [], 0
    for name, arr in zip(_ARRAYS, arrays, strict=True):
        pieces.append(bytes(_align(offset, _ARRAY_ALIGN) - offset))
        offset += len(pieces[-1])
        table.append([name, offset, int(arr.size)])
        pieces.append(memoryview(np.ascontiguousarray(arr, _ARRAYS[name])).cast("B"))
        offset += int(arr.nbytes)
    crcs, crc, filled = [], 0, 0
    for piece in pieces:
        while len(piece):
            take = min(_CHUNK - filled, len(piece))
            crc, filled, piece = zlib.crc32(piece[:take], crc), filled + take, piece[take:]
            if filled == _CHUNK:
                crcs.append(crc)
                crc = filled = 0
    crcs += [crc] if filled else []
    header = encode({
        "name": (key or {}).get("name", records.name), "num_records": len(records),
        "key": dict(key or {}),
        "extra": dict(extra or {}), "created": time.time(), "version": __version__,
        "arrays": table, "chunk_size": _CHUNK, "chunk_crcs": np.array(crcs, "<u4").tobytes(),
    })  # fmt: skip
    start = _align(_PREAMBLE.size + len(header), _PAYLOAD_ALIGN)
    head = header + bytes(start - _PREAMBLE.size - len(header))
    out.write(_PREAMBLE.pack(_MAGIC, len(header), offset, zlib.crc32(head)) + head)
    for piece in pieces:
        out.write(piece)
    return start + offset


def read_header(fd: int, where: str) -> tuple[dict[str, Any], int, int, int]:
    """``(header, payload start, payload length, stored CRC-32)`` of the file behind ``fd``,
    payload unread (CacheCorruptError: not a records file, wrong size, malformed header)."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, _PREAMBLE.size, 0)
    if len(head) < _PREAMBLE.size:
        raise CacheCorruptError(f"{where}: {size} bytes, too short for a catmap records file")
    magic, header_len, payload_len, crc = _PREAMBLE.unpack(head)
    if magic != _MAGIC:
        raise CacheCorruptError(f"{where}: not a catmap records file (magic {magic!r})")
    start = _align(_PREAMBLE.size + header_len, _PAYLOAD_ALIGN)
    if header_len > _MAX_HEADER or size != start + payload_len:
        raise CacheCorruptError(
            f"{where}: the file is {size} bytes but its preamble says {start + payload_len} "
            "(truncated or overwritten)")
    try:
        header = decode(os.pread(fd, header_len, _PREAMBLE.size))
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise CacheCorruptError(f"{where}: malformed header ({exc})") from exc
    if not isinstance(header, dict) or not isinstance(header.get("extra"), dict):
        raise CacheCorruptError(f"{where}: malformed header")
    return header, start, payload_len, crc


def open_entry(name: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """Open a records file without following a symlink or blocking; anything but a regular
    file of this user that others cannot write raises :class:`UnsafeEntryError`.

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); os.mkfifo(os.path.join(d, "f"))
        >>> open_entry(os.path.join(d, "f"))
        Traceback (most recent call last):
        catalog.storage.records_file.UnsafeEntryError: ... is not a regular file; not read
    """
    where = os.fspath(name)
    try:
        fd = os.open(name, _SAFE_OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink
            raise UnsafeEntryError(f"{where} is a symbolic link; not followed") from exc
        raise
    st = os.fstat(fd)
    problem = "is not a regular file" if not stat_module.S_ISREG(st.st_mode) else foreign(st)
    if problem is not None:
        os.close(fd)
        raise UnsafeEntryError(f"{where} {problem}; not read")
    return fd


def foreign(st: os.stat_result) -> str | None:
    """Why another user could have written the file or directory behind ``st``, or None."""
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"has mode {st.st_mode & 0o777:o}: group or others can write it"
    return None


class MappedFile:
    """An open, read-only mapping of a records file: the owner of the records' arrays.

    Takes over ``fd`` only when the constructor returns (when it raises, the caller still
    owns it) and keeps it open, so other processes of the machine can map the same file
    through ``/proc/<pid>/fd/<fd>``.

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x.catmap")
        >>> with open(p, "wb") as f: _ = write_records(f, SerializedList([{"a": 1}]))
        >>> m = MappedFile(os.open(p, os.O_RDONLY), p, verify=True); m.records("x")[0]
        {'a': 1}
    """

    fd: int = -1

    def __init__(self, fd: int, where: str, *, verify: bool, path: str | None = None) -> None:
        header, start, payload_len, crc = read_header(fd, where)
        st = os.fstat(fd)
        mapping = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
        try:
            if verify and zlib.crc32(memoryview(mapping)[_PREAMBLE.size : start]) != crc:
                raise CacheCorruptError(f"{where}: header checksum mismatch (a torn or damaged "
                                        "file)")  # fmt: skip
            table, size, crcs = (header.get(k) for k in ("arrays", "chunk_size", "chunk_crcs"))
            if not (type(size) is int and size > 0 and isinstance(crcs, bytes)
                    and len(crcs) == 4 * -(-payload_len // size)):  # fmt: skip
                raise CacheCorruptError(f"{where}: malformed chunk checksums")
            if not isinstance(table, list) or len(table) != len(_ARRAYS):
                raise CacheCorruptError(f"{where}: malformed array table")
            for spec, expected in zip(table, _ARRAYS):  # all checked before any array is made
                if not (isinstance(spec, list) and len(spec) == 3 and spec[0] == expected
                        and (expected != "buffer" or spec[1] == 0)):  # the buffer comes first
                    raise CacheCorruptError(f"{where}: malformed array table")
                name, offset, count = spec
                if not (type(offset) is int and type(count) is int and offset >= 0 and count >= 0
                        and offset + count * _ARRAYS[name].itemsize <= payload_len):  # fmt: skip
                    raise CacheCorruptError(f"{where}: malformed array table entry {name!r}")
            self.check = None
            if verify:  # the offsets and columns now, the record buffer chunk by chunk
                self.check = ChunkCheck(mapping, start, payload_len, size, crcs, where, path, st)
                first = min(offset for _, offset, _ in table[1:])  # all but the buffer
                self.check(first, payload_len, remove=False)  # a damaged entry: the caller's
            self.arrays: dict[str, np.ndarray] = {}
            for name, offset, count in table:
                self.arrays[name] = np.frombuffer(mapping, dtype=_ARRAYS[name], count=count,
                                                  offset=start + offset)
        except BaseException:
            if self.__dict__.get("check") is not None:
                self.check.payload.release()  # else the mapping cannot close
            mapping.close()
            raise
        self.header, self.where, self.path = header, where, path
        self.size, self.device, self.inode, self.crc = st.st_size, st.st_dev, st.st_ino, crc
        self._mmap = mapping
        self.fd = fd

    def records(self, name: str | None) -> SerializedList:
        """The records, backed by the mapping; spawn workers re-map the same file (through
        ``/proc/<pid>/fd/<fd>``, else by path) instead of receiving a copy."""
        a = self.arrays
        try:
            columns = RecordColumns(a["heights"], a["widths"], a["category_ids"], a["iscrowd"],
                                    a["category_offsets"])
            return SerializedList.from_arrays(
                a["buffer"], a["ends"], columns, name=name, owner=self, check=self.check,
                reopen=functools.partial(remap, os.getpid(), self.fd, self.device, self.inode,
                                         self.path, self.size, self.crc, name=name),
            )  # fmt: skip
        except ValueError as exc:
            raise CacheCorruptError(f"{self.where}: inconsistent arrays ({exc})") from exc

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - interpreter shutdown
                pass


class ChunkCheck:
    """Checks the chunks of a mapped payload against their CRC-32s, each the first time a
    byte range in it is asked for (``check(start, stop)``, payload offsets; the record buffer
    starts the payload); :class:`RecordsChunkError` names the file and chunk of a mismatch."""

    def __init__(self, mapping: mmap.mmap, start: int, length: int, size: int, crcs: bytes,
                 where: str, path: str | None, st: os.stat_result) -> None:  # fmt: skip
        self.payload = memoryview(mapping)[start : start + length]
        self.size, self.crcs, self.where, self.path = size, np.frombuffer(crcs, "<u4"), where, path
        self.done, self.file = bytearray(len(self.crcs)), (st.st_dev, st.st_ino)

    def __call__(self, start: int, stop: int, *, remove: bool = True) -> None:
        size, done = self.size, self.done
        for k in range(start // size, -(-stop // size)):
            if not done[k]:
                if zlib.crc32(self.payload[k * size : (k + 1) * size]) != self.crcs[k]:
                    if remove:
                        self._remove()
                    raise RecordsChunkError(
                        f"{self.where}: checksum mismatch in chunk {k} (payload bytes "
                        f"{k * size}-{min((k + 1) * size, len(self.payload))}): a damaged "
                        "records file, not read (a cache entry is removed: the next load "
                        "rebuilds it)", path=self.path or self.where, chunk=k)  # fmt: skip
                done[k] = 1

    def _remove(self) -> None:
        """Unlink ``path`` if it is still the mapped file (a cache entry: rebuilt next time)."""
        with contextlib.suppress(OSError):
            st = os.stat(self.path, follow_symlinks=False) if self.path else None
            if st is not None and (st.st_dev, st.st_ino) == self.file:
                os.unlink(self.path)


def remap(
    pid: int, fd: int, device: int, inode: int, path: str | None, size: int, crc: int,
    *, name: str | None,
) -> SerializedList:  # fmt: skip
    """Map the records file process ``pid`` holds open as ``fd`` (checked by device and
    inode), else the file at ``path`` (checked by size and checksum); CacheError when neither
    gives the same file."""
    proc = f"/proc/{pid}/fd/{fd}"
    tried = []
    try:
        new_fd = os.open(proc, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(new_fd)
        if (st.st_dev, st.st_ino) == (device, inode):
            return _map_or_close(new_fd, proc, verify=True, path=path).records(name)
        os.close(new_fd)
        tried.append(f"{proc} is another file")
    except OSError as exc:
        tried.append(f"{proc}: {exc}")
    if path is not None:
        try:
            new_fd = open_entry(path)
        except OSError as exc:
            tried.append(f"{path}: {exc}")
        else:
            mapped = _map_or_close(new_fd, path, verify=True, path=path)
            if (mapped.size, mapped.crc) == (size, crc):
                return mapped.records(name)
            tried.append(f"{path} was replaced by another file")
    raise CacheError(f"cannot re-map the records of {name!r}: " + "; ".join(tried))


def _map_or_close(fd: int, where: str, **kwargs: Any) -> MappedFile:
    try:
        return MappedFile(fd, where, **kwargs)
    except BaseException:
        os.close(fd)
        raise
