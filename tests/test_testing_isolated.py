"""catalog.testing.isolated_catalogs: both catalogs (builtin names included) put back on exit."""

from __future__ import annotations

import pytest

from catalog import DatasetCatalog, DatasetNotRegisteredError, MetadataCatalog
from catalog.testing import isolated_catalogs


def _records() -> list[dict]:
    return [{"file_name": "a.jpg", "image_id": 0}]


def test_registrations_and_metadata_made_inside_are_undone():
    DatasetCatalog.register("kept", _records)
    MetadataCatalog.get("kept").thing_classes = ["cat"]
    kept_records = DatasetCatalog.get("kept")
    with isolated_catalogs():
        DatasetCatalog.register("inside", _records)
        DatasetCatalog.remove("kept")
        MetadataCatalog.get("inside").thing_classes = ["dog"]
        assert "inside" in DatasetCatalog and "kept" not in DatasetCatalog
    assert "inside" not in DatasetCatalog and "inside" not in MetadataCatalog
    assert DatasetCatalog.get("kept") is kept_records  # cached records restored too
    assert DatasetCatalog.is_loaded("kept")
    assert MetadataCatalog.get("kept").thing_classes == ["cat"]


def test_keys_added_to_an_existing_metadata_are_undone():
    DatasetCatalog.register("meta_keys", _records)
    MetadataCatalog.get("meta_keys").thing_classes = ["cat"]
    with isolated_catalogs():
        MetadataCatalog.get("meta_keys").evaluator_type = "coco"
    assert "evaluator_type" not in MetadataCatalog.get("meta_keys")


def test_restored_when_the_block_raises():
    with pytest.raises(RuntimeError, match="boom"):
        with isolated_catalogs():
            DatasetCatalog.register("raised", _records)
            raise RuntimeError("boom")
    assert "raised" not in DatasetCatalog


def test_builtin_registrations_are_restored():
    assert "coco_2017_val" in DatasetCatalog.list()
    with isolated_catalogs():
        DatasetCatalog.remove("coco_2017_val")  # a builtin name, registered on first use
        DatasetCatalog.clear()
        assert "coco_2017_val" not in DatasetCatalog
        with pytest.raises(DatasetNotRegisteredError):
            DatasetCatalog.entry("coco_2017_val")
    assert "coco_2017_val" in DatasetCatalog and "coco_2017_val" in DatasetCatalog.list()
    assert DatasetCatalog.entry("coco_2017_val").name == "coco_2017_val"  # registers it again
    with isolated_catalogs():
        DatasetCatalog.entry("lvis_v1_val")  # builtin registered on first use inside: undone
        assert "lvis_v1_val" in MetadataCatalog
    assert "lvis_v1_val" not in MetadataCatalog


def test_empty_starts_with_empty_catalogs_and_restores_after():
    DatasetCatalog.register("before_empty", _records)
    MetadataCatalog.get("before_empty")
    with isolated_catalogs(empty=True):
        assert DatasetCatalog.list() == [] and MetadataCatalog.list() == []
        DatasetCatalog.register("only_mine", _records)
        assert DatasetCatalog.list() == ["only_mine"]
    assert "before_empty" in DatasetCatalog and "before_empty" in MetadataCatalog
    assert "only_mine" not in DatasetCatalog and "coco_2017_train" in DatasetCatalog


def test_nested_blocks():
    with isolated_catalogs():
        DatasetCatalog.register("outer", _records)
        with isolated_catalogs():
            DatasetCatalog.register("inner", _records)
        assert "outer" in DatasetCatalog and "inner" not in DatasetCatalog
    assert "outer" not in DatasetCatalog


def test_conftest_isolation_part1():
    # tests/conftest.py wraps every test in isolated_catalogs(); part 2 checks nothing leaked.
    DatasetCatalog.register("leak_check_isolated", _records)
    MetadataCatalog.get("leak_check_isolated").thing_classes = ["x"]


def test_conftest_isolation_part2():
    assert "leak_check_isolated" not in DatasetCatalog
    assert "leak_check_isolated" not in MetadataCatalog
