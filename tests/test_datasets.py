"""Tests for mappers.datasets: DatasetFromList, MapDataset refetch, ToIterableDataset."""

from __future__ import annotations

import logging
import pickle

import pytest
import torch
from torch.utils import data

from catalog.storage.records import SerializedList
from mappers.datasets import PicklableCallable, needs_by_value
from mappers.datasets import DatasetFromList, MapDataset, MapIterableDataset, ToIterableDataset
from mappers import set_default_dataset_from_list_serialize_method
from mappers.errors import MapFuncPickleError, RefetchExhaustedError


def _records(n: int) -> list[dict]:
    return [{"file_name": f"img_{i}.jpg", "image_id": i, "annotations": []} for i in range(n)]


class FailSet:
    """A picklable mapper that returns None for the image ids in ``bad``."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = set(bad)
        self.calls: list[int] = []

    def __call__(self, record: dict) -> dict | None:
        self.calls.append(record["image_id"])
        if record["image_id"] in self.bad:
            return None
        return {"id": record["image_id"]}


def _image_id(record: dict) -> int:
    return record["image_id"]


# ----------------------------------------------------------------------------- DatasetFromList


def test_dataset_from_list_serializes_by_default():
    ds = DatasetFromList(_records(5))
    assert isinstance(ds.records, SerializedList)
    assert len(ds) == 5
    assert ds[3]["file_name"] == "img_3.jpg"
    ds[3]["file_name"] = "changed"
    assert ds[3]["file_name"] == "img_3.jpg"  # every access is a fresh object


def test_dataset_from_list_uses_a_serialized_list_as_is():
    lst = SerializedList(_records(4))
    ds = DatasetFromList(lst)
    assert ds.records is lst


def test_dataset_from_list_custom_serializer():
    seen = []

    def serialize(lst):
        seen.append(len(lst))
        return tuple(lst)

    ds = DatasetFromList(_records(3), serialize=serialize)
    assert seen == [3]
    assert isinstance(ds.records, tuple)
    assert ds[2]["image_id"] == 2


def test_default_serialize_method_changes_inside_the_block_only():
    with set_default_dataset_from_list_serialize_method(torch.tensor):
        inside = DatasetFromList([1, 2, 3], serialize=True)
        explicit = DatasetFromList([1, 2, 3], serialize=tuple)  # a callable argument still wins
        plain = DatasetFromList([1, 2, 3], serialize=False)
    assert isinstance(inside.records, torch.Tensor) and inside[2] == torch.tensor(3)
    assert isinstance(explicit.records, tuple) and plain.records == [1, 2, 3]
    after = DatasetFromList(_records(2), serialize=True)
    assert isinstance(after.records, SerializedList) and after[1]["image_id"] == 1
    with pytest.raises(RuntimeError, match="boom"):
        with set_default_dataset_from_list_serialize_method(tuple):
            raise RuntimeError("boom")
    assert type(DatasetFromList([1, 2]).records).__name__ == "PickledList"  # restored
    with pytest.raises(TypeError, match="callable"):
        with set_default_dataset_from_list_serialize_method("pickle"):
            pass


def test_dataset_from_list_copy_semantics_without_serialization():
    records = _records(2)
    copied = DatasetFromList(records, copy=True, serialize=False)
    item = copied[0]
    item["annotations"].append({"x": 1})
    assert records[0]["annotations"] == []
    shared = DatasetFromList(records, copy=False, serialize=False)
    assert shared[0] is records[0]


# ----------------------------------------------------------------------------- MapDataset


def test_map_dataset_maps_and_passes_through():
    ds = MapDataset(DatasetFromList(_records(4)), _image_id, seed=0)
    assert len(ds) == 4
    assert [ds[i] for i in range(4)] == [0, 1, 2, 3]
    assert ds[-1] == 3
    with pytest.raises(IndexError):
        ds[4]
    assert ds.failure_stats() == {"num_failures": 0, "failed_indices": []}


def _refetch_sequence(seed: int, bad: set[int], n: int = 50) -> list[int]:
    mapper = FailSet(bad)
    ds = MapDataset(DatasetFromList(_records(n)), mapper, seed=seed)
    out = [ds[i]["id"] for i in sorted(bad)]
    return out


def test_refetch_is_reproducible_per_seed_and_differs_between_seeds():
    bad = set(range(0, 50, 3))
    a = _refetch_sequence(1, bad)
    b = _refetch_sequence(1, bad)
    c = _refetch_sequence(2, bad)
    assert a == b
    assert a != c
    assert all(x not in bad for x in a)


def test_refetch_does_not_touch_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    _refetch_sequence(3, set(range(10)))
    assert torch.equal(torch.rand(3), expected)


def test_default_seed_comes_from_torch_initial_seed():
    torch.manual_seed(123)
    a = MapDataset(_records(3), _image_id)
    torch.manual_seed(123)
    b = MapDataset(_records(3), _image_id)
    torch.manual_seed(124)
    c = MapDataset(_records(3), _image_id)
    assert a.seed == b.seed != c.seed


def test_one_warning_per_failing_index(caplog):
    mapper = FailSet({0, 1})
    ds = MapDataset(DatasetFromList(_records(3)), mapper, seed=0)
    with caplog.at_level(logging.WARNING, logger="mappers.datasets"):
        for _ in range(5):
            assert ds[0]["id"] == 2
            assert ds[1]["id"] == 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "index 0" in messages[0] and "img_0.jpg" in messages[0]
    assert "1 failures so far" in messages[0]
    assert "index 1" in messages[1] and "img_1.jpg" in messages[1]
    assert ds.failure_stats()["num_failures"] >= 10  # a replacement may fail as well


def test_every_record_failing_ends_in_refetch_exhausted_error():
    ds = MapDataset(DatasetFromList(_records(5)), lambda r: None, seed=0, max_refetch=100)
    with pytest.raises(RefetchExhaustedError) as info:
        ds[2]
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.index == 2 and err.tried == 101
    assert len(err.last_failed) == 10 and set(err.last_failed) <= {0, 1, 2, 3, 4}
    assert "index 2" in str(err) and "img_2.jpg" in str(err) and "max_refetch=100" in str(err)
    with pytest.raises(RefetchExhaustedError) as again:
        ds[0]
    assert again.value.tried == 101  # bounded the same way for every request


def test_max_refetch_bounds_one_request():
    ds = MapDataset(DatasetFromList(_records(100)), lambda r: None, seed=0, max_refetch=3)
    with pytest.raises(RefetchExhaustedError) as info:
        ds[7]
    assert info.value.tried == 4
    assert info.value.last_failed[0] == 7
    assert "max_refetch=3" in str(info.value)
    ds0 = MapDataset(DatasetFromList(_records(3)), lambda r: None, seed=0, max_refetch=0)
    with pytest.raises(RefetchExhaustedError):
        ds0[0]


def test_refetch_exhausted_error_pickles_with_attributes():
    err = RefetchExhaustedError("msg", index=3, tried=4, last_failed=[3, 1])
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.index, back.tried, back.last_failed) == ("msg", 3, 4, [3, 1])


@pytest.mark.parametrize("bad_value", [-1, 1.5, True])
def test_invalid_max_refetch(bad_value):
    with pytest.raises(ValueError, match="max_refetch"):
        MapDataset(_records(2), _image_id, max_refetch=bad_value)


def test_non_callable_map_func():
    with pytest.raises(TypeError, match="callable"):
        MapDataset(_records(2), 3)


def test_exception_from_map_func_names_index_and_file():
    def broken(record):
        raise KeyError("bbox")

    ds = MapDataset(DatasetFromList(_records(4)), broken, seed=0)
    with pytest.raises(KeyError) as info:
        ds[2]
    text = str(info.value)
    assert "bbox" in text and "index 2" in text and "img_2.jpg" in text

    def os_broken(record):
        raise OSError(5, "disk gone")

    ds = MapDataset(DatasetFromList(_records(4)), os_broken, seed=0)
    with pytest.raises(OSError) as info2:
        ds[1]
    assert info2.value.errno == 5
    assert any("img_1.jpg" in note for note in getattr(info2.value, "__notes__", []))


def test_exception_on_refetched_index_names_both():
    def mapper(record):
        if record["image_id"] == 0:
            return None
        raise ValueError("bad polygon")

    ds = MapDataset(DatasetFromList(_records(2)), mapper, seed=0)
    with pytest.raises(ValueError, match=r"bad polygon.*index 1.*requested index 0"):
        ds[0]


def test_map_dataset_pickles_a_lambda_and_a_closure():
    offset = 7
    ds = MapDataset(DatasetFromList(_records(3)), lambda r: r["image_id"] + offset, seed=0)
    back = pickle.loads(pickle.dumps(ds))
    assert [back[i] for i in range(3)] == [7, 8, 9]
    assert back.seed == 0
    assert back.failure_stats()["num_failures"] == 0


_SPAWN_SCRIPT = """
import multiprocessing
from torch.utils import data
from mappers.datasets import DatasetFromList, MapDataset

