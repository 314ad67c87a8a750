"""GroupedBatchSampler, aspect-ratio groups and ResumableBatchSampler."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from catalog import SerializedList
from samplers import (
    GroupedBatchSampler,
    InferenceSampler,
    ResumableBatchSampler,
    TrainingSampler,
    aspect_ratio_group_ids,
)


def _records(sizes):
    return [{"file_name": f"{i}.jpg", "width": w, "height": h} for i, (w, h) in enumerate(sizes)]


@pytest.mark.parametrize("wrap", [list, SerializedList])
def test_aspect_ratio_groups_from_width_and_height(wrap, caplog):
    records = _records([(4, 3), (3, 4), (5, 5), (10, 2)]) + [{"file_name": "x.jpg"}]
    groups = aspect_ratio_group_ids(wrap(records))
    assert groups.tolist() == [0, 1, 1, 0, 2]
    assert "1 of 5 records" in caplog.text


def test_every_batch_is_from_one_group():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 3, 100)
    s = GroupedBatchSampler(TrainingSampler(100, seed=0, rank=0, world_size=1), groups, 4)
    batches = list(itertools.islice(s, 200))
    assert all(len(b) == 4 for b in batches)
    assert all(len({int(groups[i]) for i in b}) == 1 for b in batches)


def test_finite_sampler_leftovers_are_dropped_by_default_or_yielded():
    # detectron2 yields full groups only (the default); drop_last=False keeps the leftovers
    groups = [0, 1, 0, 1, 0]
    dropped = list(GroupedBatchSampler(InferenceSampler(5, rank=0, world_size=1), groups, 2))
    assert dropped == [[0, 2], [1, 3]]
    kept = list(
        GroupedBatchSampler(InferenceSampler(5, rank=0, world_size=1), groups, 2, drop_last=False)
    )
    assert kept == [[0, 2], [1, 3], [4]]


def test_grouped_errors():
    s = TrainingSampler(4, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        GroupedBatchSampler(s, [0, 0, 0, 0], 0)
    with pytest.raises(TypeError, match="batch_size"):
        GroupedBatchSampler(s, [0, 0, 0, 0], 2.0)
    with pytest.raises(TypeError, match="group_ids"):
        GroupedBatchSampler(s, [0.5, 0, 0, 0], 2)
    with pytest.raises(ValueError, match="index 1 is negative"):
        GroupedBatchSampler(s, [0, -1, 0, 0], 2)
    with pytest.raises(IndexError, match="covers 2 records"):
        next(iter(GroupedBatchSampler(TrainingSampler(4, seed=0), [0, 0], 2)))


def test_resumable_batch_sampler_batches_and_len():
    b = ResumableBatchSampler(InferenceSampler(5, rank=0, world_size=1), 2)
    assert list(b) == [[0, 1], [2, 3], [4]] and len(b) == 3
    d = ResumableBatchSampler(InferenceSampler(5, rank=0, world_size=1), 2, drop_last=True)
    assert list(d) == [[0, 1], [2, 3]] and len(d) == 2
    with pytest.raises(ValueError, match="batch_size"):
        ResumableBatchSampler(InferenceSampler(5), -1)
