"""Hostile OpenMMLab annotation files: disclosure through metainfo, YAML alias bombs, deep
nesting, bad encodings, special files. Each of these failed on the loader before the fix."""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import pickle
import threading

import pytest
import yaml

from catalog import (
    AnnotationFormatError,
    DatasetCatalog,
    MetadataCatalog,
    load_annotation_file,
    register_annotation_file,
)
from catalog.formats import files as safe_parse
from catalog.formats.openmmlab import read_metainfo
from catalog.formats.validate import AnnotationFieldError
from catalog.formats.files import MAX_DEPTH, MAX_TEXT_FILE_BYTES
from tests.work_counting import count_calls


def _doc(**metainfo) -> dict:
    return {
        "metainfo": {"classes": ["cat", "dog"], **metainfo},
        "data_list": [
            {
                "img_path": "a.jpg",
                "height": 4,
                "width": 6,
                "instances": [{"bbox": [0, 0, 1, 1], "bbox_label": 1}],
            }
        ],
    }


def _write(path, content) -> str:
    path.write_text(json.dumps(content))
    return str(path)


# ---------------------------------------------------------------- disclosure through metainfo
def test_file_metainfo_values_naming_files_are_never_read(tmp_path, monkeypatch):
    cwd, root = tmp_path / "cwd", tmp_path / "root"
    cwd.mkdir()
    root.mkdir()
    (cwd / "secret_cwd.txt").write_text("CWD-SECRET\n")
    (root / "secret_root.txt").write_text("ROOT-SECRET\n")
    monkeypatch.chdir(cwd)
    values = {
        "task_name": "secret_cwd.txt",
        "palette": "secret_root.txt",
        "environ": "/proc/self/environ",
        "absolute": str(root / "secret_root.txt"),
    }
    _write(root / "ann.json", _doc(**values))
    metainfo, _ = load_annotation_file("ann.json", data_root=root)
    for key, value in values.items():
        assert metainfo[key] == value  # kept as the strings they are
    register_annotation_file("safety_no_disclosure", "ann.json", data_root=str(root))
    meta = MetadataCatalog.get("safety_no_disclosure")
    assert meta.palette == "secret_root.txt" and meta.environ == "/proc/self/environ"


@pytest.mark.parametrize("name", ["secret_cwd.txt", "secret_root.txt", "/proc/self/environ"])
def test_file_metainfo_classes_naming_a_file_is_refused(tmp_path, monkeypatch, name):
    (tmp_path / "secret_cwd.txt").write_text("CWD-SECRET\n")
    (tmp_path / "secret_root.txt").write_text("ROOT-SECRET\n")
    monkeypatch.chdir(tmp_path)
    content = _doc()
    content["metainfo"]["classes"] = name
    _write(tmp_path / "ann.json", content)
    with pytest.raises(AnnotationFieldError, match="'classes'.*list of strings") as info:
        load_annotation_file("ann.json", data_root=tmp_path)
    assert "SECRET" not in str(info.value) and info.value.key == "classes"


def test_caller_classes_file_resolves_under_data_root_never_cwd(tmp_path, monkeypatch):
    cwd, root = tmp_path / "cwd", tmp_path / "root"
    cwd.mkdir()
    root.mkdir()
    (cwd / "classes.txt").write_text("wrong\nwrong2\n")
    (root / "classes.txt").write_text("right\nright2\n")
    (cwd / "only_in_cwd.txt").write_text("a\nb\n")
    monkeypatch.chdir(cwd)
    _write(root / "ann.json", _doc())
    metainfo, _ = load_annotation_file(
        "ann.json", data_root=root, metainfo={"classes": "classes.txt"}
    )
    assert metainfo["classes"] == ["right", "right2"]
    with pytest.raises(AnnotationFormatError, match="only_in_cwd.txt.*under data_root"):
        load_annotation_file("ann.json", data_root=root, metainfo={"classes": "only_in_cwd.txt"})


