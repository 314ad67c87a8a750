"""Systematic rounding of repeat factors (issue 11, item 5): each record's count keeps its
floor/ceil law exactly, a pass is computed at any position without a per-pass array, resume at
any depth equals the uninterrupted stream, and states of the old rounding are refused."""

from __future__ import annotations

import collections
import itertools
import tracemalloc

import numpy as np
import pytest

from samplers import ConcatSampler, RepeatFactorTrainingSampler
from samplers.order import KeyedPermutation
from samplers.order import RangeOrder
from tools.bench_samplers_baselines import ExpandedOrder
from samplers.order import FRACTION_BITS, SystematicRounding

SCALE = 2**FRACTION_BITS


def take(it, n):
    return list(itertools.islice(it, n))


def _mixed_factors(rng, n):
    """Whole factors, ordinary fractions, tiny fractions (long runs of zero counts) and
    fractions within 2**-53 of 1 (running sums far beyond int64 if summed naively)."""
    kind = rng.integers(0, 4, n)
    return np.select(
        [kind == 0, kind == 1, kind == 2],
        [rng.integers(1, 6, n).astype(float), rng.uniform(0.05, 3.0, n), rng.uniform(0, 1e-3, n)],
        1.0 - 2.0**-53,
    ) + (kind == 2) * 1e-12


def _slot_records(rounding, n):
    records = rounding._records
    return np.arange(n) if records is None else records.astype(np.int64)


def _exact_extra(factors, slot_records, offset):
    """Which records get their extra copy, from the definition with Python integers."""
    extra = np.zeros(len(factors), dtype=bool)
    running = 0
    for record in slot_records.tolist():
        f = float(factors[record])
        g = int(np.ceil((f - np.floor(f)) * SCALE))
        extra[record] = (running + offset) % SCALE >= SCALE - g
        running += g
    return extra


@pytest.mark.parametrize("permute", [False, True])
def test_extra_copies_follow_the_integer_definition_exactly(permute):
    rng = np.random.default_rng(0)
    factors = _mixed_factors(rng, 3000)
    rounding = SystematicRounding(factors, permute=permute)
    slot_records = _slot_records(rounding, len(factors))
    offsets = [0, 1, SCALE - 1, *rng.integers(0, SCALE, 4).tolist()]
    # offsets on either side of a record's boundary: the comparison must be exact there
    g0 = int(np.ceil((factors[slot_records[0]] % 1) * SCALE))
    offsets += [SCALE - g0, SCALE - g0 - 1]
    for offset in offsets:
        counts = rounding.counts(offset)
        expected = np.floor(factors).astype(np.int64) + _exact_extra(factors, slot_records, offset)
        np.testing.assert_array_equal(counts, expected)
        assert rounding.length(offset) == int(expected.sum())


@pytest.mark.parametrize("permute", [False, True])
def test_positions_read_the_running_counts(permute):
    rng = np.random.default_rng(1)
    factors = _mixed_factors(rng, 2500)
    rounding = SystematicRounding(factors, permute=permute)
    slot_records = _slot_records(rounding, len(factors))
    for offset in rng.integers(0, SCALE, 3).tolist():
        per_slot = rounding.counts(offset)[slot_records]
        length = rounding.length(offset)
        expanded = np.arange(length)
        expected = slot_records[np.searchsorted(np.cumsum(per_slot), expanded, side="right")]
        np.testing.assert_array_equal(rounding.records_at(expanded, offset), expected)
        np.testing.assert_array_equal(
            rounding.records_at(expanded[::-7], offset), expected[::-7]
        )


def test_each_record_is_rounded_up_with_its_fraction():
    # 4000 passes: a record's extra copies over the passes are independent Bernoulli(frac)
    # draws (one keyed offset per pass), so the frequency has sd <= 0.0079; 0.04 is 5 sd, and
    # the seed is fixed, so the test is deterministic
    factors = np.array([1.0, 2.5, 0.5, 3.0, 0.1, 1.9, 0.01, 4.75, 0.3333, 1.5] * 3)
    s = RepeatFactorTrainingSampler(factors, seed=3, rank=0, world_size=1)
    counts = np.stack([s.pass_counts(p) for p in range(4000)])
    floor = np.floor(factors)
    assert ((counts == floor) | (counts == floor + 1)).all()
    np.testing.assert_allclose((counts - floor).mean(axis=0), factors - floor, atol=0.04)
    # the pass length is the floor or the ceiling of the sum of the factors
    lengths = counts.sum(axis=1)
    assert set(lengths.tolist()) <= {int(np.floor(factors.sum())), int(np.ceil(factors.sum()))}
    assert abs(lengths.mean() - factors.sum()) < 0.05


