"""OpenMMLab 2.0 annotation files: formats, safety, metainfo rules, prefixes, registration."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import yaml

from catalog import (
    AnnotationFormatError,
    DatasetAlreadyRegisteredError,
    DatasetCatalog,
    MetadataCatalog,
    MetadataConflictError,
    RecordFormatError,
    load_annotation_file,
    register_annotation_file,
)


def _content() -> dict:
    return {
        "metainfo": {"classes": ["cat", "dog"], "task_name": "toy", "empty_list": []},
        "data_list": [
            {
                "img_path": "a.jpg",
                "seg_map_path": "a.png",
                "height": 4,
                "width": 6,
                "instances": [{"bbox": [0, 0, 1, 1], "bbox_label": 1}],
            },
            {
                "img_path": "sub/b.jpg",
                "seg_map_path": "b.png",
                "height": 8,
                "width": 6,
                "instances": [],
            },
        ],
    }


def _write_json(path, content=None) -> str:
    path.write_text(json.dumps(_content() if content is None else content))
    return str(path)


def test_json_file_loads_metainfo_and_records(tmp_path):
    metainfo, records = load_annotation_file(
        _write_json(tmp_path / "ann.json"), record_format="openmmlab"
    )
    assert metainfo == {"classes": ["cat", "dog"], "task_name": "toy", "empty_list": []}
    assert records == _content()["data_list"]


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".YAML"])
def test_yaml_file_loads(tmp_path, suffix):
    path = tmp_path / f"ann{suffix}"
    path.write_text(yaml.safe_dump(_content()))
    metainfo, records = load_annotation_file(path)
    assert metainfo["classes"] == ["cat", "dog"] and len(records) == 2


def test_yaml_with_python_objects_is_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("metainfo: !!python/object/apply:os.system ['echo pwned']\ndata_list: []\n")
    with pytest.raises(AnnotationFormatError, match="evil.yaml.*safe_load"):
        load_annotation_file(path)


def test_invalid_json_is_format_error(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(AnnotationFormatError, match="broken.json"):
        load_annotation_file(path)


@pytest.mark.parametrize("suffix", [".pkl", ".pickle"])
def test_pickle_refused_unless_allowed(tmp_path, suffix):
    path = tmp_path / f"ann{suffix}"
    path.write_bytes(pickle.dumps(_content()))
    with pytest.raises(AnnotationFormatError, match="runs any code.*allow_pickle=True") as info:
        load_annotation_file(path)
    assert isinstance(info.value, ValueError)
    metainfo, records = load_annotation_file(path, allow_pickle=True)
    assert metainfo["task_name"] == "toy" and len(records) == 2


def test_corrupt_pickle_is_format_error(tmp_path):
    path = tmp_path / "bad.pkl"
    path.write_bytes(b"not a pickle")
    with pytest.raises(AnnotationFormatError, match="bad.pkl"):
        load_annotation_file(path, allow_pickle=True)


def test_unknown_extension(tmp_path):
    path = tmp_path / "ann.txt"
    path.write_text("{}")
    with pytest.raises(AnnotationFormatError, match="unsupported.*'.txt'.*json"):
        load_annotation_file(path)


def test_top_level_must_be_a_dict(tmp_path):
    with pytest.raises(TypeError, match="must be a dict.*got a list"):
        load_annotation_file(_write_json(tmp_path / "list.json", [1, 2]))


def test_missing_keys_named(tmp_path):
    path = _write_json(tmp_path / "wrong.json", {"meta": {}, "data": []})
    with pytest.raises(
        ValueError,
        match=r"missing top-level key\(s\) \['metainfo', 'data_list'\].*\['data', 'meta'\]",
    ):
        load_annotation_file(path)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ({"metainfo": [], "data_list": []}, "'metainfo' must be a dict"),
        ({"metainfo": {}, "data_list": {}}, "'data_list' must be a list"),
    ],
)
def test_wrong_types_of_metainfo_or_data_list(tmp_path, content, pattern):
    with pytest.raises(AnnotationFormatError, match=pattern):
        load_annotation_file(_write_json(tmp_path / "t.json", content))


def test_data_list_entry_must_be_a_dict(tmp_path):
    content = {"metainfo": {}, "data_list": [{"img_path": "a"}, "b.jpg"]}
    with pytest.raises(TypeError, match=r"data_list\[1\].*must be a mapping, got str") as info:
        load_annotation_file(_write_json(tmp_path / "t.json", content))
    assert isinstance(info.value, AnnotationFormatError) and info.value.index == 1


def test_metainfo_argument_overrides_file(tmp_path):
    metainfo, _ = load_annotation_file(
        _write_json(tmp_path / "ann.json"), metainfo={"classes": ["bird", "fish"], "extra": 1}
    )
    assert metainfo["classes"] == ["bird", "fish"] and metainfo["extra"] == 1
    assert metainfo["task_name"] == "toy"


def test_bbox_label_checked_against_the_callers_classes(tmp_path):
    # The file's label 1 does not exist among one class given by the caller.
    with pytest.raises(AnnotationFormatError, match=r"data_list\[0\] instances\[0\].*bbox_label"):
        load_annotation_file(_write_json(tmp_path / "ann.json"), metainfo={"classes": ["bird"]})


def test_metainfo_argument_must_be_dict(tmp_path):
    with pytest.raises(TypeError, match="metainfo must be a dict"):
        load_annotation_file(_write_json(tmp_path / "ann.json"), metainfo=["cat"])


def test_metainfo_classes_file_read_only_when_the_caller_names_it(tmp_path):
    # Old behaviour (the bug): a path in the file's own metainfo was read. Now refused.
    classes = tmp_path / "classes.txt"
    classes.write_text("dog\n\ncat\n")
    content = _content()
    content["metainfo"]["classes"] = str(classes)
    with pytest.raises(AnnotationFormatError, match="'classes'.*list of strings"):
        load_annotation_file(_write_json(tmp_path / "bad.json", content))
    # relative to data_root, given as an argument
    _write_json(tmp_path / "ann.json")
    metainfo, _ = load_annotation_file(
        "ann.json", data_root=tmp_path, metainfo={"classes": "classes.txt"}
    )
    assert metainfo["classes"] == ["dog", "cat"]
    assert metainfo["task_name"] == "toy"  # an ordinary string stays a string
    metainfo, _ = load_annotation_file(
        tmp_path / "ann.json", metainfo={"classes": classes}  # absolute, os.PathLike
    )
    assert metainfo["classes"] == ["dog", "cat"]


def test_data_root_and_data_prefix(tmp_path):
    _write_json(tmp_path / "ann.json")
    _, records = load_annotation_file(
        "ann.json",
        data_root=str(tmp_path),
        data_prefix={"img_path": "images", "seg_map_path": "/abs/seg"},
    )
    assert records[0]["file_name"] == os.path.join(str(tmp_path), "images", "a.jpg")
    assert records[1]["file_name"] == os.path.join(str(tmp_path), "images", "sub/b.jpg")
    assert records[0]["sem_seg_file_name"] == "/abs/seg/a.png"  # absolute prefix not re-rooted
    assert records[0]["height"] == 4


def test_absolute_ann_file_ignores_data_root(tmp_path):
    path = _write_json(tmp_path / "ann.json")
    _, records = load_annotation_file(path, data_root="/does/not/exist")
    assert len(records) == 2


def test_data_prefix_key_missing_names_record(tmp_path):
    content = _content()
    del content["data_list"][1]["img_path"]
    with pytest.raises(RecordFormatError, match="entry 1 has no key 'img_path'"):
        load_annotation_file(
            _write_json(tmp_path / "ann.json", content), data_prefix={"img_path": "x"}
        )


def test_parse_data_info_one_to_many(tmp_path):
    def split_instances(raw):
        return [
            {"img_path": raw["img_path"], "bbox": inst["bbox"]} for inst in raw["instances"]
        ] + [{"img_path": raw["img_path"], "bbox": None}]

    _, records = load_annotation_file(
        _write_json(tmp_path / "ann.json"),
        parse_data_info=split_instances,
        data_prefix={"img_path": "imgs"},
        record_format="openmmlab",
    )
    assert records == [
        {"img_path": os.path.join("imgs", "a.jpg"), "bbox": [0, 0, 1, 1]},
        {"img_path": os.path.join("imgs", "a.jpg"), "bbox": None},
        {"img_path": os.path.join("imgs", "sub/b.jpg"), "bbox": None},
    ]


def test_parse_data_info_returning_dict(tmp_path):
    _, records = load_annotation_file(
        _write_json(tmp_path / "ann.json"),
        parse_data_info=lambda raw: {"file_name": raw["img_path"]},
        record_format="openmmlab",
    )
    assert records == [{"file_name": "a.jpg"}, {"file_name": "sub/b.jpg"}]


@pytest.mark.parametrize("bad", [None, "a.jpg", [{"a": 1}, 3], ({"a": 1},)])
def test_parse_data_info_bad_return_is_type_error(tmp_path, bad):
    with pytest.raises(TypeError, match="parse_data_info returned.*entry 0"):
        load_annotation_file(_write_json(tmp_path / "ann.json"), parse_data_info=lambda raw: bad)


def test_register_annotation_file_metainfo_available_before_records(tmp_path):
    path = _write_json(tmp_path / "ann.json")
    calls = []

    def parse(raw):
        calls.append(1)
        return raw

    register_annotation_file(
        "mm_toy", path, data_prefix={"img_path": "imgs"}, parse_data_info=parse
    )
    meta = MetadataCatalog.get("mm_toy")
    assert meta.classes == ["cat", "dog"]
    assert meta.thing_classes == ["cat", "dog"]
    assert meta.task_name == "toy"
    assert meta.ann_file == path
    assert calls == []  # no record built yet
    records = DatasetCatalog.get("mm_toy")
    assert len(records) == 2 and records[0]["file_name"] == os.path.join("imgs", "a.jpg")
    assert len(calls) == 2
    assert DatasetCatalog.entry("mm_toy").source_files == (path,)


def test_register_annotation_file_relative_data_root(tmp_path, monkeypatch):
    # A relative data_root must be joined to ann_file once, not twice.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "toy").mkdir(parents=True)
    _write_json(tmp_path / "data" / "toy" / "ann.json")
    register_annotation_file(
        "mm_rel_root", "ann.json", data_root="data/toy", data_prefix={"img_path": "imgs"}
    )
    assert MetadataCatalog.get("mm_rel_root").classes == ["cat", "dog"]
    records = DatasetCatalog.get("mm_rel_root")
    assert records[0]["file_name"] == os.path.join("data/toy", "imgs", "a.jpg")


def test_register_annotation_file_entry_cache_key(tmp_path):
    path = _write_json(tmp_path / "ann.json")
    register_annotation_file("mm_key", path, data_prefix={"img_path": "imgs"})
    entry = DatasetCatalog.entry("mm_key")
    assert entry.source_files == (path,)
    assert entry.cache_key["ann_file"] == os.path.abspath(path)
    assert entry.cache_key["data_prefix"] == {"img_path": "imgs"}


def test_register_annotation_file_metainfo_argument_wins(tmp_path):
    path = _write_json(tmp_path / "ann.json")
    register_annotation_file("mm_arg", path, metainfo={"classes": ["x"], "thing_classes": ["y"]})
    meta = MetadataCatalog.get("mm_arg")
    assert meta.classes == ["x"] and meta.thing_classes == ["y"]


def test_register_annotation_file_errors(tmp_path):
    path = _write_json(tmp_path / "ann.json")
    register_annotation_file("mm_dup", path)
    with pytest.raises(DatasetAlreadyRegisteredError):
        register_annotation_file("mm_dup", path)
    pkl = tmp_path / "ann.pkl"
    pkl.write_bytes(pickle.dumps(_content()))
    with pytest.raises(AnnotationFormatError, match="allow_pickle"):
        register_annotation_file("mm_pkl", pkl)
    assert "mm_pkl" not in DatasetCatalog
    register_annotation_file("mm_pkl", pkl, allow_pickle=True)
    assert len(DatasetCatalog.get("mm_pkl")) == 2
    MetadataCatalog.get("mm_conflict").classes = ["other"]
    with pytest.raises(MetadataConflictError):
        register_annotation_file("mm_conflict", path)
    assert "mm_conflict" not in DatasetCatalog
    with pytest.raises(TypeError):
        register_annotation_file(3, path)


def test_real_mmengine_files_if_present():
    root = "/work/shared/external/mmengine/annotations"
    if not os.path.isdir(root):
        pytest.skip("shared external files not available")
    metainfo, records = load_annotation_file(os.path.join(root, "dummy_annotation.json"))
    assert metainfo["dataset_type"] == "test_dataset" and len(records) >= 2
    with pytest.raises(AnnotationFormatError, match="found keys"):
        load_annotation_file(os.path.join(root, "annotation_wrong_keys.json"))


def test_register_reads_a_callers_classes_file_once(tmp_path):
    _write_json(tmp_path / "ann.json")
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    register_annotation_file(
        "mm_classes_file", "ann.json", data_root=str(tmp_path), metainfo={"classes": "classes.txt"}
    )
    assert MetadataCatalog.get("mm_classes_file").thing_classes == ["cat", "dog"]
    (tmp_path / "classes.txt").write_text("only_one\n")  # changed after registration
    assert len(DatasetCatalog.get("mm_classes_file")) == 2  # label 1 still checked against 2


def test_register_yaml_with_aliases_only_when_allowed(tmp_path):
    path = tmp_path / "ann.yaml"
    path.write_text("metainfo: {classes: &c [cat, dog], thing: *c}\ndata_list: []\n")
    with pytest.raises(AnnotationFormatError, match="anchors and aliases"):
        register_annotation_file("mm_alias", path)
    assert "mm_alias" not in DatasetCatalog
    register_annotation_file("mm_alias", path, allow_yaml_aliases=True)
    assert MetadataCatalog.get("mm_alias").thing == ["cat", "dog"]
    assert len(DatasetCatalog.get("mm_alias")) == 0
