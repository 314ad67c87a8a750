"""The collectives of cross-rank sharing: the settings handshake and typed collective failures.

:mod:`catalog.local_share` runs up to three ``all_gather_object`` calls per dataset
(*handshake*, *publish*, *attach*). This module holds what makes them fail typed instead of
hanging or surfacing a raw backend error:

* every rank sends its settings at the handshake (even with sharing off), so ranks that
  disagree on sharing, caching, the dataset or the catmap version all raise a
  :class:`SharedAttachError` naming the ranks and the setting;
* a collective that fails (a rank died, or stopped taking part until the process-group
  timeout) becomes a :class:`SharedAttachError` naming the dataset, the step and the ranks
  suspected; a rank on this machine whose process is gone is named as such.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from .disk_cache import cache_enabled
from .env_flags import env_flag
from .errors import SharedAttachError
from .version import __version__

__all__ = [
    "describe_suspects",
    "gather",
    "node_id",
    "process_gone",
    "rank_settings",
    "settings_disagreements",
    "sharing_enabled",
]

# What every rank sends at the handshake, with the types accepted from other ranks.
_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "node": str,
    "name": str,
    "share": bool,
    "cache": bool,
    "share_env": (str, type(None)),
    "cache_env": (str, type(None)),
    "version": str,
    "pid": int,
}
_CATMAP_VERSION = __version__
_MAX_BACKEND_MESSAGE = 300
_EXIT_GRACE = 1.0  # seconds to wait for a rank whose connection dropped to show as exited


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
    return env_flag("CATMAP_SHARE", default=True)


def rank_settings(name: str) -> dict[str, Any]:
    """What this rank sends at the handshake for dataset ``name``.

    Example:
        >>> s = rank_settings("toy")
        >>> s["name"], s["pid"] == os.getpid()
        ('toy', True)
    """
    return {
        "node": node_id(),
        "name": name,
        "share": sharing_enabled(),
        "cache": cache_enabled(),
        "share_env": os.environ.get("CATMAP_SHARE"),
        "cache_env": os.environ.get("CATMAP_CACHE"),
        "version": _CATMAP_VERSION,
        "pid": os.getpid(),
    }


def ranks_text(ranks: Sequence[int]) -> str:
    """``"rank 1"`` or ``"ranks 0,2,3"``.

    Example:
        >>> ranks_text([1]), ranks_text([0, 2, 3])
        ('rank 1', 'ranks 0,2,3')
    """
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ",".join(str(r) for r in ranks)


def _check_settings(gathered: Sequence[Any], name: str) -> list[dict[str, Any]]:
    for rank, item in enumerate(gathered):
        if not isinstance(item, dict):
            raise SharedAttachError(
                f"dataset {name!r}: rank {rank} sent a {type(item).__name__} at the sharing "
                "handshake instead of its settings; it runs a different catmap version"
            )
        for key, kind in _SETTING_TYPES.items():
            value = item.get(key)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise SharedAttachError(
                    f"dataset {name!r}: rank {rank} sent a malformed setting {key!r} "
                    f"({type(value).__name__}) at the sharing handshake; it runs a different "
                    "catmap version"
                )
    return list(gathered)


def _by_value(settings: Sequence[dict[str, Any]], key: str) -> dict[Any, list[int]]:
    groups: dict[Any, list[int]] = {}
    for rank, item in enumerate(settings):
        groups.setdefault(item[key], []).append(rank)
    return groups


def _switch_text(ranks: list[int], item: dict[str, Any], var: str, on: str, off: str) -> str:
    have = "has" if len(ranks) == 1 else "have"
    if item[var.lower()]:
        return f"{ranks_text(ranks)} {on if len(ranks) == 1 else on[:-1]}"
    raw = item[f"{var.lower()}_env"]
    return f"{ranks_text(ranks)} {have} CATMAP_{var}={raw} ({off})"


def settings_disagreements(gathered: Sequence[Any], name: str) -> list[str]:
    """What the ranks disagree on, one sentence per setting (empty when they all agree).

    Raises:
        SharedAttachError: a rank sent something that is not catmap's settings.

    Example:
        >>> a, b = rank_settings("toy"), dict(rank_settings("toy"), share=False, share_env="0")
        >>> settings_disagreements([a, b, a], "toy")
        ['rank 1 has CATMAP_SHARE=0 (sharing off), ranks 0,2 share']
    """
    settings = _check_settings(gathered, name)
    problems = []
    versions = _by_value(settings, "version")
    if len(versions) > 1:
        problems.append(
            "the ranks run different catmap versions ("
            + "; ".join(f"{ranks_text(r)}: {v}" for v, r in versions.items())
            + ")"
        )
    if len(_by_value(settings, "name")) > 1:
        by_rank = ", ".join(f"rank {r}: {item['name']!r}" for r, item in enumerate(settings))
        problems.append(
            f"ranks are loading different datasets at the same time ({by_rank}); every rank "
            "must call DatasetCatalog.get for the same datasets in the same order"
        )
    for var, on, off in (("SHARE", "shares", "sharing off"), ("CACHE", "caches", "cache off")):
        groups = _by_value(settings, var.lower())
        if len(groups) > 1:
            parts = [_switch_text(r, settings[r[0]], var, on, off) for r in groups.values()]
            problems.append(", ".join(sorted(parts, key=lambda p: "CATMAP_" not in p)))
    return problems


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` of this machine has exited (checked in ``/proc``).

    Returns False when it cannot tell (no ``/proc``).

    Example:
        >>> process_gone(os.getpid())
        False
    """
    if not os.path.isdir("/proc/self"):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return state in (["Z"], ["X"])  # a zombie has exited, its parent has not reaped it yet