def test_caller_classes_file_may_not_leave_data_root_but_absolute_is_fine(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("x\ny\n")
    _write(root / "ann.json", _doc())
    with pytest.raises(AnnotationFormatError, match=r"leaves data_root.*'\.\.'"):
        load_annotation_file("ann.json", data_root=root, metainfo={"classes": "../outside.txt"})
    metainfo, _ = load_annotation_file(
        "ann.json", data_root=root, metainfo={"classes": str(tmp_path / "outside.txt")}
    )
    assert metainfo["classes"] == ["x", "y"]


def test_caller_classes_file_must_be_a_small_regular_utf8_file(tmp_path, monkeypatch):
    _write(tmp_path / "ann.json", _doc())
    (tmp_path / "real.txt").write_text("a\nb\n")
    os.symlink(tmp_path / "real.txt", tmp_path / "link.txt")
    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "dir.txt").mkdir()
    with open(tmp_path / "big.txt", "wb") as f:  # sparse: no data written
        f.truncate(MAX_TEXT_FILE_BYTES + 1)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    cases = {
        "link.txt": "symbolic link",
        "fifo.txt": "not a regular file",
        "dir.txt": "cannot be read|not a regular file",
        "big.txt": "limit",
        "latin1.txt": "not valid UTF-8",
        "missing.txt": "cannot be read",
    }
    opens = _refuse_blocking_opens(monkeypatch, tmp_path / "fifo.txt")
    for name, pattern in cases.items():
        with _fifo_watchdog(tmp_path / "fifo.txt") as hung:
            with pytest.raises(AnnotationFormatError, match=pattern):
                load_annotation_file("ann.json", data_root=tmp_path, metainfo={"classes": name})
        assert not hung, f"{name}: the loader hung on the FIFO (freed by the watchdog)"
    assert opens and all(flags & os.O_NONBLOCK for flags in opens)  # the FIFO was opened


def _refuse_blocking_opens(monkeypatch, fifo) -> list[int]:
    """Make any open of ``fifo`` that would block (open(), or os.open without O_NONBLOCK)
    fail the test at once; returns the flags of the os.open calls that named it."""
    target = os.path.abspath(fifo)
    flags_seen: list[int] = []
    real_os_open, real_open = os.open, builtins.open

    def names_fifo(file) -> bool:
        return not isinstance(file, int) and os.path.abspath(os.fsdecode(file)) == target

    def os_open(path, flags, *args, **kwargs):
        if names_fifo(path):
            flags_seen.append(flags)
            assert flags & os.O_NONBLOCK, f"os.open({path!r}) without O_NONBLOCK blocks"
        return real_os_open(path, flags, *args, **kwargs)

    def open_(file, *args, **kwargs):
        assert not names_fifo(file), f"open({file!r}) blocks on a FIFO until a writer comes"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    return flags_seen


@contextlib.contextmanager
def _fifo_watchdog(fifo, seconds: float = 60.0):
    """A liveness bound, not a performance one: if the code under test is still blocked on
    ``fifo`` after ``seconds``, a writer opens and closes it (the blocked read ends) and the
    yielded list becomes non-empty."""
    hung: list[bool] = []

    def free() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # fails when no reader waits
        except OSError:
            return
        hung.append(True)

    timer = threading.Timer(seconds, free)
    timer.daemon = True
    timer.start()
    try:
        yield hung
    finally:
        timer.cancel()


# ---------------------------------------------------------------- YAML bombs and tags
def _billion_laughs() -> bytes:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    body = "\n".join("  " + line for line in lines)
    text = f"metainfo:\n{body}\ndata_list:\n  - img_path: a.jpg\n    extra: *i\n"
    return text.encode()


