"""Benchmark the samplers against per-image Python loops (as detectron2 computes them).

Measured side by side in one run:

1. one pass of training indices for ``--items`` records: TrainingSampler (with its exact
   position tracking) against an ``islice`` over ``randperm(n).tolist()`` streams;
2. repeat factors for ``--images`` images over ``--categories`` categories: the vectorized
   SerializedList-column path against a per-image loop over record dicts;
3. one pass of repeat-factor index expansion: ``numpy.repeat`` against a per-image
   ``list.extend`` loop;
4. iterating one pass index by index: the keyed permutation computed in chunks against the
   approach before it (each pass a materialized ``numpy`` permutation of ``(seed, pass)``,
   sliced in chunks), with the ratio;
5. resume cost: ``load_state_dict`` at a position (e.g. 0.1, 0.9, 2.5 passes into training)
   plus the first index, against the permutation approach, which regenerates the pass's whole
   permutation to read one chunk (likewise for a repeat-factor pass and a two-part concat);
   for the repeat-factor pass also against the independent keyed rounding catmap used before
   systematic rounding (every record's rounding drawn and summed for the resumed pass), and
   the one-time construction of both (measured apart from the resume);
6. memory: the tracemalloc peak while resuming 0.9 pass into the stream and while iterating
   ``--iterate`` indices, keyed against the permutation approach, and while resuming 0.9 pass
   into a repeat-factor pass, systematic against independent rounding.

Memory (USS / PSS of this process, from psutil) is reported after each stage.

Usage::

    python -m tools.bench_samplers                       # full size (10M items, 1M images)
    python -m tools.bench_samplers --items 200000 --images 20000   # quick
    python -m tools.bench_samplers --stages other-resumes memory     # resume stages only
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import math
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from catalog import SerializedList
from samplers import (
    ConcatSampler,
    RepeatFactorTrainingSampler,
    TrainingSampler,
    repeat_factors_from_category_frequency,
)
from samplers.state import array_digest
from samplers.stream import CHUNK  # noqa: F401  (the chunk both orders are read in)
from tools._bench_common import HelpFormatter
from tools.bench_samplers_baselines import (
    IndependentRounding,
    PermutationTrainingSampler,
    baseline_concat_resume,
    baseline_expand_pass,
    baseline_repeat_factors,
    baseline_repeat_resume,
    baseline_state,
    baseline_training_stream,
)

__all__ = ["main", "synthetic_records"]


# ---------------------------------------------------------------------- helpers
def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    best = math.inf
    result = None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def traced_peak_mib(fn: Callable[[], Any]) -> float:
    """The tracemalloc peak (MiB, numpy buffers included) while ``fn`` runs."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def memory_mib() -> str:
    try:
        import psutil
    except ImportError:
        return "psutil not installed"
    info = psutil.Process().memory_full_info()
    return f"USS {info.uss / 2**20:.0f} MiB, PSS {getattr(info, 'pss', 0) / 2**20:.0f} MiB"


def consume(iterator: Iterator[int], count: int) -> int:
    tail = collections.deque(itertools.islice(iterator, count), maxlen=1)
    return tail[0] if tail else -1


