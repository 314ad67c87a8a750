"""Columnar record storage: every record comes back exactly as given (keys, order, types)."""

from __future__ import annotations

import math
import os
import pickle
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import BoxMode, SerializedList
from catalog.annotation_columns import KIND_FLOAT, KIND_INT, KIND_PICKLED
from catalog.record_views import concat_records
from catalog.records_file import write_serialized
from catalog.records_map import map_serialized


@pytest.fixture(autouse=True)
def columnar_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the columnar storage: make it the default for every list built
    here (``CATMAP_COLUMNAR_RECORDS=1``), as a user who opts in does."""
    monkeypatch.setenv("CATMAP_COLUMNAR_RECORDS", "1")


def same(a: Any, b: Any) -> bool:
    """Deep equality that also requires equal types, key order and the sign of zero."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def check_roundtrip(records: list[Any]) -> SerializedList:
    sl = SerializedList(records, name="prop")
    assert len(sl) == len(records)
    for i, record in enumerate(records):
        assert same(sl[i], record), (i, sl[i], record)
    got = list(sl)
    assert all(same(x, y) for x, y in zip(got, records, strict=True))
    # a rebuilt record is a fresh object: editing it changes nothing stored
    if records and isinstance(sl[0], dict):
        first = sl[0]
        first["__scratch__"] = 1
        for anno in first.get("annotations") or []:
            if isinstance(anno, dict):
                anno.clear()
        assert same(sl[0], records[0])
    return sl


two_decimals = st.integers(-10**6, 10**6).map(lambda k: k / 100)
any_float = st.floats(allow_nan=True, allow_infinity=True)
coordinate = st.one_of(
    two_decimals, st.floats(-1e4, 1e4), any_float, st.integers(-(2**40), 2**40)
)
numbers = st.one_of(
    st.lists(two_decimals, max_size=8),
    st.lists(st.integers(-1000, 1000), max_size=8),
    st.lists(coordinate, max_size=8),
)
rle = st.fixed_dictionaries(
    {"size": st.lists(st.integers(1, 50), min_size=2, max_size=2), "counts": st.text(max_size=8)}
)
odd_value = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), any_float, st.integers(-(2**70), 2**70),
    st.tuples(st.integers()), st.just(np.float64(1.5)),
)  # fmt: skip

annotation_values = {
    "bbox": st.one_of(st.lists(two_decimals, min_size=4, max_size=4),
                      st.lists(st.integers(0, 500), min_size=4, max_size=4),
                      st.lists(coordinate, min_size=4, max_size=4), numbers, odd_value),
    "bbox_mode": st.one_of(st.sampled_from([0, 1, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS]), odd_value),
    "category_id": st.one_of(st.integers(0, 90), st.integers(-(2**40), 2**40), odd_value),
    "iscrowd": st.one_of(st.sampled_from([0, 1]), st.integers(-3, 3), odd_value),
    "segmentation": st.one_of(st.lists(st.lists(two_decimals, max_size=10), max_size=3),
                              st.lists(numbers, max_size=3), rle, odd_value),
    "keypoints": st.one_of(
        st.lists(st.tuples(two_decimals, two_decimals, st.sampled_from([0, 1, 2])), max_size=5)
        .map(lambda ts: [v for t in ts for v in t]),
        numbers, odd_value),
    "area": st.one_of(any_float, odd_value),
    "extra": odd_value,
}  # fmt: skip


clean_values = {
    "bbox": st.lists(two_decimals, min_size=4, max_size=4),
    "bbox_mode": st.sampled_from([0, 1, BoxMode.XYWH_ABS, BoxMode.XYXY_ABS]),
    "category_id": st.integers(0, 90),
    "iscrowd": st.sampled_from([0, 1]),
    "segmentation": st.lists(st.lists(two_decimals, max_size=10), max_size=3),
    "keypoints": st.lists(
        st.tuples(two_decimals, two_decimals, st.sampled_from([0, 1, 2])), max_size=5
    ).map(lambda ts: [v for t in ts for v in t]),
    "area": two_decimals,
    "extra": st.text(max_size=3),
}