@pytest.mark.parametrize("allow", [False, True])
def test_yaml_billion_laughs_refused_fast(tmp_path, allow, monkeypatch):
    path = tmp_path / "lol.yaml"
    path.write_bytes(_billion_laughs())
    assert len(path.read_bytes()) < 600
    # the work, counted: ~110 nodes in the file; the expansion (9**9 values) is never walked
    # nor built (a budget stops a run-away walk at once instead of after minutes)
    composed = count_calls(monkeypatch, safe_parse._BoundedLoader, "compose_node", budget=1_000)
    walked = count_calls(monkeypatch, safe_parse, "_children", budget=1_000)
    built = count_calls(monkeypatch, yaml.constructor.BaseConstructor, "construct_object")
    with pytest.raises(AnnotationFormatError, match=r"lol.yaml: line \d+.*(alias|expand)"):
        load_annotation_file(path, allow_yaml_aliases=allow)
    assert 0 < composed.calls <= 200 and built.calls == 0, (composed.calls, built.calls)
    assert walked.calls <= 2 * composed.calls, walked.calls


def test_yaml_aliases_within_bounds_when_allowed(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text(
        "metainfo: {classes: [cat, dog]}\n"
        "data_list:\n"
        "  - &rec {img_path: a.jpg, instances: [{bbox: [0, 0, 2, 2], bbox_label: 1}]}\n"
        "  - *rec\n"
    )
    with pytest.raises(AnnotationFormatError, match="allow_yaml_aliases=True"):
        load_annotation_file(path)
    _, records = load_annotation_file(path, allow_yaml_aliases=True, data_prefix={"img_path": "im"})
    # one shared dict in the file, but the prefix is joined once per record
    assert [r["file_name"] for r in records] == [os.path.join("im", "a.jpg")] * 2
    path.write_text("metainfo: &m {a: [*m]}\ndata_list: []\n")
    with pytest.raises(AnnotationFormatError, match="refers to a node that contains it"):
        load_annotation_file(path, allow_yaml_aliases=True)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("metainfo: {a: !!binary aGVsbG8=}\ndata_list: []\n", "binary is refused"),
        ("metainfo: {a: !!set {x}}\ndata_list: []\n", "set is refused"),
        (f"metainfo: {{a: {'1:' * 40}1}}\ndata_list: []\n", "int of 81 characters"),
        ("metainfo: {}\ndata_list: []\n---\nmetainfo: {}\n", "single document"),
        ("metainfo: {a: 1}\ndata_list: [\n", "line 3"),
    ],
)
def test_yaml_refusals_name_file_and_line(tmp_path, text, pattern):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(AnnotationFormatError, match=f"bad.yaml: .*{pattern}"):
        load_annotation_file(path)


def test_yaml_timestamps_stay_strings(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("metainfo: {date: 2020-01-02}\ndata_list: []\n")
    assert load_annotation_file(path)[0]["date"] == "2020-01-02"


# ---------------------------------------------------------------- nesting depth
def _nested(depth: int):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_nesting_bounded_at_max_depth(tmp_path, suffix):
    # levels: top 1, data_list 2, entry 3, the extra value 4 ...
    ok_doc = _doc()
    ok_doc["data_list"][0]["extra"] = _nested(MAX_DEPTH - 3)
    bad_doc = _doc()
    bad_doc["data_list"][0]["extra"] = _nested(MAX_DEPTH - 2)
    for doc, fails in ((ok_doc, False), (bad_doc, True)):
        path = tmp_path / f"n{suffix}"
        path.write_text(json.dumps(doc))  # JSON is YAML too
        if fails:
            with pytest.raises(AnnotationFormatError, match=f"n{suffix}.*nested more than"):
                load_annotation_file(path)
        else:
            assert load_annotation_file(path)[1][0]["extra"] == _nested(MAX_DEPTH - 3)


@pytest.mark.parametrize("depth", [150, 5_000, 200_000])
def test_deep_json_is_format_error_never_recursion_error(tmp_path, depth):
    path = tmp_path / "deep.json"
    path.write_bytes(
        b'{"metainfo": {}, "data_list": [{"x": ' + b"[" * depth + b"]" * depth + b"}]}"
    )
    with pytest.raises(AnnotationFormatError, match="deep.json.*nested"):
        load_annotation_file(path)


def test_deep_yaml_is_format_error(tmp_path, monkeypatch):
    path = tmp_path / "deep.yaml"
    path.write_bytes(b"metainfo: {}\ndata_list: " + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    # the work, counted: refused at the first level past MAX_DEPTH, not after reading 100,000
    # levels (the scanner looks up to 1,024 characters ahead for a possible simple key)
    composed = count_calls(monkeypatch, safe_parse._BoundedLoader, "compose_node", budget=1_000)
    scanned = count_calls(monkeypatch, yaml.scanner.Scanner, "fetch_flow_sequence_start",
                          budget=2_000)
    with pytest.raises(AnnotationFormatError, match="deep.yaml: line 2.*nested more than 100"):
        load_annotation_file(path)
    assert composed.calls <= MAX_DEPTH + 5 and scanned.calls <= MAX_DEPTH + 1_100, (
        composed.calls, scanned.calls)


# ---------------------------------------------------------------- encodings, special files
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("bad", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"caf\xe9"])
def test_non_utf8_is_format_error_naming_the_file(tmp_path, suffix, bad):
    path = tmp_path / f"enc{suffix}"
    path.write_bytes(b'{"metainfo": {"x": "' + bad + b'"}, "data_list": []}')
    with pytest.raises(AnnotationFormatError, match=f"enc{suffix}.*UTF-8"):
        load_annotation_file(path)


def test_utf8_bom_is_accepted(tmp_path):
    for suffix in (".json", ".yaml"):
        path = tmp_path / f"bom{suffix}"
        path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_doc()).encode())
        assert load_annotation_file(path)[0]["classes"] == ["cat", "dog"]


