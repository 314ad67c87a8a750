"""Tests of tools/bench_coco_load.py: its pycocotools baseline matches catmap's records."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from catalog import load_coco_json
from tools.bench_coco_load import convert_pycocotools
from tools.make_synthetic_coco import make_synthetic_coco

ROOT = Path(__file__).resolve().parents[1]


def test_pycocotools_baseline_builds_the_same_records_as_load_coco_json(tmp_path):
    from pycocotools.coco import COCO

    path = str(tmp_path / "instances.json")
    make_synthetic_coco(path, 60, seed=1)
    with contextlib.redirect_stdout(io.StringIO()):
        baseline = convert_pycocotools(COCO(path), "/images")
    ours = sorted(load_coco_json(path, "/images"), key=lambda r: r["image_id"])
    assert len(ours) == 60 and sum(len(r["annotations"]) for r in ours) > 0
    assert ours == baseline


@pytest.mark.slow
def test_benchmark_runs_every_method_in_subprocesses(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench_coco_load", "--images", "200",
         "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=True,
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert set(results) == {
        "catmap_load_coco_json", "catmap_cache_miss", "catmap_cache_hit", "pycocotools_d2"
    }  # fmt: skip
    assert {r[0]["records"] for r in results.values()} == {200}
    assert "speedup" in proc.stdout
