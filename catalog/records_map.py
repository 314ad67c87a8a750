"""Memory-mapping records files back: :class:`MappedFile`, :func:`map_serialized`,
:func:`remap_file`.

The record buffer, its offsets and its columns are numpy views of the mapped file, so every
process (ranks and DataLoader workers) shares the same page-cache pages, and spawn /
forkserver workers re-map the file instead of receiving a copy.

Descriptors have exactly one owner. :class:`MappedFile` takes over the descriptor it is
given only when its constructor returns; when it raises, the caller still owns the
descriptor and closes it (once). A :class:`MappedFile` closes only a descriptor it owns, once
(``close_fd`` and ``__del__`` both hand it over to ``-1`` first).

SIGBUS: a shared mapping of a file truncated under it faults on access. The cache never
truncates or rewrites an entry in place: it writes a new file and renames it over the old
one, and clears entries with ``unlink``; on Linux both leave the mapped inode intact, so a
mapped entry stays readable after it was replaced or removed (tested). Only a process of the
same user could truncate an entry (the cache directory is 0700 and owned by this user);
entries of a shared cache that another user owns or could write are copied into private
memory before they are checked and mapped (:func:`catalog.records_file.open_entry`). The
residual risk is this user truncating an entry by hand while a job maps it.
"""

from __future__ import annotations

import logging
import mmap
import os
from typing import Any

import numpy as np

from .annotation_columns import AnnotationColumns
from .errors import CacheError
from .records_file import (
    _ARRAY_NAMES,
    _DTYPES,
    _PREAMBLE,
    CacheCorruptError,
    _check_crc,
    _read_header,
    is_signed,
    open_entry,
    write_serialized,  # noqa: F401 - used by the examples
)
from .serialized_list import RecordColumns, SerializedList

__all__ = ["MappedFile", "FileRemapper", "map_serialized", "remap_file"]

logger = logging.getLogger(__name__)