def test_fifo_annotation_file_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "ann.json")
    with pytest.raises(AnnotationFormatError, match="not a regular file"):
        load_annotation_file(tmp_path / "ann.json")


def test_json_nan_refused(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('{"metainfo": {"x": NaN}, "data_list": []}')
    with pytest.raises(AnnotationFormatError, match="nan.json: not valid JSON"):
        load_annotation_file(path)


@pytest.mark.parametrize("key", ["name", "ann_file", "get", "_private"])
def test_reserved_metainfo_keys_in_file_refused(tmp_path, key):
    path = _write(tmp_path / "ann.json", _doc(**{key: "x"}))
    with pytest.raises(AnnotationFieldError, match=f"'{key}'.*reserved"):
        read_metainfo(path)


def test_errors_pickle_with_their_fields(tmp_path):
    doc = _doc()
    doc["data_list"][0]["img_id"] = 7
    doc["data_list"][0]["instances"][0]["bbox"] = [0, 0, "1", 1]
    with pytest.raises(AnnotationFieldError) as info:
        load_annotation_file(_write(tmp_path / "ann.json", doc))
    err = pickle.loads(pickle.dumps(info.value))
    assert type(err) is type(info.value) and str(err) == str(info.value)
    assert (err.index, err.img_id, err.instance, err.key) == (0, 7, 0, "bbox")


def test_register_cache_key_names_alias_option_and_class_count(tmp_path):
    path = _write(tmp_path / "ann.json", _doc())
    register_annotation_file("safety_key", path, allow_yaml_aliases=True)
    key = DatasetCatalog.entry("safety_key").cache_key
    assert key["allow_yaml_aliases"] is True and key["num_classes"] == 2


def test_json_bounds(tmp_path):
    cases = {
        b"[" * 200_000 + b"]" * 200_000: "nested",
        b'{"metainfo": {"x": "\xff"}, "data_list": []}': "UTF-8",
        b'{"metainfo": {"x": NaN}, "data_list": []}': "not valid JSON",
        '{"metainfo": {}, "data_list": []}'.encode("utf-16"): "UTF-8",
    }
    for raw, pattern in cases.items():
        (tmp_path / "f.json").write_bytes(raw)
        with pytest.raises(AnnotationFormatError, match=f"f.json.*{pattern}"):
            load_annotation_file(tmp_path / "f.json")
    (tmp_path / "f.json").write_text(json.dumps(_doc()))
    assert load_annotation_file(tmp_path / "f.json")[0]["classes"] == ["cat", "dog"]
