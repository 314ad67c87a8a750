"""TrainingSampler, InferenceSampler and RandomSubsetTrainingSampler: order, sharding, errors."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from samplers import InferenceSampler, RandomSubsetTrainingSampler, TrainingSampler
from samplers.order import KeyedPermutation


def take(sampler, n):
    return list(itertools.islice(sampler, n))


def test_each_pass_is_a_permutation_and_passes_differ():
    s = TrainingSampler(50, seed=1, rank=0, world_size=1)
    stream = take(s, 150)
    passes = [stream[i : i + 50] for i in (0, 50, 100)]
    for p in passes:
        assert sorted(p) == list(range(50))
    assert passes[0] != passes[1] != passes[2]


def test_no_shuffle_is_arange_repeated():
    assert take(TrainingSampler(3, shuffle=False, rank=0, world_size=1), 7) == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.parametrize("world_size", [2, 3, 4, 9])
def test_ranks_take_every_world_size_th_index_of_the_global_stream(world_size):
    size = 7  # passes do not divide by the world size: rounds cross pass boundaries
    global_stream = take(TrainingSampler(size, seed=3, rank=0, world_size=1), 40 * world_size)
    for rank in range(world_size):
        stream = take(TrainingSampler(size, seed=3, rank=rank, world_size=world_size), 40)
        assert stream == global_stream[rank::world_size][:40]


def test_ranks_are_disjoint_within_a_pass_and_cover_it():
    world = 4
    streams = [
        take(TrainingSampler(40, seed=9, rank=r, world_size=world), 10) for r in range(world)
    ]
    assert sorted(itertools.chain(*streams)) == list(range(40))


def test_same_seed_same_stream_and_global_rng_is_irrelevant():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    a = take(TrainingSampler(30, seed=5, rank=0, world_size=1), 60)
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    b = take(TrainingSampler(30, seed=5, rank=0, world_size=1), 60)
    assert a == b
    assert a != take(TrainingSampler(30, seed=6, rank=0, world_size=1), 60)


def test_seed_none_is_drawn_from_torch_default_generator():
    torch.manual_seed(42)
    a = TrainingSampler(30, rank=0, world_size=1)
    torch.manual_seed(42)
    b = TrainingSampler(30, rank=0, world_size=1)
    assert a.seed == b.seed
    assert take(a, 30) == take(b, 30)
    torch.manual_seed(43)
    assert TrainingSampler(30, rank=0, world_size=1).seed != a.seed


def test_second_iter_restarts_from_the_seed_and_load_resumes():
    # detectron2 semantics: each iter() starts the stream afresh; resume is load_state_dict
    s = TrainingSampler(10, seed=2, rank=1, world_size=2)
    full = take(TrainingSampler(10, seed=2, rank=1, world_size=2), 12)
    assert take(s, 5) == full[:5]
    state = s.state_dict()
    assert take(s, 7) == full[:7]
    s.load_state_dict(state)
    assert take(s, 7) == full[5:]
    assert take(s, 7) == full[5:]  # the loaded position is the new origin


def test_large_pass_is_chunked_consistently():
    s = TrainingSampler(20_000, seed=0, rank=1, world_size=3)
    stream = take(s, 20_000)
    # the passes are keyed permutations of (seed, pass), materialized here in one go
    reference = []
    for pass_index in range(3):
        reference += KeyedPermutation(20_000, "shuffle", 0, pass_index).to_array().tolist()
    assert stream == reference[1::3][:20_000]


@pytest.mark.parametrize("bad", [0, -3])
def test_size_must_be_positive(bad):
    with pytest.raises(ValueError, match="size"):
        TrainingSampler(bad, seed=0)


@pytest.mark.parametrize("bad", [2.5, "10", None, True])
def test_size_must_be_int(bad):
    with pytest.raises(TypeError, match="size"):
        TrainingSampler(bad, seed=0)


def test_rank_and_world_size_are_validated():
    with pytest.raises(ValueError, match="rank"):
        TrainingSampler(5, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        TrainingSampler(5, seed=0, rank=0, world_size=0)
    with pytest.raises(TypeError, match="rank"):
        TrainingSampler(5, seed=0, rank=0.0, world_size=2)
    with pytest.raises(ValueError, match="seed"):
        TrainingSampler(5, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        TrainingSampler(5, seed="1")


def test_defaults_without_distributed_are_rank_0_of_1():
    s = TrainingSampler(5, seed=0)
    assert (s.rank, s.world_size) == (0, 1)


# ---------------------------------------------------------------------- InferenceSampler
@pytest.mark.parametrize(
    "size,world,expected",
    [(42, 4, [11, 11, 10, 10]), (2, 3, [1, 1, 0]), (0, 2, [0, 0]), (5, 1, [5])],
)
def test_inference_shards_are_contiguous_and_cover_once(size, world, expected):
    shards = [list(InferenceSampler(size, rank=r, world_size=world)) for r in range(world)]
    assert [len(s) for s in shards] == expected
    assert [len(InferenceSampler(size, rank=r, world_size=world)) for r in range(world)] == expected
    assert list(itertools.chain(*shards)) == list(range(size))


def test_inference_sampler_errors():
    with pytest.raises(ValueError, match="size"):
        InferenceSampler(-1, rank=0, world_size=1)
    with pytest.raises(TypeError, match="size"):
        InferenceSampler(3.0, rank=0, world_size=1)


# ---------------------------------------------------------------------- RandomSubset
def test_random_subset_is_fixed_and_reshuffled_each_pass():
    s = RandomSubsetTrainingSampler(100, 0.3, seed_shuffle=1, seed_subset=2, rank=0, world_size=1)
    stream = take(s, 90)
    passes = [stream[0:30], stream[30:60], stream[60:90]]
    assert len(set(passes[0])) == 30
    assert set(passes[0]) == set(passes[1]) == set(passes[2]) == set(s.subset.tolist())
    assert passes[0] != passes[1]
    other = RandomSubsetTrainingSampler(
        100, 0.3, seed_shuffle=1, seed_subset=3, rank=0, world_size=1
    )
    assert set(other.subset.tolist()) != set(s.subset.tolist())


def test_random_subset_without_shuffle_repeats_the_subset_order():
    s = RandomSubsetTrainingSampler(
        20, 0.5, shuffle=False, seed_shuffle=1, seed_subset=2, rank=0, world_size=1
    )
    stream = take(s, 20)
    assert stream[:10] == stream[10:] == s.subset.tolist()


def test_random_subset_shards_the_global_stream():
    kw = {"seed_shuffle": 4, "seed_subset": 5}
    full = take(RandomSubsetTrainingSampler(30, 0.5, rank=0, world_size=1, **kw), 60)
    for rank in range(2):
        s = RandomSubsetTrainingSampler(30, 0.5, rank=rank, world_size=2, **kw)
        assert take(s, 30) == full[rank::2]


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5])
def test_random_subset_ratio_outside_0_1_is_a_value_error(ratio):
    with pytest.raises(ValueError, match="subset_ratio"):
        RandomSubsetTrainingSampler(10, ratio, seed_shuffle=0, seed_subset=0)


def test_random_subset_errors():
    with pytest.raises(ValueError, match="larger subset_ratio"):
        RandomSubsetTrainingSampler(3, 0.2, seed_shuffle=0, seed_subset=0)
    with pytest.raises(TypeError, match="subset_ratio"):
        RandomSubsetTrainingSampler(3, "0.5", seed_shuffle=0, seed_subset=0)
    with pytest.raises(ValueError, match="seed_subset"):
        RandomSubsetTrainingSampler(3, 0.5, seed_shuffle=0, seed_subset=-2)
