"""The columnar build writes exactly the same arrays as before its speed-ups.

``build_arrays(records, columnar=True)`` output is stored in cache files and read back by
:class:`~catalog.annotation_columns.AnnotationColumns`, so every array (the pickle buffer, the
record ends, the sampler columns and the seven annotation arrays) must stay byte-identical.
The small cases spell their arrays out; the large mixes (clean, hostile, over several chunks)
compare SHA-256 digests recorded from the build before the speed-ups (commit 220754d).
"""

from __future__ import annotations

import copy
import functools
import hashlib
from typing import Any

import numpy as np
import pytest

from catalog.box_mode import BoxMode
from catalog.record_build import build_arrays
from catalog.seeding import numpy_generator
from tools.bench_serialize import synthetic_records

_NAMES = (
    "buffer", "ends", "heights", "widths", "category_ids", "iscrowd", "category_offsets",
    "kinds", "schema_ids", "value_offsets", "values", "shape_offsets", "shapes", "schemas",
)  # fmt: skip


def _arrays(records: list[Any]) -> dict[str, np.ndarray]:
    buffer, ends, columns, annotations = build_arrays(records, columnar=True, progress=False)
    arrays = (buffer, ends, *columns.arrays(), *annotations.arrays())
    return dict(zip(_NAMES, arrays, strict=True))


def _digests(records: list[Any]) -> dict[str, str]:
    """``name: dtype:shape:sha256-prefix`` of every array."""
    return {
        name: f"{arr.dtype.str}:{arr.shape[0]}:{hashlib.sha256(arr.tobytes()).hexdigest()[:16]}"
        for name, arr in _arrays(records).items()
    }


class _DictSubclass(dict):
    pass


class _FloatSubclass(float):
    pass


def _hostile(records: list[dict], rng: np.random.Generator) -> list[Any]:
    """Copies of ``records`` with one edit each, drawn from ``rng``: values the columns cannot
    hold, other keys or key orders, other types of records and annotations."""

    def edit(record: dict, choice: int) -> Any:
        annos = record["annotations"]
        anno = annos[int(rng.integers(0, len(annos)))]
        edits = [
            lambda: anno["bbox"].__setitem__(0, int(anno["bbox"][0])),
            lambda: anno["bbox"].__setitem__(1, -0.0),
            lambda: anno["segmentation"][0].__setitem__(2, 0.125),
            lambda: anno["bbox"].__setitem__(2, np.float64(1.5)),
            lambda: anno["bbox"].__setitem__(3, float("nan")),
            lambda: anno["segmentation"][0].__setitem__(0, True),
            lambda: anno.__setitem__("extra", "x"),
            lambda: annos.__setitem__(0, dict(reversed(list(annos[0].items())))),
            lambda: annos.append(7),
            lambda: record.__setitem__("annotations", tuple(annos)),
            lambda: record.pop("annotations"),
            lambda: anno.__setitem__("segmentation", {"size": [4, 4], "counts": "ab"}),
            lambda: anno.__setitem__("keypoints", [1.5, 2.5, 2, 3.5, 4.5, 0]),
            lambda: anno.__setitem__("bbox_mode", BoxMode.XYXY_ABS),
            lambda: anno.__setitem__("category_id", 2**40),
            lambda: anno.__setitem__("iscrowd", 3),
            lambda: anno.__setitem__("bbox", [1.5, 2.5, 3.5]),
            lambda: anno["segmentation"].append((1.0, 2.0)),
            lambda: record.__setitem__("annotations", []),
            lambda: anno["bbox"].__setitem__(0, 1e10),
            lambda: anno["bbox"].__setitem__(0, _FloatSubclass(1.5)),
            lambda: anno.__setitem__("category_id", 1.0),
            lambda: record.__setitem__("height", "tall"),
            lambda: anno.__setitem__("iscrowd", None),
            lambda: anno.pop("category_id"),
            lambda: record.__setitem__("annotations", 5),
            lambda: anno.__setitem__("segmentation", []),
            lambda: anno["bbox"].__setitem__(0, 2**70),
            lambda: [a.__setitem__("bbox", [int(v) for v in a["bbox"]]) for a in annos],
        ]
        if choice < len(edits):
            edits[choice]()
        elif choice == len(edits):
            return _DictSubclass(record)
        elif choice == len(edits) + 1:
            return ["not", "a", "dict"]
        return record

    return [edit(copy.deepcopy(r), int(rng.integers(0, 45))) for r in records]


