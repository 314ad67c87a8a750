"""The ``records`` protocol: how the loader builders find the records under a dataset."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import Subset

from catalog.storage.records import SerializedList
from mappers.datasets import DatasetFromList, MapDataset
from mappers.datasets import HasRecords, records_of
from samplers import TrainingSampler, build_batch_data_loader, build_detection_train_loader


def _records(n: int = 8) -> list[dict]:
    # even indices landscape, odd portrait
    return [
        {"image_id": i, "width": 6 if i % 2 == 0 else 4, "height": 4 if i % 2 == 0 else 6}
        for i in range(n)
    ]


class _Wrapper:
    """A user's dataset that says where its records are."""

    def __init__(self, records: list[dict]) -> None:
        self._items = records

    @property
    def records(self) -> list[dict]:
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> dict:
        return self._items[index]


class _PrivateOnly:
    """Holds records under private names only: it names none."""

    def __init__(self, records: list[dict]) -> None:
        self._lst = records
        self._dataset = records

    def __len__(self) -> int:
        return len(self._lst)

    def __getitem__(self, index: int) -> dict:
        return self._lst[index]


def test_datasets_name_their_records_through_wrappers() -> None:
    records = _records()
    base = DatasetFromList(records)
    assert isinstance(base.records, SerializedList)
    mapped = MapDataset(MapDataset(base, lambda r: r, seed=0), lambda r: r, seed=0)
    assert isinstance(mapped, HasRecords)
    found = records_of(mapped)
    assert found is base.records
    assert [r["width"] for r in found] == [r["width"] for r in records]
    assert records_of(MapDataset(_Wrapper(records), lambda r: r, seed=0)) is records


def test_private_attributes_and_foreign_wrappers_name_no_records() -> None:
    records = _records()
    assert records_of(_PrivateOnly(records)) is None
    # a Subset's indices do not match its dataset's: its records are not the dataset's
    assert records_of(Subset(records, [0, 1])) is None
    assert records_of(DatasetFromList([(1, 2), (3, 4)])) is None  # items that are not dicts
    assert records_of([(1, 2)]) is None
    assert records_of(None) is None


def test_a_cycle_of_records_links_ends() -> None:
    class Node:
        records: Any = None

    a, b = Node(), Node()
    a.records, b.records = b, a
    assert records_of(a) is None


def test_grouping_uses_the_protocol_and_only_it() -> None:
    records = _records()
    sampler = TrainingSampler(len(records), seed=0, rank=0, world_size=1)
    loader = build_batch_data_loader(_Wrapper(records), sampler, 2, aspect_ratio_grouping=True)
    it = iter(loader)
    for _ in range(4):
        widths = {record["width"] for record in next(it)}
        assert len(widths) == 1
    with pytest.raises(ValueError, match="names no records"):
        build_batch_data_loader(
            _PrivateOnly(records),
            TrainingSampler(len(records), seed=0, rank=0, world_size=1),
            2,
            aspect_ratio_grouping=True,
        )


def test_train_loader_groups_a_wrapped_dataset_by_its_records() -> None:
    records = _records(16)
    loader = build_detection_train_loader(
        _Wrapper(records), mapper=lambda r: r, total_batch_size=4, seed=1
    )
    it = iter(loader)
    for _ in range(6):
        assert len({record["width"] for record in next(it)}) == 1
