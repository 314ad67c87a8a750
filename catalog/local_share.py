"""One copy of a dataset's records per machine, shared by every local rank.

A training job runs one process per GPU. Without sharing, every rank parses the annotation
file and holds its own serialized copy of the records (detectron2, mmengine). With
:func:`share_across_local_ranks`, when ``torch.distributed`` is initialized:

1. *handshake*: every rank gathers every rank's settings (machine id, dataset name,
   ``CATMAP_SHARE``, ``CATMAP_CACHE``, catmap version, pid), which groups ranks by machine
   (node id = ``$CATMAP_NODE_ID``, else host name + boot id). Ranks that disagree on any
   of them all raise a :class:`SharedAttachError` naming the ranks and the setting, instead of
   hanging or silently loading different data. A rank with sharing off takes part in this one
   gather too (then, if every rank has sharing off, every rank loads on its own);
2. *publish*: on each machine the lowest rank (the *leader*) runs the loader. If its records
   are already memory-mapped from a file (the on-disk cache) that file is published as is;
   otherwise the records are written once into an anonymous, sealed memory file (``memfd``),
   which never appears in ``/dev/shm`` and is released by the kernel when the last process
   using it exits, whatever way it exits. The leaders' descriptors are gathered by every rank;
3. *attach*: the other local ranks map the leader's file through ``/proc/<leader pid>/fd/<fd>``
   (a new reference to the same memory, no copy) and never run the loader; a last gather
   reports whether every rank attached; if one did not, every rank raises a
   :class:`SharedAttachError` naming that rank, what it tried and why.

A collective that fails (a rank died, e.g. killed while loading, or stopped taking part until
the process-group timeout) raises :class:`SharedAttachError` on the surviving ranks, naming the
dataset, the step and the suspected ranks (:mod:`catalog.local_handshake`).

On systems without ``memfd`` or ``/proc`` the leader writes a file in ``/dev/shm`` (or the
temporary directory) and unlinks it as soon as every local rank has mapped it (and at exit if
the job fails before). Publishing and attaching live in :mod:`catalog.local_publish`.

DataLoader workers: under ``fork`` the mapping is inherited; under ``spawn``/``forkserver`` the
records re-map the same memory through ``/proc/<rank pid>/fd/<fd>`` instead of being copied.

Environment:
    ``CATMAP_SHARE=0`` turns sharing off (every rank loads on its own; under
    ``torch.distributed`` the ranks still exchange their settings once per dataset).
    ``CATMAP_NODE_ID`` overrides the machine identity used to group local ranks.

All ranks must call :func:`share_across_local_ranks` for the same datasets in the same order
(as with any collective), whatever ``CATMAP_SHARE`` says; ``DatasetCatalog.get`` loads each
dataset once per process, so calling ``get`` for the same names on every rank is enough. A
loader that itself calls ``DatasetCatalog.get`` while the ranks share raises
:class:`NestedLoadError` before any collective (the other ranks wait for the outer dataset and
cannot take part in loading the inner one): get the inner dataset before the outer one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import pickle
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import NestedLoadError, SharedAttachError
from .local_handshake import (
    describe_suspects,
    gather,
    node_id,
    rank_settings,
    settings_disagreements,
    sharing_enabled,
)
from .local_publish import attach_records, describe_attempt, publish_records, unlink_quietly
from .serialized_list import SerializedList

__all__ = [
    "LocalGroup",
    "attach_records",
    "local_group",
    "node_id",
    "publish_records",
    "share_across_local_ranks",
    "sharing_enabled",
    "this_rank_only",
    "this_rank_only_active",
]

logger = logging.getLogger(__name__)

_gloo_cache: dict[str, Any] = {}
# Threads of one rank must not interleave their collectives (each dataset takes three).
_collective_lock = threading.RLock()
# The dataset whose loader this thread runs as a leader while the other ranks wait.
_in_build = threading.local()
# Inside this_rank_only(): this thread loads by itself (no collective, nothing cached).
_this_rank_only = threading.local()


@contextlib.contextmanager
def this_rank_only() -> Iterator[None]:
    """Load datasets on this rank alone inside the block: no collective, nothing kept.

    For code that runs on one rank while the others wait elsewhere, such as Lightning's
    ``prepare_data`` (local rank 0 only): ``DatasetCatalog.get`` inside the block runs the
    loader here (through the on-disk cache, which it fills) without the cross-rank handshake,
    and does not keep the records in the catalog, so that the later ``DatasetCatalog.get`` on
    every rank still shares them as usual.

    Example:
        >>> with this_rank_only():
        ...     this_rank_only_active()
        True
    """
    depth = getattr(_this_rank_only, "depth", 0)
    _this_rank_only.depth = depth + 1
    try:
        yield
    finally:
        _this_rank_only.depth = depth


def this_rank_only_active() -> bool:
    """Whether this thread is inside :func:`this_rank_only`."""
    return getattr(_this_rank_only, "depth", 0) > 0

_HANDSHAKE_SUSPECTS = (
    "suspected: a rank that died, or one that did not call DatasetCatalog.get for this dataset "
    "(every rank must load the same datasets in the same order, whatever CATMAP_SHARE says)"
)

Build = Callable[[], tuple[SerializedList, dict[str, Any]]]


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


def share_across_local_ranks(name: str, build: Build) -> tuple[SerializedList, dict[str, Any]]:
    """Run ``build`` once per machine and share its records with the other local ranks.

    Without ``torch.distributed`` initialized or with a single rank, this is just ``build()``.
    With several ranks, every rank first exchanges its settings (also with ``CATMAP_SHARE=0``);
    then, if every rank has sharing off or every machine has one rank, each rank runs
    ``build()`` itself.

    Args:
        name: the dataset name (checked to be the same on every rank).
        build: returns ``(records, extra)``; ``extra`` is a picklable dict sent to the other
            local ranks with the records (e.g. the metadata the loader set); the caller applies
            it (``DatasetCatalog`` sets the metadata on every rank).

    Returns:
        ``(records, extra)`` on every rank; ``records`` are identical on all ranks of a
        machine and backed by one shared copy.

    Raises:
        SharedAttachError: on every rank when the ranks disagree on the dataset, sharing,
            caching or catmap version; when a machine's leader failed to load (the leader
            itself re-raises its own error); when a rank could not attach (the message names
            the rank, what it tried and why); when a collective failed because a rank died or
            timed out (the message names the step and the suspected ranks).
        NestedLoadError: called from inside a loader this rank runs for the other local ranks
            (raised before any collective; the other ranks then get a SharedAttachError).

    Example:
        >>> records, extra = share_across_local_ranks("toy", lambda: (SerializedList([{"a": 1}]), {}))
        >>> records[0]
        {'a': 1}
    """
    dist = _dist()
    if dist is None or dist.get_world_size() == 1 or this_rank_only_active():
        return build()
    outer = getattr(_in_build, "name", None)
    if outer is not None:
        raise NestedLoadError(
            f"rank {dist.get_rank()}: dataset {name!r} was requested (DatasetCatalog.get) inside "
            f"the loader of dataset {outer!r}, which this rank runs for the other local ranks "
            f"while they wait; they cannot load {name!r} with it. Call "
            f"DatasetCatalog.get({name!r}) on every rank before DatasetCatalog.get({outer!r}), "
            f"or call the loader function of {name!r} directly inside the outer loader"
        )
    with _collective_lock:
        return _share_collectively(dist, name, build)


def _share_collectively(dist: Any, name: str, build: Build) -> tuple[SerializedList, dict[str, Any]]:
    group = _collective_group(dist)
    rank = dist.get_rank()
    mine = rank_settings(name)
    settings = gather(
        dist,
        group,
        mine,
        name=name,
        step="handshake",
        suspects=lambda: _HANDSHAKE_SUSPECTS,
    )
    problems = settings_disagreements(settings, name)
    if problems:
        raise SharedAttachError(f"rank {rank}: dataset {name!r}: " + "; ".join(problems))
    if not mine["share"]:
        return build()  # every rank has sharing off
    topology = local_group([(s["node"], s["name"]) for s in settings], rank)
    per_node = Counter(s["node"] for s in settings)
    if max(per_node.values()) == 1:
        return build()  # one rank per machine: nothing to share
    return _share(dist, group, topology, settings, name, build)


def _run_leader(topology: LocalGroup, name: str, build: Build) -> tuple[Any, Any, str | None]:
    """Run ``build`` on a leader and publish the records: ``(records, published, to_unlink)``."""
    _in_build.name = name
    try:
        records, extra = build()
    finally:
        _in_build.name = None
    if len(topology.ranks) == 1:
        return (records, extra), None, None
    pickle.dumps(extra)  # fail here, not inside the collective
    records, descriptor, to_unlink = publish_records(records)
    return (records, extra), ("ok", descriptor, extra), to_unlink


def _share(
    dist: Any,
    group: Any,
    topology: LocalGroup,
    settings: list[dict[str, Any]],
    name: str,
    build: Build,
) -> tuple[SerializedList, dict[str, Any]]:
    rank = topology.rank
    records: SerializedList | None = None
    extra: dict[str, Any] = {}
    to_unlink: str | None = None
    unlink_at_exit: Callable[[], None] | None = None
    failure: BaseException | None = None
    published: Any = None
    loaders = sorted(set(topology.leaders.values()) - {rank})
    try:
        if topology.is_leader:
            try:
                (records, extra), published, to_unlink = _run_leader(topology, name, build)
                if to_unlink is not None:
                    unlink_at_exit = functools.partial(unlink_quietly, to_unlink)
                    atexit.register(unlink_at_exit)
            except BaseException as exc:  # report to the other ranks, then re-raise
                failure = exc
                published = ("error", f"{type(exc).__name__}: {exc}", None)
        everything = gather(
            dist,
            group,
            published,
            name=name,
            step="publish",
            suspects=lambda: describe_suspects(
                rank,
                settings,
                loaders or [r for r in range(len(settings)) if r != rank],
                "loading the dataset" if loaders else "waiting for the records",
            ),
        )
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
                    f"{topology.leader}: tried {describe_attempt(descriptor)}; "
                    f"{type(exc).__name__}: {exc}",
                )
        statuses = gather(
            dist,
            group,
            status,
            name=name,
            step="attach",
            suspects=lambda: describe_suspects(
                rank,
                settings,
                [r for r in range(len(settings)) if r != rank],
                "attaching to the records",
            ),
        )
        errors = [s[1] for s in statuses if s[0] != "ok"]
        if errors:
            raise SharedAttachError("; ".join(errors))
    finally:
        if to_unlink is not None:
            unlink_quietly(to_unlink)
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