def test_small_records_give_the_arrays_spelled_out():
    records: list[Any] = [
        {"file_name": "a.jpg", "height": 4, "width": 6, "annotations": [
            {"bbox": [1.5, 2.0, 3.25, 4.0], "category_id": 3, "iscrowd": 0,
             "segmentation": [[0.5, 1.0, 2.0, 3.0, 4.0, 5.25]]},
            {"bbox": [0.0, 1.0, 2.0, 3.0], "category_id": 1, "iscrowd": 1,
             "segmentation": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [7.0, 8.0, 9.0, 1.0, 2.0, 3.0]]},
        ]},
        {"file_name": "b.jpg", "annotations": []},
        {"annotations": [{"bbox": [1, 2, 3, 4], "category_id": 0}]},
        {"annotations": [{"bbox": [0.125, 2.0, 3.0, 4.0], "category_id": 2}]},
        7,
    ]  # fmt: skip
    got = _arrays(records)
    assert got["kinds"].tolist() == [1, 0, 2, 0, 0]
    assert got["schema_ids"].tolist() == [1, 0, 2, 0, 0]
    assert got["value_offsets"].tolist() == [0, 26, 26, 30, 30, 30]
    assert got["values"].tolist() == [
        150, 200, 325, 400, 0, 100, 200, 300,
        50, 100, 200, 300, 400, 525,
        100, 200, 300, 400, 500, 600, 700, 800, 900, 100, 200, 300,
        1, 2, 3, 4,
    ]  # fmt: skip
    assert got["shape_offsets"].tolist() == [0, 5, 5, 5, 5, 5]
    assert got["shapes"].tolist() == [1, 6, 2, 6, 6]
    assert got["heights"].tolist() == [4, -1, -1, -1, -1]
    assert got["category_ids"].tolist() == [3, 1, 0, 2]
    assert got["iscrowd"].tolist() == [0, 1, 0, 0]
    assert got["category_offsets"].tolist() == [0, 2, 2, 3, 4, 4]
    assert got["values"].dtype == np.int32 and got["shapes"].dtype == np.int32


# Digests of the arrays built before the speed-ups (commit 220754d), for the same records.
_GOLDEN: dict[str, dict[str, str]] = {
    "clean_3000": {
        "buffer": "|u1:317744:349981929cc50c93",
        "ends": "<i8:3000:c38169962ac05e3a",
        "heights": "<i4:3000:c46274634514d898",
        "widths": "<i4:3000:fe300a41dfbb4f77",
        "category_ids": "<i4:21129:a6ee461e6ce451e7",
        "iscrowd": "|u1:21129:4f2aa4533143aa17",
        "category_offsets": "<i8:3001:f5ce0936149595ea",
        "kinds": "|u1:3000:003164e6603fa379",
        "schema_ids": "|u1:3000:003164e6603fa379",
        "value_offsets": "<i8:3001:32cad47e112b3ced",
        "values": "<i4:338064:4546df67b633157f",
        "shape_offsets": "<i8:3001:8ad85832d0b4d56d",
        "shapes": "<i4:42258:80d38ffb08817b9e",
        "schemas": "|u1:95:67deb1d03ae8c40b",
    },
    "hostile_3000": {
        "buffer": "|u1:1932529:d141f3b117e379c1",
        "ends": "<i8:3000:629fd58ec1290374",
        "heights": "<i4:3000:c94ec9508eb7d179",
        "widths": "<i4:3000:8631ecaa85459003",
        "category_ids": "<i4:19195:14a15e3966157bb8",
        "iscrowd": "|u1:19195:b8029a651aa4243b",
        "category_offsets": "<i8:3001:26a393c3f3602fe8",
        "kinds": "|u1:3000:ef78cb733445529b",
        "schema_ids": "|u1:3000:b7656b5fe2e16edd",
        "value_offsets": "<i8:3001:572ea98ca4b37195",
        "values": "<i4:163272:232948dcccfc586a",
        "shape_offsets": "<i8:3001:b0a6d33b1c01de1c",
        "shapes": "<i4:20251:136137b18d90b765",
        "schemas": "|u1:244:38e0699ed00542ce",
    },
    "hostile_repeated_5000": {
        "buffer": "|u1:3218600:8bbeca17fe3aa043",
        "ends": "<i8:5000:d89a01f655274690",
        "heights": "<i4:5000:e5bc92e222e1d16c",
        "widths": "<i4:5000:60b4089ad182431b",
        "category_ids": "<i4:32800:20a52947c664e789",
        "iscrowd": "|u1:32800:e7f0fe5802773cd2",
        "category_offsets": "<i8:5001:57a6c51835ff4344",
        "kinds": "|u1:5000:e8f8f971fe0f1a66",
        "schema_ids": "|u1:5000:e0367be9adc38caa",
        "value_offsets": "<i8:5001:8bddcdae12d56bb3",
        "values": "<i4:284480:e24c02633fe15cb0",
        "shape_offsets": "<i8:5001:9ca866ba38cbb5ca",
        "shapes": "<i4:35060:0ed6d1672624d699",
        "schemas": "|u1:244:7f3453bfab8f818e",
    },
}


@functools.cache
def _cases() -> dict[str, list[Any]]:
    clean = list(synthetic_records(3000, seed=7))
    rng = numpy_generator(20261123)
    return {
        "clean_3000": clean,
        "hostile_3000": _hostile(list(synthetic_records(3000, seed=8)), rng),
        "hostile_repeated_5000": _hostile(list(synthetic_records(250, seed=9)), rng) * 20,
    }


@pytest.mark.parametrize("case", ["clean_3000", "hostile_3000", "hostile_repeated_5000"])
def test_large_mixes_build_the_recorded_arrays(case):
    got = _digests(_cases()[case])
    expected = _GOLDEN[case]
    differ = [name for name in _NAMES if got[name] != expected[name]]
    assert not differ, {name: (got[name], expected[name]) for name in differ}
