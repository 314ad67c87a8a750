"""KeyedPermutation and keyed_uniform: true permutations, keyed, statistically plain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from samplers.order import KeyedPermutation, round_keys
from tools.bench_samplers_baselines import ExpandedOrder, keyed_uniform
from samplers.order import ComposedOrder, RangeOrder

SMALL = sorted(
    set(range(1, 130))
    | {2**k + d for k in range(7, 13) for d in (-1, 0, 1)}
    | {251, 257, 509, 1009, 2039, 4093, 4099}
)


@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1])
def test_every_small_size_is_a_permutation(seed):
    for n in SMALL:
        for pass_index in (0, 7):
            values = KeyedPermutation(n, "shuffle", seed, pass_index).to_array()
            assert values.dtype == np.int64
            assert np.array_equal(np.sort(values), np.arange(n)), f"n={n}"


def test_positions_in_any_order_and_chunk_agree_with_the_whole():
    perm = KeyedPermutation(10_007, "shuffle", 3, 1)
    whole = perm.to_array()
    rng = np.random.default_rng(0)
    positions = rng.integers(0, 10_007, 500)
    assert np.array_equal(perm.at(positions), whole[positions])
    assert np.array_equal(perm.slice(5, 10_007, 3), whole[5::3])
    assert perm[17] == whole[17] and perm[-1] == whole[-1]
    assert perm.at(positions.reshape(20, 25)).shape == (20, 25)


def test_keys_select_unrelated_permutations():
    base = KeyedPermutation(1000, "shuffle", 5, 0).to_array()
    for other in (
        KeyedPermutation(1000, "shuffle", 5, 1),
        KeyedPermutation(1000, "shuffle", 6, 0),
        KeyedPermutation(1000, "subset", 5, 0),
    ):
        assert (other.to_array() == base).mean() < 0.02
    assert np.array_equal(KeyedPermutation(1000, "shuffle", 5, 0).to_array(), base)


@pytest.mark.parametrize("n", [1000, 65_536, 100_003])
def test_statistics_are_those_of_a_random_permutation(n):
    positions = np.arange(n)
    fixed, rhos, neighbours = [], [], []
    for seed in range(4):
        values = KeyedPermutation(n, "shuffle", seed, 11).to_array()
        fixed.append(int((values == positions).sum()))
        # Spearman correlation of position and value (ranks are the values themselves)
        rhos.append(float(np.corrcoef(positions, values)[0, 1]))
        neighbours.append(float(np.corrcoef(values[:-1], values[1:])[0, 1]))
    # a random permutation: fixed points ~ Poisson(1), correlations ~ N(0, 1/n)
    assert sum(fixed) <= 14
    bound = 5 / math.sqrt(n)
    assert max(abs(r) for r in rhos) < bound
    assert max(abs(r) for r in neighbours) < bound
    # the first position's item is spread over the range, not stuck near 0 or n
    firsts = [KeyedPermutation(n, "shuffle", seed, 0)[0] for seed in range(400)]
    counts = np.bincount(np.asarray(firsts) * 4 // n, minlength=4)
    assert counts.min() > 60


def test_small_sizes_reach_every_arrangement():
    seen = {tuple(KeyedPermutation(4, "shuffle", seed, 0).to_array()) for seed in range(3000)}
    assert len(seen) == 24


def test_errors():
    with pytest.raises(ValueError, match="size"):
        KeyedPermutation(0, "shuffle", 1)
    with pytest.raises(TypeError, match="size"):
        KeyedPermutation(2.0, "shuffle", 1)
    with pytest.raises(ValueError, match="key part"):
        KeyedPermutation(5, "shuffle", -1)
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        KeyedPermutation(5, "shuffle", 1).at([5])


def test_keyed_uniform_is_uniform_and_keyed():
    u = keyed_uniform(np.arange(200_000), "rounding", 3, 4)
    assert ((u >= 0) & (u < 1)).all()
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 19_000
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    other = keyed_uniform(np.arange(200_000), "rounding", 3, 5)
    assert abs(np.corrcoef(u, other)[0, 1]) < 0.01
    assert len(set(round_keys("a", 1).tolist()) & set(round_keys("b", 1).tolist())) == 0


def test_orders_compose():
    perm = KeyedPermutation(6, "shuffle", 0, 0)
    subset = ComposedOrder(perm, ExpandedOrder(np.cumsum([1, 2, 0, 3, 0, 0]), RangeOrder(6)))
    assert sorted(subset.to_array().tolist()) == [0, 1, 1, 3, 3, 3]
    assert subset.item(2) == subset.to_array()[2]


def test_expanded_order_matches_numpy_repeat_with_zero_counts():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        counts = rng.integers(0, 4, n) * (rng.random(n) < 0.7)  # many records repeated 0 times
        if counts.sum() == 0:
            continue
        cumulative = np.cumsum(counts)
        order = ExpandedOrder(cumulative, RangeOrder(int(cumulative[-1])))
        assert np.array_equal(order.to_array(), np.repeat(np.arange(n), counts))
        positions = rng.integers(0, int(cumulative[-1]), 50)
        assert np.array_equal(order.at(positions), np.repeat(np.arange(n), counts)[positions])
