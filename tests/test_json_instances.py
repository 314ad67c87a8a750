"""The public COCO / LVIS loaders and registrations: detectron2's signatures, one shared registration."""

from __future__ import annotations

import inspect
import json
import pickle

import pytest

from catalog import DatasetCatalog, MetadataCatalog
from catalog.formats import coco

lvis = coco

PUBLIC = [
    (coco, "load_coco_json"),
    (lvis, "load_lvis_json"),
    (coco, "register_coco_instances"),
    (lvis, "register_lvis_instances"),
]


@pytest.mark.parametrize(("module", "name"), PUBLIC)
def test_public_functions_keep_their_identity(module, name) -> None:
    function = getattr(module, name)
    assert (function.__name__, function.__qualname__) == (name, name)
    assert function.__module__ == module.__name__
    assert function.__doc__ and ("COCO" in function.__doc__ or "LVIS" in function.__doc__)
    assert pickle.loads(pickle.dumps(function)) is function  # pickled by reference


def test_signatures_are_detectron2s() -> None:
    for module, name in PUBLIC[:2]:
        params = inspect.signature(getattr(module, name)).parameters
        assert list(params) == ["json_file", "image_root", "dataset_name", "extra_annotation_keys",
                                "keep_file_order", "allow_outside_root"]
        assert params["dataset_name"].default is None
        assert params["keep_file_order"].kind is inspect.Parameter.KEYWORD_ONLY
    for module, name in PUBLIC[2:]:
        params = inspect.signature(getattr(module, name)).parameters
        assert list(params) == ["name", "metadata", "json_file", "image_root",
                                "extra_annotation_keys", "cache", "keep_file_order",
                                "allow_outside_root"]
        assert params["cache"].kind is inspect.Parameter.KEYWORD_ONLY


def test_registration_uses_the_loader_the_module_holds_now(tmp_path, monkeypatch) -> None:
    data = {"images": [{"id": 1, "file_name": "a.jpg", "height": 4, "width": 4}],
            "annotations": [], "categories": [{"id": 3, "name": "cat"}]}
    json_file = tmp_path / "c.json"
    json_file.write_text(json.dumps(data))
    calls: list[str] = []
    original = coco.load_coco_json
    monkeypatch.setattr(
        coco, "load_coco_json", lambda *a, **k: calls.append(a[2]) or original(*a, **k)
    )
    coco.register_coco_instances("ji_coco", {"x": 1}, json_file, "/img", cache=False)
    try:
        records = DatasetCatalog.get("ji_coco")
        meta = MetadataCatalog.get("ji_coco")
        assert calls == ["ji_coco"] and records[0]["file_name"] == "/img/a.jpg"
        assert (meta.evaluator_type, meta.x, meta.thing_classes) == ("coco", 1, ["cat"])
    finally:
        DatasetCatalog.remove("ji_coco")
        MetadataCatalog.remove("ji_coco")
