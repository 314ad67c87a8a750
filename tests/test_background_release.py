"""The loader's Python records are dropped on a helper thread, and before ``get`` returns."""

from __future__ import annotations

import threading

import pytest

from catalog import DatasetCatalog
from catalog.background_release import PendingRelease, wait_for_releases

FREED_ON: list[str] = []


class TracedRecord(dict):
    """A record that notes the thread it is freed on."""

    def __del__(self) -> None:
        FREED_ON.append(threading.current_thread().name)


@pytest.fixture(autouse=True)
def _clean():
    FREED_ON.clear()
    yield
    for name in ("release_fresh", "release_kept"):
        if name in DatasetCatalog:
            DatasetCatalog.remove(name)


def test_a_loaders_records_are_freed_on_the_helper_thread_before_get_returns():
    DatasetCatalog.register(
        "release_fresh", lambda: [TracedRecord(file_name=f"{i}.jpg") for i in range(2000)]
    )
    records = DatasetCatalog.get("release_fresh")
    assert len(FREED_ON) == 2000  # all of them, before get returned
    assert set(FREED_ON) == {"catmap-release"}
    assert records[1999] == {"file_name": "1999.jpg"}  # the stored copy is unaffected


def test_a_list_the_loader_keeps_is_left_untouched():
    kept = [TracedRecord(file_name=f"{i}.jpg", height=i) for i in range(600)]
    DatasetCatalog.register("release_kept", lambda: kept)
    records = DatasetCatalog.get("release_kept")
    assert len(kept) == 600 and kept[599]["height"] == 599
    assert FREED_ON == []  # the loader still refers to every record
    assert len(records) == 600


def test_pending_release_starts_once_and_wait_returns_when_all_are_dropped():
    records = [TracedRecord(i=i) for i in range(1000)]
    pending = PendingRelease(records)
    del records
    pending.start()
    pending.start()  # a second start has nothing left to drop
    wait_for_releases()
    assert len(FREED_ON) == 1000 and set(FREED_ON) == {"catmap-release"}


def test_an_empty_list_starts_no_thread():
    before = threading.active_count()
    PendingRelease([]).start()
    assert threading.active_count() == before
    wait_for_releases()
