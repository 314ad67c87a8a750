"""On 2 gloo ranks, the filtered join of shared datasets costs each rank only its index."""

from __future__ import annotations

import pytest

from catalog import DatasetCatalog, get_detection_dataset_dicts

_N = 100_000  # records per dataset; one in 100 has no annotations (as in the memory benchmark)


def _dataset(start: int, n: int) -> list[dict]:
    return [
        {
            "file_name": f"/data/train/{i:012d}.jpg",
            "height": 480,
            "width": 640,
            "image_id": i,
            "annotations": []
            if i % 100 == 0
            else [{"bbox": [1.0, 2.0, 3.0, 4.0], "bbox_mode": 1, "category_id": i % 5}],
        }
        for i in range(start, start + n)
    ]


_POSITIONS = (0, 98, 99, _N - _N // 100 - 1, _N - _N // 100, -1)  # around the join


def _private_bytes() -> int:
    import ctypes
    import gc

    import psutil

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(psutil.Process().memory_full_info().uss)


def _rank_filters_two_datasets(rank: int, world: int) -> dict:
    DatasetCatalog.register("ranks_a", lambda: _dataset(0, _N))
    DatasetCatalog.register("ranks_b", lambda: _dataset(_N, _N))
    a, b = DatasetCatalog.get("ranks_a"), DatasetCatalog.get("ranks_b")
    get_detection_dataset_dicts(["ranks_a", "ranks_b"])  # warm: first-call allocations
    before = _private_bytes()
    view = get_detection_dataset_dicts(["ranks_a", "ranks_b"])
    grown = _private_bytes() - before
    return {
        "len": len(view),
        "index_nbytes": view.index.nbytes,
        "grown": grown,
        "ids": [view[k]["image_id"] for k in _POSITIONS],
        "inodes": [base.owner.inode for base in view.bases],
        "same_bases": [x is y for x, y in zip(view.bases, (a, b), strict=True)],
    }


@pytest.mark.distributed
def test_filtered_join_on_two_ranks_holds_only_an_index():
    from tests.dist_helpers import run_distributed

    results = run_distributed(
        _rank_filters_two_datasets, 2, env={"CATMAP_SHARE": "1"}, deadline=300
    )
    dropped = 2 * _N // 100
    kept = 2 * _N - dropped
    expected = [i for i in range(2 * _N) if i % 100]  # images with annotations, in order
    for r in results:
        assert r["len"] == kept
        assert r["ids"] == [expected[k] for k in _POSITIONS]
        assert r["same_bases"] == [True, True]
        # 4 bytes per kept record (792 kB); a copy of the records would be tens of MB
        assert r["index_nbytes"] == 4 * kept
        assert r["grown"] < 2 * 4 * kept, r["grown"]
    # both ranks' views read the same two memory files (one copy per machine)
    assert results[0]["inodes"] == results[1]["inodes"]
