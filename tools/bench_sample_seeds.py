"""Benchmark per-sample augmentation seeds: train-loader throughput with and without them.

The catmap train loader maps every sample with the augmentation generator seeded from
(seed, the sample's global stream position), so augmented batches are identical for any
``num_workers`` and after a restore. This script measures what that costs, side by side in one
run, over JPEGs it generates (640x480, about 150 KB, 7 annotated objects each, as in
``tools/bench_mapper.py``):

* ``seeded``: ``build_detection_train_loader`` (DatasetMapper with ResizeShortestEdge(640..800,
  1333) + RandomFlip, polygon masks, TrainingSampler, aspect-ratio grouping);
* ``unseeded``: the same dataset and batch sampler in a ``ResumableLoader(sample_seeds=False)``
  (augmentations drawn from each worker's own generator, as before).

After one untimed round, configurations run interleaved round by round for each worker count,
alternating which goes first (so load on the machine affects both alike); the median samples/s over rounds is reported
with the ratio, and the median CPU ms per sample (user + system time of the main process and its
workers over the timed batches: unlike samples/s it hardly depends on what else runs on the
machine). It also times the seeding itself per sample, and checks (outside the timed runs)
that the seeded batches are bit-identical across worker counts and fresh loaders (and that the
unseeded ones are not).

Usage:
    python -m tools.bench_sample_seeds --workers 0 2 --rounds 5 --batches 40
    python -m tools.bench_sample_seeds --quick        # a few seconds, for development
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import tempfile
import time
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools._bench_common import HelpFormatter

__all__ = ["build_loader", "batch_digest", "seeding_overhead_us", "run", "main"]

CONFIGS = ("seeded", "unseeded")


def build_loader(
    records: Sequence[dict], *, sample_seeds: bool, workers: int, batch_size: int, seed: int
) -> Any:
    """The benchmark's train loader, with or without per-sample augmentation seeds.

    Example:
        >>> loader = build_loader(records, sample_seeds=True, workers=0, batch_size=4, seed=0)  # doctest: +SKIP
    """
    from mappers import DatasetMapper
    from mappers.transforms import RandomFlip, ResizeShortestEdge
    from samplers import ResumableLoader, build_detection_train_loader, trivial_batch_collator

    mapper = DatasetMapper(
        True,
        augmentations=[
            ResizeShortestEdge((640, 672, 704, 736, 768, 800), 1333, sample_style="choice"),
            RandomFlip(prob=0.5),
        ],
        use_instance_mask=True,
    )
    loader = build_detection_train_loader(
        list(records), mapper=mapper, total_batch_size=batch_size, num_workers=workers, seed=seed
    )
    if sample_seeds:
        return loader
    return ResumableLoader(
        loader.dataset,
        loader.batch_sampler,
        num_workers=workers,
        collate_fn=trivial_batch_collator,
        seed=seed,
        sample_seeds=False,
    )


def batch_digest(batches: Sequence[list[dict]]) -> str:
    """A digest of the image ids, image tensors and boxes of mapped batches."""
    digest = hashlib.sha1()
    for batch in batches:
        for sample in batch:
            digest.update(str(sample["image_id"]).encode())
            digest.update(sample["image"].numpy().tobytes())
            boxes = sample["instances"].gt_boxes
            digest.update(getattr(boxes, "tensor", boxes).numpy().tobytes())
    return digest.hexdigest()


def seeding_overhead_us(repeats: int = 20000) -> float:
    """Microseconds per sample to derive its seed and enter its generator."""
    import itertools

    import numpy as np

    from mappers.random_state import use_generator
    from samplers import sample_seed

    positions = itertools.count()

    def one() -> None:
        with use_generator(np.random.default_rng(sample_seed(3, next(positions)))):
            pass

    best = min(timeit.repeat(one, number=repeats, repeat=3))
    return best / repeats * 1e6


def _cpu_seconds(processes: Sequence[Any]) -> float:
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def _time_run(
    records: Sequence[dict], config: str, workers: int, args: argparse.Namespace
) -> tuple[float, float]:
    """(samples/s, CPU ms per sample) of one run; batches are dropped as they come."""
    import psutil

    loader = build_loader(
        records,
        sample_seeds=config == "seeded",
        workers=workers,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    iterator = iter(loader)
    for _ in range(args.warmup):
        next(iterator)
    main_process = psutil.Process()
    processes = [main_process, *main_process.children()]  # workers are started by iter()
    cpu_start = _cpu_seconds(processes)
    start = time.perf_counter()
    for _ in range(args.batches):
        next(iterator)
    elapsed = time.perf_counter() - start
    cpu = _cpu_seconds(processes) - cpu_start
    del iterator
    samples = args.batches * args.batch_size
    return samples / elapsed, cpu / samples * 1000


def _digest_run(
    records: Sequence[dict], config: str, workers: int, args: argparse.Namespace
) -> str:
    """Digest of the first ``args.check_batches`` batches of a fresh loader."""
    loader = build_loader(
        records,
        sample_seeds=config == "seeded",
        workers=workers,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    iterator = iter(loader)
    digest = batch_digest([next(iterator) for _ in range(args.check_batches)])
    del iterator
    return digest


def run(records: Sequence[dict], args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved timing rounds for every worker count, then the identity check."""
    rates: dict[tuple[str, int], list[float]] = {}
    cpu_ms: dict[tuple[str, int], list[float]] = {}
    for workers in args.workers:  # an untimed round: the first runs in a process are slower
        for config in CONFIGS:
            _time_run(records, config, workers, args)
    for round_index in range(args.rounds):
        order = CONFIGS if round_index % 2 == 0 else CONFIGS[::-1]
        for workers in args.workers:
            for config in order:
                rate, cpu = _time_run(records, config, workers, args)
                rates.setdefault((config, workers), []).append(rate)
                cpu_ms.setdefault((config, workers), []).append(cpu)
    rows = []
    for workers in args.workers:
        seeded = statistics.median(rates[("seeded", workers)])
        unseeded = statistics.median(rates[("unseeded", workers)])
        seeded_cpu = statistics.median(cpu_ms[("seeded", workers)])
        unseeded_cpu = statistics.median(cpu_ms[("unseeded", workers)])
        rows.append(
            {
                "workers": workers,
                "seeded_samples_per_s": seeded,
                "unseeded_samples_per_s": unseeded,
                "ratio": seeded / unseeded,
                "seeded_cpu_ms_per_sample": seeded_cpu,
                "unseeded_cpu_ms_per_sample": unseeded_cpu,
                # CPU times tick in 10 ms steps: a tiny run may measure none
                "cpu_ratio": seeded_cpu / unseeded_cpu if unseeded_cpu > 0 else float("nan"),
            }
        )
    digests = {
        config: [_digest_run(records, config, w, args) for w in args.workers for _ in range(2)]
        for config in CONFIGS
    }
    return {
        "rows": rows,
        "per_round_samples_per_s": {f"{c}/{w}": v for (c, w), v in rates.items()},
        "per_round_cpu_ms_per_sample": {f"{c}/{w}": v for (c, w), v in cpu_ms.items()},
        "seeding_us_per_sample": seeding_overhead_us(),
        "seeded_identical_across_workers": len(set(digests["seeded"])) == 1,
        "unseeded_distinct_batches": len(set(digests["unseeded"])),
        "identity_runs_per_config": len(digests["seeded"]),
    }


