"""Fuzzing the OpenMMLab annotation-file loader with hypothesis.

A valid OpenMMLab 2.0 file (JSON and YAML) is built here, mutated (a value replaced by a
hostile one, a key deleted or added, deep nesting; or its bytes truncated, flipped, or given
invalid UTF-8) and loaded. The test fails on any exception that is not an
AnnotationFormatError, on run-away work (calls counted against a budget per byte of the file),
on a hang (a liveness watchdog), and on a result that differs from an
independent oracle written below from the documented policy: malformed values must raise,
degenerate boxes and invalid polygons must be skipped *and counted*, everything else must come
back unchanged.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from catalog import AnnotationFormatError, load_annotation_file
from tests.annotation_oracle import Invalid, RLE_40x60, expect, valid_doc

TALLY: collections.Counter = collections.Counter()


# ------------------------------------------------------------------ mutations
def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, prefix + (i,))
    return out


def get_parent(doc: Any, path: tuple) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


KEYS = st.sampled_from(
    ["img_path", "seg_map_path", "height", "width", "img_id", "instances", "bbox", "bbox_label",
     "ignore_flag", "mask", "keypoints", "classes", "size", "counts", "metainfo", "data_list",
     "name", "_x", "extra"]
) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.sampled_from([0, -1, 1, 2, 3, 6, 65536, 65537, 2**31, 2**63, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 0.5, 1e308, -1e-308, 2.5])
    | st.text(max_size=12)
    | st.sampled_from(["", "\0", "a.jpg", "../../etc/passwd", "/proc/self/environ", "x" * 5000,
                       "2020-01-02", "0o17", "1:20", "~", "null", RLE_40x60[:-1] + "!"])
)
NUMBER_LISTS = st.lists(st.integers(-5, 70) | st.floats(-5, 70) | SCALARS, max_size=9)
VALUES = st.recursive(
    SCALARS | NUMBER_LISTS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=10,
) | st.fixed_dictionaries({"size": NUMBER_LISTS, "counts": NUMBER_LISTS | SCALARS})


SMALL = st.integers(-3, 70) | st.floats(-3, 70) | st.sampled_from([0, -1, 1e308, 2**64, True])
FIELD_VALUES = {
    "bbox": st.lists(SMALL, min_size=3, max_size=5),
    "bbox_label": st.integers(-2, 4) | st.sampled_from([True, 1.0, "1", 2**31]),
    "ignore_flag": st.integers(-1, 2) | st.sampled_from([True, False, 1.0, "0"]),
    "height": st.integers(-1, 3) | st.integers(65535, 65537) | st.sampled_from([True, 8.0]),
    "width": st.integers(-1, 3) | st.integers(65535, 65537) | st.sampled_from([True, 6.0]),
    "img_id": st.integers(-1, 3) | st.text(max_size=3) | st.sampled_from([None, 1.5, True]),
    "mask": st.lists(st.lists(SMALL, max_size=9), max_size=3) | st.lists(SMALL, max_size=4),
    "keypoints": st.lists(SMALL, max_size=7),
    "counts": st.lists(st.integers(-1, 30), max_size=4)
    | st.text("0123456789:;<=>?@OX[]i", max_size=8),
    "size": st.lists(st.integers(-1, 70), min_size=1, max_size=3),
    "img_path": st.sampled_from(["", "\0", "ok.jpg", "x" * 4097, 3]),
    "classes": st.lists(st.text(max_size=3) | st.integers(0, 2), max_size=4) | st.text(max_size=5),
}


def nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth - 1):
        value = [value]
    return value


def mutate_doc(data: st.DataObject, doc: dict) -> dict:
    kind = data.draw(st.sampled_from(["replace", "field", "field", "delete", "insert", "deep"]))
    all_paths = paths(doc)
    if kind == "field":  # a near-valid value for a key the loader knows
        keyed = [p for p in all_paths if p and p[-1] in FIELD_VALUES]
        path = data.draw(st.sampled_from(keyed), label="path")
        TALLY["mutation field"] += 1
        get_parent(doc, path)[path[-1]] = data.draw(FIELD_VALUES[path[-1]], label="value")
        return doc
    path = data.draw(st.sampled_from(all_paths), label="path")
    TALLY[f"mutation {kind}"] += 1
    if kind == "insert":
        target = get_parent(doc, path + (None,))
        if isinstance(target, dict):
            target[data.draw(KEYS, label="key")] = data.draw(VALUES, label="value")
        elif isinstance(target, list):
            target.insert(data.draw(st.integers(0, len(target))), data.draw(VALUES))
        return doc
    if not path:
        return data.draw(VALUES, label="document") if kind != "deep" else nested(150)
    parent = get_parent(doc, path)
    if kind == "delete":
        del parent[path[-1]]
    elif kind == "deep":
        parent[path[-1]] = nested(data.draw(st.integers(90, 300), label="depth"))
    else:
        parent[path[-1]] = data.draw(VALUES, label="value")
    return doc


def serialize(doc: Any, fmt: str) -> bytes:
    if fmt == "json":
        return json.dumps(doc, allow_nan=True).encode()
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 20).encode()


def mutate_bytes(data: st.DataObject, raw: bytes) -> bytes:
    kind = data.draw(st.sampled_from(["truncate", "flip", "invalid_utf8", "insert"]))
    TALLY[f"mutation bytes {kind}"] += 1
    at = data.draw(st.integers(0, len(raw)), label="at")
    if kind == "truncate":
        return raw[:at]
    if kind == "flip":
        at = min(at, len(raw) - 1)
        return raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1:]
    if kind == "invalid_utf8":
        bad = data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80",
                                         b"\xe9", b"\x80"]))
        return raw[:at] + bad + raw[at:]
    return raw[:at] + data.draw(st.binary(min_size=1, max_size=4)) + raw[at:]


# ------------------------------------------------------------------ running one example
class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def canon(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # NaN-aware equality; key order kept


#: The work one load may do, counted as function calls (Python and C) per byte of the file.
#: A load makes well under 100 calls per byte (plus a fixed cost, see WORK_BASE_CALLS); a
#: run-away (quadratic or endless) loop in the loader exceeds the budget at once, on any
#: machine, instead of being timed.
WORK_CALLS_PER_BYTE = 300
WORK_BASE_CALLS = 50_000
#: A liveness bound, not a performance one: a load still running after this many seconds is
#: taken for hung (loads take milliseconds; the time is never asserted).
LIVENESS_SECONDS = 60


class _Runaway(AssertionError):
    """The load exceeded its work budget or the liveness bound (raised inside the loader)."""


@contextlib.contextmanager
def _bounded_work(size: int, what: str):
    """Count the calls made inside the block; past the budget for ``size`` bytes, or after
    LIVENESS_SECONDS, fail (even if the loader catches the exception raised inside it).

    Yields a list holding the number of calls made so far."""
    budget = WORK_BASE_CALLS + WORK_CALLS_PER_BYTE * size
    calls, stopped = [0], []

    def profile(frame, event, arg):
        if event == "call" or event == "c_call":
            calls[0] += 1
            if calls[0] > budget:
                stopped.append(f"run-away work: more than {budget} calls loading {what} "
                               f"({size} bytes)")
                raise _Runaway(stopped[-1])

    def alarm(signum, frame):
        stopped.append(f"hung: loading {what} ({size} bytes) ran {LIVENESS_SECONDS} s")
        raise _Runaway(stopped[-1])

    previous_handler = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(LIVENESS_SECONDS)
    previous_profile = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous_profile)
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous_handler)
        if stopped:
            TALLY["hang" if stopped[0].startswith("hung") else "run-away work"] += 1
            raise _Runaway(stopped[0])


def load(raw: bytes, fmt: str, workdir: Path):
    """(outcome, metainfo, records, skip counts); outcome is 'ok' or the error raised."""
    path = workdir / f"ann.{fmt}"
    path.write_bytes(raw)
    handler = _Capture()
    logger = logging.getLogger("catalog.formats.openmmlab")
    logger.addHandler(handler)
    try:
        with _bounded_work(len(raw), path.name):
            meta, records = load_annotation_file(path, record_format="openmmlab")
    except AnnotationFormatError as exc:
        assert str(path) in str(exc), f"error does not name the file: {exc}"
        return exc, None, None, None
    except _Runaway:
        raise
    except Exception as exc:  # noqa: BLE001 - the very thing this test looks for
        TALLY["untyped error"] += 1
        raise AssertionError(f"untyped {type(exc).__name__}: {exc!r:.300}") from exc
    finally:
        logger.removeHandler(handler)
    warnings = [r for r in handler.records if hasattr(r, "annotation_kept")]
    assert len(warnings) <= 1, "more than one summary warning for one file"
    skips = {k: v for k, v in (warnings[0].annotation_kept if warnings else {}).items() if v}
    return "ok", meta, records, skips


def check_against_oracle(doc: Any, raw: bytes, fmt: str, workdir: Path) -> None:
    outcome, meta, records, skips = load(raw, fmt, workdir)
    try:
        want = expect(doc, fmt)
    except Invalid:
        want = None
    except RecursionError:
        assume(False)  # the oracle itself cannot judge (never happens with our depths)
    if want is None:
        if outcome == "ok":
            TALLY["accepted malformed"] += 1
        assert outcome != "ok", "malformed data accepted silently"
        TALLY["typed error (expected)"] += 1
        return
    if outcome != "ok":
        TALLY["rejected valid"] += 1
    assert outcome == "ok", f"valid data refused: {outcome}"
    assert canon(meta) == canon(want[0])
    assert canon(records) == canon(want[1]), "records differ from the oracle"
    assert skips == want[2], f"skips reported {skips}, expected {want[2]}"
    TALLY["accepted with skips" if skips else "accepted"] += 1


def check_postcondition(raw: bytes, fmt: str, workdir: Path) -> None:
    """For byte mutations: a typed error, or a result the oracle finds valid as it is."""
    outcome, meta, records, _ = load(raw, fmt, workdir)
    if outcome != "ok":
        TALLY["typed error"] += 1
        return
    if fmt == "json":  # the bytes must also be strict JSON that gives the same result
        try:
            doc = json.loads(raw.removeprefix(b"\xef\xbb\xbf"), parse_constant=_no_constants)
        except ValueError:
            TALLY["accepted malformed"] += 1
            raise AssertionError("bytes that are not strict JSON were accepted") from None
        check_against_oracle(doc, raw, fmt, workdir)
        return
    try:
        _, again, skips = expect({"metainfo": meta, "data_list": records}, fmt)
    except Invalid:
        TALLY["accepted malformed"] += 1
        raise AssertionError("the loader returned records the oracle finds malformed") from None
    assert canon(again) == canon(records)  # raw mode returns entries as they are
    TALLY["accepted"] += 1


def _no_constants(name: str) -> Any:
    raise ValueError(name)


# ------------------------------------------------------------------ the tests
_REFERENCE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # C: no Python recursion
_WORKDIR = Path(tempfile.mkdtemp(prefix="catmap_fuzz_ann_"))
atexit.register(shutil.rmtree, _WORKDIR, ignore_errors=True)
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _structural(data: st.DataObject, fmt: str) -> None:
    doc = mutate_doc(data, valid_doc())
    raw = serialize(doc, fmt)
    if fmt == "yaml":  # judge what the file says, whatever PyYAML's dumper made of it
        try:
            assume(canon(yaml.load(raw, Loader=_REFERENCE_LOADER)) == canon(doc))
        except (yaml.YAMLError, RecursionError):
            assume(False)
    TALLY["examples"] += 1
    check_against_oracle(doc, raw, fmt, _WORKDIR)


def _bytes(data: st.DataObject, fmt: str) -> None:
    raw = mutate_bytes(data, serialize(valid_doc(), fmt))
    TALLY["examples"] += 1
    check_postcondition(raw, fmt, _WORKDIR)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_valid_fixture_matches_oracle(fmt):
    _, records, skips = expect(valid_doc(), fmt)
    assert skips == {} and records == valid_doc()["data_list"]
    check_against_oracle(valid_doc(), serialize(valid_doc(), fmt), fmt, _WORKDIR)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@settings(max_examples=150, **_SETTINGS)
@given(data=st.data())
def test_fuzz_structural_mutations(fmt, data):
    _structural(data, fmt)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@settings(max_examples=100, **_SETTINGS)
@given(data=st.data())
def test_fuzz_byte_mutations(fmt, data):
    _bytes(data, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_fuzz_slow_1500_each(fmt, capsys):
    """``python -m pytest -m slow -s tests/test_fuzz_annotation_file.py``: 1,500 structural and
    500 byte mutations per format; prints the tally."""
    TALLY.clear()

    @settings(max_examples=1500, **_SETTINGS)
    @given(data=st.data())
    def structural(data):
        _structural(data, fmt)

    @settings(max_examples=500, **_SETTINGS)
    @given(data=st.data())
    def byte_level(data):
        _bytes(data, fmt)

    structural()
    byte_level()
    with capsys.disabled():
        print(f"\n[{fmt}] {dict(sorted(TALLY.items()))}")
    assert TALLY["untyped error"] == TALLY["accepted malformed"] == TALLY["hang"] == 0
    assert TALLY["run-away work"] == 0
