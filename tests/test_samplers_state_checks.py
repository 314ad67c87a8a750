"""Saved states are untrusted: every field is checked, the configuration fingerprint is compared,
and a rejected state changes nothing (issue 10, items 7 and 8)."""

from __future__ import annotations

import itertools
import logging
import tracemalloc

import numpy as np
import pytest

from samplers import (
    ConcatSampler,
    GroupedBatchSampler,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    ResumableBatchSampler,
    SamplerStateError,
    TrainingSampler,
    build_batch_data_loader,



)
from samplers.errors import StateMismatchError
from samplers.order import KeyedPermutation
from samplers import order, stream
from samplers.stream import StreamSampler as EndlessPassStream
from tests.work_counting import count_calls

FACTORS = [1.5, 0.4, 2.7, 1.0, 1.1]


def take(it, n):
    return list(itertools.islice(it, n))


def training(seed=1, rank=0, world=1):
    return TrainingSampler(11, seed=seed, rank=rank, world_size=world)


def subset(seed=1, rank=0, world=1):
    return RandomSubsetTrainingSampler(
        23, 0.5, seed_shuffle=seed, seed_subset=seed + 1, rank=rank, world_size=world
    )


def repeat(seed=1, rank=0, world=1, factors=FACTORS):
    return RepeatFactorTrainingSampler(factors, seed=seed, rank=rank, world_size=world)


def concat(seed=1, rank=0, world=1, weights=(1, 2), part_factors=(2.5, 1.0, 0.5)):
    return ConcatSampler(
        [3, 8],
        weights=list(weights),
        samplers=[RepeatFactorTrainingSampler(list(part_factors), seed=seed + 7), None],
        seed=seed,
        rank=rank,
        world_size=world,
    )


SAMPLERS = {"training": training, "subset": subset, "repeat": repeat, "concat": concat}
GROUPS = [i % 3 for i in range(12)]


def batches(seed=1, batch_size=3):
    return ResumableBatchSampler(TrainingSampler(12, seed=seed, rank=0, world_size=1), batch_size)


def grouped(seed=1, groups=GROUPS, batch_size=3):
    sampler = TrainingSampler(12, seed=seed, rank=0, world_size=1)
    return GroupedBatchSampler(sampler, groups, batch_size)


def loader(seed=1, batch_size=4):
    sampler = TrainingSampler(12, seed=seed, rank=0, world_size=1)
    return build_batch_data_loader(list(range(12)), sampler, batch_size)


ALL = {**SAMPLERS, "batches": batches, "grouped": grouped, "loader": loader}


def advanced(make, draws=7, **kwargs):
    obj = make(**kwargs)
    iterator = iter(obj)
    take(iterator, draws)
    return obj, iterator


# ------------------------------------------------------------------ item 5: absurd values
@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize("world", [10**15, 2**20 + 1, 1e15, True, 0])
def test_absurd_world_size_is_rejected_at_once(kind, world, monkeypatch):
    obj, _ = advanced(SAMPLERS[kind])
    state = dict(obj.state_dict(), world_size=world, offset=10**14)
    fresh = SAMPLERS[kind]()
    # "at once" counted as work, not time: rejecting the world size needs no pass, no pass
    # length, no keyed permutation or keyed draw, and no array (numpy reports its buffers to
    # tracemalloc); a check made after walking the cursor or sharding would call these
    _forbid_stream_work(monkeypatch)
    tracemalloc.start()
    try:
        with pytest.raises(SamplerStateError, match="'world_size'"):
            fresh.load_state_dict(state)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**10, f"peak {peak / 2**10:.0f} KiB"


def _stream_classes(cls=EndlessPassStream):
    for sub in cls.__subclasses__():
        yield sub
        yield from _stream_classes(sub)


