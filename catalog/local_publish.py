"""Publishing a dataset's records to the other processes of this machine, and attaching to them.

The storage half of :mod:`catalog.local_share` (which runs the collectives): the loading rank
puts its records where the other local ranks can map them (:func:`publish_records`) and the
others map them (:func:`attach_records`). Nothing here talks to other processes.

File descriptors have exactly one owner at every point: the function that creates one closes it
on every failure path; :func:`catalog.disk_cache.map_serialized` takes a descriptor over only
when it returns (the returned records own it from then on; when it raises, the caller still
does and closes it, once). A failure therefore surfaces as itself, never as a later ``EBADF``
from closing a descriptor twice, and no descriptor is left open.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
from typing import Any

from .disk_cache import MappedFile, map_serialized, remap_file, write_serialized
from .errors import SharedAttachError
from .serialized_list import SerializedList

__all__ = ["attach_records", "describe_attempt", "publish_records", "unlink_quietly"]

logger = logging.getLogger(__name__)

_DESCRIPTOR_TYPES: dict[str, type | tuple[type, ...]] = {
    "transport": str,
    "pid": int,
    "fd": int,
    "device": int,
    "inode": int,
    "path": (str, type(None)),
    "size": int,
    "crc": (int, type(None)),
    "mac": (str, type(None)),
    "num_records": int,
}


def _memfd_usable() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


def _descriptor_of(records: SerializedList, transport: str) -> dict[str, Any] | None:
    # The records' owner is a MappedFile when they are memory-mapped (cache file or memfd).
    owner = getattr(records, "_shared_owner", None)
    if not isinstance(owner, MappedFile) or owner.fd < 0:
        return None
    return {
        "transport": transport,
        "pid": os.getpid(),
        "fd": owner.fd,
        "device": owner.device,
        "inode": owner.inode,
        "path": owner.path,
        "size": owner.size,
        "crc": owner.header.get("payload_crc32"),
        "mac": getattr(owner, "mac", None),  # set for signed cache files
        "num_records": len(records),
    }


def _seal(fd: int) -> None:
    seals = 0
    for flag in ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE"):
        seals |= getattr(fcntl, flag, 0)
    add_seals = getattr(fcntl, "F_ADD_SEALS", None)
    if add_seals is None or not seals:
        return
    try:
        fcntl.fcntl(fd, add_seals, seals)
    except OSError as exc:  # sealing is a safety net, not a requirement
        logger.debug("could not seal the memory file: %s", exc)


def _write_memfd(records: SerializedList, name: str) -> int:
    """A sealed anonymous memory file holding ``records``; the caller owns the returned fd."""
    fd = os.memfd_create(
        f"catmap:{name}"[:240], os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)
    )
    try:
        # closefd=False: the file object only borrows fd, which stays ours to close.
        with open(fd, "wb", closefd=False) as out:
            write_serialized(out, records, checksum=False)
        _seal(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def publish_records(records: SerializedList) -> tuple[SerializedList, dict[str, Any], str | None]:
    """Put ``records`` where other local processes can map them.

    Records already mapped from a file are published as they are. Others are written into an
    anonymous sealed memory file (``memfd``) or, where that is not available, a file in
    ``/dev/shm`` / the temporary directory that the caller must unlink once every local rank
    has attached.

    Returns:
        ``(records, descriptor, path_to_unlink)``: the records now backed by the published
        memory (the private copy can be freed), a picklable descriptor for
        :func:`attach_records`, and the file to unlink later (``None`` for memfd and cache
        files).

    Raises:
        OSError, CacheError: writing or mapping the memory failed (the original error, with
            no descriptor left open).

    Example:
        >>> mapped, desc, to_unlink = publish_records(SerializedList([{"a": 1}]))
        >>> mapped[0], desc["num_records"]
        ({'a': 1}, 1)
    """
    existing = _descriptor_of(records, "file")
    if existing is not None and existing["path"] is not None:
        return records, existing, None
    name = records.name or "records"
    if _memfd_usable():
        fd = _write_memfd(records, name)
        try:
            mapped, _ = map_serialized(fd=fd, name=records.name, verify=False)
        except BaseException:
            os.close(fd)  # map_serialized takes fd over only when it returns
            raise
        descriptor = _descriptor_of(mapped, "memfd")
        if descriptor is None:  # pragma: no cover - map_serialized always sets the owner
            raise SharedAttachError(f"could not publish the records of {name!r}")
        return mapped, descriptor, None
    directory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="catmap-", suffix=".records", dir=directory)
    try:
        try:
            out = open(fd, "wb")  # from here the file object owns (and closes) fd
        except BaseException:
            os.close(fd)
            raise
        with out:
            write_serialized(out, records, checksum=False)
        mapped, _ = map_serialized(path, name=records.name, verify=False)
    except BaseException:
        unlink_quietly(path)
        raise
    descriptor = _descriptor_of(mapped, "file")
    if descriptor is None:  # pragma: no cover
        raise SharedAttachError(f"could not publish the records of {name!r}")
    return _without_reopen(mapped), descriptor, path


def _without_reopen(records: SerializedList) -> SerializedList:
    """The same mapped records, sent to spawn workers through torch shared memory (for
    files that are unlinked right after attaching and cannot be re-opened by path)."""
    owner = getattr(records, "_shared_owner", None)
    buffer, ends, columns, annotations = records.storage()
    return SerializedList.from_arrays(
        buffer, ends, columns, annotations=annotations, name=records.name, owner=owner
    )


def unlink_quietly(path: str) -> None:
    """Remove a published records file; a missing file is fine, other errors are logged.

    Example:
        >>> unlink_quietly("/nonexistent/catmap-x.records")
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        logger.warning("could not remove shared records file %s: %s", path, exc)


