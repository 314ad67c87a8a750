"""Samplers and loaders under torch.distributed (gloo on 127.0.0.1, spawned ranks)."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.dist_helpers import run_distributed

pytestmark = pytest.mark.distributed


def _records(n):
    return [
        {
            "file_name": f"{i}.jpg",
            "image_id": i,
            "height": 4,
            "width": 6 if i % 3 else 3,
            "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": i % 4}],
        }
        for i in range(n)
    ]


def image_id(record):
    return record["image_id"]


def _samplers_on_rank(rank, world_size):
    from samplers import (
        ConcatSampler,
        InferenceSampler,
        RepeatFactorTrainingSampler,
        TrainingSampler,
        build_detection_test_loader,
        get_rank,
        get_world_size,
    )

    torch.manual_seed(100 + rank)  # every rank's default generator differs: the seed is broadcast
    training = TrainingSampler(21)
    repeat = RepeatFactorTrainingSampler([1.5] * 6)
    concat = ConcatSampler([4, 5])
    inference = InferenceSampler(10)
    test_loader = build_detection_test_loader(_records(10), mapper=image_id, batch_size=2)
    return {
        **_train_loader_on_rank(rank, world_size),
        "rank": (get_rank(), get_world_size(), training.rank, training.world_size),
        "seeds": (training.seed, repeat.seed, concat.seed),
        "training": list(itertools.islice(training, 14)),
        "inference": list(inference),
        "test_loader": list(itertools.chain(*test_loader)),
        "test_len": len(test_loader),
    }


def test_samplers_and_loaders_over_three_ranks():
    # one spawned group (spawning costs seconds): samplers, test loader and train loader
    results = run_distributed(_samplers_on_rank, 3)
    assert [r["rank"] for r in results] == [(i, 3, i, 3) for i in range(3)]
    # seed=None: one seed drawn on rank 0 and shared
    assert len({r["seeds"] for r in results}) == 1
    # TrainingSampler: within a pass the ranks are disjoint and together cover it
    first_pass = [r["training"][:7] for r in results]
    assert sorted(itertools.chain(*first_pass)) == list(range(21))
    second_pass = [r["training"][7:] for r in results]
    assert sorted(itertools.chain(*second_pass)) == list(range(21))
    assert first_pass != second_pass
    # InferenceSampler and the test loader: every index exactly once across ranks
    assert [r["inference"] for r in results] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert sorted(itertools.chain(*(r["test_loader"] for r in results))) == list(range(10))
    assert [r["test_len"] for r in results] == [2, 2, 2]
    # train loader, num_workers=2 on every rank: saves its state and resumes exactly
    for r in results:
        assert r["state_batches"] == 5
        assert all(len(b) == 2 for b in r["head"] + r["tail"])  # 6 in total over 3 ranks
        assert r["resumed_tail"] == r["tail"]
        assert "does not divide by the world size 3" in r["divisible_error"]
    assert results[0]["head"] != results[1]["head"]  # ranks read different shards


def _train_loader_on_rank(rank, world_size):
    from samplers import build_detection_train_loader

    torch.manual_seed(7 + rank)

    def make():
        return build_detection_train_loader(
            _records(30),
            mapper=image_id,
            total_batch_size=6,
            num_workers=2,
            multiprocessing_context="fork",  # ranks are spawned; forked workers start fast
        )

    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    tail = [next(it) for _ in range(4)]
    del it
    resumed = make()  # a fresh shared seed: the state's seed must win
    resumed.load_state_dict(state)
    resumed_tail = list(itertools.islice(resumed, 4))
    try:
        build_detection_train_loader(_records(30), mapper=image_id, total_batch_size=4)
        divisible_error = None
    except ValueError as exc:
        divisible_error = str(exc)
    return {
        "head": head,
        "tail": tail,
        "resumed_tail": resumed_tail,
        "state_batches": state["batches"],
        "divisible_error": divisible_error,
    }
