import pytest
import torch
import torch.distributed as dist

from tests.dist_helpers import run_distributed


def _sum_ranks(rank: int, world_size: int) -> int:
    t = torch.tensor([rank])
    dist.all_reduce(t)
    return int(t.item())


def _fail_on_rank_one(rank: int, world_size: int) -> int:
    if rank == 1:
        raise ValueError("rank one fails on purpose")
    return rank


@pytest.mark.distributed
def test_run_distributed_returns_each_rank_result():
    assert run_distributed(_sum_ranks, 2) == [1, 1]


@pytest.mark.distributed
def test_run_distributed_reports_failing_rank():
    with pytest.raises(AssertionError, match="rank one fails on purpose"):
        run_distributed(_fail_on_rank_one, 2)