@st.composite
def annotation(draw: Any, keys: list[str], clean: bool = False) -> dict:
    values = clean_values if clean else annotation_values
    return {key: draw(values[key]) for key in keys}


@st.composite
def record(draw: Any) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(st.one_of(st.lists(st.integers(), max_size=3), st.text(max_size=3), st.none()))
    keys = draw(st.permutations(list(annotation_values)))[: draw(st.integers(0, 6))]
    uniform = draw(st.booleans())
    count = draw(st.integers(0, 5))
    if uniform:
        clean = draw(st.booleans())
        annos: Any = [draw(annotation(keys, clean)) for _ in range(count)]
    else:
        annos = [
            draw(annotation(draw(st.permutations(list(annotation_values)))[:3]))
            for _ in range(count)
        ]
    if count and draw(st.integers(0, 10)) == 0:
        annos[0] = draw(odd_value)  # an annotation that is not a dict
    if draw(st.integers(0, 10)) == 0:
        annos = tuple(annos)
    fields = {
        "file_name": st.text(max_size=10),
        "height": st.one_of(st.integers(1, 2000), odd_value),
        "width": st.integers(1, 2000),
        "image_id": st.one_of(st.integers(), st.text(max_size=4)),
        "annotations": st.just(annos),
        "note": odd_value,
    }
    names = draw(st.permutations(list(fields)))[: draw(st.integers(0, len(fields)))]
    if "annotations" not in names and draw(st.booleans()):
        names.append("annotations")
    return {name: draw(fields[name]) for name in names}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record(), max_size=12))
def test_random_records_come_back_exactly(records):
    check_roundtrip(records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.permutations(sorted(set(clean_values) - {"area", "extra"})).flatmap(
            lambda keys: st.lists(annotation(keys[:4], clean=True), min_size=1, max_size=6)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_clean_records_are_all_columnar(annotation_lists):
    records = [{"image_id": i, "annotations": annos} for i, annos in enumerate(annotation_lists)]
    sl = check_roundtrip(records)
    assert (sl.annotation_columns.kinds != KIND_PICKLED).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record(), min_size=1, max_size=8))
def test_random_records_survive_pickling_files_and_views(records):
    sl = SerializedList(records, name="prop")
    again = pickle.loads(pickle.dumps(sl))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prop.records")
        with open(path, "wb") as f:
            write_serialized(f, sl)
        mapped, _ = map_serialized(path)  # stays mapped after the file is gone
    view = concat_records([sl.subset(list(range(len(sl)))[::-1]), mapped])
    expected = records[::-1] + records
    for copy in (again, mapped):
        assert all(same(copy[i], r) for i, r in enumerate(records))
    assert all(same(view[i], r) for i, r in enumerate(expected))
    assert all(same(x, r) for x, r in zip(view.compact(), expected, strict=True))


def _coco_like(n: int) -> list[dict]:
    return [
        {
            "file_name": f"images/{i:012d}.jpg",
            "height": 480,
            "width": 640,
            "image_id": i,
            "annotations": [
                {
                    "iscrowd": 0,
                    "bbox": [10.25, 20.5, 30.0, 40.75 + k],
                    "category_id": k,
                    "bbox_mode": BoxMode.XYWH_ABS,
                    "segmentation": [[1.5, 2.5, 3.25, 4.0, 5.0, 6.75], [0.0, 1.0, 2.0, 3.0, 4.0, 5.5]],
                }
                for k in range(i % 5)
            ],
        }
        for i in range(n)
    ]


def test_coco_like_records_are_columnar_and_smaller_than_pickles():
    records = _coco_like(200)
    sl = check_roundtrip(records)
    kinds = sl.annotation_columns.kinds
    has_annotations = np.array([bool(r["annotations"]) for r in records])
    assert (kinds[has_annotations] == KIND_FLOAT).all()
    assert (kinds[~has_annotations] == KIND_PICKLED).all()
    pickled = sum(len(pickle.dumps(r, protocol=5)) for r in records)
    assert sl.nbytes < 0.6 * pickled, (sl.nbytes, pickled)
    assert sl[7]["annotations"][1]["bbox_mode"] is BoxMode.XYWH_ABS


