"""End-to-end loader benchmark: samples/s and memory of every process, catmap against a baseline.

For each number of DataLoader workers from 0 to ``--max-workers`` it runs, each in a fresh
subprocess so that one configuration's memory never leaks into the next:

* ``catmap``: the registered dataset's records in a ``SerializedList`` →
  ``build_detection_train_loader`` (``DatasetMapper``, ``TrainingSampler``);
* ``baseline``: the same records as a plain Python list of dicts in a map-style torch Dataset
  that deep-copies each record before mapping (detectron2's ``DatasetFromList(copy=True,
  serialize=False)``, and what a hand-written torch Dataset does), a seeded ``RandomSampler``
  and a torch ``DataLoader`` with the same batch size.

Both use the same ``DatasetMapper`` (ResizeShortestEdge + RandomFlip), so the throughput columns
compare the loaders and the memory columns show the record storage: a Python list is copied into
every worker as reference counts and the garbage collector touches its pages, a SerializedList
stays one shared buffer. Each process runs one full garbage collection at its first sample (as a
long training run eventually does), so the memory figures show the steady state.
``--replicate K`` repeats the records K times to stand in for a large annotation file.

Memory is PSS and USS (psutil) summed over the main process and its workers, measured after the
timed batches while the workers are alive. CPU ms/sample is the user + system CPU time of the
main process and its workers over the timed batches: unlike samples/s it hardly depends on what
else runs on the machine. On a busy machine, ``--repeats N`` runs every
configuration N times (interleaved) and reports the run with the median samples/s.

Examples::

    python -m tools.benchmark_loader                                  # demo dataset, 0..2 workers
    python -m tools.benchmark_loader --replicate 300 --batches 100 --repeats 3
    python -m tools.benchmark_loader --import my_project.datasets --dataset my_train --max-workers 4
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mappers.image_io import limit_opencv_threads
from ._bench_common import HelpFormatter
from .dataset_source import DatasetSourceError, add_dataset_arguments, resolve_dataset

__all__ = [
    "BenchmarkError",
    "CollectOnceMapper",
    "ListDataset",
    "measure_memory",
    "main",
    "run_config",
]

IMPLEMENTATIONS = ("baseline", "catmap")
_RESULT_PREFIX = "BENCHMARK_RESULT "


class BenchmarkError(RuntimeError):
    """A benchmark configuration failed (the message names it and carries the child's output)."""


class CollectOnceMapper:
    """Wraps a mapper; runs one full ``gc.collect()`` in each process at its first sample.

    Example:
        >>> CollectOnceMapper(lambda r: r["x"])({"x": 1})
        1
    """

    def __init__(self, mapper: Callable[[dict], Any]) -> None:
        self.mapper = mapper
        self._collected_in: int | None = None

    def __call__(self, record: dict) -> Any:
        if self._collected_in != os.getpid():
            self._collected_in = os.getpid()
            gc.collect()
        return self.mapper(record)


class ListDataset:
    """The baseline dataset: a plain list of record dicts, deep-copied on access, then mapped.

    Example:
        >>> ds = ListDataset([{"a": 1}], lambda r: r["a"] + 1)
        >>> len(ds), ds[0]
        (1, 2)
    """

    def __init__(self, records: list[dict], mapper: Callable[[dict], Any]) -> None:
        self.records = records
        self.mapper = mapper

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Any:
        return self.mapper(copy.deepcopy(self.records[index]))


def _collate_list(batch: list[Any]) -> list[Any]:
    return batch


def _is_multiprocessing_helper(proc: Any) -> bool:
    """True for multiprocessing's own service processes (resource tracker, forkserver), which
    earlier spawn-based code in the same process may have left running; they are not workers."""
    import psutil

    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return True
    return "multiprocessing.resource_tracker" in cmdline or "multiprocessing.forkserver" in cmdline


def measure_memory() -> dict[str, Any]:
    """PSS and USS in MiB of this process and of its child processes, summed.

    Returns:
        ``{"pss_main", "uss_main", "pss_workers", "uss_workers", "pss_total", "uss_total",
        "processes", "pss_each"}``; ``pss_each`` lists the PSS of each process, main first.

    Example:
        >>> measure_memory()["processes"] >= 1
        True
    """
    import psutil

    me = psutil.Process()
    figures: dict[str, Any] = {"pss_main": 0.0, "uss_main": 0.0, "pss_workers": 0.0, "uss_workers": 0.0,
                               "processes": 0, "pss_each": []}  # fmt: skip
    workers = [c for c in me.children(recursive=True) if not _is_multiprocessing_helper(c)]
    for proc, role in [(me, "main")] + [(c, "workers") for c in workers]:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a worker that exited between listing and reading has no memory left
        pss = getattr(info, "pss", info.rss) / 2**20  # PSS is Linux-only; RSS elsewhere
        figures[f"pss_{role}"] += pss
        figures["pss_each"].append(round(pss, 1))
        figures[f"uss_{role}"] += info.uss / 2**20
        figures["processes"] += 1
    figures["pss_total"] = figures["pss_main"] + figures["pss_workers"]
    figures["uss_total"] = figures["uss_main"] + figures["uss_workers"]
    return figures


def cpu_seconds() -> dict[int, float]:
    """User + system CPU seconds used so far by this process and each of its children, by pid.

    Example:
        >>> os.getpid() in cpu_seconds()
        True
    """
    import psutil

    me = psutil.Process()
    seconds = {}
    for proc in [me] + me.children(recursive=True):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # exited between listing and reading
        seconds[proc.pid] = times.user + times.system
    return seconds


def _build_mapper(short_edge: int, max_size: int) -> Callable[[dict], Any]:
    from mappers import DatasetMapper
    from mappers.transforms import RandomFlip, ResizeShortestEdge

    return CollectOnceMapper(
        DatasetMapper(
            is_train=True,
            augmentations=[ResizeShortestEdge(short_edge, max_size=max_size), RandomFlip(prob=0.5)],
            use_instance_mask=True,
        )
    )


def _endless(loader: Any):
    while True:
        yield from loader


def run_config(
    impl: str,
    name: str,
    *,
    workers: int,
    batches: int,
    warmup: int,
    batch_size: int,
    replicate: int,
    seed: int,
    short_edge: int,
    max_size: int,
) -> dict[str, Any]:
    """Run one configuration in this process and return its figures.

    Raises:
        BenchmarkError: an unknown implementation name.
    """
    import torch

    from catalog import DatasetCatalog, SerializedList
    from samplers import TrainingSampler, build_detection_train_loader

    if impl not in IMPLEMENTATIONS:
        raise BenchmarkError(f"unknown implementation {impl!r}; expected one of {IMPLEMENTATIONS}")
    torch.set_num_threads(1)
    mapper = _build_mapper(short_edge, max_size)
    source = DatasetCatalog.get(name)
    total = len(source) * replicate
    # every replicated record is a distinct object (a SerializedList access returns a fresh dict),
    # as if read from a large annotation file
    fresh_records = (source[i % len(source)] for i in range(total))
    if impl == "catmap":
        dataset: Any = SerializedList(fresh_records, name=name)
        gc.collect()
        loader = build_detection_train_loader(
            dataset,
            mapper=mapper,
            sampler=TrainingSampler(len(dataset), shuffle=True, seed=seed),
            total_batch_size=batch_size,
            aspect_ratio_grouping=False,
            num_workers=workers,
        )
        stream = iter(loader)
    else:
        dataset = ListDataset(list(fresh_records), mapper)
        generator = torch.Generator()
        generator.manual_seed(seed)
        limit_opencv_threads()  # before workers fork: OpenCV's pool deadlocks forked workers
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=torch.utils.data.RandomSampler(dataset, generator=generator),
            num_workers=workers,
            collate_fn=_collate_list,
            drop_last=True,
            persistent_workers=workers > 0,
        )
        stream = _endless(loader)
    for _ in range(warmup):
        next(stream)
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    samples = 0
    for _ in range(batches):
        samples += len(next(stream))
    elapsed = time.perf_counter() - start
    cpu_after = cpu_seconds()
    cpu = sum(after - cpu_before.get(pid, 0.0) for pid, after in cpu_after.items())
    memory = measure_memory()
    return {
        "impl": impl,
        "workers": workers,
        "records": len(dataset),
        "samples": samples,
        "seconds": elapsed,
        "samples_per_s": samples / elapsed if elapsed > 0 else float("inf"),
        "cpu_ms_per_sample": 1000.0 * cpu / samples,
        **memory,
    }


