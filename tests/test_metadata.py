"""Metadata and MetadataCatalog: write-once keys, value equality, atomic set, legacy keys."""

from __future__ import annotations

import copy
import logging
import pickle

import numpy as np
import pytest
import torch

from catalog import DatasetCatalog, Metadata, MetadataCatalog, MetadataConflictError
from catalog._common import counts
from catalog.metadata import values_equal


def test_get_creates_entry_on_first_use():
    meta = MetadataCatalog.get("fresh")
    assert meta.name == "fresh"
    assert "fresh" in MetadataCatalog.list()
    assert MetadataCatalog.get("fresh") is meta


def test_remove_and_clear():
    MetadataCatalog.get("m1").thing_classes = ["a"]
    MetadataCatalog.remove("m1")
    assert "m1" not in MetadataCatalog
    assert MetadataCatalog.get("m1").get("thing_classes") is None
    MetadataCatalog.get("m2")
    MetadataCatalog.clear()
    assert MetadataCatalog.list() == []


@pytest.mark.parametrize("bad", [None, 3])
def test_catalog_get_name_must_be_str(bad):
    with pytest.raises(TypeError):
        MetadataCatalog.get(bad)


def test_catalog_get_empty_name():
    with pytest.raises(ValueError):
        MetadataCatalog.get("")


def test_attribute_get_set_and_missing_lists_keys():
    meta = Metadata(name="toy")
    meta.thing_classes = ["cat", "dog"]
    assert meta.thing_classes == ["cat", "dog"]
    with pytest.raises(AttributeError) as info:
        _ = meta.thing_colours
    message = str(info.value)
    assert "'thing_colours'" in message and "thing_classes" in message and "name" in message
    assert "'toy'" in message


def test_conflict_shows_both_values():
    meta = Metadata(name="toy", thing_classes=["cat"])
    with pytest.raises(MetadataConflictError) as info:
        meta.thing_classes = ["dog"]
    assert isinstance(info.value, ValueError)
    assert "['cat']" in str(info.value) and "['dog']" in str(info.value)
    assert meta.thing_classes == ["cat"]


@pytest.mark.parametrize(
    "value",
    [
        np.arange(6).reshape(2, 3),
        [[1, 2], [3, [4, 5]]],
        {"a": np.array([1.0, np.nan]), "b": [1, 2]},
        torch.tensor([1, 2, 3]),
        (1, 2),
        "text",
    ],
)
def test_setting_an_equal_value_is_a_noop(value):
    meta = Metadata(name="eq")
    meta.key = value
    meta.key = copy.deepcopy(value)  # equal but not the same object
    assert meta.key is value


def test_arrays_with_different_values_or_shapes_conflict():
    meta = Metadata(name="arr", colors=np.zeros((2, 3)))
    with pytest.raises(MetadataConflictError):
        meta.colors = np.ones((2, 3))
    with pytest.raises(MetadataConflictError):
        meta.colors = np.zeros((3, 2))
    meta.colors = [[0, 0, 0], [0, 0, 0]]  # same values as a nested list: equal


def test_set_is_atomic_and_returns_self():
    meta = Metadata(name="atomic", a=1)
    assert meta.set(b=2, c=3) is meta
    with pytest.raises(MetadataConflictError, match="'a'"):
        meta.set(d=4, a=2, e=5)
    assert "d" not in meta and "e" not in meta
    assert meta.as_dict() == {"name": "atomic", "a": 1, "b": 2, "c": 3}


def test_get_with_default_and_as_dict_is_a_copy():
    meta = Metadata(name="g", x=1)
    assert meta.get("x") == 1
    assert meta.get("y") is None
    assert meta.get("y", 7) == 7
    d = meta.as_dict()
    d["x"] = 99
    assert meta.x == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("class_names", "thing_classes"),
        ("dataset_id_to_contiguous_id", "thing_dataset_id_to_contiguous_id"),
        ("stuff_class_names", "stuff_classes"),
    ],
)
def test_legacy_keys_redirect_with_warning(old, new):
    meta = Metadata(name="legacy")
    with pytest.warns(DeprecationWarning, match=new):
        setattr(meta, old, ["a"])
    assert getattr(meta, new) == ["a"]
    assert old not in meta.as_dict()
    with pytest.warns(DeprecationWarning):
        assert getattr(meta, old) == ["a"]


def test_name_conflicts_like_any_key():
    meta = MetadataCatalog.get("named")
    with pytest.raises(MetadataConflictError):
        meta.name = "other"


def test_delete_is_refused():
    meta = Metadata(name="d", x=1)
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del meta.x


