"""Tests of tools/bench_samplers.py (sampler speed against per-image loops), at small sizes."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from tools.bench_samplers import main, synthetic_records
from tools.bench_samplers_baselines import (
    IndependentRounding,
    PermutationTrainingSampler,
    baseline_concat_resume,
    baseline_expand_pass,
    baseline_repeat_factors,
    baseline_repeat_resume,
    baseline_training_stream,
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
    # the permutation approach: each pass a permutation, resumable like the keyed sampler
    old = list(itertools.islice(PermutationTrainingSampler(7, seed=0, rank=0, world_size=1), 21))
    assert all(sorted(old[k : k + 7]) == list(range(7)) for k in (0, 7, 14))
    assert 0 <= baseline_repeat_resume(np.array([1.5, 0.5, 2.0]), 0, 0, 1) < 3
    assert 0 <= baseline_concat_resume([3, 4], 0, 0, 5) < 7
    # catmap's independent rounding before systematic rounding: floor or ceil per record,
    # the fraction's frequency over passes, and a resume reads that pass's order
    factors = np.array([1.5, 0.25, 2.0, 0.9])
    old = IndependentRounding(factors)
    counts = np.stack([np.diff(old.cumulative(3, p), prepend=0) for p in range(2000)])
    assert ((counts == np.floor(factors)) | (counts == np.ceil(factors))).all()
    np.testing.assert_allclose(counts.mean(axis=0), factors, atol=0.05)
    assert old.resume(3, 5, 0) in set(np.flatnonzero(np.diff(old.cumulative(3, 5), prepend=0)))


def test_main_runs_every_stage_at_small_sizes(capsys):
    threads = torch.get_num_threads()
    try:
        rows = main(
            ["--items", "2000", "--images", "500", "--categories", "20",
             "--resume-items", "1000", "--resume-passes", "0.5", "2.5", "--iterate", "500"]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    stages = [row[0] for row in rows]
    assert stages[0].startswith("one pass of indices, 2,000 items")
    assert stages[1].startswith("repeat factors, 500 images / 20 categories")
    assert stages[2].startswith("repeat-factor pass expansion, 500 images")
    assert stages[3].startswith("iterate one pass, 2,000 items")
    resumes = [s for s in stages if s.startswith("resume")]
    assert resumes[:2] == [
        "resume 0.5 passes into a 1,000-item stream",
        "resume 2.5 passes into a 1,000-item stream",
    ]
    assert resumes[2].startswith("resume 0.9 pass, repeat factors of 1,000 records (")
    assert resumes[3:] == [
        "resume 0.9 pass, repeat factors of 1,000 records: rounding per pass",
        "resume 0.9 pass, concat of 2 x 1,000 records",
    ]
    assert "build the repeat-factor sampler once, 1,000 records (checks, digest, tables)" in stages
    assert [s for s in stages if s.startswith("tracemalloc")] == [
        "tracemalloc peak, resume 0.9 pass into 2,000 items",
        "tracemalloc peak, resume and iterate 200 of 2,000 items",
        "tracemalloc peak, resume 0.9 pass, repeat factors of 1,000 records",
    ]
    assert all(row[3].endswith("x") for row in rows)
    assert "| stage" in capsys.readouterr().out


def test_stages_run_only_the_chosen_parts():
    threads = torch.get_num_threads()
    try:
        rows = main(["--items", "2000", "--stages", "other-resumes"])
    finally:
        torch.set_num_threads(threads)
    assert [row[0].split(",")[0] for row in rows] == [
        "resume 0.9 pass", "resume 0.9 pass", "build the repeat-factor sampler once",
        "resume 0.9 pass",
    ]  # fmt: skip