def _forbid_stream_work(monkeypatch) -> None:
    """Make every function that computes a pass, a pass length or keyed values raise."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the state was not rejected before the stream was computed")

    for cls in (EndlessPassStream, *_stream_classes()):
        for name in ("_make_pass", "_pass_length", "_order", "_normalize_cursor"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, forbidden)
    for name in ("__init__", "_encrypt", "at"):
        monkeypatch.setattr(KeyedPermutation, name, forbidden)
    monkeypatch.setattr(order, "keyed_bits53", forbidden)


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize(
    "key,value",
    [
        ("seed", True),
        ("seed", 1.0),
        ("seed", -1),
        ("seed", 2**64),
        ("seed", float("nan")),
        ("pass_index", 2**40),
        ("pass_index", -3),
        ("pass_index", "0"),
        ("offset", 10**6),
        ("offset", np.float64(2.0)),
        ("world_size", None),
    ],
)
def test_every_field_is_checked_for_type_and_range(kind, key, value):
    obj, _ = advanced(SAMPLERS[kind])
    with pytest.raises(SamplerStateError, match=f"'{key}'|{key} "):
        SAMPLERS[kind]().load_state_dict(dict(obj.state_dict(), **{key: value}))


@pytest.mark.parametrize("kind", sorted(ALL))
def test_unknown_missing_and_malformed_keys_are_rejected(kind):
    obj, _ = advanced(ALL[kind])
    state = obj.state_dict()
    with pytest.raises(SamplerStateError, match="unknown key"):
        ALL[kind]().load_state_dict(dict(state, surprise=1))
    with pytest.raises(SamplerStateError, match="lacks key.*'config'"):
        ALL[kind]().load_state_dict({k: v for k, v in state.items() if k != "config"})
    with pytest.raises(SamplerStateError, match="'config' must be a dict"):
        ALL[kind]().load_state_dict(dict(state, config=[1, 2]))
    with pytest.raises(SamplerStateError, match="config.*unknown key"):
        ALL[kind]().load_state_dict(dict(state, config={**state["config"], "extra": 0}))
    for version in (True, 0, 3, "2", 2.0):
        with pytest.raises(SamplerStateError, match="version"):
            ALL[kind]().load_state_dict(dict(state, version=version))


def test_numpy_ints_are_ints_but_floats_and_bools_are_not():
    obj, iterator = advanced(training)
    state = obj.state_dict()
    resumed = training(seed=5)
    resumed.load_state_dict(dict(state, seed=np.int64(1), offset=np.int32(state["offset"])))
    assert take(resumed, 10) == take(iterator, 10)
    with pytest.raises(SamplerStateError, match="'offset'"):
        training().load_state_dict(dict(state, offset=float(state["offset"])))
    with pytest.raises(SamplerStateError, match="config\\['shuffle'\\] must be a bool"):
        training().load_state_dict(dict(state, config={**state["config"], "shuffle": 1}))


def test_grouped_pending_indices_are_checked():
    obj, _ = advanced(grouped, draws=1)
    state = obj.state_dict()
    pending = [g for g, b in enumerate(state["buckets"]) if b]
    assert pending, "the fixture must leave indices pending"
    g = pending[0]

    def with_bucket(indices, positions):
        buckets = [list(b) for b in state["buckets"]]
        bucket_positions = [list(b) for b in state["bucket_positions"]]
        buckets[g], bucket_positions[g] = indices, positions
        return dict(state, buckets=buckets, bucket_positions=bucket_positions)

    index, position = state["buckets"][g][0], state["bucket_positions"][g][0]
    bad = [
        (with_bucket([12], [position]), "buckets"),  # outside the dataset
        (with_bucket([index + 0.0], [position]), "buckets"),  # a float
        (with_bucket(np.array([1.5]), [position]), "1-D array of ints"),
        (with_bucket([index] * 3, [0, 1, 2]), "at most 2 fit"),  # a full bucket: batch_size 3
        (with_bucket([index, index], [position, position]), "share a global stream position"),
        (dict(state, buckets=[[]] * 4, bucket_positions=[[]] * 4), "at most 3 lists"),
        (dict(state, rank=np.array([0, 1])), "'rank' must be an int or None"),
    ]
    for broken, match in bad:
        with pytest.raises(SamplerStateError, match=match):
            grouped().load_state_dict(broken)


# ------------------------------------------------------------------ item 2: the fingerprint
def test_repeat_factors_of_another_run_raise_a_mismatch():
    saved, _ = advanced(repeat)
    other = repeat(factors=[1.5, 0.4, 2.7, 1.0, 1.2])  # same size, one factor differs
    with pytest.raises(StateMismatchError, match="repeat_factors") as info:
        other.load_state_dict(saved.state_dict())
    assert info.value.key == "repeat_factors"
    assert info.value.saved.startswith("'blake2b-128:") and info.value.saved != info.value.current


@pytest.mark.parametrize(
    "make_saved,make_other,key",
    [
        (training, lambda: TrainingSampler(12, seed=0, rank=0, world_size=1), "size"),
        (training, lambda: TrainingSampler(11, shuffle=False, seed=0), "shuffle"),
        (
            subset,
            lambda: RandomSubsetTrainingSampler(23, 0.6, seed_shuffle=0, seed_subset=0),
            "subset_ratio",
        ),
        (concat, lambda: concat(weights=(1, 1)), "weights"),
        (concat, lambda: concat(part_factors=(2.5, 1.0, 0.6)), "part 0: repeat_factors"),
        (batches, lambda: batches(batch_size=4), "global_batch_size"),
        (grouped, lambda: grouped(groups=[i % 2 for i in range(12)]), "num_groups"),
        (grouped, lambda: grouped(groups=[(i + 1) % 3 for i in range(12)]), "group_ids"),
        (loader, lambda: loader(batch_size=3), "global_batch_size"),
    ],
)
def test_a_state_of_another_configuration_raises_and_loads_with_strict_false(
    make_saved, make_other, key, caplog
):
    saved, _ = advanced(make_saved, draws=6)
    state = saved.state_dict()
    if "buckets" in state:  # pending indices of the old group ids
        state = dict(state, buckets=[[] for _ in state["buckets"]])
        state["bucket_positions"] = [[] for _ in state["buckets"]]
    with pytest.raises(StateMismatchError) as info:
        make_other().load_state_dict(state)
    assert info.value.key == key
    assert info.value.saved != info.value.current
    assert f"'{key}'" in str(info.value) or key.split(": ")[-1] in str(info.value)
    other = make_other()
    with caplog.at_level(logging.WARNING, logger="samplers"):
        other.load_state_dict(state, strict=False)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "strict=False" in warnings[0].getMessage()
    assert len(take(other, 5)) == 5


def test_strict_is_keyword_only():
    state = training().state_dict()
    with pytest.raises(TypeError):
        training().load_state_dict(state, False)


def test_state_dict_of_a_million_factors_reuses_its_digest(monkeypatch):
    factors = np.random.default_rng(0).uniform(0.5, 3.0, 1_000_000)
    digests = count_calls(monkeypatch, stream, "array_digest")
    sampler = RepeatFactorTrainingSampler(factors, seed=0, rank=0, world_size=1)
    first = sampler.state_dict()["config"]["repeat_factors"]
    for _ in range(100):
        assert sampler.state_dict()["config"]["repeat_factors"] == first
    assert digests.calls == 1  # the factors are hashed once, not once per state_dict
    factors[0] += 1  # the caller's array is not the sampler's
    assert sampler.state_dict()["config"]["repeat_factors"] == first


def test_saved_cursor_lies_inside_its_pass():
    for rank in range(3):
        s = TrainingSampler(4, seed=0, rank=rank, world_size=3)
        for _ in range(7):
            take(s, 1)
            state = s.state_dict()
            assert 0 <= state["offset"] < 4


def test_grouped_strict_false_regroups_pending_indices():
    saved, _ = advanced(grouped, draws=1)
    state = saved.state_dict()
    assert any(state["buckets"])
    other_groups = [i % 2 for i in range(12)]
    other = grouped(groups=other_groups)
    other.load_state_dict(state, strict=False)
    for batch in take(other, 8):
        assert len({other_groups[i] for i in batch}) == 1


def test_constructor_bounds_match_the_state_bounds():
    with pytest.raises(ValueError, match="world_size"):
        TrainingSampler(5, seed=0, rank=0, world_size=2**20 + 1)
    with pytest.raises(ValueError, match="seed"):
        TrainingSampler(5, seed=2**64)
    with pytest.raises(ValueError, match="sum to"):
        RepeatFactorTrainingSampler([0.1, 0.2], seed=0)
    with pytest.raises(ValueError, match="group ids must be below"):
        GroupedBatchSampler(training(), [0, 2**40], 2)


# ------------------------------------------------------------------ item 3: all or nothing
def _bad_states(kind, good):
    """States that fail late: after fields that would change the object were read."""
    if kind in SAMPLERS:
        out = [dict(good, seed=good["seed"] + 5, offset=10**6)]
        if kind == "subset":
            out.append(dict(good, seed_subset=good["seed_subset"] + 3, offset=10**6))
        if kind == "concat":
            parts = list(good["pass_start"])
            other = parts[0]
            parts[0] = dict(other, seed=other["seed"] + 1, offset=0)
            parts[1] = dict(parts[1], offset=10**6)  # part 0 is fine, part 1 is not
            out.append(dict(good, seed=good["seed"] + 5, pass_start=parts))
        return out
    nested = "batch_sampler" if kind == "loader" else "sampler"
    inner = good[nested]
    out = [dict(good, **{nested: dict(inner, offset=10**6)})]
    if kind == "loader":
        sampler = dict(inner["sampler"], offset=10**6)
        out.append(dict(good, batches=99, seed=42, batch_sampler=dict(inner, sampler=sampler)))
    else:
        out.append(dict(good, position=good["position"] + 3, config=None))
    if kind == "grouped":
        out.append(dict(good, position=good["position"] + 3, bucket_positions=[[-1]] * 3))
    return out


@pytest.mark.parametrize("kind", sorted(ALL))
def test_a_rejected_state_changes_nothing(kind):
    make = ALL[kind]
    saved, iterator = advanced(make, draws=5, seed=3)
    good = saved.state_dict()
    expected = take(iterator, 12)
    obj = make(seed=8)
    obj.load_state_dict(good)
    for bad in _bad_states(kind, good):
        with pytest.raises(SamplerStateError):
            obj.load_state_dict(bad)
    if kind == "loader":
        assert obj.batches_delivered == 5 and obj.seed == 3
    assert take(iter(obj), 12) == expected


@pytest.mark.parametrize("kind", sorted(ALL))
def test_a_state_of_another_format_version_is_refused(kind):
    saved, _ = advanced(ALL[kind], draws=5)
    with pytest.raises(SamplerStateError, match="unsupported state version 1"):
        ALL[kind]().load_state_dict(dict(saved.state_dict(), version=1))