class MappedFile:
    """An open, read-only memory-mapped records file (the owner of the mapped arrays).

    Takes over ``fd`` only when the constructor returns (when it raises, the caller still
    owns ``fd``). Keeps it open so that other processes of the machine can map the very same
    file through ``/proc/<pid>/fd/<fd>`` (even after it was deleted or replaced).

    Attributes:
        fd: the open file descriptor (-1 once closed).
        path: the file's path when it has one (``None`` for anonymous memory files).
        size: the file size in bytes.
        device, inode: identify the file.
        header: the parsed JSON header.
        mac: the MAC (hex) stored in a signed file (verified when a ``secret`` was given),
            else ``None``.

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x.catmap")
        >>> with open(p, "wb") as f: _ = write_serialized(f, SerializedList([{"a": 1}]))
        >>> m = MappedFile(os.open(p, os.O_RDONLY), p, p, verify=True); m.header["num_records"]
        1
        >>> m.close_fd()
    """

    fd: int = -1

    def __init__(
        self,
        fd: int,
        path: str | None,
        where: str,
        *,
        verify: bool,
        secret: bytes | None = None,
        key_digest: bytes | None = None,
    ) -> None:
        stat = os.fstat(fd)
        size = stat.st_size
        if size < _PREAMBLE.size:
            raise CacheCorruptError(f"{where}: {size} bytes, too short for a catmap cache header")
        mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        view = memoryview(mapping)
        try:
            header, start, mac = _read_header(
                view, size, where, secret=secret, key_digest=key_digest
            )
            if verify and secret is None:
                _check_crc(view, header, start, where)
        except BaseException:
            view.release()
            mapping.close()
            raise
        view.release()
        self.path, self.size, self.device, self.inode = path, size, stat.st_dev, stat.st_ino
        self.header, self.payload_start = header, start
        self.mac = mac.hex() if mac is not None else None
        self._mmap = mapping
        self.fd = fd  # owned from here on

    def arrays(self, where: str) -> dict[str, np.ndarray]:
        """numpy views of the stored arrays (read-only, backed by the mapping)."""
        out: dict[str, np.ndarray] = {}
        table = self.header.get("arrays")
        if not isinstance(table, list) or [
            s.get("name") if isinstance(s, dict) else None for s in table
        ] != list(_ARRAY_NAMES):
            raise CacheCorruptError(f"{where}: malformed array table in the header")
        payload_size = self.header["payload_size"]
        for spec in table:
            name, dtype = spec["name"], _DTYPES[spec["name"]]
            count, offset = spec.get("count"), spec.get("offset")
            if (
                spec.get("dtype") != dtype.str
                or not isinstance(count, int)
                or not isinstance(offset, int)
                or count < 0
                or offset < 0
                or offset + count * dtype.itemsize > payload_size
            ):
                raise CacheCorruptError(f"{where}: malformed entry {spec!r} in the array table")
            out[name] = np.frombuffer(
                self._mmap, dtype=dtype, count=count, offset=self.payload_start + offset
            )
        return out

    def close_fd(self) -> None:
        """Close the file descriptor once (the mapping stays valid while arrays use it)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def release_fd(self) -> int:
        """Give the descriptor back to the caller without closing it (it is no longer ours)."""
        fd, self.fd = self.fd, -1
        return fd

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - only at interpreter shutdown
                pass


class FileRemapper:
    """A picklable callable that maps the same file again in another process.

    Pickled in process P, it records ``/proc/P/fd/<fd>`` (the exact same file, valid while P
    keeps it open, even if the path was deleted or replaced) and, for cache files, the path
    with the verified MAC (or the payload CRC of an unsigned file) as a fallback. Used as
    ``SerializedList`` ``reopen`` so that spawn / forkserver DataLoader workers map the file
    instead of receiving a copy.
    """

    def __init__(
        self,
        owner: MappedFile | None,
        name: str | None,
        remote: tuple[Any, ...] | None = None,
        *,
        shared: bool = False,
    ) -> None:
        self._owner = owner
        self._name = name
        self._remote = remote
        self._shared = shared

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
            o.mac,
            self._shared,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (FileRemapper, (None, self._name, self._remote_args()))

    def __call__(self) -> SerializedList:
        if self._owner is not None:
            return _list_from_mapped(self._owner, self._name, self._owner.path or "mapped file")
        return remap_file(*self._remote_args())


def _list_from_mapped(
    owner: MappedFile, name: str | None, where: str, *, shared: bool = False
) -> SerializedList:
    arrays = owner.arrays(where)
    try:
        columns = RecordColumns(*(arrays[n] for n in _ARRAY_NAMES[2:7]))
        annotations = AnnotationColumns(*(arrays[n] for n in _ARRAY_NAMES[7:]))
        return SerializedList.from_arrays(
            arrays["buffer"],
            arrays["ends"],
            columns,
            annotations=annotations,
            name=name,
            reopen=FileRemapper(owner, name, shared=shared),
            owner=owner,
        )
    except ValueError as exc:
        raise CacheCorruptError(f"{where}: inconsistent arrays ({exc})") from exc


def _open_proc_fd(pid: int, fd: int, device: int, inode: int) -> int | None:
    if pid < 0 or fd < 0:
        return None
    proc_path = f"/proc/{pid}/fd/{fd}"
    try:
        new_fd = os.open(proc_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        logger.debug("could not open %s: %s", proc_path, exc)
        return None
    stat = os.fstat(new_fd)
    if (stat.st_dev, stat.st_ino) != (device, inode):
        os.close(new_fd)
        return None
    return new_fd


def _mapped_or_close(fd: int, path: str | None, where: str, **kwargs: Any) -> MappedFile:
    """MappedFile(fd, ...) that closes ``fd`` when mapping fails (for descriptors opened here)."""
    try:
        return MappedFile(fd, path, where, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def remap_file(
    pid: int,
    fd: int,
    device: int,
    inode: int,
    path: str | None,
    payload_crc: int | None,
    size: int,
    name: str | None,
    mac: str | None = None,
    shared: bool = False,
) -> SerializedList:
    """Map, in this process, a file that process ``pid`` holds open as ``fd``.

    Tries ``/proc/<pid>/fd/<fd>`` first (the very same file, checked by device and inode;
    only a process of the same user can open it), then ``path``: opened without following
    links, it must be a regular file of this user (see
    :func:`~catalog.records_file.open_entry`) of size ``size`` with the payload checksum
    ``payload_crc``; a signed file (a cache entry) must also verify under this user's cache
    secret (and carry the MAC ``mac`` when given), an unsigned one pass its checksum.

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
        mapped = _mapped_or_close(new_fd, path, where, verify=False)
        return _list_from_mapped(mapped, name, where, shared=shared)
    if path is None:
        raise CacheError(
            f"cannot re-map the records of {name!r}: process {pid} no longer holds fd {fd} "
            "and the memory file has no path"
        )
    try:
        new_fd = open_entry(path, shared=shared)
    except OSError as exc:
        raise CacheError(f"cannot re-map the records of {name!r} from {path}: {exc}") from exc
    try:
        secret = None
        if is_signed(new_fd):  # a cache entry: only if this user's secret signed it
            from .cache_secret import load_secret

            secret = load_secret(shared=shared, create=False)
    except BaseException:
        os.close(new_fd)
        raise
    mapped = _mapped_or_close(new_fd, path, path, verify=secret is None, secret=secret)
    crc = mapped.header.get("payload_crc32")
    if mapped.size != size or (mac is not None and mapped.mac != mac) or crc != payload_crc:
        raise CacheError(
            f"cannot re-map the records of {name!r}: {path} was replaced by a different file "
            f"(size {mapped.size} vs {size}, MAC {mapped.mac} vs {mac}, checksum {crc} vs "
            f"{payload_crc})"
        )
    return _list_from_mapped(mapped, name, path, shared=shared)


