"""One copy of a dataset's records per machine, shared by every local rank.

:func:`share_across_local_ranks` runs three data-only collectives (msgpack in uint8 tensors):
*handshake* (settings: machine, dataset, ``CATMAP_SHARE``/``CATMAP_CACHE``, version, pid;
disagreeing ranks all raise SharedAttachError), *publish* (the lowest rank of each machine
builds and writes the records into a sealed ``memfd``, or publishes its mapped cache file) and
*attach* (the others map it through ``/proc/<pid>/fd/<fd>``). A failed collective raises
SharedAttachError naming the step and the suspected ranks. ``CATMAP_SHARE=0`` turns sharing
off; ``CATMAP_NODE_ID`` overrides the machine identity (default: host name + boot id).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from .._common import NestedLoadError, SharedAttachError, env_flag
from ..version import __version__
from .records import SerializedList, decode, encode
from .records_file import MappedFile, remap, write_records

__all__ = ["LocalGroup", "attach_records", "describe_suspects", "local_group", "node_id",
           "process_gone", "publish_records", "rank_settings", "settings_disagreements",
           "share_across_local_ranks", "this_rank_only", "this_rank_only_active"]

logger = logging.getLogger(__name__)

Build = Callable[[], tuple[SerializedList, dict[str, Any]]]

_SETTING_TYPES: dict[str, Any] = {
    "node": str, "name": str, "share": bool, "cache": bool, "share_env": (str, type(None)),
    "cache_env": (str, type(None)), "version": str, "pid": int}  # fmt: skip
_DESCRIPTOR_TYPES: dict[str, Any] = {
    "pid": int, "fd": int, "device": int, "inode": int, "path": (str, type(None)), "size": int,
    "crc": int, "num_records": int}  # fmt: skip
_CATMAP_VERSION = __version__
_MAX_BACKEND_MESSAGE = 300
_EXIT_GRACE = 1.0  # seconds to wait for a rank whose connection dropped to show as exited
_HANDSHAKE_SUSPECTS = (
    "suspected: a rank that died, or one that did not call DatasetCatalog.get for this dataset "
    "(every rank must load the same datasets in the same order, whatever CATMAP_SHARE says)")
_gloo: dict[str, Any] = {}
_collective_lock = threading.RLock()  # one rank's threads must not interleave collectives
_in_build = threading.local()  # the dataset this thread builds for the other local ranks
_this_rank_only = threading.local()


@contextlib.contextmanager
def this_rank_only() -> Iterator[None]:
    """Load datasets on this rank alone inside the block: no collective, nothing kept in
    the catalog (for code that runs on one rank only, such as Lightning's ``prepare_data``)."""
    depth = getattr(_this_rank_only, "depth", 0)
    _this_rank_only.depth = depth + 1
    try:
        yield
    finally:
        _this_rank_only.depth = depth


def this_rank_only_active() -> bool:
    """Whether this thread is inside :func:`this_rank_only`."""
    return getattr(_this_rank_only, "depth", 0) > 0


def node_id() -> str:
    """This machine's identity: ``$CATMAP_NODE_ID``, else ``<host name>/<boot id>``."""
    configured = os.environ.get("CATMAP_NODE_ID")
    if configured:
        return configured
    boot = ""
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def rank_settings(name: str) -> dict[str, Any]:
    """What this rank sends at the handshake for dataset ``name``."""
    return {
        "node": node_id(), "name": name, "share": env_flag("CATMAP_SHARE", default=True),
        "cache": env_flag("CATMAP_CACHE", default=True),
        "share_env": os.environ.get("CATMAP_SHARE"), "cache_env": os.environ.get("CATMAP_CACHE"),
        "version": _CATMAP_VERSION, "pid": os.getpid()}  # fmt: skip


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def _check_fields(item: Any, types: dict[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise SharedAttachError(f"{what}: a {type(item).__name__}, not a dict")
    for key, kind in types.items():
        value = item.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SharedAttachError(f"{what}: field {key!r} is {type(value).__name__} {value!r}")
    return item


def settings_disagreements(gathered: Sequence[Any], name: str) -> list[str]:
    """What the ranks disagree on, one sentence per setting (SharedAttachError for a rank
    that sent no settings).

    Example:
        >>> a, b = rank_settings("toy"), dict(rank_settings("toy"), share=False, share_env="0")
        >>> settings_disagreements([a, b, a], "toy")
        ['rank 1 has CATMAP_SHARE=0 (sharing off), ranks 0,2 share']
    """
    for rank, item in enumerate(gathered):
        _check_fields(item, _SETTING_TYPES, f"dataset {name!r}: rank {rank} sent malformed "
                      "settings at the sharing handshake (it runs a different catmap version)")

    def groups(key: str) -> dict[Any, list[int]]:
        out: dict[Any, list[int]] = {}
        for rank, item in enumerate(gathered):
            out.setdefault(item[key], []).append(rank)
        return out

    problems = []
    versions = groups("version")
    if len(versions) > 1:
        listed = "; ".join(f"{_ranks_text(r)}: {v}" for v, r in versions.items())
        problems.append(f"the ranks run different catmap versions ({listed})")
    if len(groups("name")) > 1:
        by_rank = ", ".join(f"rank {r}: {item['name']!r}" for r, item in enumerate(gathered))
        problems.append(
            f"ranks are loading different datasets at the same time ({by_rank}); every rank "
            "must call DatasetCatalog.get for the same datasets in the same order")
    for var, on, off in (("share", "shares", "sharing off"), ("cache", "caches", "cache off")):
        split = groups(var)
        if len(split) > 1:
            parts = []
            for ranks in split.values():
                item = gathered[ranks[0]]
                if item[var]:
                    parts.append(f"{_ranks_text(ranks)} {on if len(ranks) == 1 else on[:-1]}")
                else:
                    have = "has" if len(ranks) == 1 else "have"
                    parts.append(f"{_ranks_text(ranks)} {have} CATMAP_{var.upper()}="
                                 f"{item[var + '_env']} ({off})")  # fmt: skip
            problems.append(", ".join(sorted(parts, key=lambda p: "CATMAP_" not in p)))
    return problems


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` of this machine has exited (False when it cannot tell)."""
    if not os.path.isdir("/proc/self"):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[-1].split()[:1]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return state in (["Z"], ["X"])  # a zombie has exited; its parent has not reaped it


def describe_suspects(rank: int, settings: Sequence[dict[str, Any]] | None,
                      candidates: Sequence[int], role: str) -> str:
    """Which ranks probably made a collective fail: local ranks whose process is gone
    (watched up to ``_EXIT_GRACE`` s: a dying process drops its sockets first), else
    ``candidates``."""
    if settings is not None:
        here = settings[rank]["node"]
        local = [r for r, s in enumerate(settings) if r != rank and s["node"] == here]
        dead = [r for r in local if process_gone(settings[r]["pid"])]
        watched = [r for r in local if r in candidates]
        end = time.monotonic() + _EXIT_GRACE
        while not dead and watched and time.monotonic() < end:
            time.sleep(0.05)
            dead = [r for r in watched if process_gone(settings[r]["pid"])]
        if dead:
            named = ", ".join(f"rank {r} (pid {settings[r]['pid']} on this machine)" for r in dead)
            return f"suspected: {named}, no longer running"
    if not candidates:
        return "suspected: another rank, which died or stopped responding"
    return f"suspected: {_ranks_text(list(candidates))} ({role}), which died or stopped responding"


def _gather(dist: Any, group: Any, value: Any, name: str, step: str,
            suspects: Callable[[], str]) -> list[Any]:
    """Every rank's ``value``, data-only (msgpack bytes in uint8 tensors, length first);
    SharedAttachError when the backend fails or a message does not decode."""
    import torch

    payload = encode(value)
    world = dist.get_world_size()
    start = time.monotonic()
    try:
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([len(payload)], dtype=torch.int64), group=group)
        longest = max(int(s) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        if payload:
            mine[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        out = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(out, mine, group=group)
    except RuntimeError as exc:  # gloo / nccl: RuntimeError, DistBackendError, DistError
        detail = " ".join(str(exc).split())[:_MAX_BACKEND_MESSAGE]
        hint = ""
        if "timeout" in detail.lower() or "timed out" in detail.lower():
            hint = ("; if the loader merely takes longer than the process-group timeout, pass a "
                    "larger timeout to torch.distributed.init_process_group")  # fmt: skip
        raise SharedAttachError(
            f"rank {dist.get_rank()}: sharing dataset {name!r} failed at the {step} step after "
            f"{time.monotonic() - start:.1f} s; {suspects()} ({type(exc).__name__}: {detail}){hint}"
        ) from exc
    values = []
    for rank, (tensor, size) in enumerate(zip(out, sizes, strict=True)):
        try:
            values.append(decode(tensor[: int(size)].numpy().tobytes()))
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise SharedAttachError(
                f"dataset {name!r}: rank {rank} sent a malformed message at the {step} step "
                f"({exc}); it runs a different catmap version") from exc
    return values


@dataclass(frozen=True)
class LocalGroup:
    """The ranks of this machine: ``ranks[0]`` loads for them (the leader)."""

    rank: int
    ranks: tuple[int, ...]
    node: str
    leaders: dict[str, int]

    @property
    def leader(self) -> int:
        return self.ranks[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == self.ranks[0]

    @property
    def local_rank(self) -> int:
        return self.ranks.index(self.rank)


def local_group(gathered: list[tuple[str, Any]], rank: int) -> LocalGroup:
    """Group ranks by node from every rank's ``(node id, ...)``.

    Example:
        >>> g = local_group([("a", 0), ("b", 0), ("a", 0)], rank=2)
        >>> g.ranks, g.leader, g.local_rank, g.leaders
        ((0, 2), 0, 1, {'a': 0, 'b': 1})
    """
    node = gathered[rank][0]
    leaders: dict[str, int] = {}
    for r, item in enumerate(gathered):
        leaders.setdefault(item[0], r)
    ranks = tuple(r for r, item in enumerate(gathered) if item[0] == node)
    return LocalGroup(rank=rank, ranks=ranks, node=node, leaders=leaders)


def _memfd_usable() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


def publish_records(records: SerializedList) -> tuple[SerializedList, dict[str, Any]]:
    """Put ``records`` where the other local processes can map them (a mapped file as it
    is, else a new sealed ``memfd``): ``(records backed by it, a data-only descriptor)``."""
    owner = records.owner
    if not isinstance(owner, MappedFile) or owner.fd < 0:
        fd = os.memfd_create(f"catmap:{records.name or 'records'}"[:240],
                             os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
        try:
            with open(fd, "wb", closefd=False) as out:
                write_records(out, records)
            kinds = ("SEAL", "SHRINK", "GROW", "WRITE")
            seals = sum(getattr(fcntl, f"F_SEAL_{k}", 0) for k in kinds)
            if hasattr(fcntl, "F_ADD_SEALS"):
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            owner = MappedFile(fd, f"memory file of {records.name!r}", verify=False)
        except BaseException:
            os.close(fd)  # MappedFile takes fd over only when it returns
            raise
        records = owner.records(records.name)
    descriptor = {
        "pid": os.getpid(), "fd": owner.fd, "device": owner.device, "inode": owner.inode,
        "path": owner.path, "size": owner.size, "crc": owner.crc, "num_records": len(records)}
    return records, descriptor


def attach_records(descriptor: Any, name: str | None) -> SerializedList:
    """Map the records another local process published (SharedAttachError for a malformed
    descriptor; OSError / CacheError when the memory cannot be mapped)."""
    d = _check_fields(descriptor, _DESCRIPTOR_TYPES, f"malformed descriptor for dataset {name!r}")
    records = remap(d["pid"], d["fd"], d["device"], d["inode"], d["path"], d["size"], d["crc"],
                    name=name)
    if len(records) != d["num_records"]:
        raise OSError(f"mapped {len(records)} records but the publisher has {d['num_records']}")
    return records


def _gloo_group(dist: Any) -> Any:
    """A gloo group over every rank (None: the default group is gloo already)."""
    if dist.get_backend() == "gloo":
        return None
    if _gloo.get("world") is not dist.group.WORLD:
        _gloo.update(group=dist.new_group(backend="gloo"), world=dist.group.WORLD)
    return _gloo["group"]


def share_across_local_ranks(name: str, build: Build) -> tuple[SerializedList, dict[str, Any]]:
    """Run ``build`` (returning ``(records, data-only extra dict)``) once per machine and
    share its result with the other local ranks; without torch.distributed, with one rank or
    inside :func:`this_rank_only`, just ``build()``. NestedLoadError when called inside a
    loader this rank runs for the other local ranks.

    Example:
        >>> build = lambda: (SerializedList([{"a": 1}]), {})
        >>> share_across_local_ranks("toy", build)[0][0]
        {'a': 1}
    """
    # a process group needs torch.distributed imported: no import of torch for one process
    dist = sys.modules.get("torch.distributed")
    if (dist is None or not dist.is_available() or not dist.is_initialized()
            or dist.get_world_size() == 1 or this_rank_only_active()):  # fmt: skip
        return build()
    outer = getattr(_in_build, "name", None)
    if outer is not None:
        raise NestedLoadError(
            f"rank {dist.get_rank()}: dataset {name!r} was requested (DatasetCatalog.get) inside "
            f"the loader of dataset {outer!r}, which this rank runs for the other local ranks "
            f"while they wait; they cannot load {name!r} with it. Call "
            f"DatasetCatalog.get({name!r}) on every rank before DatasetCatalog.get({outer!r}), "
            f"or call the loader function of {name!r} directly inside the outer loader")
    with _collective_lock:
        group, rank = _gloo_group(dist), dist.get_rank()
        mine = rank_settings(name)
        settings = _gather(dist, group, mine, name, "handshake", lambda: _HANDSHAKE_SUSPECTS)
        problems = settings_disagreements(settings, name)
        if problems:
            raise SharedAttachError(f"rank {rank}: dataset {name!r}: " + "; ".join(problems))
        topology = local_group([(s["node"], s["name"]) for s in settings], rank)
        per_node = [sum(s["node"] == n for s in settings) for n in topology.leaders]
        if not mine["share"] or max(per_node) == 1 or not _memfd_usable():
            return build()  # sharing off everywhere, one rank per machine, or not Linux
        return _share(dist, group, topology, settings, name, build)


def _share(dist: Any, group: Any, topology: LocalGroup, settings: list[dict[str, Any]],
           name: str, build: Build) -> tuple[SerializedList, dict[str, Any]]:
    rank = topology.rank
    others = [r for r in range(len(settings)) if r != rank]
    loaders = sorted(set(topology.leaders.values()) - {rank})
    records: SerializedList | None = None
    extra: dict[str, Any] = {}
    failure: BaseException | None = None
    published: Any = None
    if topology.is_leader:
        _in_build.name = name
        try:
            records, extra = build()
            if len(topology.ranks) > 1:
                encode(extra)  # fail here, not inside the collective
                records, descriptor = publish_records(records)
                published = ["ok", descriptor, extra]
        except BaseException as exc:  # reported to the other ranks, then re-raised
            failure = exc
            published = ["error", f"{type(exc).__name__}: {exc}", None]
        finally:
            _in_build.name = None
    role = "loading the dataset" if loaders else "waiting for the records"
    everything = _gather(dist, group, published, name, "publish",
                         lambda: describe_suspects(rank, settings, loaders or others, role))
    failed = [(r, p[1]) for r, p in enumerate(everything) if p and p[0] == "error"]
    if failed:
        if failure is not None:
            raise failure
        leader, message = failed[0]
        which = "this" if leader == topology.leader else "another"
        raise SharedAttachError(
            f"rank {rank} did not get dataset {name!r}: rank {leader}, which loads it for "
            f"{which} machine, failed: {message}")
    status: list[Any] = ["ok"]
    if not topology.is_leader:
        published = everything[topology.leader]
        descriptor, extra = published[1], dict(published[2] or {})
        try:
            records = attach_records(descriptor, name)
        except Exception as exc:
            tried = "nothing"
            if isinstance(descriptor, dict):
                d, what = descriptor, descriptor.get("path") or "the leader's memory file"
                tried = (f"mapping {what} via /proc/{d.get('pid')}/fd/{d.get('fd')} "
                         f"({d.get('size')} bytes)")  # fmt: skip
            status = ["error",
                      f"rank {rank} (local rank {topology.local_rank} on node {topology.node!r}) "
                      f"could not attach to the records of dataset {name!r} published by rank "
                      f"{topology.leader}: tried {tried}; {type(exc).__name__}: {exc}"]  # fmt: skip
    statuses = _gather(dist, group, status, name, "attach", lambda: describe_suspects(
        rank, settings, others, "attaching to the records"))
    errors = [s[1] for s in statuses if s[0] != "ok"]
    if errors:
        raise SharedAttachError("; ".join(errors))
    if records is None:  # pragma: no cover - every path above sets records or raises
        raise SharedAttachError(f"rank {rank} got no records for dataset {name!r}")
    logger.info("rank %d %s dataset %r (%d records), local ranks %s", rank,
                "loaded" if topology.is_leader else "attached to", name, len(records),
                list(topology.ranks))  # fmt: skip
    return records, extra
