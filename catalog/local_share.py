"""One copy of a dataset's records per machine, shared by every local rank.

A training job runs one process per GPU. Without sharing, every rank parses the annotation
file and holds its own serialized copy of the records (detectron2, mmengine). With
:func:`share_across_local_ranks`, when ``torch.distributed`` is initialized:

1. every rank gathers ``(node id, dataset name)`` from all ranks, which groups ranks by
   machine (node id = ``$CATMAP_NODE_ID``, else host name + boot id) and checks that all
   ranks load the same dataset at the same time (a mismatch is a :class:`SharedAttachError`
   instead of a hang or silently different data);
2. on each machine the lowest rank (the *leader*) runs the loader. If its records are already
   memory-mapped from a file (the on-disk cache) that file is published as is; otherwise the
   records are written once into an anonymous, sealed memory file (``memfd``), which never
   appears in ``/dev/shm`` and is released by the kernel when the last process using it exits,
   whatever way it exits;
3. the leaders' descriptors are gathered by every rank; the other local ranks map the
   leader's file through ``/proc/<leader pid>/fd/<fd>`` (a new reference to the same memory,
   no copy) and never run the loader;
4. a last gather reports whether every rank attached; if one did not, every rank raises a
   :class:`SharedAttachError` naming that rank, what it tried and why.

On systems without ``memfd`` or ``/proc`` the leader writes a file in ``/dev/shm`` (or the
temporary directory) and unlinks it as soon as every local rank has mapped it (and at exit if
the job fails before).

DataLoader workers: under ``fork`` the mapping is inherited; under ``spawn``/``forkserver`` the
records re-map the same memory through ``/proc/<rank pid>/fd/<fd>`` instead of being copied.

Environment:
    ``CATMAP_SHARE=0`` turns sharing off (every rank loads on its own).
    ``CATMAP_NODE_ID`` overrides the machine identity used to group local ranks.

All ranks must call :func:`share_across_local_ranks` for the same datasets in the same order
(as with any collective); ``DatasetCatalog.get`` loads each dataset once per process, so
calling ``get`` for the same names on every rank is enough. A loader that itself calls
``DatasetCatalog.get`` loads that inner dataset on its own rank only (with a warning): the
other ranks are already waiting for the outer one. Set ``CATMAP_SHARE=0`` (on every rank) if
only some ranks load datasets.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import logging
import os
import pickle
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .disk_cache import MappedFile, map_serialized, remap_file, write_serialized
from .errors import SharedAttachError
from .serialized_list import SerializedList

__all__ = [
    "LocalGroup",
    "local_group",
    "node_id",
    "publish_records",
    "share_across_local_ranks",
    "sharing_enabled",
]

logger = logging.getLogger(__name__)

_OFF_VALUES = {"0", "false", "off", "no"}
_gloo_cache: dict[str, Any] = {}
# Threads of one rank must not interleave their collectives (each dataset takes three).
_collective_lock = threading.RLock()
# Set while this thread runs a leader's build: a loader that itself calls DatasetCatalog.get
# loads the inner dataset locally (the other ranks are waiting in a collective already).
_in_build = threading.local()


# ---------------------------------------------------------------------------------------
# topology


def node_id() -> str:
    """This machine's identity: ``$CATMAP_NODE_ID``, else ``<host name>/<boot id>``.

    Example:
        >>> node_id()  # doctest: +SKIP
        'gpu-host-3/8c1e5f0a-...'
    """
    configured = os.environ.get("CATMAP_NODE_ID")
    if configured:
        return configured
    boot = ""
    with contextlib.suppress(OSError):  # no /proc: the host name alone identifies the node
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def sharing_enabled() -> bool:
    """Whether cross-rank sharing is on (``CATMAP_SHARE`` is not ``0``/``false``/``off``/``no``).

    Example:
        >>> sharing_enabled()  # unless CATMAP_SHARE=0 is set  # doctest: +SKIP
        True
    """
    return os.environ.get("CATMAP_SHARE", "1").strip().lower() not in _OFF_VALUES


@dataclass(frozen=True)
class LocalGroup:
    """The ranks of this machine.

    Attributes:
        rank: this process's global rank.
        ranks: the global ranks on this machine, ascending (``ranks[0]`` is the leader).
        node: the machine identity.
        leaders: the leader rank of every machine, by node id.
    """

    rank: int
    ranks: tuple[int, ...]
    node: str
    leaders: dict[str, int]

    @property
    def leader(self) -> int:
        """The global rank that loads for this machine."""
        return self.ranks[0]

    @property
    def is_leader(self) -> bool:
        """Whether this process loads for its machine."""
        return self.rank == self.ranks[0]

    @property
    def local_rank(self) -> int:
        """This process's index among the ranks of its machine."""
        return self.ranks.index(self.rank)