def map_serialized(
    path: str | os.PathLike[str] | None = None,
    *,
    fd: int | None = None,
    name: str | None = None,
    verify: bool = True,
    secret: bytes | None = None,
    key_digest: bytes | None = None,
    shared: bool = False,
) -> tuple[SerializedList, dict[str, Any]]:
    """Memory-map a records file and return its records and header.

    Args:
        path: the file to map (or give ``fd``); opened read-only, without following a
            symlink or blocking, and only if it is a regular file of this user.
        fd: an open file descriptor to map instead of ``path``. When this function returns,
            the returned list owns it; when it raises, the caller still does.
        name: the dataset name for the returned list (default: the name in the header).
        verify: check the payload checksum of an unsigned file (the header checksum and the
            size are always checked).
        secret: require a signed file whose MAC verifies under this secret (checked on the
            descriptor that is mapped, before anything is decoded).
        key_digest: with ``secret``, require the file to be signed for this key digest.
        shared: accept another user's file (copied first, see ``open_entry``).

    Returns:
        ``(records, header)``; ``records`` is backed by the mapping and re-maps the same
        file when sent to spawn / forkserver workers.

    Raises:
        CacheCorruptError: the file failed verification.
        UnsafeEntryError: ``path`` is not a regular file of this user.
        OSError: the file cannot be opened.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.catmap")
        >>> with open(p, "wb") as f: _ = write_serialized(f, SerializedList([{"a": 1}]))
        >>> records, header = map_serialized(p); records[0], header["num_records"]
        ({'a': 1}, 1)
    """
    kwargs: dict[str, Any] = {"verify": verify, "secret": secret, "key_digest": key_digest}
    if fd is None:
        if path is None:
            raise TypeError("map_serialized needs a path or an fd")
        where = os.fspath(path)
        mapped = _mapped_or_close(open_entry(path, shared=shared), where, where, **kwargs)
    else:
        where = os.fspath(path) if path is not None else f"fd {fd}"
        mapped = MappedFile(fd, os.fspath(path) if path is not None else None, where, **kwargs)
    header = mapped.header
    name = name if name is not None else header.get("name")
    try:
        return _list_from_mapped(mapped, name, where, shared=shared), header
    except BaseException:
        if fd is not None:
            mapped.release_fd()  # the caller's again, as documented
        raise