def _print_report(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"{args.images} JPEGs 640x480, batch {args.batch_size}, {args.batches} timed batches "
        f"after {args.warmup} warm-up, median of {args.rounds} interleaved rounds"
    )
    print(
        f"{'workers':>7}  {'seeded':>12}  {'unseeded':>12}  {'ratio':>6}  "
        f"{'seeded CPU':>12}  {'unseeded CPU':>12}  {'ratio':>6}"
    )
    for row in result["rows"]:
        print(
            f"{row['workers']:>7}  {row['seeded_samples_per_s']:>8.1f} s/s  "
            f"{row['unseeded_samples_per_s']:>8.1f} s/s  {row['ratio']:>6.3f}  "
            f"{row['seeded_cpu_ms_per_sample']:>9.2f} ms  "
            f"{row['unseeded_cpu_ms_per_sample']:>9.2f} ms  {row['cpu_ratio']:>6.3f}"
        )
    print("(samples/s: higher is better; CPU ms per sample over main process + workers: lower)")
    per_sample_ms = 1000 / result["rows"][0]["seeded_samples_per_s"]
    print(
        f"seeding: {result['seeding_us_per_sample']:.1f} us per sample "
        f"(mapping one sample: {per_sample_ms:.1f} ms with {result['rows'][0]['workers']} workers)"
    )
    identical = "yes" if result["seeded_identical_across_workers"] else "NO"
    runs = result["identity_runs_per_config"]
    print(
        f"first {args.check_batches} batches, 2 fresh loaders per worker count: seeded identical "
        f"for workers {list(args.workers)}: {identical}; unseeded: "
        f"{result['unseeded_distinct_batches']} distinct sequences over {runs} loaders"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; prints the table and returns the figures."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, description=__doc__.splitlines()[0]
    )
    parser.add_argument("--images", type=int, default=48, help="distinct JPEGs generated")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="worker counts")
    parser.add_argument("--batches", type=int, default=40, help="timed batches per run")
    parser.add_argument("--warmup", type=int, default=3, help="batches before timing")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check-batches", type=int, default=5, help="batches compared in the identity check"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for development")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.batches, args.warmup, args.rounds = 8, 4, 1, 1
    for name in ("images", "batches", "batch_size", "rounds", "check_batches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0 or any(w < 0 for w in args.workers):
        parser.error("--warmup and --workers must be >= 0")
    logging.basicConfig(level=logging.WARNING)
    from tools.bench_mapper import _make_dataset  # the same realistic JPEGs as bench_mapper

    with tempfile.TemporaryDirectory(prefix="catmap_bench_seeds_") as directory:
        records = _make_dataset(Path(directory), args.images)
        result = run(records, args)
    _print_report(result, args)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
