"""Tests of tools/bench_sample_seeds.py (loader throughput with and without sample seeds)."""

from __future__ import annotations

import itertools
import json

import pytest

from tools.bench_sample_seeds import batch_digest, build_loader, main, seeding_overhead_us


@pytest.fixture(scope="module")
def jpeg_records(tmp_path_factory):
    from tools.bench_mapper import _make_dataset

    return _make_dataset(tmp_path_factory.mktemp("bench_seeds"), 4)


def test_seeded_loader_repeats_and_unseeded_does_not(jpeg_records):
    from mappers.random_state import seed_generator

    def digest(sample_seeds, generator_seed):
        seed_generator(generator_seed)  # the process generator the unseeded loader draws from
        loader = build_loader(
            jpeg_records, sample_seeds=sample_seeds, workers=0, batch_size=2, seed=0
        )
        return batch_digest(list(itertools.islice(loader, 3)))

    assert digest(True, 1) == digest(True, 2)
    assert digest(False, 1) != digest(False, 2)
    assert 0 < seeding_overhead_us(200) < 10_000


def test_main_reports_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "figures.json"
    result = main(
        [
            "--images",
            "3",
            "--batches",
            "2",
            "--warmup",
            "0",
            "--batch-size",
            "2",
            "--workers",
            "0",
            "--rounds",
            "2",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert "seeded CPU" in text and "seeded identical for workers [0]: yes" in text
    assert result["seeded_identical_across_workers"] is True
    (row,) = result["rows"]
    assert row["workers"] == 0 and row["ratio"] > 0 and row["seeded_cpu_ms_per_sample"] >= 0
    assert json.loads(out.read_text())["rows"][0]["workers"] == 0
    with pytest.raises(SystemExit):
        main(["--batches", "0"])
