"""tools/bench_shards runs end to end at a tiny size and reports every stage (no timing
asserts: the figures are measured, not checked)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tools.bench_shards import main, shuffle_quality

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def test_bench_shards_reports_every_stage(tmp_path):
    out = tmp_path / "figures.json"
    results = main(["--images", "40", "--shard-size", "10", "--batches", "2", "--batch-size",
                    "4", "--workers", "0", "--shards", "5", "--resume-samples", "10000",
                    "--resume-shards", "10", "--index-samples", "2000", "--index-shards",
                    "100", "--index-workers", "1", "--fetch-big", "2", "--fetch-big-mb", "0.25",
                    "--fetch-small", "3", "--fetch-small-kb", "4", "--fetch-rounds", "1",
                    "--ranks", "2", "--rank-workers", "0",
                    "--dir", str(tmp_path / "work"), "--json", str(out)])
    assert json.loads(out.read_text()) == results
    assert results["write"]["images"] == 40
    for loader in ("catmap", "webdataset"):
        figures = results["throughput"]["0_workers"][loader]
        assert figures["img_per_s"] > 0 and figures["first_batch_s"] > 0
    assert set(results["first_batch"]) == {"5_shards_cold", "5_shards_warm", "5_shards_write_s"}
    ranks = results["ranks"]["5_shards_2_ranks"]
    assert len(ranks["first_batch_s"]) == 2 and ranks["machine_pss_mb"] > 0
    big = results["big_index"]
    assert big["samples"] == 2000 and big["shards"] == 100
    for run in ("cold", "warm"):
        assert big[run]["first_batch_s"] > 0 and big[run]["pss_mb"]["main"] > 0
    assert results["resume"]["samples"] == 10000 and results["resume"]["resume_ms"] > 0
    shuffle = results["shuffle"]
    assert shuffle["buffer_samples"] == 4 * 10
    for loader in ("catmap", "webdataset"):
        assert -1 <= shuffle[loader]["position_index_correlation"] <= 1
        assert 1 <= shuffle[loader]["distinct_shards_per_64"] <= 4  # 4 shards in all
    fetch = results["fetch"]
    if "skipped" not in fetch:  # moto and boto3 are test extras
        assert fetch["objects"] == {"big": 2, "small": 3}
        assert fetch["boto3"]["big_mb_per_s_1_thread"] > 0
        assert fetch["boto3"]["small_ms_per_object"] > 0


def test_shuffle_quality_tells_an_ordered_pass_from_a_shuffled_one():
    shard_of = np.arange(1000) // 100
    ordered = shuffle_quality(np.arange(1000), shard_of)
    shuffled = shuffle_quality(np.random.default_rng(0).permutation(1000), shard_of)
    assert ordered == {"position_index_correlation": 1.0, "distinct_shards_per_64": 1.6}
    assert abs(shuffled["position_index_correlation"]) < 0.1
    assert shuffled["distinct_shards_per_64"] > 9
