"""catmap's internal API (issue 15): the shared error base, the one env-flag reader, and a
``catalog.__all__`` that is the public contract only."""

from __future__ import annotations

import importlib
import pickle
import re

import pytest

import catalog
from catalog.formats.validate import AnnotationFieldError, ParseDataInfoError
from catalog.storage.cache import cache_enabled
from catalog._common import (
    CatmapErrorWithFields,
    DatasetFileNotFoundError,
    OFF_VALUES,
    ON_VALUES,
    env_flag,
    missing_dependency,
)
from catalog.formats.validate import (
    CityscapesFormatError,
    CocoEvaluationError,
    CocoExportError,
    PanopticFormatError,
    SemSegPairingError,
)
from catalog.registry import RegistryKeyError

FIELD_ERRORS = [
    DatasetFileNotFoundError,
    AnnotationFieldError,
    ParseDataInfoError,
    CityscapesFormatError,
    CocoEvaluationError,
    CocoExportError,
    PanopticFormatError,
    SemSegPairingError,
    RegistryKeyError,
]


@pytest.mark.parametrize("cls", FIELD_ERRORS, ids=lambda c: c.__name__)
def test_field_errors_share_one_base(cls):
    assert issubclass(cls, CatmapErrorWithFields)
    assert cls.field_names, "a field error names its fields"
    plain = cls("just a message")  # torch's worker re-raise: cls(message)
    assert str(plain) == "just a message"
    for name in cls.field_names:
        default = [] if (cls, name) == (SemSegPairingError, "unpaired") else None
        assert getattr(plain, name) == default
    values = {name: f"v_{name}" for name in cls.field_names}
    if cls is SemSegPairingError:
        values["unpaired"] = ("a.png",)
    err = cls("boom", **values)
    restored = pickle.loads(pickle.dumps(err))
    assert type(restored) is cls and str(restored) == "boom"
    for name in cls.field_names:
        expected = ["a.png"] if name == "unpaired" else f"v_{name}"
        assert getattr(restored, name) == expected


def test_unknown_field_is_a_type_error_naming_the_fields():
    with pytest.raises(TypeError, match=r"\['path', 'index', 'key'\]"):
        CityscapesFormatError("bad", line=3)


def test_missing_dependency_keeps_its_fields():
    err = missing_dependency("pycocotools", "coco", "COCO evaluation")
    assert (err.extra, err.package) == ("coco", "pycocotools")
    assert isinstance(err, ImportError)


@pytest.mark.parametrize("default", [True, False])
def test_env_flag(monkeypatch, default):
    name = "CATMAP_TEST_FLAG_ISSUE15"
    monkeypatch.delenv(name, raising=False)
    assert env_flag(name, default=default) is default
    for value in OFF_VALUES:
        monkeypatch.setenv(name, f"  {value.upper()} ")
        assert env_flag(name, default=default) is False
    for value in ON_VALUES:
        monkeypatch.setenv(name, value.title())
        assert env_flag(name, default=default) is True
    for value in ("", "maybe", "2"):
        monkeypatch.setenv(name, value)
        assert env_flag(name, default=default) is default


def test_cache_switches_read_the_env_flag(monkeypatch):
    monkeypatch.setenv("CATMAP_CACHE", "off")
    assert cache_enabled() is False
    monkeypatch.setenv("CATMAP_CACHE", "garbage")
    assert cache_enabled() is True


def test_catalog_all_is_the_public_contract():
    for name in catalog.__all__:
        assert hasattr(catalog, name), name
    contract = {
        "DatasetCatalog",
        "MetadataCatalog",
        "Metadata",
        "SerializedList",
        "BoxMode",
        "load_coco_json",
        "register_coco_instances",
        "load_annotation_file",
        "register_annotation_file",
        "get_detection_dataset_dicts",
        "AnnotationFormatError",
        "DatasetNotRegisteredError",
        "DatasetAlreadyRegisteredError",
        "MetadataConflictError",
        "this_rank_only",
    }
    assert contract <= set(catalog.__all__)
    plumbing = {"DiskCache", "load_with_cache", "share_across_local_ranks", "Registry"}
    assert not plumbing & set(catalog.__all__)
    assert not plumbing & set(vars(catalog))


def test_internal_api_index_names_modules_that_exist():
    doc = catalog.__doc__ or ""
    index = doc[doc.index("catmap's internal API") :]
    bullets = [b for b in index.split("\n- ")[1:]]
    assert len(bullets) >= 7
    checked = 0
    for bullet in bullets:
        modules = [
            importlib.import_module(m) for m in re.findall(r":mod:`(catalog\.[a-z_.]+)`", bullet)
        ]
        assert modules, bullet
        for name in re.findall(r"``([A-Za-z_]+)``", bullet):
            assert any(hasattr(m, name) for m in modules), (name, bullet)
            checked += 1
    assert checked >= 12


def test_register_annotation_file_refuses_an_unknown_option(tmp_path):
    from catalog import DatasetCatalog, register_annotation_file
    from catalog.testing import isolated_catalogs

    path = tmp_path / "a.json"
    path.write_text('{"metainfo": {"classes": ["a"]}, "data_list": []}')
    with isolated_catalogs():
        with pytest.raises(TypeError, match="data_roots"):
            register_annotation_file("issue15_unknown", str(path), data_roots="x")
        assert "issue15_unknown" not in DatasetCatalog