def synthetic_records(
    images: int, categories: int, mean_annotations: float, seed: int
) -> list[dict]:
    """Long-tailed (Zipf-like) category frequencies, Poisson annotation counts."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(mean_annotations, images)
    weights = 1.0 / np.arange(1, categories + 1) ** 1.1
    cats = rng.choice(categories, int(counts.sum()), p=weights / weights.sum()).tolist()
    records = []
    position = 0
    for i, count in enumerate(counts.tolist()):
        annos = [{"category_id": c} for c in cats[position : position + count]]
        position += count
        records.append({"file_name": f"{i}.jpg", "height": 480, "width": 640, "annotations": annos})
    return records


# ---------------------------------------------------------------------- stages
def bench_one_pass(items: int, rows: list[tuple[str, ...]]) -> None:
    ours, last = timed(
        lambda: consume(iter(TrainingSampler(items, seed=0, rank=0, world_size=1)), items)
    )
    base, _ = timed(lambda: consume(baseline_training_stream(items, 0, 0, 1), items))
    rows.append(
        (
            f"one pass of indices, {items:,} items",
            f"{base:.3f} s",
            f"{ours:.3f} s",
            f"{base / ours:.2f}x",
        )
    )
    print(f"  one pass done ({memory_mib()})", flush=True)


def bench_repeat_factors(
    images: int, categories: int, mean_annotations: float, rows: list[tuple[str, ...]]
) -> None:
    build, records = timed(lambda: synthetic_records(images, categories, mean_annotations, 0))
    serialize, serialized = timed(lambda: SerializedList(records, progress=False))
    annotations = int(serialized.columns.num_annotations().sum())
    print(
        f"  {images:,} images, {annotations:,} annotations, {categories} categories "
        f"(records built in {build:.1f} s, serialized once in {serialize:.1f} s; {memory_mib()})",
        flush=True,
    )
    thresh = 0.001
    ours, factors = timed(lambda: repeat_factors_from_category_frequency(serialized, thresh), 3)
    base, expected = timed(lambda: baseline_repeat_factors(records, thresh))
    np.testing.assert_allclose(factors.numpy(), expected.numpy(), rtol=1e-6)
    rows.append(
        (
            f"repeat factors, {images:,} images / {categories} categories",
            f"{base:.3f} s",
            f"{ours:.3f} s",
            f"{base / ours:.1f}x",
        )
    )
    records.clear()  # free the dicts before the next stage
    sampler = RepeatFactorTrainingSampler(factors, seed=0, rank=0, world_size=1)
    ours_pass, indices = timed(lambda: sampler._make_pass(0).to_array(), 3)
    base_pass, _ = timed(lambda: baseline_expand_pass(factors, torch.Generator().manual_seed(0)))
    rows.append(
        (
            f"repeat-factor pass expansion, {images:,} images ({len(indices):,} indices)",
            f"{base_pass:.3f} s",
            f"{ours_pass:.3f} s",
            f"{base_pass / ours_pass:.1f}x",
        )
    )
    print(f"  repeat factors done ({memory_mib()})", flush=True)


def bench_iterate(items: int, rows: list[tuple[str, ...]]) -> None:
    """One pass index by index: keyed chunks against the materialized permutation."""
    ours, _ = timed(
        lambda: consume(iter(TrainingSampler(items, seed=0, rank=0, world_size=1)), items), 2
    )
    base, _ = timed(
        lambda: consume(
            iter(PermutationTrainingSampler(items, seed=0, rank=0, world_size=1)), items
        ),
        2,
    )
    rows.append(
        (
            f"iterate one pass, {items:,} items ({ours / items * 1e9:.0f} ns/index)",
            f"{base:.3f} s (permutation)",
            f"{ours:.3f} s (keyed)",
            f"{base / ours:.2f}x",
        )
    )
    print(f"  iteration done ({memory_mib()})", flush=True)


def _resume(make: Callable[[], Any], state: dict[str, Any]) -> int:
    sampler = make()
    sampler.load_state_dict(state)
    return next(iter(sampler))


def bench_resume(items: int, passes: list[float], rows: list[tuple[str, ...]]) -> None:
    """Resume ``passes`` passes into training (e.g. 2.5: the middle of the third pass)."""
    for where in passes:
        position = int(items * where)
        pass_index, offset = divmod(position, items)
        state = TrainingSampler(items, seed=1, rank=0, world_size=1).state_dict()
        state.update(pass_index=pass_index, offset=offset)  # saved after `position` draws
        base_state = baseline_state(items, position)
        base, expected = timed(
            lambda: _resume(
                lambda: PermutationTrainingSampler(items, seed=7, rank=0, world_size=1),
                base_state,  # noqa: B023
            ),
            3,
        )
        ours, first = timed(
            lambda: _resume(
                lambda: TrainingSampler(items, seed=7, rank=0, world_size=1),
                state,  # noqa: B023
            ),
            3,
        )
        reference = TrainingSampler(items, seed=1, rank=0, world_size=1)._make_pass(pass_index)
        if first != reference.item(offset) or not 0 <= expected < items:
            raise RuntimeError(f"resume at {position} gave {first}, not the pass's index")
        rows.append(
            (
                f"resume {where:g} passes into a {items:,}-item stream",
                f"{base * 1e3:.1f} ms (permutation)",
                f"{ours * 1e3:.2f} ms (keyed)",
                f"{base / ours:.0f}x",
            )
        )
    print(f"  resume done ({memory_mib()})", flush=True)


def _fresh_resume_seconds(make: Callable[[], Any], state: dict[str, Any], repeat: int) -> float:
    """Best time of ``load_state_dict`` plus the first index on a freshly built sampler (the
    construction is not timed)."""
    best = math.inf
    for _ in range(repeat):
        sampler = make()
        gc.collect()
        start = time.perf_counter()
        sampler.load_state_dict(state)
        next(iter(sampler))
        best = min(best, time.perf_counter() - start)
    return best


def bench_other_resumes(items: int, rows: list[tuple[str, ...]]) -> None:
    """Resume 0.9 pass into a repeat-factor pass and a two-part concat pass of ``items``."""
    factors = np.random.default_rng(0).uniform(0.5, 2.5, items // 2)  # ~items per pass
    build, repeat = timed(
        lambda: RepeatFactorTrainingSampler(factors, seed=1, rank=0, world_size=1), 3
    )
    # the previous sampler's construction: the same checks, its rounding tables, and the digest
    # of the factors (which it computed at the first save or load)
    old_build, old = timed(
        lambda: (array_digest(factors, "<f8"), IndependentRounding(factors))[1], 3
    )
    length = len(repeat._make_pass(0))
    offset = int(length * 0.9)
    state = dict(repeat.state_dict(), offset=offset)
    base, _ = timed(lambda: baseline_repeat_resume(factors, 1, 0, offset), 3)
    old_resume, _ = timed(lambda: old.resume(1, 0, offset), 3)
    make = lambda: RepeatFactorTrainingSampler(factors, seed=7, rank=0, world_size=1)  # noqa: E731
    ours = _fresh_resume_seconds(make, state, 3)
    records = f"{len(factors):,} records"
    rows.append(
        (
            f"resume 0.9 pass, repeat factors of {records} ({length:,} indices)",
            f"{base * 1e3:.1f} ms (permutation)",
            f"{ours * 1e3:.2f} ms (keyed)",
            f"{base / ours:.0f}x",
        )
    )
    rows.append(
        (
            f"resume 0.9 pass, repeat factors of {records}: rounding per pass",
            f"{old_resume * 1e3:.1f} ms (independent)",
            f"{ours * 1e3:.2f} ms (systematic)",
            f"{old_resume / ours:.0f}x",
        )
    )
    rows.append(
        (
            f"build the repeat-factor sampler once, {records} (checks, digest, tables)",
            f"{old_build * 1e3:.0f} ms (independent)",
            f"{build * 1e3:.0f} ms (systematic)",
            f"{old_build / build:.2f}x",
        )
    )
    sizes = [items // 2, items - items // 2]
    concat_state = dict(
        ConcatSampler(sizes, seed=1, rank=0, world_size=1).state_dict(), offset=int(items * 0.9)
    )
    base, _ = timed(lambda: baseline_concat_resume(sizes, 1, 0, int(items * 0.9)), 3)
    ours, _ = timed(
        lambda: _resume(
            lambda: ConcatSampler(sizes, seed=7, rank=0, world_size=1), concat_state
        ),
        3,
    )
    rows.append(
        (
            f"resume 0.9 pass, concat of 2 x {items // 2:,} records",
            f"{base * 1e3:.1f} ms (permutation)",
            f"{ours * 1e3:.2f} ms (keyed)",
            f"{base / ours:.0f}x",
        )
    )
    print(f"  repeat-factor / concat resume done ({memory_mib()})", flush=True)


def bench_memory(items: int, iterate: int, rows: list[tuple[str, ...]]) -> None:
    """tracemalloc peaks of resuming 0.9 pass in and of iterating ``iterate`` indices."""
    position = int(items * 0.9)
    state = dict(TrainingSampler(items, seed=1, rank=0, world_size=1).state_dict(), offset=position)
    base_state = baseline_state(items, position)
    count = min(iterate, items - position)

    def resume_and_iterate(cls: type[TrainingSampler], saved: dict[str, Any]) -> None:
        sampler = cls(items, seed=7, rank=0, world_size=1)
        sampler.load_state_dict(saved)
        consume(iter(sampler), count)

    measures = [
        (
            f"tracemalloc peak, resume 0.9 pass into {items:,} items",
            lambda: _resume(
                lambda: PermutationTrainingSampler(items, seed=7, rank=0, world_size=1), base_state
            ),
            lambda: _resume(lambda: TrainingSampler(items, seed=7, rank=0, world_size=1), state),
        ),
        (
            f"tracemalloc peak, resume and iterate {count:,} of {items:,} items",
            lambda: resume_and_iterate(PermutationTrainingSampler, base_state),
            lambda: resume_and_iterate(TrainingSampler, state),
        ),
    ]  # fmt: skip
    for label, baseline, ours in measures:
        base_peak, our_peak = traced_peak_mib(baseline), traced_peak_mib(ours)
        rows.append(
            (
                label,
                f"{base_peak:.2f} MiB (permutation)",
                f"{our_peak:.2f} MiB (keyed)",
                f"{base_peak / max(our_peak, 1e-6):.0f}x",
            )
        )
    # a repeat-factor pass: both samplers built first, only the resume traced
    factors = np.random.default_rng(0).uniform(0.5, 2.5, items // 2)
    old = IndependentRounding(factors)
    repeat_state = RepeatFactorTrainingSampler(factors, seed=1, rank=0, world_size=1).state_dict()
    repeat = RepeatFactorTrainingSampler(factors, seed=7, rank=0, world_size=1)
    offset = int(len(repeat._make_pass(1)) * 0.9)
    repeat_state.update(pass_index=1, offset=offset)
    base_peak = traced_peak_mib(lambda: old.resume(1, 1, offset))
    our_peak = traced_peak_mib(lambda: (repeat.load_state_dict(repeat_state), next(iter(repeat))))
    rows.append(
        (
            f"tracemalloc peak, resume 0.9 pass, repeat factors of {len(factors):,} records",
            f"{base_peak:.2f} MiB (independent)",
            f"{our_peak:.2f} MiB (systematic)",
            f"{base_peak / max(our_peak, 1e-6):.0f}x",
        )
    )
    print(f"  memory done ({memory_mib()})", flush=True)


#: The stages, in the order they run (``--stages`` picks some).
STAGES = ("one-pass", "repeat-factors", "iterate", "resume", "other-resumes", "memory")


def main(argv: list[str] | None = None) -> list[tuple[str, ...]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=HelpFormatter
    )
    parser.add_argument("--items", type=int, default=10_000_000, help="records for the index pass")
    parser.add_argument("--images", type=int, default=1_000_000, help="images for repeat factors")
    parser.add_argument("--categories", type=int, default=1200)
    parser.add_argument("--mean-annotations", type=float, default=4.0)
    parser.add_argument(
        "--resume-items", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000]
    )
    parser.add_argument(
        "--resume-passes", type=float, nargs="+", default=[0.1, 0.9, 2.5], help="resume points"
    )
    parser.add_argument(
        "--iterate", type=int, default=1_000_000, help="indices iterated for the memory peak"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--stages", nargs="+", choices=STAGES, default=list(STAGES), help="stages to run"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows: list[tuple[str, ...]] = []
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, {args.threads} torch thread(s)",
        flush=True,
    )
    stages = set(args.stages)
    if "one-pass" in stages:
        bench_one_pass(args.items, rows)
    if "repeat-factors" in stages:
        bench_repeat_factors(args.images, args.categories, args.mean_annotations, rows)
    if "iterate" in stages:
        bench_iterate(args.items, rows)
    if "resume" in stages:
        for items in args.resume_items:
            bench_resume(items, args.resume_passes, rows)
    if "other-resumes" in stages:
        bench_other_resumes(args.items, rows)
    if "memory" in stages:
        bench_memory(args.items, args.iterate, rows)
    header = ("stage", "baseline (loop / permutation)", "catmap", "speed-up / ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
    return rows


if __name__ == "__main__":
    main()