def _dist() -> Any:
    # A process group can only be initialized after torch.distributed was imported: checking
    # sys.modules keeps single-process loading from paying for importing torch.
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _collective_group(dist: Any) -> Any:
    """A gloo group spanning every rank (the default group when it is gloo already)."""
    if dist.get_backend() == "gloo":
        return None
    world = dist.group.WORLD
    cached = _gloo_cache.get("group")
    if cached is not None and _gloo_cache.get("world") is world:
        return cached
    group = dist.new_group(backend="gloo")
    _gloo_cache.update(group=group, world=world)
    return group


def _all_gather(dist: Any, group: Any, value: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value, group=group)
    return out


def local_group(gathered: list[tuple[str, Any]], rank: int) -> LocalGroup:
    """Group ranks by node from every rank's ``(node id, ...)`` tuple.

    Example:
        >>> g = local_group([("a", 0), ("b", 0), ("a", 0)], rank=2)
        >>> g.ranks, g.leader, g.local_rank, g.leaders
        ((0, 2), 0, 1, {'a': 0, 'b': 1})
    """
    node = gathered[rank][0]
    ranks = tuple(r for r, item in enumerate(gathered) if item[0] == node)
    leaders: dict[str, int] = {}
    for r, item in enumerate(gathered):
        leaders.setdefault(item[0], r)
    return LocalGroup(rank=rank, ranks=ranks, node=node, leaders=leaders)


# ---------------------------------------------------------------------------------------
# publishing and attaching


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
        fd = os.memfd_create(
            f"catmap:{name}"[:240], os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)
        )
        try:
            with os.fdopen(os.dup(fd), "wb") as out:
                write_serialized(out, records, checksum=False)
            _seal(fd)
            mapped, _ = map_serialized(fd=fd, name=records.name, verify=False)
        except BaseException:
            os.close(fd)
            raise
        descriptor = _descriptor_of(mapped, "memfd")
        if descriptor is None:  # pragma: no cover - map_serialized always sets the owner
            raise SharedAttachError(f"could not publish the records of {name!r}")
        return mapped, descriptor, None
    directory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="catmap-", suffix=".records", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            write_serialized(out, records, checksum=False)
        mapped, _ = map_serialized(path, name=records.name, verify=False)
    except BaseException:
        _unlink(path)
        raise
    descriptor = _descriptor_of(mapped, "file")
    if descriptor is None:  # pragma: no cover
        raise SharedAttachError(f"could not publish the records of {name!r}")
    return _without_reopen(mapped), descriptor, path


def _without_reopen(records: SerializedList) -> SerializedList:
    """The same mapped records, sent to spawn workers through torch shared memory (for
    files that are unlinked right after attaching and cannot be re-opened by path)."""
    owner = getattr(records, "_shared_owner", None)
    return SerializedList.from_arrays(
        records.buffer, records.ends, records.columns, name=records.name, owner=owner
    )


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        logger.warning("could not remove shared records file %s: %s", path, exc)


def attach_records(descriptor: dict[str, Any], name: str | None) -> SerializedList:
    """Map the records another local process published with :func:`publish_records`.

    Raises:
        OSError, CacheError: the memory could not be opened or mapped (the caller wraps them
            into a :class:`SharedAttachError`).
    """
    if descriptor["transport"] == "memfd" or descriptor["path"] is None:
        records = remap_file(
            descriptor["pid"],
            descriptor["fd"],
            descriptor["device"],
            descriptor["inode"],
            None,
            None,
            descriptor["size"],
            name,
        )
    elif _memfd_usable():
        records = remap_file(
            descriptor["pid"],
            descriptor["fd"],
            descriptor["device"],
            descriptor["inode"],
            descriptor["path"],
            descriptor["crc"],
            descriptor["size"],
            name,
        )
    else:
        records = _without_reopen(map_serialized(descriptor["path"], name=name, verify=False)[0])
    if len(records) != descriptor["num_records"]:
        raise OSError(
            f"mapped {len(records)} records but the publisher has {descriptor['num_records']}"
        )
    return records


def _describe_attempt(descriptor: dict[str, Any]) -> str:
    target = f"/proc/{descriptor['pid']}/fd/{descriptor['fd']}"
    if descriptor["transport"] == "memfd":
        return f"mapping the leader's memory file {target} ({descriptor['size']} bytes)"
    return f"mapping {descriptor['path']} (via {target}, {descriptor['size']} bytes)"


# ---------------------------------------------------------------------------------------
# the collective