def test_extra_copies_do_not_follow_the_dataset_order():
    # with every fraction 0.5, systematic rounding along the index order would alternate
    # (neighbours never both rounded up); the keyed slot order decouples neighbours
    factors = np.full(2000, 1.5)
    shuffled = RepeatFactorTrainingSampler(factors, seed=0, rank=0, world_size=1)
    plain = RepeatFactorTrainingSampler(factors, shuffle=False, seed=0, rank=0, world_size=1)
    both = [
        np.mean([((c[1:] == 2) & (c[:-1] == 2)).mean() for c in map(s.pass_counts, range(100))])
        for s in (shuffled, plain)
    ]
    assert both[1] == 0.0
    assert 0.2 < both[0] < 0.3  # independent neighbours: 0.25


def test_every_pass_holds_its_counts_once_each():
    factors = _mixed_factors(np.random.default_rng(2), 500)
    s = RepeatFactorTrainingSampler(factors, seed=5, rank=0, world_size=1)
    for p in (0, 1, 17):
        order = s._make_pass(p).to_array()
        np.testing.assert_array_equal(np.bincount(order, minlength=500), s.pass_counts(p))
    assert len(s._make_pass(0)) >= 1


@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_at_random_depths_with_tiny_fractions(shuffle):
    # mostly tiny fractions: long runs of records without a copy (wide search windows), and
    # passes of ~40 indices, so the stream crosses many passes
    factors = np.random.default_rng(3).uniform(0.0, 0.02, 4000) + 1e-9
    make = lambda seed, r=0, w=1: RepeatFactorTrainingSampler(  # noqa: E731
        factors, shuffle=shuffle, seed=seed, rank=r, world_size=w
    )
    reference = take(make(6), 3000)
    counts = np.stack([make(6).pass_counts(p) for p in range(5)])
    lengths = counts.sum(axis=1)
    first = np.asarray(reference[: lengths[0]])
    np.testing.assert_array_equal(np.bincount(first, minlength=4000), counts[0])
    rng = np.random.default_rng(4)
    for depth in [0, 1, int(lengths[0]), *rng.integers(0, 2900, 6).tolist()]:
        saved = make(6)
        take(saved, depth)
        state = saved.state_dict()
        resumed = make(1)
        resumed.load_state_dict(state)
        assert take(resumed, 100) == reference[depth : depth + 100], f"depth {depth}"
        for rank in range(3):  # re-sharded over 3 ranks
            part = make(2, rank, 3)
            part.load_state_dict(state)
            assert take(part, 30) == reference[depth + rank : depth + 90 : 3]


def _last_of(iterator, n):
    """The ``n``-th next value, keeping none of the others (nothing for tracemalloc to see)."""
    return collections.deque(itertools.islice(iterator, n), maxlen=1)[0]


def test_resume_deep_in_a_million_records_allocates_no_pass_sized_array():
    # the old scheme drew every record's rounding and kept its running counts for the pass
    # (8 MB here, a 9.6 MiB peak); computing positions needs only chunk-sized temporaries
    factors = np.random.default_rng(0).uniform(0.5, 2.5, 1_000_000)
    make = lambda: RepeatFactorTrainingSampler(factors, seed=1, rank=0, world_size=1)  # noqa: E731
    state = dict(make().state_dict(), pass_index=40, offset=1_200_000)
    sampler = make()
    tracemalloc.start()
    try:
        sampler.load_state_dict(state)
        first = _last_of(sampler, 10_000)
        sampler.state_dict()
        _last_of(sampler, 20_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first == make()._make_pass(40).item(1_200_000 + 9_999)
    assert peak < 2 * 2**20, f"peak {peak / 2**20:.2f} MiB"


def test_concat_reads_a_repeat_part_across_many_passes():
    factors = np.random.default_rng(5).uniform(0.0, 0.05, 3000) + 1e-9  # ~75 per part pass
    make = lambda seed: ConcatSampler(  # noqa: E731
        [3000, 50],
        weights=[10, 1],
        samplers=[RepeatFactorTrainingSampler(factors, seed=seed + 1), None],
        seed=seed,
        rank=0,
        world_size=1,
    )
    reference = take(make(2), 9000)
    for depth in (0, 2999, 4321):
        saved = make(2)
        take(saved, depth)
        resumed = make(9)
        resumed.load_state_dict(saved.state_dict())
        assert take(resumed, 500) == reference[depth : depth + 500]


def test_factor_sum_is_bounded():
    with pytest.raises(ValueError, match="2\\*\\*52"):
        RepeatFactorTrainingSampler([2.0**52, 2.0**52], seed=0)