def _child_command(args: argparse.Namespace, impl: str, workers: int) -> list[str]:
    cmd = [sys.executable, "-m", __spec__.name, "--child", impl, "--child-workers", str(workers)]
    for module in args.imports:
        cmd += ["--import", module]
    for flag in ("dataset", "coco_json", "image_root", "data_dir"):
        value = getattr(args, flag)
        if value is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(value)]
    for flag in ("num_images", "batches", "warmup", "batch_size", "replicate", "seed", "short_edge", "max_size"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return cmd


def _run_child(args: argparse.Namespace, impl: str, workers: int) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(_child_command(args, impl, workers), capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT_PREFIX):
            return json.loads(line[len(_RESULT_PREFIX) :])
    raise BenchmarkError(
        f"{impl} with {workers} worker(s) failed (exit status {proc.returncode}):\n"
        f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
    )


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median samples/s (memory figures of that same run)."""
    ordered = sorted(runs, key=lambda r: r["samples_per_s"])
    return dict(ordered[(len(ordered) - 1) // 2], repeats=len(runs))


def _format_rows(results: list[dict[str, Any]]) -> str:
    headers = ["workers", "loader", "samples/s", "x baseline", "CPU ms/sample", "x baseline",
               "PSS MiB", "x baseline", "PSS of each process", "USS MiB"]  # fmt: skip
    rows = []
    by_key = {(r["workers"], r["impl"]): r for r in results}
    for r in results:
        base = by_key.get((r["workers"], "baseline"))
        compare = base is not None and r["impl"] != "baseline"

        def ratio(key: str, r: dict[str, Any] = r, base: dict[str, Any] | None = base, compare: bool = compare) -> str:
            return f"{r[key] / base[key]:.2f}" if compare and base[key] > 0 else ""

        rows.append([r["workers"], r["impl"], f"{r['samples_per_s']:.1f}", ratio("samples_per_s"),
                     f"{r['cpu_ms_per_sample']:.2f}", ratio("cpu_ms_per_sample"),
                     f"{r['pss_total']:.0f}", ratio("pss_total"),
                     " + ".join(f"{p:.0f}" for p in r["pss_each"]), f"{r['uss_total']:.0f}"])  # fmt: skip
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        description="End-to-end loader samples/s and memory, catmap vs a plain list.",
    )
    add_dataset_arguments(parser)
    parser.add_argument("--max-workers", type=int, default=2, help="benchmark 0..N workers")
    parser.add_argument("--batches", type=int, default=40, help="timed batches per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="untimed batches first (worker start-up)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--replicate", type=int, default=1,
                        help="repeat the records K times (a stand-in for a large annotation file)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every configuration N times and report the median run")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--short-edge", type=int, default=256, help="ResizeShortestEdge length")
    parser.add_argument("--max-size", type=int, default=480, help="ResizeShortestEdge max size")
    parser.add_argument("--impl", choices=IMPLEMENTATIONS, action="append", default=None,
                        help="run only this loader (repeatable; default both)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    parser.add_argument("--child", choices=IMPLEMENTATIONS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-workers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag in ("batches", "batch_size", "replicate", "repeats", "short_edge", "max_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_workers < 0 or args.warmup < 0:
        parser.error("--max-workers and --warmup must be >= 0")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        name = resolve_dataset(args)
    except DatasetSourceError as exc:
        parser.error(str(exc))

    if args.child is not None:
        result = run_config(args.child, name, workers=args.child_workers, batches=args.batches,
                            warmup=args.warmup, batch_size=args.batch_size, replicate=args.replicate,
                            seed=args.seed, short_edge=args.short_edge, max_size=args.max_size)  # fmt: skip
        print(_RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    from catalog import DatasetCatalog

    num_records = len(DatasetCatalog.get(name)) * args.replicate
    impls = args.impl or list(IMPLEMENTATIONS)
    print(f"dataset {name!r}: {num_records} records ({args.replicate}x replicated), batch size "
          f"{args.batch_size}, {args.warmup} warm-up + {args.batches} timed batches, "
          f"workers 0..{args.max_workers}, {os.cpu_count()} CPU cores")  # fmt: skip
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):  # repeats outermost: slow drifts of a shared machine
        for workers in range(args.max_workers + 1):  # spread over every configuration alike
            for impl in impls:
                label = f" (round {repeat + 1}/{args.repeats})" if args.repeats > 1 else ""
                print(f"  running {impl:<8} with {workers} worker(s){label} ...", end=" ", flush=True)
                try:
                    result = _run_child(args, impl, workers)
                except BenchmarkError as exc:
                    print("failed")
                    print(exc, file=sys.stderr)
                    return 1
                print(f"{result['samples_per_s']:.1f} samples/s, {result['cpu_ms_per_sample']:.2f} CPU "
                      f"ms/sample, PSS {result['pss_total']:.0f} MiB")  # fmt: skip
                runs.setdefault((workers, impl), []).append(result)
    results = [_median_run(r) for r in runs.values()]
    print()
    print(_format_rows(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
