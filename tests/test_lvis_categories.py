"""The bundled LVIS category tables (catalog/data/*.json) and their loader."""

from __future__ import annotations

import json
import pickle

import pytest

from catalog.formats import builtin as lc
from catalog.formats.builtin import get_builtin_metadata
from catalog.formats.builtin import LvisCategoriesError, lvis_categories


def test_tables_have_the_lvis_shapes() -> None:
    v1, v05 = lvis_categories("v1"), lvis_categories("v0.5")
    assert len(v1.classes) == len(v1.frequency) == len(v1.image_count) == 1203
    assert len(v05.classes) == 1230 and v05.frequency is None and v05.image_count is None
    assert len(set(v1.classes)) == 1203 and len(set(v05.classes)) == 1230
    assert set(v1.frequency) == {"r", "c", "f"} and min(v1.image_count) >= 1
    # A few facts of the LVIS annotation files.
    assert (v1.classes[0], v1.classes[-1], v05.classes[0]) == ("aerosol_can", "zucchini", "acorn")
    assert v1.frequency.count("r") == 337 and v1.frequency.count("f") == 405
    assert lc.LVIS_V1_CLASSES is v1.classes and lc.LVIS_V0_5_CLASSES is v05.classes
    assert lc.LVIS_V1_FREQUENCY is v1.frequency and lc.LVIS_V1_IMAGE_COUNT is v1.image_count


def test_builtin_metadata_reads_the_tables() -> None:
    meta = get_builtin_metadata("lvis_v1")
    v1 = lvis_categories("v1")
    assert meta["thing_classes"] == list(v1.classes)
    assert meta["class_frequency"] == list(v1.frequency)
    assert meta["class_image_count"][5] == {"id": 6, "image_count": v1.image_count[5]}
    v05_classes = list(lvis_categories("v0.5").classes)
    assert get_builtin_metadata("lvis_v0.5")["thing_classes"] == v05_classes


def test_unknown_version_and_attribute() -> None:
    with pytest.raises(LvisCategoriesError, match="unknown LVIS version 'v2'") as info:
        lvis_categories("v2")
    assert info.value.version == "v2"
    with pytest.raises(AttributeError, match="LVIS_V2_CLASSES"):
        lc.LVIS_V2_CLASSES  # noqa: B018


def test_missing_file_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(lc.LVIS_VERSIONS, "v9", "no_such_file.json")
    with pytest.raises(LvisCategoriesError, match="cannot read the LVIS v9 category file"):
        lvis_categories("v9")


def _doc(categories: object, **top: object) -> dict:
    return {"format": "catmap-lvis-categories", "version": "v1", "categories": categories, **top}


GOOD = {"id": 1, "name": "a", "frequency": "r", "image_count": 3}


@pytest.mark.parametrize(
    ("document", "index", "key"),
    [
        ([], None, "format"),
        (_doc([GOOD], format="other"), None, "format"),
        (_doc([GOOD], version="v0.5"), None, "version"),
        (_doc([]), None, "categories"),
        (_doc([{"id": 1}]), 0, None),
        (_doc([GOOD, {"id": 2, "name": "b"}]), 1, None),
        (_doc([GOOD, {**GOOD, "id": 3}]), 1, "id"),
        (_doc([GOOD, {**GOOD, "id": True}]), 1, "id"),
        (_doc([{**GOOD, "name": ""}]), 0, "name"),
        (_doc([{**GOOD, "name": 5}]), 0, "name"),
        (_doc([{**GOOD, "frequency": "x"}]), 0, "frequency"),
        (_doc([{**GOOD, "image_count": -1}]), 0, "image_count"),
        (_doc([{**GOOD, "image_count": 1.5}]), 0, "image_count"),
    ],
)
def test_malformed_documents_are_refused(document: object, index: int | None,
                                         key: str | None) -> None:
    with pytest.raises(LvisCategoriesError) as info:
        lc._parse(document, "v1", "f.json")
    err = info.value
    assert (err.index, err.key, err.path, err.version) == (index, key, "f.json", "v1")
    assert "f.json" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is LvisCategoriesError and again.key == key and str(again) == str(err)


@pytest.fixture
def fresh_cache():
    """Forget what the test cached (its stand-in versions) once it ends."""
    yield
    lvis_categories.cache_clear()


def test_corrupt_and_oversized_files(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                     fresh_cache: None) -> None:
    class _Root:
        """Stands in for the package folder: files under tmp_path."""

        def joinpath(self, *parts: str):
            return tmp_path.joinpath(*parts[1:])

    monkeypatch.setattr(lc.resources, "files", lambda package: _Root())
    (tmp_path / "bad.json").write_text('{"format": ')
    (tmp_path / "big.json").write_text(" " * (lc._MAX_FILE_BYTES + 1))
    (tmp_path / "ok.json").write_text(json.dumps(_doc([GOOD], version="v7")))
    for version, name in [("v7", "ok.json"), ("v8", "bad.json"), ("v9", "big.json")]:
        monkeypatch.setitem(lc.LVIS_VERSIONS, version, name)
    assert lvis_categories("v7").classes == ("a",)
    with pytest.raises(LvisCategoriesError, match="not valid JSON"):
        lvis_categories("v8")
    with pytest.raises(LvisCategoriesError, match="larger than"):
        lvis_categories("v9")