if __name__ == "__main__":
    scale = 3
    records = [{"file_name": f"img_{i}.jpg", "image_id": i} for i in range(4)]
    ds = MapDataset(DatasetFromList(records), lambda r: r["image_id"] * scale, seed=0)
    loader = data.DataLoader(
        ds, batch_size=None, num_workers=1,
        multiprocessing_context=multiprocessing.get_context("spawn"),
    )
    print([int(x) for x in loader])
"""


def test_lambda_mapper_works_in_spawn_workers(tmp_path):
    # In a child interpreter: a spawn DataLoader leaves multiprocessing's resource tracker
    # running, which would count as an extra child process of the test runner.
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "spawn_lambda.py"
    script.write_text(_SPAWN_SCRIPT)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 3, 6, 9]"


def test_needs_by_value_decisions():
    def nested(x):
        return x

    assert not needs_by_value(_image_id)
    assert needs_by_value(nested)
    assert needs_by_value(lambda x: x)
    assert not needs_by_value(FailSet(set()))
    import functools

    assert needs_by_value(functools.partial(nested, 1))
    assert not needs_by_value(functools.partial(_image_id))
    keyword_lambda = functools.partial(_image_id, key=lambda r: r)
    assert needs_by_value(keyword_lambda)
    ds = MapDataset([{"image_id": 1}], keyword_lambda, seed=0)
    assert pickle.loads(pickle.dumps(ds)).map_func.keywords["key"]("x") == "x"


def test_lambda_without_cloudpickle_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cloudpickle(name, *args, **kwargs):
        if name == "cloudpickle":
            raise ImportError("no cloudpickle")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cloudpickle)
    with pytest.raises(MapFuncPickleError, match="cloudpickle"):
        pickle.dumps(PicklableCallable(lambda x: x))
    # a module-level function still pickles by reference
    assert pickle.loads(pickle.dumps(PicklableCallable(_image_id)))({"image_id": 4}) == 4


class Stream(data.IterableDataset):
    def __init__(self, n: int, sized: bool = True):
        self.n = n
        self.sized = sized

    def __iter__(self):
        return iter(_records(self.n))

    def __len__(self):
        if not self.sized:
            raise TypeError("unsized stream")
        return self.n


def test_iterable_input_skips_none_and_keeps_len(caplog):
    ds = MapDataset(Stream(6), lambda r: None if r["image_id"] % 3 == 0 else r["image_id"])
    assert isinstance(ds, MapIterableDataset)
    assert isinstance(ds, data.IterableDataset)
    assert len(ds) == 6
    with caplog.at_level(logging.WARNING, logger="mappers.datasets"):
        assert list(ds) == [1, 2, 4, 5]
    assert ds.failure_stats() == {"num_failures": 2, "failed_indices": [0, 3]}
    assert "img_0.jpg" in caplog.records[0].getMessage()
    with pytest.raises(TypeError):
        len(MapDataset(Stream(3, sized=False), _image_id))


def test_iterable_input_where_everything_fails_is_bounded():
    ds = MapDataset(Stream(1000), lambda r: None, max_refetch=10)
    with pytest.raises(RefetchExhaustedError) as info:
        list(ds)
    assert info.value.tried == 11


def test_iterable_input_exception_names_file():
    def broken(record):
        raise ValueError("boom")

    with pytest.raises(ValueError, match=r"boom.*img_0.jpg"):
        list(MapDataset(Stream(2), broken))


def test_iterable_map_dataset_pickles():
    ds = MapDataset(Stream(3), lambda r: r["image_id"] + 1)
    assert list(pickle.loads(pickle.dumps(ds))) == [1, 2, 3]


# ----------------------------------------------------------------------------- ToIterableDataset


class SeededSampler(data.Sampler):
    """A finite, seeded permutation: the same sequence in every worker."""

    def __init__(self, n: int, seed: int, repeats: int = 1) -> None:
        self.n, self.seed, self.repeats = n, seed, repeats

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.repeats):
            yield from torch.randperm(self.n, generator=g).tolist()

    def __len__(self):
        return self.n * self.repeats


@pytest.mark.parametrize("chunk", [1, 3])
def test_to_iterable_dataset_same_sequence_for_0_1_2_workers(chunk):
    base = MapDataset(DatasetFromList(_records(23)), _image_id, seed=0)
    sampler = SeededSampler(23, seed=9, repeats=2)
    ds = ToIterableDataset(base, sampler, shard_chunk_size=chunk)
    assert len(ds) == 46
    expected = list(sampler)
    for workers in (0, 1, 2):
        loader = data.DataLoader(ds, batch_size=chunk, num_workers=workers, collate_fn=list)
        got = [x for batch in loader for x in batch]
        assert got == expected, workers


def test_to_iterable_dataset_with_infinite_sampler_and_workers():
    def forever():
        i = 0
        while True:
            yield i % 10
            i += 1

    class Forever:
        def __iter__(self):
            return forever()

    ds = ToIterableDataset(list(range(10)), Forever(), shard_chunk_size=2)
    loader = iter(data.DataLoader(ds, batch_size=2, num_workers=2, collate_fn=list))
    got = [x for _ in range(7) for x in next(loader)]
    assert got == [i % 10 for i in range(14)]


def test_to_iterable_dataset_argument_errors():
    with pytest.raises(ValueError, match="shard_chunk_size"):
        ToIterableDataset([1], [0], shard_chunk_size=0)
    with pytest.raises(TypeError, match="map-style"):
        ToIterableDataset(Stream(2), [0])
