"""get_detection_dataset_dicts: joining, filtering, consistency checks, histogram."""

from __future__ import annotations

import logging
import tracemalloc

import numpy as np
import pytest

from catalog import (
    DatasetCatalog,
    DatasetNotRegisteredError,
    EmptyDatasetError,
    MetadataCatalog,
    MetadataConflictError,
    SerializedList,
    get_detection_dataset_dicts,
)
from catalog import concat_records as concat_serialized
from catalog.dataset_catalog import _format_counts


def _anno(category: int, crowd: int = 0, keypoints: list | None = None) -> dict:
    anno = {"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": category, "iscrowd": crowd}
    if keypoints is not None:
        anno["keypoints"] = keypoints
    return anno


def _record(image_id: int, annotations: list | None) -> dict:
    record = {
        "file_name": f"{image_id}.jpg",
        "height": 10,
        "width": 20 + image_id,
        "image_id": image_id,
    }
    if annotations is not None:
        record["annotations"] = annotations
    return record


def _register(name: str, records: list[dict], classes: list[str] | None = None) -> None:
    DatasetCatalog.register(name, lambda: records)
    if classes is not None:
        MetadataCatalog.get(name).thing_classes = classes


@pytest.fixture
def two_datasets():
    _register(
        "det_a",
        [
            _record(0, [_anno(0), _anno(1)]),
            _record(1, []),  # no annotations
            _record(2, [_anno(1, crowd=1)]),  # only crowd
            _record(3, None),  # no annotations key
            _record(4, [_anno(1, crowd=1), _anno(0)]),
        ],
        ["cat", "dog"],
    )
    _register("det_b", [_record(10, [_anno(1)]), _record(11, [])], ["cat", "dog"])


def _ids(records) -> list[int]:
    return [r["image_id"] for r in records]


def test_single_name_without_filtering_returns_the_cached_list(two_datasets):
    result = get_detection_dataset_dicts("det_a", filter_empty=False)
    assert result is DatasetCatalog.get("det_a")
    assert _ids(result) == [0, 1, 2, 3, 4]


def test_names_joined_in_order(two_datasets):
    result = get_detection_dataset_dicts(["det_b", "det_a"], filter_empty=False)
    assert isinstance(result, SerializedList)
    assert _ids(result) == [10, 11, 0, 1, 2, 3, 4]
    assert result.columns.widths.tolist() == [30, 31, 20, 21, 22, 23, 24]
    assert result.columns.num_annotations().tolist() == [1, 0, 2, 0, 1, 0, 2]
    assert result.columns.category_ids.tolist() == [1, 0, 1, 1, 1, 0]


def test_filter_empty_drops_crowd_only_and_unannotated(two_datasets, caplog):
    with caplog.at_level(logging.INFO, logger="catalog.dataset_catalog"):
        result = get_detection_dataset_dicts(["det_a", "det_b"])
    assert _ids(result) == [0, 4, 10]
    assert result.columns.num_annotations().tolist() == [2, 2, 1]
    message = next(r.getMessage() for r in caplog.records if "removed" in r.getMessage())
    assert "removed 4 images" in message and "3 left" in message


def test_min_keypoints(caplog):
    _register(
        "kp",
        [
            _record(0, [_anno(0, keypoints=[1, 1, 2, 2, 2, 0, 3, 3, 1])]),  # 2 visible
            _record(1, [_anno(0, keypoints=[1, 1, 0, 2, 2, 0])]),  # 0 visible
            _record(2, [_anno(0, keypoints=[1, 1, 2]), _anno(0, keypoints=[5, 5, 1])]),  # 2
            _record(3, [_anno(0)]),  # no keypoints
        ],
    )
    with caplog.at_level(logging.INFO, logger="catalog.dataset_catalog"):
        result = get_detection_dataset_dicts("kp", filter_empty=False, min_keypoints=2)
    assert _ids(result) == [0, 2]
    assert any(
        "removed 2 images with fewer than 2 visible keypoints" in r.getMessage()
        and "2 left" in r.getMessage()
        for r in caplog.records
    )


def test_inconsistent_classes_raise_naming_both(two_datasets):
    _register("det_c", [_record(20, [_anno(0)])], ["cat", "bird"])
    with pytest.raises(MetadataConflictError, match="'det_a' and 'det_c'.*bird"):
        get_detection_dataset_dicts(["det_a", "det_c"])
    result = get_detection_dataset_dicts(["det_a", "det_c"], check_consistency=False)
    assert _ids(result) == [0, 4, 20]


def test_datasets_without_classes_are_not_compared(two_datasets):
    _register("det_plain", [_record(30, [_anno(0)])])
    assert _ids(get_detection_dataset_dicts(["det_plain", "det_a"])) == [30, 0, 4]


def test_empty_dataset_is_a_clear_error():
    _register("empty", [])
    with pytest.raises(EmptyDatasetError, match="'empty' is empty"):
        get_detection_dataset_dicts("empty")


def test_nothing_left_after_filtering_is_an_error():
    _register("all_crowd", [_record(0, [_anno(0, crowd=1)])])
    with pytest.raises(EmptyDatasetError, match="no images left in all_crowd"):
        get_detection_dataset_dicts("all_crowd")


def test_bad_names():
    with pytest.raises(ValueError, match="at least one"):
        get_detection_dataset_dicts([])
    with pytest.raises(TypeError, match="must be strs"):
        get_detection_dataset_dicts(["ok", 3])
    with pytest.raises(DatasetNotRegisteredError, match="'nope'"):
        get_detection_dataset_dicts("nope")


