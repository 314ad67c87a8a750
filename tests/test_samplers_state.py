"""Exact resume: state_dict / load_state_dict of every training sampler, re-sharding, errors."""

from __future__ import annotations

import io
import itertools
import pickle

import pytest
import torch

from samplers import (
    ConcatSampler,
    GroupedBatchSampler,
    InferenceSampler,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    ReshardError,
    ResumableBatchSampler,
    SamplerStateError,
    TrainingSampler,
)
from samplers.errors import NotResumableError, StateMismatchError
from samplers.order import KeyedPermutation


def take(it, n):
    return list(itertools.islice(it, n))


FACTORIES = {
    "training": lambda seed, r, w: TrainingSampler(11, seed=seed, rank=r, world_size=w),
    "no_shuffle": lambda seed, r, w: TrainingSampler(
        11, shuffle=False, seed=seed, rank=r, world_size=w
    ),
    "subset": lambda seed, r, w: RandomSubsetTrainingSampler(
        23, 0.5, seed_shuffle=seed, seed_subset=seed + 1, rank=r, world_size=w
    ),
    "repeat": lambda seed, r, w: RepeatFactorTrainingSampler(
        [1.5, 0.4, 2.7, 1.0, 1.1], seed=seed, rank=r, world_size=w
    ),
    "concat": lambda seed, r, w: ConcatSampler(
        [3, 8],
        weights=[1, 2],
        samplers=[RepeatFactorTrainingSampler([2.5, 1.0, 0.5], seed=seed + 7), None],
        seed=seed,
        rank=r,
        world_size=w,
    ),
}


@pytest.mark.parametrize("kind", sorted(FACTORIES))
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("consumed", [0, 5, 26])
def test_resume_continues_with_exactly_the_next_index(kind, world, consumed):
    make = FACTORIES[kind]
    for rank in range(world):
        original = make(1, rank, world)
        it = iter(original)
        take(it, consumed)
        state = pickle.loads(pickle.dumps(original.state_dict()))
        expected = take(it, 40)
        resumed = make(99, rank, world)  # the state's seed wins over the constructor's
        resumed.load_state_dict(state)
        assert resumed.seed == 1
        assert take(resumed, 40) == expected


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_state_saved_with_one_world_size_re_shards_over_another(kind):
    make = FACTORIES[kind]
    global_stream = take(make(4, 0, 1), 400)
    saved = make(4, 1, 2)  # rank 1 of 2 delivered 13 indices: ranks together consumed 26
    take(saved, 13)
    state = saved.state_dict()
    assert state["world_size"] == 2
    for new_world in (1, 3):
        for rank in range(new_world):
            resumed = make(0, rank, new_world)
            resumed.load_state_dict(state)
            assert take(resumed, 20) == global_stream[26 + rank :: new_world][:20]


def test_state_is_the_same_on_every_rank_in_lockstep():
    states = []
    for rank in range(3):
        s = TrainingSampler(10, seed=3, rank=rank, world_size=3)
        take(s, 7)
        states.append(s.state_dict())
    assert states[0] == states[1] == states[2]
    assert states[0]["pass_index"] * 10 + states[0]["offset"] == 21  # 7 rounds of 3


def test_resume_deep_in_a_pass_does_not_replay_earlier_passes(monkeypatch):
    s = TrainingSampler(1000, seed=0, rank=0, world_size=1)
    state = dict(s.state_dict(), pass_index=500, offset=999)
    made = []
    original = TrainingSampler._make_pass

    def counting(self, pass_index):
        made.append(pass_index)
        return original(self, pass_index)

    monkeypatch.setattr(TrainingSampler, "_make_pass", counting)
    resumed = TrainingSampler(1000, seed=0, rank=0, world_size=1)
    resumed.load_state_dict(state)
    first = take(resumed, 2)
    assert made == [500, 501]
    assert first[0] == KeyedPermutation(1000, "shuffle", 0, 500)[999]
    assert first[1] == KeyedPermutation(1000, "shuffle", 0, 501)[0]


def test_state_round_trips_through_torch_save():
    s = FACTORIES["concat"](1, 0, 1)
    it = iter(s)  # one iterator: a second iter() would restart from the seed
    take(it, 17)
    buffer = io.BytesIO()
    torch.save(s.state_dict(), buffer)
    buffer.seek(0)
    expected = take(it, 10)
    resumed = FACTORIES["concat"](2, 0, 1)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert take(resumed, 10) == expected


def test_grouped_batch_sampler_resumes_with_pending_indices():
    groups = [i % 3 for i in range(30)]
    a = GroupedBatchSampler(TrainingSampler(30, seed=2, rank=0, world_size=1), groups, 4)
    it = iter(a)
    take(it, 5)
    state = a.state_dict()
    assert sum(len(b) for b in state["buckets"]) > 0
    expected = take(it, 12)
    b = GroupedBatchSampler(TrainingSampler(30, seed=9, rank=0, world_size=1), groups, 4)
    b.load_state_dict(state)
    assert take(b, 12) == expected


