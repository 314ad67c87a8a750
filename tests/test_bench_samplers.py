"""Tests of tools/bench_samplers.py (sampler speed against per-image loops), at small sizes."""

from __future__ import annotations

import itertools

import torch

from tools.bench_samplers import (
    baseline_expand_pass,
    baseline_repeat_factors,
    baseline_training_stream,
    main,
    synthetic_records,
)


def test_baselines_compute_what_the_samplers_compute():
    from samplers import repeat_factors_from_category_frequency

    records = synthetic_records(200, 12, 2.0, seed=0)
    torch.testing.assert_close(
        baseline_repeat_factors(records, 0.3), repeat_factors_from_category_frequency(records, 0.3)
    )
    factors = torch.tensor([1.0, 2.0, 3.0])
    expanded = baseline_expand_pass(factors, torch.Generator().manual_seed(0))
    assert sorted(expanded.tolist()) == [0, 1, 1, 2, 2, 2]
    stream = list(itertools.islice(baseline_training_stream(5, 0, 1, 2), 5))
    assert all(0 <= i < 5 for i in stream)


def test_main_runs_every_stage_at_small_sizes(capsys):
    threads = torch.get_num_threads()
    try:
        rows = main(
            ["--items", "2000", "--images", "500", "--categories", "20",
             "--resume-items", "1000", "--resume-passes", "0.5", "2.5"]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    stages = [row[0] for row in rows]
    assert stages[0].startswith("one pass of indices, 2,000 items")
    assert stages[1].startswith("repeat factors, 500 images / 20 categories")
    assert stages[2].startswith("repeat-factor pass expansion, 500 images")
    assert [s for s in stages if s.startswith("resume")] == [
        "resume 0.5 passes into a 1,000-item stream",
        "resume 2.5 passes into a 1,000-item stream",
    ]
    assert all(row[3].endswith("x") for row in rows)
    assert "| stage" in capsys.readouterr().out