def _gone_local_ranks(
    rank: int, settings: Sequence[dict[str, Any]], candidates: Sequence[int]
) -> list[int]:
    """The other ranks of this machine whose process has exited.

    Every local rank is checked once, right away. A dying process closes its sockets before
    it shows as exited in ``/proc``, so the collective may fail a moment early: the
    ``candidates`` are then watched for up to ``_EXIT_GRACE`` s (only they: a rank that exits
    meanwhile because of this very failure must not be blamed for it).
    """
    here = settings[rank]["node"]
    local = [r for r, item in enumerate(settings) if r != rank and item["node"] == here]
    dead = [r for r in local if process_gone(settings[r]["pid"])]
    watched = [r for r in local if r in candidates]
    end = time.monotonic() + _EXIT_GRACE
    while not dead and watched and time.monotonic() < end:
        time.sleep(0.05)
        dead = [r for r in watched if process_gone(settings[r]["pid"])]
    return dead


def describe_suspects(
    rank: int,
    settings: Sequence[dict[str, Any]] | None,
    candidates: Sequence[int],
    role: str,
) -> str:
    """Which ranks probably made a collective fail, for the error message.

    Ranks of this machine whose process is gone are named first; otherwise ``candidates``
    (the ranks that were busy in ``role``).

    Example:
        >>> describe_suspects(1, None, [0], "loading the dataset")
        'suspected: rank 0 (loading the dataset), which died or stopped responding'
    """
    if settings is not None:
        dead = [
            f"rank {r} (pid {settings[r]['pid']} on this machine)"
            for r in _gone_local_ranks(rank, settings, candidates)
        ]
        if dead:
            return f"suspected: {', '.join(dead)}, no longer running"
    if not candidates:
        return "suspected: another rank, which died or stopped responding"
    return f"suspected: {ranks_text(list(candidates))} ({role}), which died or stopped responding"


def gather(
    dist: Any,
    group: Any,
    value: Any,
    *,
    name: str,
    step: str,
    suspects: Any,
) -> list[Any]:
    """``all_gather_object`` of ``value``; a failing collective raises a typed error.

    Args:
        dist: the ``torch.distributed`` module.
        group: the process group (``None``: the default group).
        value: this rank's picklable contribution.
        name: the dataset name (for the message).
        step: ``"handshake"``, ``"publish"`` or ``"attach"`` (for the message).
        suspects: a zero-argument callable returning the "suspected: ..." text, called only
            when the collective fails.

    Raises:
        SharedAttachError: the backend failed (a rank died or timed out); chained to the
            backend's own error.

    Example:
        >>> gather(dist, None, ("node", "toy"), name="toy", step="handshake",
        ...        suspects=lambda: "")  # doctest: +SKIP
    """
    out: list[Any] = [None] * dist.get_world_size()
    start = time.monotonic()
    try:
        dist.all_gather_object(out, value, group=group)
    except RuntimeError as exc:  # gloo / nccl: RuntimeError, DistBackendError, DistError
        elapsed = time.monotonic() - start
        detail = " ".join(str(exc).split())[:_MAX_BACKEND_MESSAGE]
        hint = ""
        if "timed out" in detail.lower() or "timeout" in detail.lower():
            hint = (
                "; if the loader merely takes longer than the process-group timeout, pass a "
                "larger timeout to torch.distributed.init_process_group"
            )
        raise SharedAttachError(
            f"rank {dist.get_rank()}: sharing dataset {name!r} failed at the {step} step after "
            f"{elapsed:.1f} s; {suspects()} ({type(exc).__name__}: {detail}){hint}"
        ) from exc
    return out
