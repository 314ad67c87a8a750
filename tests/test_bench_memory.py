"""Tests of tools/bench_memory.py (R ranks x W workers on the real loader path, summed PSS)."""

from __future__ import annotations

import pickle

import pytest

from tools._memory_pss import data_pss
from tools.bench_memory import (
    EMPTY_EVERY,
    PerRankRecords,
    make_records,
    measure_layout,
    summarize,
)


def test_records_are_deterministic_and_coco_like():
    first = list(make_records(300, start=7))
    assert first == list(make_records(300, start=7))
    assert first != list(make_records(300, start=7, seed=1))
    assert [r["image_id"] for r in first[:3]] == [7, 8, 9]
    empty = [r["image_id"] for r in first if not r["annotations"]]
    assert empty == [i for i in range(7, 307) if i % EMPTY_EVERY == 0]
    assert all(len(r["annotations"]) == 2 for r in first if r["annotations"])
    assert all(0 <= a["category_id"] < 80 for r in first for a in r["annotations"])
    assert 300 < len(pickle.dumps(first[0], protocol=pickle.HIGHEST_PROTOCOL)) < 700


def test_per_rank_records_pickle_by_value():
    records = PerRankRecords(list(make_records(5)))
    clone = pickle.loads(pickle.dumps(records))
    assert [clone[i] for i in range(5)] == list(make_records(5))
    assert clone.nbytes == records.nbytes > records.buffer.nbytes


def test_summary_subtracts_the_idle_job_and_divides_by_the_buffer():
    results = {
        "idle": {"pss_total": 1_000},
        "catmap": {"pss_total": 1_500, "buffer_bytes": 400},
        "catmap_plain": {"pss_total": 1_480, "buffer_bytes": 400},
        "per_rank": {"pss_total": 3_000, "buffer_bytes": 396},
    }
    summary = summarize(results)
    assert summary["interpreters_bytes"] == 1_000 and summary["buffer_bytes"] == 400
    assert summary["catmap"] == pytest.approx(1.25)
    assert summary["per_rank"] == pytest.approx(5.0)
    assert summary["catmap_vs_plain"] == pytest.approx(500 / 480)


def test_summary_uses_data_pss_and_reports_the_whole_pss_ratio_beside_it():
    results = {
        "idle": {"pss_total": 1_100, "data_total": 1_000},
        "catmap": {"pss_total": 1_700, "data_total": 1_500, "buffer_bytes": 400},
        "catmap_plain": {"pss_total": 1_600, "data_total": 1_500, "buffer_bytes": 400},
    }
    summary = summarize(results)
    assert summary["interpreters_bytes"] == 1_000
    assert summary["catmap"] == pytest.approx(1.25) == summary["catmap_plain"]
    assert summary["catmap_vs_plain"] == pytest.approx(1.0)
    assert summary["catmap_vs_plain_pss"] == pytest.approx(600 / 500)


def test_data_pss_is_the_anonymous_and_shared_memory_part():
    import os

    import numpy as np

    total, data = data_pss(os.getpid())
    block = np.ones(64 * 2**20, dtype=np.uint8)  # 64 MiB of private anonymous pages
    total_after, data_after = data_pss(os.getpid())
    assert 0 < data <= total and data_after - data > 60 * 2**20
    assert total_after - total >= data_after - data - 2**20
    del block


@pytest.mark.distributed
def test_tiny_catmap_job_runs_the_filtered_joined_loader():
    res = measure_layout("catmap", 2, 1, 2_000, "fork", steps=2)
    assert res["processes"] >= 4  # 2 ranks and their workers
    assert res["records_after_filter"] == 2_000 - 2_000 // EMPTY_EVERY
    assert res["annotations"] == 2 * 2 * 8 * 2  # 2 steps x 2 ranks x 8 samples x 2 boxes
    assert res["buffer_bytes"] > 2_000 * 300 and res["pss_total"] > res["buffer_bytes"]
    assert res["data_total"] == res["data_ranks"] + res["data_children"] <= res["pss_total"]


@pytest.mark.slow
@pytest.mark.distributed
def test_catmap_holds_one_buffer_and_per_rank_one_per_rank():
    n = 200_000  # about 90 MiB of records: large against the noise of idle interpreters
    catmap = measure_layout("catmap", 2, 1, n, "spawn")
    per_rank = measure_layout("per_rank", 2, 1, n, "spawn")
    assert catmap["annotations"] == per_rank["annotations"]
    extra = per_rank["pss_total"] - catmap["pss_total"]
    # per_rank: one copy per rank and per spawned worker (4), catmap: one per machine
    assert extra > 2 * per_rank["buffer_bytes"]
