"""Repeat factors from category frequency and RepeatFactorTrainingSampler."""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
import torch

from catalog import RecordFormatError, SerializedList
from samplers import RepeatFactorTrainingSampler, repeat_factors_from_category_frequency


def _records(category_sets):
    return [
        {"file_name": f"{i}.jpg", "annotations": [{"category_id": c, "iscrowd": 0} for c in cats]}
        for i, cats in enumerate(category_sets)
    ]


@pytest.mark.parametrize("wrap", [list, SerializedList])
def test_issue_example(wrap):
    factors = repeat_factors_from_category_frequency(wrap(_records([[0, 1], [0], []])), 0.5)
    assert factors.dtype == torch.float32
    np.testing.assert_allclose(factors.numpy(), [math.sqrt(1.5), 1.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize("wrap", [list, SerializedList])
def test_without_sqrt_and_duplicates_count_once_per_image(wrap):
    # category 1 appears three times in one image: its image frequency is still 1/4
    records = _records([[0, 1, 1, 1], [0], [0], [2]])
    factors = repeat_factors_from_category_frequency(wrap(records), 0.5, sqrt=False)
    np.testing.assert_allclose(factors.numpy(), [2.0, 1.0, 1.0, 2.0], rtol=1e-6)


def test_vectorized_columns_match_the_per_record_loop():
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 30, rng.integers(0, 6)).tolist() for _ in range(500)]
    records = _records(sets)
    for thresh, sqrt in [(0.01, True), (0.2, False), (1.0, True)]:
        a = repeat_factors_from_category_frequency(records, thresh, sqrt=sqrt)
        b = repeat_factors_from_category_frequency(SerializedList(records), thresh, sqrt=sqrt)
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_serialized_list_is_not_unpickled(monkeypatch):
    sl = SerializedList(_records([[0], [1], [0, 1]]))

    def forbidden(*args, **kwargs):
        raise AssertionError("a record was unpickled")

    monkeypatch.setattr(SerializedList, "__getitem__", forbidden)
    monkeypatch.setattr(SerializedList, "__iter__", forbidden)
    assert len(repeat_factors_from_category_frequency(sl, 0.5)) == 3


@pytest.mark.parametrize("wrap", [list, SerializedList])
def test_missing_category_id_names_record_and_annotation(wrap):
    records = _records([[0], [1, 2]])
    del records[1]["annotations"][1]["category_id"]
    sl = wrap(records)
    with pytest.raises(RecordFormatError, match=r"record 1.*annotation 1"):
        repeat_factors_from_category_frequency(sl, 0.5)


def test_serialized_list_error_names_the_dataset():
    records = _records([[0], [1]])
    records[0]["annotations"][0]["category_id"] = None
    with pytest.raises(RecordFormatError, match="record 0 of dataset 'toy'"):
        repeat_factors_from_category_frequency(SerializedList(records, name="toy"), 0.5)


def test_non_dict_record_is_an_error():
    with pytest.raises(RecordFormatError, match="record 1 is a str"):
        repeat_factors_from_category_frequency([{"annotations": []}, "oops"], 0.5)


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-1.0, ValueError), ("x", TypeError)])
def test_threshold_is_validated(bad, exc):
    with pytest.raises(exc, match="repeat_thresh"):
        repeat_factors_from_category_frequency(_records([[0]]), bad)


def test_no_annotations_at_all_gives_ones():
    for wrap in (list, SerializedList):
        f = repeat_factors_from_category_frequency(wrap(_records([[], []])), 0.5)
        assert f.tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------- sampler
def test_stochastic_rounding_reaches_the_expected_counts():
    factors = [1.0, 2.5, 0.5, 3.0]
    s = RepeatFactorTrainingSampler(torch.tensor(factors), seed=0, rank=0, world_size=1)
    passes = [s._make_pass(p).to_array() for p in range(400)]
    counts = np.stack([np.bincount(p, minlength=4) for p in passes])
    assert all((s.pass_counts(p) == counts[p]).all() for p in range(400))
    assert (counts[:, 0] == 1).all() and (counts[:, 3] == 3).all()
    assert set(counts[:, 1].tolist()) == {2, 3} and set(counts[:, 2].tolist()) == {0, 1}
    np.testing.assert_allclose(counts.mean(axis=0), factors, atol=0.12)


def test_constant_factor_stands_in_for_repeat_dataset():
    s = RepeatFactorTrainingSampler([3.0] * 5, seed=1, rank=0, world_size=1)
    first = list(itertools.islice(s, 15))
    assert collections.Counter(first) == {i: 3 for i in range(5)}


def test_shuffle_false_keeps_index_order():
    s = RepeatFactorTrainingSampler([2.0, 1.0, 2.0], shuffle=False, seed=0, rank=0, world_size=1)
    assert list(itertools.islice(s, 10)) == [0, 0, 1, 2, 2, 0, 0, 1, 2, 2]


def test_ranks_shard_the_same_global_stream():
    factors = [1.3, 0.7, 2.2, 1.0, 1.9]
    full = list(
        itertools.islice(RepeatFactorTrainingSampler(factors, seed=4, rank=0, world_size=1), 90)
    )
    for rank in range(3):
        s = RepeatFactorTrainingSampler(factors, seed=4, rank=rank, world_size=3)
        assert list(itertools.islice(s, 30)) == full[rank::3]


def test_from_category_frequency():
    s = RepeatFactorTrainingSampler.from_category_frequency(
        SerializedList(_records([[0, 1], [0], []])), 0.5, seed=0, rank=0, world_size=1
    )
    np.testing.assert_allclose(s.repeat_factors, [math.sqrt(1.5), 1, 1], rtol=1e-6)


def test_detectron2_static_method_spelling():
    # detectron2 code calls RepeatFactorTrainingSampler.repeat_factors_from_category_frequency
    records = _records([[0, 1], [0], []])
    factors = RepeatFactorTrainingSampler.repeat_factors_from_category_frequency(records, 0.5)
    np.testing.assert_allclose(factors.numpy(), [math.sqrt(1.5), 1, 1], rtol=1e-6)


@pytest.mark.parametrize(
    "factors,exc,match",
    [
        ([], ValueError, "non-empty"),
        ([[1.0]], ValueError, "1-D"),
        ([1.0, 0.0], ValueError, "record 1"),
        ([1.0, float("nan")], ValueError, "record 1"),
        ([-1.0], ValueError, "record 0"),
        (["a"], TypeError, "numbers"),
    ],
)
def test_factor_errors(factors, exc, match):
    with pytest.raises(exc, match=match):
        RepeatFactorTrainingSampler(factors, seed=0)
