"""Tests of tools/bench_memory.py (R ranks x W workers, summed PSS per layout)."""

from __future__ import annotations

import pickle

import pytest

from tools.bench_memory import make_records, measure_layout


def test_records_are_deterministic_and_coco_like():
    first = list(make_records(3))
    assert first == list(make_records(3))
    assert [r["image_id"] for r in first] == [0, 1, 2]
    assert all(len(r["annotations"]) == 2 for r in first)
    assert 300 < len(pickle.dumps(first[0], protocol=pickle.HIGHEST_PROTOCOL)) < 700


@pytest.mark.slow
@pytest.mark.distributed
def test_catmap_layout_holds_one_buffer_and_per_rank_holds_one_per_rank():
    n = 200_000  # about 90 MiB of records: large against the noise of idle interpreters
    catmap = measure_layout("catmap", 2, 1, n, "fork")
    per_rank = measure_layout("per_rank", 2, 1, n, "fork")
    assert catmap["processes"] == per_rank["processes"] == 4
    assert catmap["annotations"] == per_rank["annotations"] == 2 * n
    extra = per_rank["pss_total"] - catmap["pss_total"]
    assert extra > 0.6 * per_rank["buffer_bytes"]  # a second copy of the buffer
