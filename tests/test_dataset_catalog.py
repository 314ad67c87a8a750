"""DatasetCatalog: registration rules, load-once caching, errors, thread safety."""

from __future__ import annotations

import threading
import time

import pytest

from catalog import (
    DatasetAlreadyRegisteredError,
    DatasetCatalog,
    DatasetNotRegisteredError,
    SerializedList,
)
from catalog.dataset_catalog import DatasetEntry


def _records(n: int = 3) -> list[dict]:
    return [{"file_name": f"{i}.jpg", "image_id": i, "height": 4, "width": 6} for i in range(n)]


def test_register_and_get_returns_serialized_list():
    DatasetCatalog.register("toy", lambda: _records(3))
    records = DatasetCatalog.get("toy")
    assert isinstance(records, SerializedList)
    assert [r["image_id"] for r in records] == [0, 1, 2]
    assert records.name == "toy"
    assert "toy" in DatasetCatalog
    assert len(DatasetCatalog) >= 1
    assert "toy" in DatasetCatalog.list()


def test_loader_runs_once_and_remove_drops_cache():
    calls = []

    def loader():
        calls.append(1)
        return _records(2)

    DatasetCatalog.register("once", loader)
    first = DatasetCatalog.get("once")
    second = DatasetCatalog.get("once")
    assert len(calls) == 1
    assert first is second
    assert DatasetCatalog.is_loaded("once")
    DatasetCatalog.remove("once")
    assert "once" not in DatasetCatalog
    DatasetCatalog.register("once", loader)
    DatasetCatalog.get("once")
    assert len(calls) == 2


def test_mutating_a_record_does_not_change_the_catalog():
    DatasetCatalog.register("immutable", lambda: _records(1))
    rec = DatasetCatalog.get("immutable")[0]
    rec["file_name"] = "changed"
    assert DatasetCatalog.get("immutable")[0]["file_name"] == "0.jpg"


@pytest.mark.parametrize("bad_name", [1, None, b"x", ("a",)])
def test_register_name_must_be_str(bad_name):
    with pytest.raises(TypeError, match="must be a str"):
        DatasetCatalog.register(bad_name, lambda: [])


def test_register_empty_name_is_value_error():
    with pytest.raises(ValueError, match="must not be empty"):
        DatasetCatalog.register("", lambda: [])


def test_register_func_must_be_callable():
    with pytest.raises(TypeError, match="'notcallable'.*callable"):
        DatasetCatalog.register("notcallable", [{"a": 1}])
    assert "notcallable" not in DatasetCatalog


def test_register_twice_raises_already_registered():
    DatasetCatalog.register("dup", lambda: [])
    with pytest.raises(DatasetAlreadyRegisteredError, match="'dup'") as info:
        DatasetCatalog.register("dup", lambda: [])
    assert isinstance(info.value, ValueError)


def test_missing_name_lists_registered_and_close_matches():
    DatasetCatalog.register("coco_2017_train", lambda: [])
    DatasetCatalog.register("coco_2017_val", lambda: [])
    with pytest.raises(DatasetNotRegisteredError) as info:
        DatasetCatalog.get("coco_2017_trian")
    message = str(info.value)
    assert isinstance(info.value, KeyError)
    assert "'coco_2017_trian'" in message
    # one "did you mean" format for every name lookup (catalog.registry), best match first
    assert "Did you mean: coco_2017_train," in message
    assert "coco_2017_val" in message  # the registered names are listed


def test_remove_missing_name_raises():
    with pytest.raises(DatasetNotRegisteredError, match="nothing_here"):
        DatasetCatalog.remove("nothing_here")


def test_clear_empties_the_catalog():
    DatasetCatalog.register("a1", lambda: [])
    DatasetCatalog.register("a2", lambda: [])
    DatasetCatalog.clear()
    assert len(DatasetCatalog) == 0
    assert DatasetCatalog.list() == []


