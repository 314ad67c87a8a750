"""ConcatSampler: mixture by weight, per-part orders and samplers, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from samplers import ConcatSampler, RepeatFactorTrainingSampler, TrainingSampler


def take(sampler, n):
    return np.asarray(list(itertools.islice(sampler, n)))


def test_mixture_within_one_percent_of_the_weights():
    s = ConcatSampler([50, 5000, 200], weights=[2, 1, 1], seed=0, rank=0, world_size=1)
    draws = take(s, 100_000)
    parts = np.searchsorted([50, 5050], draws, side="right")
    freq = np.bincount(parts, minlength=3) / len(draws)
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.25], atol=0.01)


def test_default_weights_are_proportional_to_sizes():
    s = ConcatSampler([100, 300], seed=1, rank=0, world_size=1)
    np.testing.assert_allclose(s.weights, [0.25, 0.75])
    draws = take(s, 40_000)
    assert abs((draws < 100).mean() - 0.25) < 0.01


def test_each_part_goes_through_its_own_reshuffled_order():
    s = ConcatSampler([5, 7], weights=[1, 1], seed=3, rank=0, world_size=1)
    draws = take(s, 400)
    part_a = [int(i) for i in draws if i < 5]
    part_b = [int(i) - 5 for i in draws if i >= 5]
    # every consecutive run of 5 (resp. 7) draws of a part is a permutation of the part
    for stream, size in ((part_a, 5), (part_b, 7)):
        blocks = [stream[k : k + size] for k in range(0, len(stream) - size + 1, size)]
        assert all(sorted(b) == list(range(size)) for b in blocks)
        assert len({tuple(b) for b in blocks}) > 1


def test_part_sampler_is_used_for_its_part():
    repeat = RepeatFactorTrainingSampler([4.0, 1.0, 1.0], seed=2, rank=0, world_size=1)
    s = ConcatSampler(
        [3, 10], weights=[1, 1], samplers=[repeat, None], seed=0, rank=0, world_size=1
    )
    draws = take(s, 6000)
    part_a = draws[draws < 3]
    counts = np.bincount(part_a, minlength=3) / len(part_a)
    np.testing.assert_allclose(counts, [4 / 6, 1 / 6, 1 / 6], atol=0.02)
    assert set(draws[draws >= 3].tolist()) == set(range(3, 13))


def test_ranks_shard_the_mixture():
    full = take(ConcatSampler([4, 9], seed=5, rank=0, world_size=1), 120).tolist()
    for rank in range(3):
        s = ConcatSampler([4, 9], seed=5, rank=rank, world_size=3)
        assert take(s, 40).tolist() == full[rank::3]


def test_same_seed_same_stream():
    a = take(ConcatSampler([4, 9], seed=5, rank=0, world_size=1), 50)
    b = take(ConcatSampler([4, 9], seed=5, rank=0, world_size=1), 50)
    c = take(ConcatSampler([4, 9], seed=6, rank=0, world_size=1), 50)
    assert (a == b).all() and not (a == c).all()


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"sizes": [3, 4], "weights": [1, 0]}, ValueError, "part 1"),
        ({"sizes": [3, 4], "weights": [1, -2]}, ValueError, "part 1"),
        ({"sizes": [3, 4], "weights": [1]}, ValueError, "1 weights for 2 parts"),
        ({"sizes": [3, 4], "weights": [1, "a"]}, TypeError, "part 1"),
        ({"sizes": []}, TypeError, "sizes"),
        ({"sizes": [3, 0]}, ValueError, "part 1"),
        ({"sizes": [3, 4], "samplers": [None]}, ValueError, "1 samplers for 2 parts"),
        ({"sizes": [3, 4], "samplers": [None, [0, 1]]}, TypeError, "part 1"),
    ],
)
def test_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ConcatSampler(seed=0, **kwargs)


def test_part_sampler_of_the_wrong_size_is_an_error():
    with pytest.raises(ValueError, match="part 0 draws from 5 records"):
        ConcatSampler([3, 4], samplers=[TrainingSampler(5, seed=0), None], seed=0)


def test_global_rng_is_irrelevant():
    torch.manual_seed(0)
    a = take(ConcatSampler([4, 9], seed=5, rank=0, world_size=1), 50)
    torch.manual_seed(1)
    np.random.seed(1)
    b = take(ConcatSampler([4, 9], seed=5, rank=0, world_size=1), 50)
    assert (a == b).all()