def test_grouped_state_with_pending_indices_refuses_another_rank():
    groups = [i % 3 for i in range(30)]
    a = GroupedBatchSampler(TrainingSampler(30, seed=2, rank=0, world_size=2), groups, 4)
    batches = iter(a)
    state = a.state_dict()
    while not any(state["buckets"]):  # the stream decides when an index is left pending
        take(batches, 1)
        state = a.state_dict()
    other = GroupedBatchSampler(TrainingSampler(30, seed=2, rank=1, world_size=2), groups, 4)
    with pytest.raises(ReshardError, match="saved by rank 0 of 2"):
        other.load_state_dict(state)
    wider = GroupedBatchSampler(TrainingSampler(30, seed=2, rank=0, world_size=3), groups, 4)
    with pytest.raises(ReshardError, match="this is rank 0 of 3"):
        wider.load_state_dict(state)
    # without pending indices the state re-shards like the sampler's; 4 per rank on 3 ranks is
    # another global batch size than 4 on 2 ranks, so only with strict=False
    empty = dict(state, buckets=[[], [], []], bucket_positions=[[], [], []])
    with pytest.raises(StateMismatchError, match="global_batch_size"):
        wider.load_state_dict(empty)
    wider.load_state_dict(empty, strict=False)


def test_grouped_state_with_foreign_indices_is_rejected():
    groups = [0, 1, 0, 1]
    a = GroupedBatchSampler(TrainingSampler(4, seed=2, rank=0, world_size=1), groups, 2)
    state = dict(a.state_dict(), buckets=[[1], []])
    with pytest.raises(SamplerStateError, match="does not belong to group 0"):
        a.load_state_dict(state)


def test_state_errors():
    s = TrainingSampler(10, seed=0, rank=0, world_size=1)
    with pytest.raises(SamplerStateError, match="expected a dict"):
        s.load_state_dict([1, 2])
    with pytest.raises(SamplerStateError, match="written by 'RepeatFactorTrainingSampler'"):
        s.load_state_dict(RepeatFactorTrainingSampler([1.0], seed=0).state_dict())
    state = s.state_dict()
    with pytest.raises(SamplerStateError, match="lacks key"):
        s.load_state_dict({k: v for k, v in state.items() if k != "offset"})
    with pytest.raises(SamplerStateError, match="version"):
        s.load_state_dict(dict(state, version=99))
    with pytest.raises(SamplerStateError, match="'offset' must be a non-negative int"):
        s.load_state_dict(dict(state, offset=-1))
    with pytest.raises(SamplerStateError, match="offset 10000000 lies beyond pass 0"):
        s.load_state_dict(dict(state, offset=10_000_000))
    with pytest.raises(SamplerStateError, match="'world_size' must be a positive int"):
        s.load_state_dict(dict(state, world_size=0))
    with pytest.raises(SamplerStateError, match="saved for 10 records, this sampler has 12"):
        TrainingSampler(12, seed=0).load_state_dict(state)
    with pytest.raises(SamplerStateError, match="shuffle"):
        TrainingSampler(10, shuffle=False, seed=0).load_state_dict(state)
    concat = ConcatSampler([3, 7], seed=0)
    with pytest.raises(SamplerStateError, match=r"sizes \[3, 7\]"):
        ConcatSampler([4, 6], seed=0).load_state_dict(concat.state_dict())
    with pytest.raises(SamplerStateError, match="subset_ratio"):
        RandomSubsetTrainingSampler(10, 0.3, seed_shuffle=0, seed_subset=0).load_state_dict(
            RandomSubsetTrainingSampler(10, 0.5, seed_shuffle=0, seed_subset=0).state_dict()
        )


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrainingSampler(10, seed=0, rank=0, world_size=1),
        lambda: RandomSubsetTrainingSampler(20, 0.5, seed_shuffle=0, seed_subset=1, rank=0,
                                            world_size=1),
        lambda: ConcatSampler([3, 7], seed=0, rank=0, world_size=1),
    ],
)  # fmt: skip
def test_a_rejected_state_leaves_the_sampler_where_it_was(make):
    expected = take(make(), 15)
    s = make()
    it = iter(s)  # one iterator: a second iter() would restart from the seed
    assert take(it, 5) == expected[:5]
    # another seed (and subset seed), and an offset far beyond the pass: a corrupt state
    bad = dict(s.state_dict(), seed=77, offset=10_000)
    if "seed_subset" in bad:  # unknown keys are rejected, so only where the sampler has one
        bad["seed_subset"] = 99
    with pytest.raises(SamplerStateError, match="lies beyond pass"):
        s.load_state_dict(bad)
    assert take(it, 10) == expected[5:]


def test_subset_state_restores_the_subset():
    a = RandomSubsetTrainingSampler(50, 0.2, seed_shuffle=1, seed_subset=2, rank=0, world_size=1)
    take(a, 3)
    b = RandomSubsetTrainingSampler(50, 0.2, seed_shuffle=5, seed_subset=6, rank=0, world_size=1)
    b.load_state_dict(a.state_dict())
    assert b.subset.tolist() == a.subset.tolist() and b.seed_subset == 2


def test_batch_sampler_over_a_plain_sampler_is_not_resumable():
    b = ResumableBatchSampler(InferenceSampler(4, rank=0, world_size=1), 2)
    with pytest.raises(NotResumableError, match="InferenceSampler"):
        b.state_dict()
    g = GroupedBatchSampler(InferenceSampler(4, rank=0, world_size=1), [0, 0, 0, 0], 2)
    with pytest.raises(NotResumableError, match="InferenceSampler"):
        g.state_dict()
