"""Tests of run_distributed's options for failure tests: ranks that may die, a deadline."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist

from tests.dist_helpers import run_distributed


def _rank_one_dies_then_rank_zero_reports(rank: int, world_size: int) -> str:
    if rank == 1:
        os._exit(3)
    try:
        dist.barrier()
    except RuntimeError as exc:  # the group notices the dead rank within the timeout
        return f"rank 0 saw: {type(exc).__name__}"
    return "rank 0 saw nothing"


def _rank_one_hangs(rank: int, world_size: int) -> int:
    if rank == 1:
        time.sleep(300)
    return rank


@pytest.mark.distributed
def test_a_rank_allowed_to_die_leaves_the_others_running():
    results = run_distributed(
        _rank_one_dies_then_rank_zero_reports, 2, pg_timeout=5.0, may_exit={1}, deadline=50
    )
    assert results == ["rank 0 saw: RuntimeError", None]


@pytest.mark.distributed
def test_a_hang_becomes_a_failure_at_the_deadline():
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"ranks \[1\] still running after 15.0 s"):
        run_distributed(_rank_one_hangs, 2, deadline=15.0)
    assert time.monotonic() - start < 30
