"""Record views: subsets, filters and concatenations share their bases' buffers, never copy."""

from __future__ import annotations

import gc
import os
import pickle
import tracemalloc

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from catalog import SerializedList
from catalog.storage.records import SerializedListView, concat_records
from catalog.storage.sharing import publish_records


def _records(n: int, start: int = 0, pad: int = 0) -> list[dict]:
    return [
        {
            "i": i,
            "file_name": f"{i}.jpg" + "x" * pad,
            "height": 10 + i,
            "width": 20 + 2 * i,
            "annotations": [
                {"category_id": (i + k) % 3, "iscrowd": int(k == 1), "bbox": [0, 0, 1, 1]}
                for k in range(i % 4)
            ],
        }
        for i in range(start, start + n)
    ]


def _ids(sl) -> list[int]:
    return [r["i"] for r in sl]


def _check_columns(view: SerializedList) -> None:
    """The view's columns equal those of a list serialized from its records."""
    expected = SerializedList(view.to_list()).columns
    for got, want in zip(view.columns.arrays(), expected.arrays(), strict=True):
        assert got.tolist() == want.tolist()


def test_subset_slice_and_filter_are_views_of_the_same_buffer():
    sl = SerializedList(_records(10), name="toy")
    for view, ids in [
        (sl.subset([7, 2, 2, -1]), [7, 2, 2, 9]),
        (sl.subset(3), [0, 1, 2]),
        (sl[::-3], [9, 6, 3, 0]),
        (sl.subset(np.flatnonzero(sl.columns.num_annotations() > 0)), [1, 2, 3, 5, 6, 7, 9]),
    ]:
        assert isinstance(view, SerializedListView) and isinstance(view, SerializedList)
        assert view.bases[0] is sl and view.name == "toy"
        assert _ids(view) == ids and [view[k]["i"] for k in range(len(view))] == ids
        assert view[-1]["i"] == ids[-1]
        _check_columns(view)


def test_views_of_views_compose_and_keep_the_original_base():
    sl = SerializedList(_records(8))
    view = sl.subset([6, 4, 2, 0])[1:][::-1]
    assert _ids(view) == [0, 2, 4] and view.bases == (sl,)
    assert view.index.tolist() == [0, 2, 4]
    with pytest.raises(IndexError, match="out of range for 3 records"):
        view[3]
    with pytest.raises(IndexError, match="subset index 5"):
        view.subset([5])


