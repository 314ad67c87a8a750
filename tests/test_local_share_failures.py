"""Cross-rank sharing fails typed, on every rank and within seconds, instead of hanging.

Each job runs 3 gloo ranks on 127.0.0.1. ``_mismatch_scenarios`` runs every scenario that
leaves the process group usable in one job; a rank that dies breaks the group, so each kill
gets its own job with a short process-group timeout. Every job has a wall-clock deadline that
turns a hang into a test failure.
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
from catalog.local_handshake import (
    describe_suspects,
    process_gone,
    rank_settings,
    settings_disagreements,
)
from catalog.local_share import share_across_local_ranks
from tests.dist_helpers import run_distributed

WORLD = 3
DEADLINE = 50.0  # seconds per job: a hang fails the test instead of blocking the suite
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


def _timed(fn: Callable[[], Any]) -> tuple[str, str, float]:
    """(error type or "ok", message, seconds) of ``fn()``."""
    start = time.monotonic()
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc), time.monotonic() - start
    return "ok", "", time.monotonic() - start


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
        end = time.monotonic() + 20
        while not process_gone(child.pid):  # a zombie until reaped: gone already
            assert time.monotonic() < end, "the child did not exit"
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


def _share_off_on_rank_1(rank: int) -> tuple[str, str, float]:
    return _with_env(
        rank,
        (1,),
        "CATMAP_SHARE",
        "0",
        lambda: _timed(lambda: share_across_local_ranks("toy", _build())),
    )


def _cache_off_on_rank_2(rank: int) -> tuple[str, str, float]:
    return _with_env(
        rank,
        (2,),
        "CATMAP_CACHE",
        "off",
        lambda: _timed(lambda: share_across_local_ranks("toy", _build())),
    )


def _version_differs_on_rank_0(rank: int) -> tuple[str, str, float]:
    import catalog.local_handshake as handshake

    original = handshake._CATMAP_VERSION
    if rank == 0:
        handshake._CATMAP_VERSION = "0.0.9"
    try:
        return _timed(lambda: share_across_local_ranks("toy", _build()))
    finally:
        handshake._CATMAP_VERSION = original


def _share_off_everywhere(rank: int, root: Path) -> tuple[str, list[dict]]:
    out: list[Any] = []

    def load():
        out.append(share_across_local_ranks("toy", _build(root / "off_everywhere", n=2))[0])

    kind, message, _ = _with_env(rank, (0, 1, 2), "CATMAP_SHARE", "0", lambda: _timed(load))
    return kind + message, out[0].to_list() if out else []


def _nested_get(rank: int, share: bool) -> dict[str, Any]:
    """An outer loader that calls DatasetCatalog.get(inner)."""
    from catalog import DatasetCatalog

    inner, outer = f"nested_inner_{share}", f"nested_outer_{share}"
    DatasetCatalog.register(inner, lambda: _records(2))
    DatasetCatalog.register(outer, lambda: list(DatasetCatalog.get(inner)) + _records(1))

    def run() -> dict[str, Any]:
        result: dict[str, Any] = {"first": _timed(lambda: DatasetCatalog.get(outer))}
        # whatever happened, every rank is still in step: getting the inner dataset first
        # (on every rank) makes the outer loader work
        result["inner"] = _timed(lambda: DatasetCatalog.get(inner))
        result["then"] = _timed(lambda: DatasetCatalog.get(outer))
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
    for kind, message, seconds in (r["share_off"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "rank 1 has CATMAP_SHARE=0 (sharing off), ranks 0,2 share" in message
        assert "'toy'" in message and seconds < 10


@pytest.mark.distributed
def test_cache_off_on_one_rank_fails_on_every_rank_naming_it(job):
    for kind, message, seconds in (r["cache_off"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "rank 2 has CATMAP_CACHE=off (cache off), ranks 0,1 cache" in message
        assert seconds < 10


@pytest.mark.distributed
def test_a_different_catmap_version_fails_on_every_rank(job):
    for kind, message, _ in (r["version"] for r in job["results"]):
        assert kind == "SharedAttachError"
        assert "different catmap versions (rank 0: 0.0.9; ranks 1,2: " in message


@pytest.mark.distributed
def test_sharing_off_on_every_rank_loads_on_every_rank(job):
    assert sorted(os.listdir(job["root"] / "off_everywhere")) == ["rank0", "rank1", "rank2"]
    assert all(r["off_everywhere"] == ("ok", _records(2)) for r in job["results"])


@pytest.mark.distributed
def test_a_nested_get_under_sharing_fails_typed_on_every_rank_within_seconds(job):
    for rank, result in enumerate(r["nested_shared"] for r in job["results"]):
        kind, message, seconds = result["first"]
        assert seconds < 10
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


def _leader_dies_while_loading(rank: int, world_size: int) -> tuple[str, str, float]:
    def build():
        time.sleep(0.3)  # the others are waiting in the publish step by now
        os._exit(1)

    return _timed(lambda: share_across_local_ranks("toy", build))


def _follower_dies_while_leader_loads(rank: int, world_size: int) -> tuple[str, str, float]:
    def build():
        time.sleep(1.5)  # rank 2 dies meanwhile
        return SerializedList(_records(3), name="toy"), {}

    if rank == 2:
        threading.Timer(0.3, os._exit, (1,)).start()
    return _timed(lambda: share_across_local_ranks("toy", build))


@pytest.mark.distributed
def test_a_leader_killed_while_loading_is_named_on_the_other_ranks():
    start = time.monotonic()
    results = run_distributed(
        _leader_dies_while_loading, WORLD, pg_timeout=PG_TIMEOUT, may_exit={0}, deadline=DEADLINE
    )
    assert results[0] is None  # the leader died
    for kind, message, seconds in results[1:]:
        assert kind == "SharedAttachError", message
        assert "dataset 'toy'" in message and "publish step" in message
        assert "suspected: rank 0 (pid" in message and "no longer running" in message
        assert seconds < PG_TIMEOUT + 5
    assert time.monotonic() - start < 45


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
    for kind, message, seconds in results[:2]:
        assert kind == "SharedAttachError", message
        assert "dataset 'toy'" in message and "publish step" in message
        assert "suspected: rank 2 (pid" in message and "no longer running" in message
        assert seconds < PG_TIMEOUT + 5


def _leader_stalls_past_the_timeout(rank: int, world_size: int) -> tuple[str, str, float]:
    def build():
        time.sleep(5.0)  # well past the 2 s process-group timeout
        return SerializedList(_records(3), name="toy"), {}

    return _timed(lambda: share_across_local_ranks("toy", build))


@pytest.mark.distributed
def test_a_leader_that_stops_responding_is_named_after_the_group_timeout():
    results = run_distributed(
        _leader_stalls_past_the_timeout, WORLD, pg_timeout=2.0, deadline=DEADLINE
    )
    for kind, message, seconds in results[1:]:
        assert kind == "SharedAttachError", message
        assert "publish step" in message
        assert "suspected: rank 0 (loading the dataset), which died or stopped responding" in message
        assert "pass a larger timeout to torch.distributed.init_process_group" in message
        assert 1.5 < seconds < 4.5  # the timeout, not the end of the loader
    kind, message, _ = results[0]  # the leader finds the others gone when it is done
    assert kind == "SharedAttachError" and "publish step" in message
