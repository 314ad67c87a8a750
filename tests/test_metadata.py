"""Metadata and MetadataCatalog: write-once keys, value equality, atomic set, legacy keys."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from catalog import Metadata, MetadataCatalog, MetadataConflictError
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