def test_columnar_false_pickles_every_record_and_reads_the_same():
    records = _coco_like(50)
    plain = SerializedList(records, columnar=False)
    assert (plain.annotation_columns.kinds == KIND_PICKLED).all()
    assert all(same(plain[i], r) for i, r in enumerate(records))
    assert SerializedList(records).nbytes < plain.nbytes


def test_int_coordinates_and_keypoints_are_columnar():
    records = [
        {"annotations": [{"bbox": [1, 2, 3, 4], "category_id": 3}]},
        {"annotations": [{"keypoints": [1.5, 2.5, 2, 3.5, 4.5, 0], "bbox": [0.5, 1.0, 2.0, 3.0]}]},
    ]
    sl = check_roundtrip(records)
    assert sl.annotation_columns.kinds.tolist() == [KIND_INT, KIND_FLOAT]


@pytest.mark.parametrize(
    "value",
    [-0.0, 0.125, 1e10, float("nan"), float("inf"), 2**31, True, np.float64(1.25)],
    ids=repr,
)
def test_values_the_columns_cannot_hold_fall_back_to_pickles(value):
    records = [
        {"annotations": [{"bbox": [value, 1.5, 2.5, 3.5]}]},
        {"annotations": [{"bbox": [1.5, 1.5, 2.5, 3.5]}]},
    ]
    sl = check_roundtrip(records)
    assert sl.annotation_columns.kinds.tolist() == [KIND_PICKLED, KIND_FLOAT]


def test_rle_and_extra_keys_stay_in_the_skeleton_the_rest_in_columns():
    records = [
        {
            "annotations": [
                {"bbox": [1.5, 2.5, 3.5, 4.5], "segmentation": {"size": [4, 4], "counts": "ab"},
                 "my_key": ("x", 1)},
                {"bbox": [1.0, 2.0, 3.0, 4.0], "segmentation": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]],
                 "my_key": None},
            ]
        }
    ]  # fmt: skip
    sl = check_roundtrip(records)
    assert sl.annotation_columns.kinds.tolist() == [KIND_FLOAT]
    assert sl.annotation_columns.values.tolist()[:4] == [150, 250, 350, 450]


def test_many_schemas_overflow_to_pickles():
    records = [{"annotations": [{f"k{i}": 1.5, "bbox": [1.5, 2.0, 3.0, 4.0]}]} for i in range(300)]
    sl = check_roundtrip(records)
    kinds = sl.annotation_columns.kinds
    assert (kinds[:255] == KIND_FLOAT).all() and (kinds[255:] == KIND_PICKLED).all()


def test_records_are_pickled_whole_unless_columnar_is_asked_for(monkeypatch):
    records = [{"file_name": "a.jpg", "annotations": [{"bbox": [1.5, 2.0, 3.0, 4.0],
                                                       "category_id": 0}]}] * 4
    monkeypatch.delenv("CATMAP_COLUMNAR_RECORDS")
    plain, columnar = SerializedList(records), SerializedList(records, columnar=True)
    assert plain.nbytes > columnar.nbytes
    assert all(same(a, b) for a, b in zip(plain, columnar, strict=True))


def test_annotation_keys_equal_to_each_other_keep_their_own_types():
    # 1, True and 1.0 are equal dict keys with one hash: a shared schema would give every
    # record the first one's key back
    records = [
        {"image_id": i, "annotations": [{key: 5, "bbox": [1.5, 2.0, 3.0, 4.0]}]}
        for i, key in enumerate([1, True, 1.0, "a"] * 3)
    ]
    stored = SerializedList(records, columnar=True)
    for i, record in enumerate(records):
        back = stored[i]
        assert back == record
        assert [type(k) for k in back["annotations"][0]] == [type(k) for k in record["annotations"][0]]
