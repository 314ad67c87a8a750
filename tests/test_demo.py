"""The demo end to end: runs as a newcomer would (a subprocess), with small settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tools.demo import class_counts_of_indices, format_table, per_record_class_counts
from tools.shapes_dataset import SHAPE_CLASSES

REPO = Path(__file__).resolve().parents[1]


def run_demo_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(
        CATMAP_CACHE_DIR=str(tmp_path / "cache"),
        CATMAP_DEMO_DIR=str(tmp_path / "demo"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),  # python -m tools.demo from outside the clone
    )
    return subprocess.run(
        [sys.executable, "-m", "tools.demo", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )


def _table_rows(stdout: str, *header_words: str) -> dict[str, list[str]]:
    """Rows (class name -> other cells) of the first table whose header has these words."""
    lines = stdout.splitlines()
    start = next(
        i for i, line in enumerate(lines)
        if line.split()[:1] == ["class"] and all(w in line.split() for w in header_words)
    )  # fmt: skip
    rows = {}
    for line in lines[start + 2 :]:
        parts = line.split()
        if not parts or parts[0] not in SHAPE_CLASSES:
            break
        rows[parts[0]] = parts[1:]
    return rows


@pytest.mark.distributed  # spawns DataLoader worker processes
def test_demo_runs_end_to_end_with_workers(tmp_path):
    out = tmp_path / "out"
    proc = run_demo_cli(tmp_path, "--batches", "6", "--workers", "2", "--batch-size", "4",
                        "--num-images", "24", "--out", str(out), "--seed", "3", "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stdout = proc.stdout
    # the dataset was generated in $CATMAP_DEMO_DIR and registered
    assert "generated 24 images" in stdout
    assert (tmp_path / "demo" / "shapes" / "annotations.json").is_file()
    assert "registered 'shapes_train': 24 records" in stdout
    assert "thing_classes" in stdout and "circle" in stdout
    histogram = _table_rows(stdout, "images", "instances")
    assert set(histogram) <= set(SHAPE_CLASSES) and "circle" in histogram
    assert sum(int(r[1]) for r in histogram.values()) == int(
        re.search(r"(\d+) shapes", stdout).group(1)
    )
    # the iteration reports throughput and per-class draws for both samplers
    match = re.search(r"24 samples in [\d.]+s: (\d+) samples/s", stdout)
    assert match and int(match.group(1)) > 0
    draws = _table_rows(stdout, "TrainingSampler", "RepeatFactor")
    assert set(draws) == set(SHAPE_CLASSES)
    assert sum(int(r[0]) for r in draws.values()) > 0  # TrainingSampler column
    assert sum(int(r[2]) for r in draws.values()) > 0  # RepeatFactor column
    # resume
    assert "resume check: PASSED" in stdout
    assert (out / "loader_state.pt").is_file()
    # picture
    png = out / "demo_samples.png"
    assert f"wrote 12 samples to {png}" in stdout
    with Image.open(png) as image:
        assert image.width > 600 and image.height > 600
        assert len(np.unique(np.asarray(image.convert("RGB")).reshape(-1, 3), axis=0)) > 50


def test_demo_reuses_dataset_and_runs_without_workers(tmp_path):
    first = run_demo_cli(tmp_path, "--batches", "3", "--workers", "0", "--batch-size", "2",
                         "--num-images", "10", "--out", str(tmp_path / "a"), "--no-progress")  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "generated 10 images" in first.stdout
    second = run_demo_cli(tmp_path, "--batches", "3", "--workers", "0", "--batch-size", "2",
                          "--num-images", "10", "--out", str(tmp_path / "b"))  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "reused 10 images" in second.stdout
    assert "resume check: PASSED" in second.stdout
    assert "img/s" in second.stdout  # the tqdm progress bar
    assert (tmp_path / "b" / "demo_samples.png").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batches", "0"], "--batches must be at least 1"),
        (["--workers", "-1"], "--workers must be >= 0"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
    ],
)
def test_demo_rejects_bad_options(capsys, args, message):
    from tools.demo import main

    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_class_counting_helpers():
    from catalog import SerializedList

    records = [
        {"annotations": [{"category_id": 0}, {"category_id": 2}, {"category_id": 2}]},
        {"annotations": [{"category_id": 1, "iscrowd": 1}]},
        {"annotations": []},
    ]
    per_record = per_record_class_counts(SerializedList(records).columns, 3)
    assert per_record.tolist() == [[1, 0, 2], [0, 0, 0], [0, 0, 0]]
    assert class_counts_of_indices(per_record, np.array([0, 0, 2])).tolist() == [2, 0, 4]
    table = format_table(["class", "n"], [["a", 1], ["bbb", 22]])
    assert table.splitlines() == ["class   n", "-----  --", "a       1", "bbb    22"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batches": 0}, "--batches"),
        ({"workers": -2}, "--workers"),
        ({"batch_size": 0}, "--batch-size"),
    ],
)
def test_run_demo_rejects_bad_settings_before_any_work(tmp_path, kwargs, message):
    from tools.demo import run_demo

    with pytest.raises(ValueError, match=message):
        run_demo(out=tmp_path / "out", data_dir=tmp_path / "data", **kwargs)
    assert not (tmp_path / "data").exists()
