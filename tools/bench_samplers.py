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
6. memory: the tracemalloc peak while resuming 0.9 pass into the stream and while iterating
   ``--iterate`` indices, keyed against the permutation approach.

Memory (USS / PSS of this process, from psutil) is reported after each stage.

Usage::

    python tools/bench_samplers.py                       # full size (10M items, 1M images)
    python tools/bench_samplers.py --items 200000 --images 20000   # quick
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
from catalog.seeding import numpy_generator
from samplers import (
    ConcatSampler,
    RepeatFactorTrainingSampler,
    TrainingSampler,
    repeat_factors_from_category_frequency,
)
from samplers.stream import CHUNK  # noqa: F401  (the chunk both orders are read in)
from tools._bench_common import HelpFormatter

__all__ = ["main"]


# ---------------------------------------------------------------------- baselines
def baseline_training_stream(size: int, seed: int, rank: int, world_size: int) -> Iterator[int]:
    """Endless permutations joined into one stream, every world_size-th item kept."""
    generator = torch.Generator()
    generator.manual_seed(seed)

    def endless() -> Iterator[int]:
        while True:
            yield from torch.randperm(size, generator=generator).tolist()

    return itertools.islice(endless(), rank, None, world_size)


class PermutationTrainingSampler(TrainingSampler):
    """TrainingSampler as it was before keyed passes (the same cursor, chunking and state):
    each pass a materialized ``numpy`` permutation of ``(seed, pass)``."""

    def _make_pass(self, pass_index: int) -> np.ndarray:
        return numpy_generator(self._seed, pass_index).permutation(self._size)


def baseline_state(items: int, position: int) -> dict[str, Any]:
    """A PermutationTrainingSampler state (seed 1) saved after ``position`` draws."""
    pass_index, offset = divmod(position, items)
    state = PermutationTrainingSampler(items, seed=1, rank=0, world_size=1).state_dict()
    return dict(state, pass_index=pass_index, offset=offset)


def baseline_repeat_resume(factors: np.ndarray, seed: int, pass_index: int, offset: int) -> int:
    """Resume inside a repeat-factor pass before keyed passes: draw the rounding of every
    record, expand, permute the whole pass, read one chunk."""
    generator = numpy_generator(seed, pass_index)
    whole = np.floor(factors)
    repeats = (whole + (generator.random(len(factors)) < factors - whole)).astype(np.int64)
    expanded = np.repeat(np.arange(len(factors), dtype=np.int64), repeats)
    order = expanded[generator.permutation(len(expanded))]
    return order[offset : offset + CHUNK].tolist()[0]


def baseline_concat_resume(sizes: list[int], seed: int, pass_index: int, offset: int) -> int:
    """Resume inside a concat pass before keyed passes: draw the part of every draw of the
    pass, permute each part's pass, assemble the pass, read one chunk."""
    generator = numpy_generator(seed, pass_index)
    total = sum(sizes)
    weights = np.cumsum(sizes) / total
    choices = np.searchsorted(weights, generator.random(total), side="right")
    out = np.empty(total, dtype=np.int64)
    start = 0
    for j, size in enumerate(sizes):
        where = np.flatnonzero(choices == j)
        order = numpy_generator(seed, j, pass_index).permutation(size)
        out[where] = np.resize(order, len(where)) + start
        start += size
    return out[offset : offset + CHUNK].tolist()[0]


def baseline_repeat_factors(records: list[dict], thresh: float) -> torch.Tensor:
    """Image frequency of each category and the per-image maximum, one image at a time."""
    images_with = collections.defaultdict(int)
    for record in records:
        for category in {a["category_id"] for a in record["annotations"]}:
            images_with[category] += 1
    n = len(records)
    factor_of = {c: max(1.0, math.sqrt(thresh / (count / n))) for c, count in images_with.items()}
    factors = []
    for record in records:
        categories = {a["category_id"] for a in record["annotations"]}
        factors.append(max((factor_of[c] for c in categories), default=1.0))
    return torch.tensor(factors, dtype=torch.float32)


def baseline_expand_pass(factors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Stochastic rounding, then one ``extend`` per image, then a shuffle."""
    whole = torch.trunc(factors)
    frac = factors - whole
    repeats = whole + (torch.rand(len(frac), generator=generator) < frac).float()
    indices: list[int] = []
    for image, count in enumerate(repeats):
        indices.extend([image] * int(count.item()))
    out = torch.tensor(indices, dtype=torch.int64)
    return out[torch.randperm(len(out), generator=generator)]


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


def bench_other_resumes(items: int, rows: list[tuple[str, ...]]) -> None:
    """Resume 0.9 pass into a repeat-factor pass and a two-part concat pass of ``items``."""
    factors = np.random.default_rng(0).uniform(0.5, 2.5, items // 2)  # ~items per pass
    repeat = RepeatFactorTrainingSampler(factors, seed=1, rank=0, world_size=1)
    length = len(repeat._make_pass(0))
    state = dict(repeat.state_dict(), offset=int(length * 0.9))
    base, _ = timed(lambda: baseline_repeat_resume(factors, 1, 0, int(length * 0.9)), 3)
    ours, _ = timed(
        lambda: _resume(
            lambda: RepeatFactorTrainingSampler(factors, seed=7, rank=0, world_size=1), state
        ),
        3,
    )
    rows.append(
        (
            f"resume 0.9 pass, repeat factors of {len(factors):,} records ({length:,} indices)",
            f"{base * 1e3:.1f} ms (permutation)",
            f"{ours * 1e3:.2f} ms (keyed)",
            f"{base / ours:.0f}x",
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
    print(f"  memory done ({memory_mib()})", flush=True)


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
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows: list[tuple[str, ...]] = []
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, {args.threads} torch thread(s)",
        flush=True,
    )
    bench_one_pass(args.items, rows)
    bench_repeat_factors(args.images, args.categories, args.mean_annotations, rows)
    bench_iterate(args.items, rows)
    for items in args.resume_items:
        bench_resume(items, args.resume_passes, rows)
    bench_other_resumes(args.items, rows)
    bench_memory(args.items, args.iterate, rows)
    header = ("stage", "baseline (loop / permutation)", "catmap", "speed-up / ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
    return rows


if __name__ == "__main__":
    main()
