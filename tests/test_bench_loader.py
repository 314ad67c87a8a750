"""tools/bench_loader.py: the photo dataset, the table, and (slow) an end-to-end run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.optional_imports import import_or_skip

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

bench = pytest.importorskip("tools.bench_loader")
pytest.importorskip("skimage")


def test_photo_dataset_is_photographic_jpegs_with_boxes(tmp_path):
    records = bench.make_photo_dataset(tmp_path, 3, seed=1)
    sizes = [os.path.getsize(r["file_name"]) for r in records]
    assert all(60_000 < size < 200_000 for size in sizes), sizes  # ~100 KiB photos, not flat
    assert all(len(r["annotations"]) == 7 and r["width"] == 640 for r in records)
    (tmp_path / "again").mkdir()
    again = bench.make_photo_dataset(tmp_path / "again", 1, seed=1)  # seeded: same bytes
    assert Path(again[0]["file_name"]).read_bytes() == Path(records[0]["file_name"]).read_bytes()


def test_table_and_option_errors(capsys):
    table = bench._table([
        {"workers": 2, "pipeline": "catmap", "img_s": 300.0, "main_us": 80.0, "x_bare": 0.9,
         "x_torch_dl": 0.07},
        {"workers": 2, "pipeline": "bare", "img_s": 333.0, "main_us": None, "x_bare": None,
         "x_torch_dl": None},
    ])
    assert "catmap" in table and "0.07" in table and table.count("\n") == 3
    with pytest.raises(SystemExit):
        bench.main(["--pipelines", "nope"])
    assert "unknown pipelines" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path):
    results = bench.main(["--quick", "--max-workers", "1", "--pipelines", "bare,catmap,torch-dl",
                          "--json", str(tmp_path / "r.json")])
    rows = {(r["workers"], r["pipeline"]): r for r in results["rows"]}
    assert rows[(1, "catmap")]["main_us"] < rows[(1, "torch-dl")]["main_us"]
    assert (tmp_path / "r.json").exists()


def test_torchvision_v2_baseline_runs(tmp_path):
    """The tv2 row is measured wherever torchvision imports (CI requires it there)."""
    import_or_skip("torchvision.transforms.v2")
    results = bench.main(["--quick", "--max-workers", "0", "--pipelines", "tv2"])
    (row,) = [r for r in results["rows"] if r["pipeline"] == "tv2"]
    assert row["img_s"] > 0 and not [n for n in results.get("notes", []) if "tv2" in n]


def test_paired_run_measures_both_worker_paths():
    results = bench.main(["--quick", "--paired", "--max-workers", "1"])
    (run,) = results["paired"]
    assert run["passes_us"] > 0 and run["one_at_a_time_us"] > 0
    assert run["ratio"] == pytest.approx(run["one_at_a_time_us"] / run["passes_us"])
    assert run["bare_us"] > 0 and run["bare_ratio"] == pytest.approx(
        run["bare_us"] / run["passes_us"])
