"""Fuzz the COCO loader: every mutated file must give AnnotationFormatError or the outcome of
an independent reference of the documented policy (``tools/coco_reference.py``): malformed
values raise or are counted, valid files load. ``pytest -m slow`` runs 4,000 examples.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.coco_reference import reference_outcome
from tools.fuzz_loaders import FIELDS, VALUES, _paths, _set, classify, mutate, run_paths

_EXTRA = ("area", "id", "num_keypoints", "attributes", "score", "segmentation")


def valid_coco() -> dict[str, Any]:
    """Instances and keypoints, polygons, compressed and uncompressed RLE crowds, unread keys:
    loads without any skip."""
    return {
        "info": {"description": "fuzz fixture", "year": 2024},
        "licenses": [{"id": 1, "name": "l"}],
        "images": [
            {"id": 1, "file_name": "a.jpg", "height": 4, "width": 6, "license": 1},
            {"id": 2, "file_name": "b/c.jpg", "height": 3, "width": 2},
            {"id": 5, "file_name": "d.jpg", "height": 8, "width": 8},
        ],
        "categories": [
            {"id": 1, "name": "person", "keypoints": ["nose", "eye"], "skeleton": [[1, 2]]},
            {"id": 3, "name": "car", "supercategory": "vehicle"},
            {"id": 9, "name": "dog"},
        ],
        "annotations": [
            {"id": 10, "image_id": 1, "category_id": 3, "bbox": [0, 0, 2, 3], "area": 6,
             "iscrowd": 0, "segmentation": [[0, 0, 2, 0, 2, 3], [1.5, 1, 2, 2, 1, 2]],
             "attributes": {"occluded": False}, "score": 0.5},
            {"id": 11, "image_id": 1, "category_id": 1, "bbox": [1.0, 1.0, 3.0, 2.0],
             "iscrowd": 0, "keypoints": [1, 1, 2, 2, 2, 1], "num_keypoints": 2,
             "segmentation": [[1, 1, 4, 1, 4, 3, 1, 3]]},
            {"id": 12, "image_id": 2, "category_id": 9, "bbox": [0, 0, 2, 3], "iscrowd": 1,
             "segmentation": {"size": [3, 2], "counts": [1, 4, 1]}, "area": 4.0},
            {"id": 13, "image_id": 5, "category_id": 9, "bbox": [1, 1, 1, 1], "iscrowd": 1,
             "segmentation": {"counts": "0o1", "size": [8, 8]}},
            {"id": 14, "image_id": 5, "category_id": 3, "bbox": [2, 2, 4, 4], "ignore": 0},
        ],
    }


def _check(data: bytes, extra: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "instances.json")
        with open(path, "wb") as f:
            f.write(data)
        outcomes = run_paths(path, extra)
    reference = reference_outcome(data, extra)
    problems = classify(outcomes, reference)
    assert not problems, (problems, reference, outcomes, data[:2000])


def test_fixture_is_valid_and_loads_without_skips():
    data = json.dumps(valid_coco()).encode()
    assert reference_outcome(data, _EXTRA) == ("ok", {}, [2, 1, 2])
    _check(data, _EXTRA)


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4), st.sampled_from(VALUES),
)
_keys = st.sampled_from(["size", "counts", "a"])
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=7) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def mutated_inputs(draw: st.DrawFn) -> tuple[bytes, tuple[str, ...]]:
    doc = valid_coco()
    extra = draw(st.sampled_from([(), _EXTRA, ("area", "score")]))
    if draw(st.booleans()):  # a hypothesis-chosen value at a hypothesis-chosen path
        for _ in range(draw(st.integers(1, 2))):
            if draw(st.booleans()):  # a key the loader reads (present or not)
                section = draw(st.sampled_from(sorted(FIELDS)))
                index = draw(st.integers(0, len(valid_coco()[section]) - 1))
                path: tuple = (section, index, draw(st.sampled_from(FIELDS[section])))
            else:  # anywhere, nested values included
                paths = _paths(doc)
                path = paths[draw(st.integers(0, len(paths) - 1))]
            try:
                doc = _set(doc, path, copy.deepcopy(draw(_values)))
            except (KeyError, IndexError, TypeError):  # the path went away with an earlier change
                pass
        return json.dumps(doc).encode(), extra
    rng = draw(st.randoms(use_true_random=False))  # the tool's mutations, hypothesis-driven
    data, _ = mutate(json.dumps(doc).encode(), rng)
    return data, extra


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@settings(max_examples=150, **_SETTINGS)
@given(mutated_inputs())
def test_the_loader_agrees_with_the_reference(case):
    logging.disable(logging.WARNING)
    try:
        _check(*case)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.slow
@settings(max_examples=4000, **_SETTINGS)
@given(mutated_inputs())
def test_the_loader_agrees_with_the_reference_long(case):
    logging.disable(logging.WARNING)
    try:
        _check(*case)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("raw", ["1e400", "NaN", "1" * 5000, "[" * 1100 + "]" * 1100,
                                 '"\\ud800"', "[" * 900 + "]" * 900])
@pytest.mark.parametrize("where", [("info",), ("annotations", 0, "bbox", 0),
                                   ("annotations", 0, "attributes")])
def test_raw_json_edge_values_everywhere(raw, where):
    doc = valid_coco()
    _set(doc, where, "@@raw@@")
    data = json.dumps(doc).replace('"@@raw@@"', raw).encode()
    _check(data, _EXTRA)


@pytest.mark.parametrize("data", [
    b"", b"\xef\xbb\xbf{}", b"{", b'{"images": []}\x00', "{}".encode("utf-16"),
    b'{"images": [], "x": "\xff"}', b'{"images": [], "x": "\xed\xa0\x80"}',
    b"[" * 200000, b'{"images": [], "x": ' + b"[" * 200000 + b"]" * 200000 + b"}",
])
def test_byte_level_garbage(data):
    _check(data, ())
