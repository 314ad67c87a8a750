"""Keyed passes (issue 11, item 5): resume at any depth equals the uninterrupted stream, ranks
cover every pass exactly, and loading a state builds nothing of the size of the data."""

from __future__ import annotations

import collections
import itertools
import tracemalloc

import numpy as np
import pytest
import torch

from samplers import (
    ConcatSampler,
    GroupedBatchSampler,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    TrainingSampler,
)
from samplers.order import LEAF
from samplers.order import KeyedPermutation
from tests.work_counting import count_calls

FACTORS = np.random.default_rng(5).uniform(0.3, 2.6, 700)


def take(it, n):
    return list(itertools.islice(it, n))


MAKERS = {
    "training": lambda seed, r=0, w=1: TrainingSampler(997, seed=seed, rank=r, world_size=w),
    "no_shuffle": lambda seed, r=0, w=1: TrainingSampler(
        31, shuffle=False, seed=seed, rank=r, world_size=w
    ),
    "subset": lambda seed, r=0, w=1: RandomSubsetTrainingSampler(
        2000, 0.3, seed_shuffle=seed, seed_subset=seed + 1, rank=r, world_size=w
    ),
    "repeat": lambda seed, r=0, w=1: RepeatFactorTrainingSampler(
        FACTORS, seed=seed, rank=r, world_size=w
    ),
    # 3 * LEAF + 17 draws per pass: several leaves of the part-count tree
    "concat": lambda seed, r=0, w=1: ConcatSampler(
        [LEAF, 2 * LEAF + 17], weights=[2, 1], seed=seed, rank=r, world_size=w
    ),
    "concat_repeat": lambda seed, r=0, w=1: ConcatSampler(
        [700, 300],
        weights=[1, 1],
        samplers=[RepeatFactorTrainingSampler(FACTORS, seed=seed + 3), None],
        seed=seed,
        rank=r,
        world_size=w,
    ),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_resume_at_random_depths_equals_the_uninterrupted_stream(kind):
    make = MAKERS[kind]
    reference = take(make(4), 30_000)
    rng = np.random.default_rng(hash(kind) % 2**32)
    for depth in sorted(rng.integers(0, 29_000, 5).tolist()) + [0, 1]:
        saved = make(4)
        take(saved, depth)
        resumed = make(11)
        resumed.load_state_dict(saved.state_dict())
        assert take(resumed, 600) == reference[depth : depth + 600], f"depth {depth}"


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("world", [2, 3])
def test_resume_re_shards_at_random_depths(kind, world):
    make = MAKERS[kind]
    reference = take(make(4), 20_000)
    for depth in (0, 1234, 9999):  # global draws; saved on rank 0 of 1
        saved = make(4)
        take(saved, depth)
        state = saved.state_dict()
        for rank in range(world):
            resumed = make(0, rank, world)
            resumed.load_state_dict(state)
            assert take(resumed, 200) == reference[depth + rank :: world][:200]


def _pass_multiset(kind, sampler, pass_index):
    return collections.Counter(sampler._make_pass(pass_index).to_array().tolist())


@pytest.mark.parametrize("kind", ["training", "subset", "repeat", "no_shuffle"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_together_cover_each_pass_exactly(kind, world):
    make = MAKERS[kind]
    lengths = [len(make(4)._make_pass(p)) for p in range(3)]
    samplers = [make(4, r, world) for r in range(world)]
    streams = [take(s, sum(lengths) // world + 2) for s in samplers]
    merged = [None] * (max(len(s) for s in streams) * world)
    for rank, stream in enumerate(streams):
        merged[rank::world] = stream + [None] * (len(merged[rank::world]) - len(stream))
    start = 0
    for p, length in enumerate(lengths):
        got = collections.Counter(merged[start : start + length])
        assert got == _pass_multiset(kind, make(4), p), f"pass {p}"
        start += length


def test_concat_passes_keep_each_part_in_its_own_stream_and_weights():
    sizes = [LEAF, 2 * LEAF + 17]
    s = ConcatSampler(sizes, weights=[2, 1], seed=3, rank=0, world_size=1)
    draws = np.asarray(take(s, 5 * sum(sizes)))
    part_a = draws[draws < sizes[0]].tolist()
    part_b = (draws[draws >= sizes[0]] - sizes[0]).tolist()
    # each part's draws, in order, are its own TrainingSampler stream: blocks are permutations
    for stream, size in ((part_a, sizes[0]), (part_b, sizes[1])):
        blocks = [stream[k : k + size] for k in range(0, len(stream) - size + 1, size)]
        assert blocks and all(sorted(b) == list(range(size)) for b in blocks)
    np.testing.assert_allclose(len(part_a) / len(draws), 2 / 3, atol=0.01)
    # the draws of part 0 in each leaf vary like independent draws: Binomial(4096, 2/3)
    order = s._make_pass(7)
    per_leaf = []
    for leaf in range(3):
        choice, _, before = order._leaf(leaf)
        per_leaf.append(int((choice == 0).sum()))
        assert before.sum() == leaf * LEAF
    assert sum(per_leaf) <= order.counts[0] and len(set(per_leaf)) > 1
    assert all(abs(c - LEAF * 2 / 3) < 6 * (LEAF * 2 / 9) ** 0.5 for c in per_leaf)


def test_grouped_batches_resume_at_random_depths():
    groups = np.random.default_rng(1).integers(0, 3, 997)

    def make(seed):
        return GroupedBatchSampler(TrainingSampler(997, seed=seed, rank=0, world_size=1), groups, 5)

    reference = take(make(2), 1200)
    for depth in (0, 7, 198, 613):
        saved = make(2)
        batches = iter(saved)
        take(batches, depth)
        resumed = make(9)
        resumed.load_state_dict(saved.state_dict())
        assert take(resumed, 60) == reference[depth : depth + 60]


BIG = 10_000_000
#: Most positions evaluated to resume a pass of BIG items and take 10,000 (a pass: BIG).
EVALUATED_LIMIT = 200_000


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrainingSampler(BIG, seed=1, rank=0, world_size=1),
        lambda: TrainingSampler(BIG, seed=1, rank=2, world_size=3),
        lambda: RandomSubsetTrainingSampler(BIG, 0.5, seed_shuffle=1, seed_subset=2, rank=0,
                                            world_size=1),
        lambda: ConcatSampler([BIG // 2, BIG // 2], seed=1, rank=0, world_size=1),
    ],
)  # fmt: skip
def test_resume_deep_in_a_ten_million_item_pass_builds_nothing_of_its_size(make, monkeypatch):
    sampler = make()
    length = len(sampler._make_pass(3))
    state = dict(sampler.state_dict(), pass_index=3, offset=int(0.9 * length))

    def forbidden(*args, **kwargs):
        raise AssertionError("a pass was materialized")

    # the old way (a permutation of the pass) would fail here, and the peak below catches any
    # other pass-sized array (numpy reports its buffers to tracemalloc)
    monkeypatch.setattr(np.random, "permutation", forbidden)
    monkeypatch.setattr(torch, "randperm", forbidden)
    # the work, counted: the positions the keyed permutations are evaluated at (a walk to the
    # cursor, or a pass computed chunk by chunk, evaluates millions)
    evaluated = count_calls(monkeypatch, KeyedPermutation, "_encrypt", size=lambda _, x: x.size,
                            item_budget=EVALUATED_LIMIT)
    sampler = make()
    tracemalloc.start()
    try:
        sampler.load_state_dict(state)
        first = take(sampler, 10_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(first) == 10_000
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # a pass of int64 is 76 MiB
    # 10,000 indices need a few chunks of 8,192 positions per rank, whatever the depth
    assert 0 < evaluated.items <= EVALUATED_LIMIT, evaluated.items


def test_repeat_factor_memory_is_the_size_of_the_records_not_the_position():
    factors = np.random.default_rng(0).uniform(0.5, 2.5, 1_000_000)
    make = lambda: RepeatFactorTrainingSampler(factors, seed=1, rank=0, world_size=1)  # noqa: E731
    state = dict(make().state_dict(), pass_index=40, offset=1_200_000)
    sampler = make()
    tracemalloc.start()
    try:
        sampler.load_state_dict(state)
        take(sampler, 10_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # no array of the pass's size (~12 MB) nor of the records' (8 MB): the tighter bound is
    # in test_samplers_repeat_rounding.py
    assert peak < 3.2 * 8 * len(factors)