def test_subset_of_records_allocates_only_an_index():
    sl = SerializedList(_records(20_000, pad=200))
    gc.collect()
    tracemalloc.start()
    try:
        view = sl.subset(np.arange(0, len(sl), 2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(view) == 10_000
    # the index (40 kB) and its checks; a copy of the kept bytes would be > 2 MB
    assert peak < sl.buffer.nbytes / 10, (peak, sl.buffer.nbytes)


def test_concat_joins_bases_once_and_without_an_index():
    a, b = SerializedList(_records(3)), SerializedList(_records(4, start=3))
    joined = concat_records([a, SerializedList([]), b], name="ab")
    assert isinstance(joined, SerializedListView)
    assert joined.bases == (a, b) and joined.nbytes == a.nbytes + b.nbytes
    assert _ids(joined) == list(range(7)) and joined[4]["i"] == 4 and joined.name == "ab"
    _check_columns(joined)
    mixed = concat_records([b.subset([3, 0]), a, joined.subset([6, 0])])
    assert mixed.bases == (b, a)
    assert _ids(mixed) == [6, 3, 0, 1, 2, 6, 0]
    _check_columns(mixed)
    assert _ids(concat_records([a, a])) == [0, 1, 2, 0, 1, 2]
    assert concat_records([a]) is a and len(concat_records([])) == 0


def test_compact_copy_and_plain_pickle_are_self_contained():
    sl = SerializedList(_records(6))
    view = concat_records([sl.subset([5, 1]), SerializedList(_records(1, start=9))])
    for copy in (view.compact(), SerializedList(view), pickle.loads(pickle.dumps(view))):
        assert type(copy) is SerializedList
        assert _ids(copy) == [5, 1, 9] and copy.to_list() == view.to_list()
        assert not np.shares_memory(copy.buffer, sl.buffer)
    assert "SerializedListView" in repr(view)


def test_views_are_not_constructed_directly():
    with pytest.raises(TypeError, match="subset"):
        SerializedListView([{"a": 1}])
    with pytest.raises(IndexError):
        SerializedListView._over((SerializedList(_records(2)),), np.array([2]), None)


def _forking_dumps(obj) -> bytes:
    from multiprocessing.reduction import ForkingPickler

    return bytes(ForkingPickler.dumps(obj))


def test_views_pickle_to_processes_by_reference_to_the_mapped_base():
    small = SerializedList(_records(2_000))
    large = SerializedList(_records(2_000, pad=2_000))
    sizes = []
    for sl in (small, large):
        mapped, _ = publish_records(sl)  # a memory file, as DatasetCatalog.get under ranks
        view = concat_records([mapped.subset(np.arange(0, 2_000, 3)), mapped.subset([1])])
        data = _forking_dumps(view)
        sizes.append(len(data))
        from multiprocessing.reduction import ForkingPickler

        clone = ForkingPickler.loads(data)
        assert _ids(clone) == _ids(view)
        owner, clone_owner = mapped.owner, clone.bases[0].owner
        # the same memory file, mapped again: not a copy of its bytes
        assert (clone_owner.device, clone_owner.inode) == (owner.device, owner.inode)
    assert sizes[0] < 8_000 and sizes[1] < 8_000, sizes  # the index, not the records
    assert abs(sizes[0] - sizes[1]) < 512, sizes  # independent of the records' bytes


def test_views_share_a_private_base_once_through_shared_memory():
    sl = SerializedList(_records(50, pad=5_000))
    view = sl.subset(list(range(0, 50, 2)))
    data = _forking_dumps(view)
    assert len(data) < 4_000 < sl.buffer.nbytes
    assert sl.owner is not None  # the base itself moved once into shared memory
    again = _forking_dumps(view.subset([0]))
    assert len(again) < 4_000 and sl.owner.tensors[0].is_shared()


class _Probe(Dataset):
    """Reports from inside a worker what backs the view's records."""

    def __init__(self, records: SerializedList) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict:
        owners = [b.owner for b in self.records.bases]
        return {
            "i": self.records[index]["i"],
            "view": type(self.records).__name__,
            "inodes": [getattr(o, "inode", None) for o in owners],
            "tensors_shared": [
                all(t.is_shared() for t in o.tensors) if hasattr(o, "tensors") else None
                for o in owners
            ],
            "pid": os.getpid(),
        }


def _collate(batch):
    return batch


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_views_work_in_dataloader_workers(context):
    mapped, _ = publish_records(SerializedList(_records(10), name="a"))
    private = SerializedList(_records(6, start=10), name="b")
    view = concat_records([mapped.subset([9, 3, 0]), private.subset([5, 0])], name="ab")
    loader = DataLoader(
        _Probe(view),
        batch_size=2,
        num_workers=2,
        multiprocessing_context=context,
        collate_fn=_collate,
    )
    items = [item for batch in loader for item in batch]
    assert [item["i"] for item in items] == [9, 3, 0, 15, 10]
    assert {item["view"] for item in items} == {"SerializedListView"}
    assert all(item["pid"] != os.getpid() for item in items)
    inode = mapped.owner.inode
    for item in items:
        assert item["inodes"][0] == inode  # the very memory file, inherited or re-mapped
    if context == "spawn":
        # the private base moved once into shared memory, which workers attach to
        assert all(item["tensors_shared"][1] for item in items)
        assert private.owner is not None
    else:
        assert private.owner is None  # fork: inherited, nothing moved