def test_class_histogram_logged_as_table(two_datasets, caplog):
    with caplog.at_level(logging.INFO, logger="catalog.dataset_catalog"):
        get_detection_dataset_dicts(["det_a", "det_b"])
    table = next(r.getMessage() for r in caplog.records if "#instances" in r.getMessage())
    lines = table.splitlines()
    assert "det_a+det_b" in lines[0]
    rows = {
        line.split("|")[0].strip(): int(line.split("|")[1])
        for line in lines[3:]
        if "|" in line and "-" not in line
    }
    assert rows == {"cat": 2, "dog": 2, "total": 4}  # the crowd instance of image 4 not counted


def test_format_class_histogram_without_names_and_empty():
    one = SerializedList([{"annotations": [_anno(2), _anno(0), _anno(2, crowd=1)]}])
    table = _format_counts([one], np.ones(1, bool), None)
    assert [line.split("|")[0].strip() for line in table.splitlines()[2:5]] == ["0", "1", "2"]
    assert _format_counts([one], np.zeros(1, bool), None) == ""  # nothing kept
    empty = SerializedList([{"annotations": []}])
    assert _format_counts([empty], np.ones(1, bool), None) == ""


def test_concat_serialized_matches_list_concatenation():
    a = SerializedList([_record(i, [_anno(i % 2)] * i) for i in range(3)])
    b = SerializedList([_record(10 + i, [_anno(1)]) for i in range(2)])
    joined = concat_serialized([a, SerializedList([]), b], name="ab")
    assert joined.to_list() == a.to_list() + b.to_list()
    expected = SerializedList(a.to_list() + b.to_list()).columns
    for got, want in zip(joined.columns.arrays(), expected.arrays(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert len(concat_serialized([])) == 0


# ---------------------------------------------------------------- views over shared buffers (#11)


def _coco_like(start: int, n: int) -> list[dict]:
    """COCO-like records, every 10th without annotations (filtered out by filter_empty)."""
    polygon = [[float(v) for v in range(16)]]
    return [
        _record(
            i,
            []
            if i % 10 == 0
            else [
                _anno(i % 2) | {"segmentation": polygon},
                _anno((i + 1) % 2, crowd=i % 3 == 0) | {"segmentation": polygon},
            ],
        )
        | {"file_name": f"/data/train2017/{i:012d}.jpg"}
        for i in range(start, start + n)
    ]


def test_filtered_join_is_a_view_over_the_catalog_buffers(two_datasets):
    result = get_detection_dataset_dicts(["det_a", "det_b"])
    a, b = DatasetCatalog.get("det_a"), DatasetCatalog.get("det_b")
    assert result.bases == (a, b)  # the cached (shared) lists themselves, not copies
    assert result.index.tolist() == [0, 4, 5]
    assert _ids(result) == [0, 4, 10] and result.name == "det_a+det_b"


def test_filtering_allocates_an_index_not_a_copy():
    DatasetCatalog.register("views_big", lambda: _coco_like(0, 20_000))
    base = DatasetCatalog.get("views_big")
    tracemalloc.start()
    try:
        result = get_detection_dataset_dicts("views_big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result) == 18_000 and result[0]["image_id"] == 1
    # index and per-record masks; a copy of the kept records' bytes would be ~ 90% of it
    assert peak < base.buffer.nbytes / 4, (peak, base.buffer.nbytes)
    assert result.bases == (base,)


def _rank_loads_two_datasets(rank: int, world: int) -> dict:
    import ctypes
    import gc

    import psutil

    DatasetCatalog.register("views_a", lambda: _coco_like(0, 40_000))
    DatasetCatalog.register("views_b", lambda: _coco_like(100_000, 40_000))
    a, b = DatasetCatalog.get("views_a"), DatasetCatalog.get("views_b")
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = psutil.Process().memory_full_info().uss
    result = get_detection_dataset_dicts(["views_a", "views_b"])
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    grown = psutil.Process().memory_full_info().uss - before
    memfds = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "memfd:catmap:views_" in fields[5]:
                memfds.add((fields[5], int(fields[4])))
    return {
        "len": len(result),
        "ids": [result[i]["image_id"] for i in (0, 1, 35_999, 36_000, -1)],
        "grown": grown,
        "buffers": int(a.buffer.nbytes + b.buffer.nbytes),
        "base_inodes": [b.owner.inode for b in getattr(result, "bases", ())],
        "memfds": sorted(memfds),
    }


@pytest.mark.distributed
def test_two_ranks_share_one_buffer_per_dataset_after_filtering_and_joining():
    from tests.dist_helpers import run_distributed

    results = run_distributed(_rank_loads_two_datasets, 2, env={"CATMAP_SHARE": "1"}, deadline=300)
    for r in results:
        assert r["len"] == 72_000
        assert r["ids"] == [1, 2, 39_999, 100_001, 139_999]
        # no private copy of the records: the filtered join costs its index (~0.6 MB)
        assert r["grown"] < r["buffers"] / 8, (r["grown"], r["buffers"])
    # one memory file per dataset on this machine, mapped by both ranks, backing the views
    assert results[0]["memfds"] == results[1]["memfds"] and len(results[0]["memfds"]) == 2
    assert results[0]["base_inodes"] == results[1]["base_inodes"]
    assert sorted(results[0]["base_inodes"]) == sorted(i for _, i in results[0]["memfds"])
