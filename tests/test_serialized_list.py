"""SerializedList: list semantics, fresh objects, subsets, columns, sharing with workers."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from catalog import RecordColumns, SerializedList


def _records(n: int) -> list[dict]:
    return [
        {
            "i": i,
            "file_name": f"{i}.jpg",
            "height": 10 + i,
            "width": 20 + 2 * i,
            "annotations": [
                {"category_id": (i + k) % 3, "iscrowd": int(k == 1), "bbox": [0, 0, 1, 1]}
                for k in range(i % 4)
            ],
        }
        for i in range(n)
    ]


def _ids(sl) -> list[int]:
    return [r["i"] for r in sl]


def test_len_index_negative_and_iteration():
    sl = SerializedList(_records(5), name="toy")
    assert len(sl) == 5
    assert sl[0]["i"] == 0 and sl[4]["i"] == 4
    assert sl[-1]["i"] == 4 and sl[-5]["i"] == 0
    assert sl[np.int64(2)]["i"] == 2
    assert _ids(sl) == [0, 1, 2, 3, 4]
    assert sl.to_list() == _records(5)
    assert sl.nbytes == sl.buffer.nbytes + sl.ends.nbytes + sl.columns.nbytes
    assert "toy" in repr(sl)


@pytest.mark.parametrize("index", [5, -6, 100])
def test_index_out_of_range(index):
    sl = SerializedList(_records(5), name="toy")
    with pytest.raises(IndexError, match="'toy'"):
        sl[index]


@pytest.mark.parametrize("index", [1.0, "1", True, None])
def test_bad_index_type(index):
    with pytest.raises(TypeError):
        SerializedList(_records(3))[index]


def test_slicing_returns_serialized_list():
    sl = SerializedList(_records(6))
    for sl_slice, expected in [
        (slice(1, 4), [1, 2, 3]),
        (slice(None, None, -2), [5, 3, 1]),
        (slice(4, 1), []),
        (slice(-2, None), [4, 5]),
    ]:
        part = sl[sl_slice]
        assert isinstance(part, SerializedList)
        assert _ids(part) == expected
        assert part.columns.heights.tolist() == [10 + i for i in expected]


def test_every_access_returns_a_fresh_object():
    sl = SerializedList(_records(3))
    first = sl[1]
    first["annotations"].clear()
    first["i"] = -1
    assert sl[1]["i"] == 1 and len(sl[1]["annotations"]) == 1
    assert sl[1] is not sl[1]


def test_input_records_are_not_aliased():
    records = _records(2)
    sl = SerializedList(records)
    records[0]["i"] = 99
    assert sl[0]["i"] == 0


def test_buffer_is_read_only():
    sl = SerializedList(_records(2))
    with pytest.raises(ValueError):
        sl.buffer[0] = 1
    with pytest.raises(ValueError):
        sl.columns.heights[0] = 5


def test_non_dict_items_are_stored_as_data():
    # any data item is stored (issue 11, item 3); a tuple comes back as a list
    items = [{"a": 1, "height": 3}, (1, "x"), [3], "s", None, {"annotations": "odd"}]
    sl = SerializedList(items, name="mixed")
    assert sl.to_list() == [items[0], [1, "x"], *items[2:]]
    assert sl.columns.heights.tolist() == [3, -1, -1, -1, -1, -1]
    assert sl.columns.num_annotations().tolist() == [0] * 6


def test_assigning_to_the_list_raises_a_typed_error_and_edits_of_a_record_are_scratch():
    from catalog import ImmutableRecordsError

    sl = SerializedList(_records(3), name="ro")
    with pytest.raises(ImmutableRecordsError, match="read-only.*'ro'.*index 1"):
        sl[1] = {"i": 9}
    with pytest.raises(TypeError):  # an ImmutableRecordsError is a TypeError
        del sl[0]
    with pytest.raises(ImmutableRecordsError):
        sl.subset([0, 1])[0] = {}
    record = sl[2]  # a mapper may use what it gets as scratch...
    record["annotations"].clear()
    record["i"] = -1
    assert sl[2] == _records(3)[2]  # ...the list is unchanged
    err = pickle.loads(pickle.dumps(ImmutableRecordsError("x")))
    assert isinstance(err, ImmutableRecordsError) and err.args == ("x",)


def test_dataset_from_list_serializes_non_dict_items():
    from mappers import DatasetFromList

    items = [("a", 1), [2, 3], "s", {"k": 1}]
    ds = DatasetFromList(items, serialize=True)
    assert [ds[i] for i in range(len(ds))] == items


def test_empty_list_and_generator_input():
    empty = SerializedList([])
    assert len(empty) == 0 and list(empty) == [] and empty.buffer.size == 0
    assert len(empty.columns) == 0 and empty.columns.category_offsets.tolist() == [0]
    gen = SerializedList(r for r in _records(3))
    assert _ids(gen) == [0, 1, 2]


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        (0, []),
        (2, [0, 1]),
        (-2, [3, 4]),
        (5, [0, 1, 2, 3, 4]),
        (-5, [0, 1, 2, 3, 4]),
        (7, [0, 1, 2, 3, 4]),
        (-7, [0, 1, 2, 3, 4]),
        ([], []),
        ([-5], [0]),
        ([4, 0, 2], [4, 0, 2]),
        ([1, 1], [1, 1]),
        (np.array([3, -1]), [3, 4]),
        (range(1, 3), [1, 2]),
    ],
)
def test_subset_consistent_edge_cases(arg, expected):
    sl = SerializedList(_records(5))
    sub = sl.subset(arg)
    assert _ids(sub) == expected
    assert len(sub.columns) == len(expected)
    assert sub.columns.num_annotations().tolist() == [i % 4 for i in expected]


@pytest.mark.parametrize("arg", [[5], [-6], [0, 10]])
def test_subset_out_of_range(arg):
    with pytest.raises(IndexError, match="out of range"):
        SerializedList(_records(5)).subset(arg)


def test_subset_out_of_range_from_a_generator_names_the_index():
    # The generator is consumed building the indices: the message must not re-read it.
    with pytest.raises(IndexError, match="subset index 7 out of range"):
        SerializedList(_records(5)).subset(i for i in [0, 1, 7])


@pytest.mark.parametrize("arg", [[0.5], np.array([True, False])])
def test_subset_rejects_non_integer_indices(arg):
    with pytest.raises(TypeError):
        SerializedList(_records(2)).subset(arg)


def test_subset_is_a_read_only_view_of_the_parent():
    # (was: the subset copied the parent's bytes; a subset is now a view, issue 11)
    sl = SerializedList(_records(5))
    sub = sl.subset([1, 3])
    assert isinstance(sub, SerializedList) and sub.bases == (sl,)
    record = sub[0]
    record["i"] = 99  # a fresh object: neither list changes
    assert _ids(sub) == [1, 3] and _ids(sl) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        sub.index[0] = 0
    assert not np.shares_memory(sub.compact().buffer, sl.buffer)


def test_columns_extracted_while_serializing():
    records = _records(5)
    records.append({"i": 5, "annotations": [{"bbox": [0, 0, 1, 1]}, "not-a-dict"]})  # no size
    cols = SerializedList(records).columns
    assert isinstance(cols, RecordColumns)
    assert cols.heights.tolist() == [10, 11, 12, 13, 14, -1]
    assert cols.widths.tolist() == [20, 22, 24, 26, 28, -1]
    assert cols.num_annotations().tolist() == [0, 1, 2, 3, 0, 1]
    assert cols.categories_of(3).tolist() == [0, 1, 2]
    assert cols.categories_of(5).tolist() == [-1]
    assert cols.iscrowd.tolist() == [0, 0, 1, 0, 1, 0, 0]
    ratios = cols.aspect_ratios()
    assert ratios[0] == pytest.approx(2.0) and np.isnan(ratios[5])
    taken = cols.take(np.array([3, 1]))
    assert taken.category_ids.tolist() == [0, 1, 2, 1]
    assert taken.category_offsets.tolist() == [0, 3, 4]


def test_columns_length_mismatch_is_value_error():
    with pytest.raises(ValueError, match="disagree"):
        RecordColumns(np.zeros(2), np.zeros(3), np.zeros(0), np.zeros(0), np.zeros(3))
    with pytest.raises(ValueError, match="crowd flags"):
        RecordColumns(np.zeros(1), np.zeros(1), np.zeros(2), np.zeros(1), np.array([0, 2]))


def test_from_arrays_validates_offsets():
    sl = SerializedList(_records(3))
    again = SerializedList.from_arrays(sl.buffer, sl.ends, sl.columns, name="again")
    assert _ids(again) == [0, 1, 2] and again.name == "again"
    with pytest.raises(ValueError, match="offsets end"):
        SerializedList.from_arrays(sl.buffer[:-1], sl.ends, sl.columns)


def test_copy_constructor_and_pickle_roundtrip():
    sl = SerializedList(_records(4), name="p")
    assert _ids(SerializedList(sl)) == [0, 1, 2, 3]
    clone = pickle.loads(pickle.dumps(sl))
    assert clone.name == "p" and clone.to_list() == sl.to_list()
    assert clone.columns.category_ids.tolist() == sl.columns.category_ids.tolist()


def test_progress_bar_and_size_logged(capsys, caplog):
    with caplog.at_level(logging.DEBUG, logger="catalog.storage.records"):
        SerializedList(_records(50), name="bar", progress=True)
    assert "serializing bar" in capsys.readouterr().err
    assert any("MiB" in r.getMessage() and "bar" in r.getMessage() for r in caplog.records)


def test_share_memory_keeps_contents():
    sl = SerializedList(_records(4)).share_memory()
    assert _ids(sl) == [0, 1, 2, 3]
    assert sl.columns.heights.tolist() == [10, 11, 12, 13]


class _Probe(Dataset):
    """Reports, from inside a worker, whether the records live in shared memory."""

    def __init__(self, records: SerializedList) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict:
        owner = self.records.owner
        shared = owner is not None and all(t.is_shared() for t in owner.tensors)
        info = torch.utils.data.get_worker_info()
        return {
            "i": self.records[index]["i"],
            "shared": shared,
            "pid": info.id if info else -1,
            "n_cats": len(self.records.columns.categories_of(index)),
        }


def _collate(batch):
    return batch


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_share_the_buffer(context):
    sl = SerializedList(_records(12), name="shared")
    loader = DataLoader(
        _Probe(sl),
        batch_size=4,
        num_workers=1 if context == "forkserver" else 2,
        multiprocessing_context=context,
        collate_fn=_collate,
    )
    items = [item for batch in loader for item in batch]
    assert sorted(item["i"] for item in items) == list(range(12))
    assert [item["n_cats"] for item in sorted(items, key=lambda x: x["i"])] == [
        i % 4 for i in range(12)
    ]
    if context == "fork":
        assert sl.owner is None  # fork: pages inherited, nothing copied or moved
    else:
        # spawn / forkserver: the buffer was moved once into shared memory, which the
        # workers attach to instead of unpickling a private copy.
        assert all(item["shared"] for item in items)
        assert sl.owner is not None and all(t.is_shared() for t in sl.owner.tensors)


@pytest.mark.parametrize("annotations", [7, 2.5, None, "ab", {"category_id": 1}, True])
def test_records_whose_annotations_are_not_a_list_are_stored_as_they_are(annotations):
    # Was: an int or float "annotations" value raised a bare TypeError while the sampler
    # columns were filled. Such a record has no annotations for the columns, and reads back.
    records = [{"height": 2, "annotations": annotations}, {"annotations": [{"category_id": 4}]}]
    data = SerializedList(records)
    assert data.to_list() == records
    assert data.columns.category_ids.tolist() == [4]
    assert data.columns.category_offsets.tolist() == [0, 0, 1]
    assert data.columns.heights.tolist() == [2, -1]


def test_numpy_fields_round_trip_and_other_objects_are_a_typed_error():
    from catalog import BoxMode, RecordFormatError

    proposals = np.arange(8, dtype=np.float32).reshape(2, 4)
    records = [{"proposal_boxes": proposals, "ids": np.int64(3), "mode": BoxMode.XYWH_ABS}]
    back = SerializedList(records)[0]
    assert back["proposal_boxes"].dtype == np.float32
    assert np.array_equal(back["proposal_boxes"], proposals)
    assert back["ids"] == 3 and back["mode"] == BoxMode.XYWH_ABS == 1
    back["proposal_boxes"][0, 0] = 9  # a writable array of its own
    with pytest.raises(RecordFormatError, match=r"'objs', record 1, key \['annotations'\]\[0\]"):
        SerializedList([{}, {"annotations": [object()]}], name="objs")
    with pytest.raises(RecordFormatError, match="dtype"):
        SerializedList([{"x": np.array(["a"])}])


def test_decoding_refuses_unknown_extensions_and_malformed_arrays():
    import msgspec

    from catalog.storage.records import decode

    with pytest.raises(ValueError):
        decode(msgspec.msgpack.encode(msgspec.msgpack.Ext(7, b"")))
    bad = msgspec.msgpack.encode(["|O", [1], b"12345678"])
    with pytest.raises(ValueError):
        decode(msgspec.msgpack.encode(msgspec.msgpack.Ext(1, bad)))
