"""Views store the smaller of their positions and their gaps, and give the same records."""

from __future__ import annotations

import os
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from catalog import SerializedList
from catalog.record_views import SerializedListView, _rebuild_view, concat_records
from catalog.view_index import check_stored, encode_index, positions, view_length


def _records(n: int, start: int = 0) -> list[dict]:
    return [
        {"i": i, "height": 5 + i % 7, "width": 9 + i % 5,
         "annotations": [{"category_id": i % 3, "iscrowd": 0}] * (i % 3)}
        for i in range(start, start + n)
    ]  # fmt: skip


def _ids(records) -> list[int]:
    return [r["i"] for r in records]


def _roundtrip(view):
    return ForkingPickler.loads(bytes(ForkingPickler.dumps(view)))


def test_order_keeping_filter_stores_only_the_dropped_positions():
    base = SerializedList(_records(5_000), name="toy")
    keep = np.flatnonzero(np.arange(5_000) % 100 != 7)  # 50 dropped, as filter_empty does
    view = base.subset(keep)
    assert view.index_kind == "gaps"
    assert view.index_nbytes == 4 * 50  # 4 bytes per dropped record, not per kept one
    assert len(view) == len(keep) and view.index.tolist() == keep.tolist()
    assert _ids(view) == keep.tolist()
    assert [view[k]["i"] for k in (0, 6, 7, 99, -1)] == [int(keep[k]) for k in (0, 6, 7, 99, -1)]
    want = SerializedList([base[int(i)] for i in keep]).columns
    for got, expected in zip(view.columns.arrays(), want.arrays(), strict=True):
        assert got.tolist() == expected.tolist()
    assert not view._stored.flags.writeable
    # subsets and joins of such a view are the same records
    assert _ids(view[10:20]) == keep[10:20].tolist()
    joined = concat_records([view, SerializedList(_records(3, start=9_000))])
    assert _ids(joined) == keep.tolist() + [9_000, 9_001, 9_002]
    assert joined.index_kind == "gaps" and joined.index_nbytes == 4 * 50


def test_reorderings_and_heavy_filters_keep_their_positions():
    base = SerializedList(_records(100))
    assert base.subset([3, 1, 2]).index_kind == "index"  # not increasing
    assert base.subset([1, 1, 2]).index_kind == "index"  # repeats
    assert base.subset(np.arange(0, 100, 3)).index_kind == "index"  # more dropped than kept
    assert concat_records([base, SerializedList(_records(2))]).index_kind == "all"


def test_gaps_of_a_prefix_suffix_and_everything():
    assert encode_index(np.arange(1, 10), 10)[1].tolist() == [0]
    assert encode_index(np.arange(0, 9), 10)[1].tolist() == [9]
    kind, gaps = encode_index(np.arange(10), 10)
    assert kind == "gaps" and len(gaps) == 0 and view_length(kind, gaps, 10) == 10
    assert positions(kind, gaps, np.arange(3)).tolist() == [0, 1, 2]


def test_stored_arrays_are_checked_when_rebuilt():
    base = SerializedList(_records(10))
    with pytest.raises(IndexError, match="must not decrease"):
        _rebuild_view((base,), np.array([3, 2], dtype=np.int32), "toy", "gaps")
    with pytest.raises(IndexError, match="10 records of toy"):
        _rebuild_view((base,), np.array([9, 9], dtype=np.int32), "toy", "gaps")
    with pytest.raises(IndexError, match="out of range"):
        _rebuild_view((base,), np.array([10], dtype=np.int64), "toy", "index")
    with pytest.raises(TypeError, match="ints"):
        check_stored("index", np.array([0.5]), 10)
    with pytest.raises(ValueError, match="kind"):
        check_stored("mask", np.array([0]), 10)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of range"):
        SerializedListView.over((base,), np.array([2**40]))  # not wrapped around by int32


def test_large_gaps_go_to_workers_through_shared_memory():
    base = SerializedList(_records(40_000))
    keep = np.flatnonzero(np.arange(40_000) % 7 >= 3)  # 17,143 dropped: 68 kB of gaps
    view = base.subset(keep)
    assert view.index_kind == "gaps" and view.index_nbytes > 64 * 1024
    data = bytes(ForkingPickler.dumps(view))
    assert len(data) < 8_000  # the gaps went to shared memory, not into the pickle
    clone = ForkingPickler.loads(data)
    assert isinstance(view._index_owner, torch.Tensor) and view._index_owner.is_shared()
    assert clone.index_kind == "gaps" and not clone._stored.flags.writeable
    assert clone.index.tolist() == keep.tolist()
    assert [clone[k]["i"] for k in (0, 1_000, -1)] == [int(keep[k]) for k in (0, 1_000, -1)]


class _Reader(Dataset):
    def __init__(self, records: SerializedList) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[int, str, int]:
        return self.records[index]["i"], self.records.index_kind, os.getpid()


def _as_list(batch: list) -> list:
    return batch


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_gap_views_give_the_same_records_in_dataloader_workers(context):
    base = SerializedList(_records(300), name="a")
    keep = np.flatnonzero(np.arange(300) % 10 != 0)
    view = concat_records([base.subset(keep), SerializedList(_records(5, start=1_000))])
    loader = DataLoader(
        _Reader(view), batch_size=50, num_workers=2, multiprocessing_context=context,
        collate_fn=_as_list,
    )  # fmt: skip
    items = [item for batch in loader for item in batch]
    assert [i for i, _, _ in items] == keep.tolist() + list(range(1_000, 1_005))
    assert {kind for _, kind, _ in items} == {"gaps"}
    assert all(pid != os.getpid() for _, _, pid in items)


@st.composite
def _index_cases(draw):
    sizes = draw(st.lists(st.integers(0, 40), min_size=1, max_size=3))
    total = sum(sizes)
    if total and draw(st.booleans()):  # an order-keeping filter
        keep = draw(st.lists(st.booleans(), min_size=total, max_size=total))
        index = [i for i, k in enumerate(keep) if k]
    else:
        index = draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=60)) if total else []
    picks = draw(st.lists(st.integers(-100, 100), max_size=10))
    return sizes, index, picks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_index_cases())
def test_views_hold_exactly_the_indexed_records(case):
    sizes, index, picks = case
    bases, start = [], 0
    for size in sizes:
        bases.append(SerializedList(_records(size, start=start)))
        start += size
    view = SerializedListView.over(bases, np.asarray(index, dtype=np.int64))
    assert len(view) == len(index) and view.index.tolist() == index
    assert _ids(view) == index and [view[k]["i"] for k in range(len(view))] == index
    assert _ids(_roundtrip(view)) == index
    kept = [p for p in picks if -len(index) <= p < len(index)]
    assert _ids(view.subset(kept)) == [index[p] for p in kept]
    assert view.index_nbytes <= 4 * min(len(index), sum(sizes) - len(set(index)) + len(index))
