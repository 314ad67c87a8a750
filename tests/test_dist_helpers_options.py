"""Tests of run_distributed's options for failure tests: ranks that may die, a deadline."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist

from tests import dist_helpers
from tests.dist_helpers import run_distributed
from tests.work_counting import WorkBudgetExceeded


def _rank_one_dies_then_rank_zero_reports(rank: int, world_size: int) -> str:
    if rank == 1:
        os._exit(3)
    try:
        dist.barrier()
    except RuntimeError as exc:  # the group notices the dead rank within the timeout
        return f"rank 0 saw: {type(exc).__name__}"
    return "rank 0 saw nothing"


#: The deadline run_distributed is given in the hang test, and how much longer the hanging
#: rank waits before it gives up by itself (a liveness bound: when it ends on its own, the
#: helper did not stop it at the deadline and the test fails as a hang; never timed).
HANG_DEADLINE = 15.0
LIVENESS_SECONDS = 60.0
NOT_STOPPED = "not stopped at the deadline"


def _rank_one_hangs(rank: int, world_size: int) -> int | str:
    if rank == 1:
        time.sleep(HANG_DEADLINE + LIVENESS_SECONDS)
        return NOT_STOPPED
    return rank


@pytest.mark.distributed
def test_a_rank_allowed_to_die_leaves_the_others_running():
    results = run_distributed(
        _rank_one_dies_then_rank_zero_reports, 2, pg_timeout=5.0, may_exit={1}, deadline=50
    )
    assert results == ["rank 0 saw: RuntimeError", None]


@pytest.mark.distributed
def test_a_hang_becomes_a_failure_at_the_deadline(monkeypatch):
    waits = _record_waits(monkeypatch)
    alive_when_stopped: list[list[bool]] = []
    real_stop = dist_helpers._stop

    def stop(processes):
        alive_when_stopped.append([process.is_alive() for process in processes])
        real_stop(processes)

    monkeypatch.setattr(dist_helpers, "_stop", stop)
    try:
        results = run_distributed(_rank_one_hangs, 2, deadline=HANG_DEADLINE)
    except AssertionError as exc:
        assert "ranks [1] still running after 15.0 s (a hang)" in str(exc), str(exc)
    else:
        pytest.fail(f"hung: rank 1 ran {HANG_DEADLINE + LIVENESS_SECONDS:.0f} s and ended by "
                    f"itself, the deadline of {HANG_DEADLINE} s did not stop it: {results}")
    # the work, checked: every wait for the ranks was bounded by what was left of the deadline
    # (never unbounded, never past it), and the helper stopped rank 1 while it ran (how
    # many waits is not asserted: a rank's pipe closes just before its exit code can be read,
    # so the helper may wait a few times more while that rank finishes exiting)
    assert waits and all(0 <= left <= HANG_DEADLINE for left in waits), waits
    assert alive_when_stopped and alive_when_stopped[0][1], alive_when_stopped


def _record_waits(monkeypatch) -> list[float]:
    """The timeouts of run_distributed's waits for its ranks; an unbounded wait or one past
    the deadline fails the test at once."""
    waits: list[float] = []
    real_wait = dist_helpers.wait

    def bounded_wait(objects, timeout=None):
        waits.append(timeout)
        if timeout is None or timeout > HANG_DEADLINE:
            raise WorkBudgetExceeded(f"run_distributed waited for its ranks with timeouts "
                                     f"{waits} (deadline {HANG_DEADLINE} s)")
        return real_wait(objects, timeout)

    monkeypatch.setattr(dist_helpers, "wait", bounded_wait)
    return waits