def check_descriptor(descriptor: Any, name: str | None) -> dict[str, Any]:
    """``descriptor`` if it has the fields :func:`publish_records` produces, with their types.

    Raises:
        SharedAttachError: a field is missing or of the wrong type.

    Example:
        >>> _, desc, _ = publish_records(SerializedList([{"a": 1}], name="toy"))
        >>> check_descriptor(desc, "toy") is desc
        True
    """
    if not isinstance(descriptor, dict):
        raise SharedAttachError(
            f"malformed descriptor for dataset {name!r}: a {type(descriptor).__name__}, not a dict"
        )
    for key, kind in _DESCRIPTOR_TYPES.items():
        value = descriptor.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SharedAttachError(
                f"malformed descriptor for dataset {name!r}: field {key!r} is "
                f"{type(value).__name__} {value!r}"
            )
    return descriptor


def attach_records(descriptor: dict[str, Any], name: str | None) -> SerializedList:
    """Map the records another local process published with :func:`publish_records`.

    Raises:
        SharedAttachError: the descriptor is malformed.
        OSError, CacheError: the memory could not be opened or mapped (the caller wraps them
            into a :class:`SharedAttachError`).

    Example:
        >>> mapped, desc, _ = publish_records(SerializedList([{"a": 1}], name="toy"))
        >>> attach_records(desc, "toy")[0]  # ``mapped`` keeps the memory file open
        {'a': 1}
    """
    d = check_descriptor(descriptor, name)
    remote = (d["pid"], d["fd"], d["device"], d["inode"])
    if d["transport"] == "memfd" or d["path"] is None:
        records = remap_file(*remote, None, None, d["size"], name)
    elif _memfd_usable():
        signed = {"mac": d["mac"]} if d["mac"] is not None else {}
        records = remap_file(*remote, d["path"], d["crc"], d["size"], name, **signed)
    else:
        records = _without_reopen(map_serialized(d["path"], name=name, verify=False)[0])
    if len(records) != d["num_records"]:
        owner = getattr(records, "_shared_owner", None)
        if isinstance(owner, MappedFile):
            with contextlib.suppress(OSError):
                owner.close_fd()
        raise OSError(f"mapped {len(records)} records but the publisher has {d['num_records']}")
    return records


def describe_attempt(descriptor: dict[str, Any]) -> str:
    """What :func:`attach_records` tries for ``descriptor``, for error messages.

    Example:
        >>> describe_attempt({"transport": "memfd", "pid": 7, "fd": 3, "size": 10, "path": None})
        "mapping the leader's memory file /proc/7/fd/3 (10 bytes)"
    """
    target = f"/proc/{descriptor['pid']}/fd/{descriptor['fd']}"
    if descriptor["transport"] == "memfd":
        return f"mapping the leader's memory file {target} ({descriptor['size']} bytes)"
    return f"mapping {descriptor['path']} (via {target}, {descriptor['size']} bytes)"