def test_list_is_in_registration_order():
    DatasetCatalog.clear()
    for name in ["z", "a", "m"]:
        DatasetCatalog.register(name, lambda: [])
    assert DatasetCatalog.list() == ["z", "a", "m"]
    assert list(DatasetCatalog) == ["z", "a", "m"]


@pytest.mark.parametrize(
    ("result", "pattern"),
    [
        ({"a": 1}, "'badtype' returned a dict"),
        (({"a": 1},), "'badtype' returned a tuple"),
        (None, "'badtype' returned a NoneType"),
        ([{"a": 1}, {"b": 2}, "oops", 3], "'badtype'.*element 2 is a str"),
    ],
)
def test_loader_returning_non_list_of_dicts_is_type_error(result, pattern):
    DatasetCatalog.register("badtype", lambda: result)
    with pytest.raises(TypeError, match=pattern):
        DatasetCatalog.get("badtype")
    assert not DatasetCatalog.is_loaded("badtype")


def test_loader_may_return_a_serialized_list():
    records = SerializedList(_records(2), name="pre")
    DatasetCatalog.register("pre", lambda: records)
    assert DatasetCatalog.get("pre") is records


def test_loader_exception_names_dataset_and_is_not_cached():
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("disk hiccup")
        return _records(1)

    DatasetCatalog.register("flaky", flaky)
    with pytest.raises(OSError, match="disk hiccup") as info:
        DatasetCatalog.get("flaky")
    assert any("'flaky'" in note for note in info.value.__notes__)
    assert len(DatasetCatalog.get("flaky")) == 1
    assert len(attempts) == 2


def test_entry_carries_cache_key_and_source_files():
    DatasetCatalog.register(
        "keyed", lambda: [], source_files=["a.json"], cache_key={"loader": "x"}, options={"k": 1}
    )
    entry = DatasetCatalog.entry("keyed")
    assert isinstance(entry, DatasetEntry)
    assert entry.source_files == ("a.json",)
    assert entry.cache_key == {"loader": "x"}
    assert entry.options == {"k": 1}
    DatasetCatalog.register("plain", lambda: [])
    assert DatasetCatalog.entry("plain").cache_key is None


def test_concurrent_get_runs_loader_once():
    calls = []
    start = threading.Barrier(8)

    def slow_loader():
        calls.append(1)
        time.sleep(0.05)
        return _records(5)

    DatasetCatalog.register("concurrent", slow_loader)
    results = []

    def worker():
        start.wait()
        results.append(DatasetCatalog.get("concurrent"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_concurrent_registration_is_thread_safe():
    errors = []
    names = [f"thread_{i}" for i in range(50)]

    def worker(name):
        try:
            DatasetCatalog.register(name, lambda: [])
        except DatasetAlreadyRegisteredError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in names + names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 50  # each name registered exactly once
    assert all(n in DatasetCatalog for n in names)


def test_conftest_restores_catalog_part1():
    DatasetCatalog.register("leak_probe", lambda: [])


def test_conftest_restores_catalog_part2():
    assert "leak_probe" not in DatasetCatalog


def test_both_catalogs_share_one_container_implementation():
    from catalog import MetadataCatalog
    from catalog.metadata import NamedContainer

    for catalog, add in (
        (DatasetCatalog, lambda name: DatasetCatalog.register(name, list)),
        (MetadataCatalog, lambda name: MetadataCatalog.get(name, warn_unregistered=False)),
    ):
        assert isinstance(catalog, NamedContainer)
        state = catalog.snapshot()
        add("shared_a")
        add("shared_b")
        names = catalog.list()
        assert names.index("shared_a") + 1 == names.index("shared_b")  # registration order
        assert catalog.pop("shared_a") is not None and "shared_a" not in catalog
        assert catalog.pop("shared_a", "default") == "default"
        with pytest.raises(KeyError, match="Did you mean: shared_b"):
            catalog.pop("shared_a")
        catalog.clear()
        assert catalog.list() == [] and len(catalog) == 0
        catalog.restore(state)
        assert "shared_b" not in catalog