def test_pickle_and_copy_roundtrip():
    meta = Metadata(name="p", thing_classes=["a", "b"], arr=np.arange(3))
    for clone in (pickle.loads(pickle.dumps(meta)), copy.copy(meta), copy.deepcopy(meta)):
        assert clone.thing_classes == ["a", "b"]
        assert values_equal(clone.arr, np.arange(3))
        clone.thing_classes = ["a", "b"]
        with pytest.raises(MetadataConflictError):
            clone.thing_classes = ["c"]


def test_values_equal_edge_cases():
    assert values_equal(np.array([1, 2]), [1, 2])
    assert not values_equal(np.array([1, 2]), [1, 2, 3])
    assert not values_equal({"a": 1}, {"b": 1})
    assert not values_equal([1, 2], [1, 3])
    assert values_equal(np.array(["a", "b"]), ["a", "b"])
    assert not values_equal(1, "1")


# ---------------------------------------------------------------- MetadataCatalog.get warnings
@pytest.fixture
def unregistered_warnings(caplog, monkeypatch):
    """The warnings MetadataCatalog.get logs (the rate limit lifted for this test)."""
    monkeypatch.setenv("CATMAP_WARNINGS_PER_KIND", "1000000")
    caplog.set_level(logging.WARNING, logger="catalog.metadata")

    def messages() -> list[str]:
        found = [r.getMessage() for r in caplog.records if r.name == "catalog.metadata"]
        caplog.clear()
        return found

    return messages


def test_get_of_an_unregistered_name_warns_with_close_matches(unregistered_warnings):
    DatasetCatalog.register("my_coco_train", list)
    MetadataCatalog.get("my_coco_train").thing_classes = ["a"]
    assert unregistered_warnings() == []  # a registered dataset: silent
    meta = MetadataCatalog.get("my_coco_trian")  # a typo
    assert meta.name == "my_coco_trian" and "my_coco_trian" in MetadataCatalog  # still created
    (message,) = unregistered_warnings()
    assert "'my_coco_trian'" in message and "Did you mean: my_coco_train" in message
    MetadataCatalog.get("my_coco_trian")  # it has metadata now: no second warning
    assert unregistered_warnings() == []


def test_get_warns_for_names_that_are_not_datasets(unregistered_warnings):
    MetadataCatalog.get("metadata_only_name")
    (message,) = unregistered_warnings()
    assert "no dataset 'metadata_only_name' is registered" in message
    assert "Did you mean" not in message  # nothing alike registered


def test_get_of_builtin_name_does_not_warn(unregistered_warnings):
    assert len(MetadataCatalog.get("coco_2017_val").thing_classes) == 80
    assert unregistered_warnings() == []
    MetadataCatalog.get("coco_2017_vall")
    (message,) = unregistered_warnings()
    assert "Did you mean: coco_2017_val" in message


def test_get_warnings_are_rate_limited(caplog, monkeypatch):
    monkeypatch.setenv("CATMAP_WARNINGS_PER_KIND", "0")  # only counted, summarized at exit
    caplog.set_level(logging.WARNING, logger="catalog.metadata")
    before = counts().get("MetadataCatalog.get", 0)
    for i in range(5):
        MetadataCatalog.get(f"rate_limited_{i}")
    assert counts()["MetadataCatalog.get"] == before + 5
    assert not [r for r in caplog.records if r.name == "catalog.metadata"]


def test_get_without_the_warning_for_metadata_set_on_purpose(unregistered_warnings):
    MetadataCatalog.get("attached_on_purpose", warn_unregistered=False).thing_classes = ["a"]
    assert unregistered_warnings() == []
    assert MetadataCatalog.get("attached_on_purpose").thing_classes == ["a"]


def test_setting_nan_twice_is_not_a_conflict():
    # separate NaN objects (float('nan') twice, numpy NaN, NaN inside lists and dicts)
    name = "nan_twice"
    try:
        MetadataCatalog.get(name, warn_unregistered=False).set(x=float("nan"))
        MetadataCatalog.get(name).set(x=float("nan"))
        MetadataCatalog.get(name).set(x=np.float64("nan"))
        MetadataCatalog.get(name).set(y=[1.0, float("nan")], z={"a": [float("nan")]})
        MetadataCatalog.get(name).set(y=[1.0, float("nan")], z={"a": (float("nan"),)})
        with pytest.raises(MetadataConflictError):
            MetadataCatalog.get(name).set(x=1.0)
        with pytest.raises(MetadataConflictError):
            MetadataCatalog.get(name).set(y=[float("nan"), 1.0])
    finally:
        MetadataCatalog.remove(name)
    assert values_equal(float("nan"), np.float32("nan"))
    assert not values_equal(float("nan"), "nan")
