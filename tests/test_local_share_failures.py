"""Cross-rank sharing fails typed, on every rank, instead of hanging.

Each job runs 3 gloo ranks on 127.0.0.1. ``_mismatch_scenarios`` runs every scenario that
leaves the process group usable in one job; a rank that dies breaks the group, so each kill
gets its own job with a short process-group timeout. Every job has a generous wall-clock
deadline that turns a hang into a test failure (a liveness bound: no test asserts how long a
step took; what a rank learned, and in which order, shows it did not wait for a timeout).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from catalog import SerializedList, SharedAttachError
from catalog.storage.sharing import (
    describe_suspects,
    process_gone,
    rank_settings,
    settings_disagreements,
    share_across_local_ranks,
)
from tests.dist_helpers import run_distributed

WORLD = 3
DEADLINE = 60.0  # seconds per job: a hang fails the test instead of blocking the suite
PG_TIMEOUT = 8.0  # the process-group timeout of the jobs where a rank dies


def _records(n: int) -> list[dict]:
    return [{"file_name": f"{i}.jpg", "image_id": i, "annotations": []} for i in range(n)]


def _build(marker_dir: Path | None = None, n: int = 3) -> Callable[[], Any]:
    def build():
        if marker_dir is not None:
            marker_dir.mkdir(exist_ok=True)
            Path(marker_dir, f"rank{torch.distributed.get_rank()}").touch()
        return SerializedList(_records(n), name="toy"), {}

    return build


def _outcome(fn: Callable[[], Any]) -> tuple[str, str]:
    """(error type or "ok", message) of ``fn()``."""
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


def _with_env(rank: int, ranks: tuple[int, ...], key: str, value: str, fn: Callable[[], Any]):
    """Run ``fn`` with ``key=value`` set on ``ranks`` only."""
    old = os.environ.get(key)
    if rank in ranks:
        os.environ[key] = value
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


# ---------------------------------------------------------------------------------------
# single-process tests of the handshake's pieces


def test_disagreements_name_every_group_of_ranks():
    on = rank_settings("toy")
    off = dict(on, share=False, share_env="no")
    uncached = dict(on, cache=False, cache_env="0")
    assert settings_disagreements([on, off, off], "toy") == [
        "ranks 1,2 have CATMAP_SHARE=no (sharing off), rank 0 shares"
    ]
    assert settings_disagreements([uncached, on, on, on], "toy") == [
        "rank 0 has CATMAP_CACHE=0 (cache off), ranks 1,2,3 cache"
    ]
    assert settings_disagreements([on, on], "toy") == []
    two = settings_disagreements([on, dict(off, name="other")], "toy")
    assert len(two) == 2 and "rank 1: 'other'" in two[0] and "CATMAP_SHARE=no" in two[1]


@pytest.mark.parametrize(
    "sent", [("node", "toy"), None, {"node": "n"}, {**rank_settings("toy"), "pid": True}]
)
def test_settings_from_another_catmap_version_are_a_typed_error(sent):
    with pytest.raises(SharedAttachError, match="rank 1 sent .* different catmap version"):
        settings_disagreements([rank_settings("toy"), sent], "toy")


def test_an_exited_local_process_is_named_as_the_suspect():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        end = time.monotonic() + 60  # a liveness bound: the child only has to exit
        while not process_gone(child.pid):  # a zombie until reaped: gone already
            assert time.monotonic() < end, "hung: the child did not exit in 60 s"
            time.sleep(0.02)
        settings = [rank_settings("toy"), dict(rank_settings("toy"), pid=child.pid)]
        text = describe_suspects(0, settings, [1], "attaching to the records")
        assert text == f"suspected: rank 1 (pid {child.pid} on this machine), no longer running"
    finally:
        child.wait()
    assert not process_gone(os.getpid())
    alive = [rank_settings("toy"), rank_settings("toy")]
    assert describe_suspects(1, alive, [0], "loading the dataset") == (
        "suspected: rank 0 (loading the dataset), which died or stopped responding"
    )


# ---------------------------------------------------------------------------------------
# scenarios that leave the process group usable (one job)


def _share_off_on_rank_1(rank: int) -> tuple[str, str]:
    return _with_env(
        rank,
        (1,),
        "CATMAP_SHARE",
        "0",
        lambda: _outcome(lambda: share_across_local_ranks("toy", _build())),
    )


def _cache_off_on_rank_2(rank: int) -> tuple[str, str]:
    return _with_env(
        rank,
        (2,),
        "CATMAP_CACHE",
        "off",
        lambda: _outcome(lambda: share_across_local_ranks("toy", _build())),
    )


def _version_differs_on_rank_0(rank: int) -> tuple[str, str]:
    import catalog.storage.sharing as handshake

    original = handshake._CATMAP_VERSION
    if rank == 0:
        handshake._CATMAP_VERSION = "0.0.9"
    try:
        return _outcome(lambda: share_across_local_ranks("toy", _build()))
    finally:
        handshake._CATMAP_VERSION = original


def _share_off_everywhere(rank: int, root: Path) -> tuple[str, list[dict]]:
    out: list[Any] = []

    def load():
        out.append(share_across_local_ranks("toy", _build(root / "off_everywhere", n=2))[0])

    kind, message = _with_env(rank, (0, 1, 2), "CATMAP_SHARE", "0", lambda: _outcome(load))
    return kind + message, out[0].to_list() if out else []


def _nested_get(rank: int, share: bool) -> dict[str, Any]:
    """An outer loader that calls DatasetCatalog.get(inner)."""
    from catalog import DatasetCatalog

    inner, outer = f"nested_inner_{share}", f"nested_outer_{share}"
    DatasetCatalog.register(inner, lambda: _records(2))
    DatasetCatalog.register(outer, lambda: list(DatasetCatalog.get(inner)) + _records(1))

    def run() -> dict[str, Any]:
        result: dict[str, Any] = {"first": _outcome(lambda: DatasetCatalog.get(outer))}
        # whatever happened, every rank is still in step: getting the inner dataset first
        # (on every rank) makes the outer loader work
        result["inner"] = _outcome(lambda: DatasetCatalog.get(inner))
        result["then"] = _outcome(lambda: DatasetCatalog.get(outer))
        result["records"] = DatasetCatalog.get(outer).to_list()
        return result

    try:
        if share:
            return run()
        return _with_env(rank, (0, 1, 2), "CATMAP_SHARE", "0", run)
    finally:
        DatasetCatalog.remove(inner)
        DatasetCatalog.remove(outer)


def _still_in_step(rank: int) -> list[dict]:
    return share_across_local_ranks("toy", _build(n=4))[0].to_list()


def _mismatch_scenarios(rank: int, world_size: int, root: str) -> dict[str, Any]:
    root_path = Path(root)
    return {
        "share_off": _share_off_on_rank_1(rank),
        "cache_off": _cache_off_on_rank_2(rank),
        "version": _version_differs_on_rank_0(rank),
        "off_everywhere": _share_off_everywhere(rank, root_path),
        "nested_shared": _nested_get(rank, share=True),
        "nested_unshared": _nested_get(rank, share=False),
        "after": _still_in_step(rank),
    }


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("share_failures")
    results = run_distributed(
        _mismatch_scenarios, WORLD, str(root), pg_timeout=20.0, deadline=DEADLINE
    )
    return {"root": root, "results": results}


@pytest.mark.distributed
def test_sharing_off_on_one_rank_fails_on_every_rank_naming_it(job):
    for kind, message in (r["share_off"] for r in job["results"]):
        assert kind == "SharedAttachError"  # at the handshake, not after a collective timeout
        assert "rank 1 has CATMAP_SHARE=0 (sharing off), ranks 0,2 share" in message
        assert "'toy'" in message


@pytest.mark.distributed
def test_cache_off_on_one_rank_fails_on_every_rank_naming_it(job):
    for kind, message in (r["cache_off"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "rank 2 has CATMAP_CACHE=off (cache off), ranks 0,1 cache" in message


@pytest.mark.distributed
def test_a_different_catmap_version_fails_on_every_rank(job):
    for kind, message in (r["version"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "different catmap versions (rank 0: 0.0.9; ranks 1,2: " in message


@pytest.mark.distributed
def test_sharing_off_on_every_rank_loads_on_every_rank(job):
    assert sorted(os.listdir(job["root"] / "off_everywhere")) == ["rank0", "rank1", "rank2"]
    assert all(r["off_everywhere"] == ("ok", _records(2)) for r in job["results"])


@pytest.mark.distributed
def test_a_nested_get_under_sharing_fails_typed_on_every_rank_without_a_collective(job):
    # no rank waits in a collective for the timeout (20 s here): the leader refuses before
    # any collective and the others learn it from the leader (a hang fails the job's deadline)
    for rank, result in enumerate(r["nested_shared"] for r in job["results"]):
        kind, message = result["first"]
        if rank == 0:  # the leader runs the outer loader: refused before any collective
            assert kind == "NestedLoadError"
            assert "'nested_inner_True'" in message and "'nested_outer_True'" in message
            assert "DatasetCatalog.get('nested_inner_True') on every rank before" in message
        else:
            assert kind == "SharedAttachError"
            assert "rank 0" in message and "NestedLoadError" in message
        assert result["inner"][0] == "ok" and result["then"][0] == "ok"
        assert result["records"] == _records(2) + _records(1)


@pytest.mark.distributed
def test_a_nested_get_with_sharing_off_works_on_every_rank(job):
    for result in (r["nested_unshared"] for r in job["results"]):
        assert result["first"][0] == "ok", result["first"]
        assert result["records"] == _records(2) + _records(1)


@pytest.mark.distributed
def test_the_ranks_stay_in_step_after_every_failure(job):
    assert all(r["after"] == _records(4) for r in job["results"])


# ---------------------------------------------------------------------------------------
# a rank dies while the leader loads (one job each: the group is broken afterwards)


def _leader_dies_while_loading(rank: int, world_size: int) -> tuple[str, str]:
    def build():
        time.sleep(0.3)  # the others are waiting in the publish step by now
        os._exit(1)

    return _outcome(lambda: share_across_local_ranks("toy", build))


def _follower_dies_while_leader_loads(rank: int, world_size: int) -> tuple[str, str]:
    def build():
        time.sleep(1.5)  # rank 2 dies meanwhile
        return SerializedList(_records(3), name="toy"), {}

    if rank == 2:
        threading.Timer(0.3, os._exit, (1,)).start()
    return _outcome(lambda: share_across_local_ranks("toy", build))


@pytest.mark.distributed
def test_a_leader_killed_while_loading_is_named_on_the_other_ranks():
    results = run_distributed(
        _leader_dies_while_loading, WORLD, pg_timeout=PG_TIMEOUT, may_exit={0}, deadline=DEADLINE
    )
    assert results[0] is None  # the leader died
    for kind, message in results[1:]:
        assert kind == "SharedAttachError", message
        assert "dataset 'toy'" in message and "publish step" in message
        assert "suspected: rank 0 (pid" in message and "no longer running" in message


@pytest.mark.distributed
def test_a_follower_killed_while_the_leader_loads_is_named_on_the_other_ranks():
    results = run_distributed(
        _follower_dies_while_leader_loads,
        WORLD,
        pg_timeout=PG_TIMEOUT,
        may_exit={2},
        deadline=DEADLINE,
    )
    assert results[2] is None
    for kind, message in results[:2]:
        assert kind == "SharedAttachError", message
        assert "dataset 'toy'" in message and "publish step" in message
        assert "suspected: rank 2 (pid" in message and "no longer running" in message


#: How long the stalled leader waits for the others to give up on it (a liveness bound).
STALL_LIMIT = 25.0


def _leader_stalls_past_the_timeout(rank: int, world_size: int, root: str) -> tuple[str, str, bool]:
    """(kind, message, whether the leader's loader had ended when this rank's call returned).

    The leader's loader does not end before every other rank has given up on it (or
    STALL_LIMIT has passed): a rank that gives up at the group timeout sees it still
    loading, one that waits for the end of the loader does not."""
    marks = Path(root)

    def build():
        end = time.monotonic() + STALL_LIMIT
        while len(list(marks.glob("gave_up_*"))) < world_size - 1 and time.monotonic() < end:
            time.sleep(0.05)
        (marks / "loader_ended").touch()
        return SerializedList(_records(3), name="toy"), {}

    kind, message = _outcome(lambda: share_across_local_ranks("toy", build))
    ended = (marks / "loader_ended").exists()
    if rank != 0:
        (marks / f"gave_up_{rank}").touch()
    return kind, message, ended


@pytest.mark.distributed
def test_a_leader_that_stops_responding_is_named_after_the_group_timeout(tmp_path):
    results = run_distributed(
        _leader_stalls_past_the_timeout, WORLD, str(tmp_path), pg_timeout=2.0, deadline=DEADLINE
    )
    for kind, message, loader_ended in results[1:]:
        assert kind == "SharedAttachError", message
        assert "publish step" in message
        assert "suspected: rank 0 (loading the dataset), which died or stopped responding" in message
        assert "pass a larger timeout to torch.distributed.init_process_group" in message
        assert not loader_ended, "gave up at the end of the loader, not at the group timeout"
    kind, message, _ = results[0]  # the leader finds the others gone when it is done
    assert kind == "SharedAttachError" and "publish step" in message
