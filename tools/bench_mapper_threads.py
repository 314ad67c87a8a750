"""DatasetMapper across threads vs processes: does a thread executor pay off?

cv2.resize, cv2.flip and simplejpeg's decode release the GIL, so threads could map images
in parallel without a process per worker (no pickling, no per-process memory). The Python
parts (record copy, planning, boxes, Instances) hold the GIL. This script measures, on the
machine it runs on, wall-clock images/s of:

* 1 thread (the mapper called in a loop);
* N threads (a ``ThreadPoolExecutor`` mapping the same records);
* N processes (forked, each mapping its share of the records);

plus the CPU time each mode used (this process and its children): images per CPU-second
show what a mode costs when the cores are shared with other jobs (wall-clock speed-ups are
only meaningful on an otherwise idle machine). Each sample draws from its own generator (``use_generator(default_rng(index))``), the
records, augmentations and images (photo mosaics, ``tools/bench_photos.py``) the same in all
modes; modes interleaved round by round, best and median over rounds. OpenCV and torch run
one thread each, as in DataLoader workers.

Usage:
    python -m tools.bench_mapper_threads --images 64 --rounds 5 --workers 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]


def _map_one(mapper: Any, index: int, record: dict[str, Any]) -> Any:
    from mappers.random_state import use_generator

    with use_generator(np.random.default_rng(index)):
        return mapper(record)


def _serial(mapper: Any, records: list[dict[str, Any]], passes: int) -> float:
    start = time.perf_counter()
    for _ in range(passes):
        for index, record in enumerate(records):
            _map_one(mapper, index, record)
    return passes * len(records) / (time.perf_counter() - start)


def _threads(mapper: Any, records: list[dict[str, Any]], passes: int, workers: int) -> float:
    indices = list(range(len(records))) * passes
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda i: _map_one(mapper, i, records[i]), indices[: 2 * workers]))
        start = time.perf_counter()
        for _ in pool.map(lambda i: _map_one(mapper, i, records[i]), indices, chunksize=4):
            pass
        return len(indices) / (time.perf_counter() - start)


def _child(mapper: Any, records: list[dict[str, Any]], passes: int, barrier: Any) -> None:
    for index, record in enumerate(records[:2]):
        _map_one(mapper, index, record)
    barrier.wait()
    for _ in range(passes):
        for index, record in enumerate(records):
            _map_one(mapper, index, record)


def _processes(mapper: Any, records: list[dict[str, Any]], passes: int, workers: int) -> float:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    shares = [records[i::workers] for i in range(workers)]
    procs = [ctx.Process(target=_child, args=(mapper, s, passes, barrier)) for s in shares]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - start
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a mapping process failed: exit codes {[p.exitcode for p in procs]}")
    return passes * len(records) / elapsed


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(run: Any, images: int) -> tuple[float, float]:
    """(wall-clock images/s from ``run``, images per CPU-second over the call)."""
    cpu = _cpu_seconds()
    rate = run()
    return rate, images / max(_cpu_seconds() - cpu, 1e-9)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print and return best / median images/s per mode."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--images", type=int, default=64, help="distinct JPEGs generated")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--passes", type=int, default=2, help="passes over the images per mode")
    parser.add_argument("--workers", type=int, default=2, help="threads / processes")
    args = parser.parse_args(argv)

    import cv2
    import torch

    from tools.bench_mapper import mapper_pipeline
    from tools.bench_photos import image_source, make_records

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    mapper = mapper_pipeline()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        records = make_records(Path(tmp), args.images)
        for index, record in enumerate(records[:4]):
            _map_one(mapper, index, record)
        modes = {
            "1 thread": lambda: _serial(mapper, records, args.passes),
            f"{args.workers} threads": lambda: _threads(mapper, records, args.passes, args.workers),
            f"{args.workers} processes": lambda: _processes(
                mapper, records, args.passes, args.workers
            ),
        }
        samples: dict[str, list[float]] = {name: [] for name in modes}
        cpu_rates: dict[str, list[float]] = {name: [] for name in modes}
        for r in range(args.rounds):
            order = list(modes) if r % 2 == 0 else list(reversed(list(modes)))
            for name in order:
                rate, cpu_rate = _timed(modes[name], args.passes * len(records))
                samples[name].append(rate)
                cpu_rates[name].append(cpu_rate)
    load_end = os.getloadavg()[0]
    best = {name: max(v) for name, v in samples.items()}
    median = {name: statistics.median(v) for name, v in samples.items()}
    cpu = {name: statistics.median(v) for name, v in cpu_rates.items()}
    base = best["1 thread"]
    print(
        f"bench_mapper_threads: {args.images} {image_source()} JPEGs x {args.passes} passes, "
        f"{args.rounds} rounds, {os.cpu_count()} CPUs, wall-clock images/s"
    )
    for name in modes:
        print(
            f"  {name:<12} best {best[name]:7.1f}  median {median[name]:7.1f}  "
            f"x{best[name] / base:4.2f} of 1 thread (median x{median[name] / median['1 thread']:4.2f}); "
            f"{cpu[name]:6.1f} images per CPU-second"
        )
    print(f"  load average (1 min): {load_start:.1f} at start, {load_end:.1f} at end")
    return {"best": best, "median": median, "images_per_cpu_second": cpu}


if __name__ == "__main__":
    main()