def share_across_local_ranks(
    name: str,
    build: Callable[[], tuple[SerializedList, dict[str, Any]]],
    *,
    on_attach: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[SerializedList, dict[str, Any]]:
    """Run ``build`` once per machine and share its records with the other local ranks.

    Without ``torch.distributed`` initialized, with one rank per machine, or with
    ``CATMAP_SHARE=0``, this is just ``build()``.

    Args:
        name: the dataset name (checked to be the same on every rank).
        build: returns ``(records, extra)``; ``extra`` is a picklable dict sent to the other
            local ranks with the records (e.g. the metadata the loader set).
        on_attach: called with ``extra`` on ranks that did not run ``build``.

    Returns:
        ``(records, extra)`` on every rank; ``records`` are identical on all ranks of a
        machine and backed by one shared copy.

    Raises:
        SharedAttachError: on every rank when the ranks disagree on the dataset, when a
            machine's leader failed to load (the leader itself re-raises its own error), or
            when a rank could not attach (the message names the rank, what it tried and why).

    Example:
        >>> records, extra = share_across_local_ranks("toy", lambda: (SerializedList([{"a": 1}]), {}))
        >>> records[0]
        {'a': 1}
    """
    dist = _dist()
    if dist is None or dist.get_world_size() == 1 or not sharing_enabled():
        return build()
    if getattr(_in_build, "active", False):
        logger.warning(
            "dataset %r is loaded inside another dataset's loader: loading it on this rank "
            "only, without sharing",
            name,
        )
        return build()
    with _collective_lock:
        return _share_collectively(dist, name, build, on_attach)


def _share_collectively(
    dist: Any,
    name: str,
    build: Callable[[], tuple[SerializedList, dict[str, Any]]],
    on_attach: Callable[[dict[str, Any]], None] | None,
) -> tuple[SerializedList, dict[str, Any]]:
    group = _collective_group(dist)
    rank = dist.get_rank()
    gathered = _all_gather(dist, group, (node_id(), name))
    names = {item[1] for item in gathered}
    if len(names) > 1:
        by_rank = ", ".join(f"rank {r}: {item[1]!r}" for r, item in enumerate(gathered))
        raise SharedAttachError(
            f"rank {rank}: ranks are loading different datasets at the same time ({by_rank}); "
            "every rank must call DatasetCatalog.get for the same datasets in the same order"
        )
    topology = local_group(gathered, rank)
    if all(len([g for g in gathered if g[0] == node]) == 1 for node in topology.leaders):
        return build()  # one rank per machine: nothing to share
    return _share(dist, group, topology, name, build, on_attach)


def _share(
    dist: Any,
    group: Any,
    topology: LocalGroup,
    name: str,
    build: Callable[[], tuple[SerializedList, dict[str, Any]]],
    on_attach: Callable[[dict[str, Any]], None] | None,
) -> tuple[SerializedList, dict[str, Any]]:
    rank = topology.rank
    records: SerializedList | None = None
    extra: dict[str, Any] = {}
    to_unlink: str | None = None
    unlink_at_exit: Callable[[], None] | None = None
    failure: BaseException | None = None
    published: Any = None
    try:
        if topology.is_leader:
            try:
                _in_build.active = True
                try:
                    records, extra = build()
                finally:
                    _in_build.active = False
                if len(topology.ranks) > 1:
                    pickle.dumps(extra)  # fail here, not inside the collective
                    records, descriptor, to_unlink = publish_records(records)
                    if to_unlink is not None:
                        unlink_at_exit = functools.partial(_unlink, to_unlink)
                        atexit.register(unlink_at_exit)
                    published = ("ok", descriptor, extra)
            except BaseException as exc:  # report to the other ranks, then re-raise
                failure = exc
                published = ("error", f"{type(exc).__name__}: {exc}", None)
        everything = _all_gather(dist, group, published)
        failed_leaders = [(r, p[1]) for r, p in enumerate(everything) if p and p[0] == "error"]
        if failed_leaders:
            if failure is not None:
                raise failure
            leader_rank, message = failed_leaders[0]
            raise SharedAttachError(
                f"rank {rank} did not get dataset {name!r}: rank {leader_rank}, which loads it "
                f"for {'this' if leader_rank == topology.leader else 'another'} machine, "
                f"failed: {message}"
            )
        status: Any = ("ok",)
        if not topology.is_leader:
            leader_pub = everything[topology.leader]
            descriptor, extra = leader_pub[1], dict(leader_pub[2] or {})
            try:
                records = attach_records(descriptor, name)
            except Exception as exc:
                status = (
                    "error",
                    f"rank {rank} (local rank {topology.local_rank} on node {topology.node!r}) "
                    f"could not attach to the records of dataset {name!r} published by rank "
                    f"{topology.leader}: tried {_describe_attempt(descriptor)}; "
                    f"{type(exc).__name__}: {exc}",
                )
        statuses = _all_gather(dist, group, status)
        errors = [s[1] for s in statuses if s[0] != "ok"]
        if errors:
            raise SharedAttachError("; ".join(errors))
        if not topology.is_leader and on_attach is not None:
            on_attach(extra)
    finally:
        if to_unlink is not None:
            _unlink(to_unlink)
        if unlink_at_exit is not None:
            atexit.unregister(unlink_at_exit)
    if records is None:  # pragma: no cover - every path above sets records or raises
        raise SharedAttachError(f"rank {rank} got no records for dataset {name!r}")
    logger.info(
        "rank %d %s dataset %r (%d records) %s local ranks %s",
        rank,
        "loaded" if topology.is_leader else "attached to",
        name,
        len(records),
        "shared with" if topology.is_leader else "from",
        list(topology.ranks),
    )
    return records, extra
