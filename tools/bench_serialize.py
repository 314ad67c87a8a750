"""Benchmark: SerializedList vs mmengine's BaseDataset serialization vs a plain list.

Builds N synthetic detectron2 records (about 7 annotations each, every one with a 12-float
polygon) and measures, for each way of holding them, in one run:

* build seconds: from the in-memory list of dicts to the structure (``serialized_list``:
  every record encoded data-only with msgpack);
* bytes: the serialized buffer (plus offsets and columns), or for the plain list the memory
  its Python objects take (USS growth while generating them);
* ``pickle_each``: only ``pickle.dumps`` of every record into a list of bytes, the floor of
  any build that pickles records one by one (mmengine's);
* median get latency: ``structure[i]`` for random i (mmengine: ``get_data_info(i)``);
* summed PSS and USS of the main process plus 4 DataLoader workers (fork) after one pass
  over all records, and the same for 5 idle interpreters (an empty dataset) as reference.

Each approach runs in its own subprocess so that memory figures do not mix. When mmengine is
not installed its row is skipped (``pip install mmengine`` adds it; it pulls no torch).

Usage:
    python -m tools.bench_serialize --n 1000000
    python -m tools.bench_serialize --n 20000 --workers 4 --gets 5000   # quick check

Targets (issues 2 and 11): build >= 2x faster than mmengine; buffer <= 0.6 x mmengine's
pickles; median get no slower than mmengine's; summed PSS of main + 4 workers <= 1.2 x
(buffer bytes + PSS of 5 idle interpreters).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from catalog._common import numpy_generator
from tools._bench_common import HelpFormatter

__all__ = ["synthetic_records", "main"]

logger = logging.getLogger(__name__)

APPROACHES = (
    "idle",
    "serialized_list",
    "mmengine",
    "pickle_each",
    "plain_list",
)


def synthetic_records(n: int, seed: int = 0, chunk: int = 10_000) -> Iterator[dict]:
    """Yield ``n`` detectron2-format records, about 7 annotations each with a 12-float polygon.

    Example:
        >>> records = list(synthetic_records(3))
        >>> len(records), len(records[0]["annotations"][0]["segmentation"][0])
        (3, 12)
    """
    rng = numpy_generator(seed)
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        counts = rng.integers(4, 11, size=size)  # 4..10 annotations, mean 7
        total = int(counts.sum())
        polygons = np.round(rng.random((total, 12)) * 500.0, 2).tolist()
        boxes = np.round(rng.random((total, 4)) * 300.0, 2).tolist()
        categories = rng.integers(0, 80, size=total).tolist()
        crowd = (rng.random(total) < 0.01).astype(int).tolist()
        pos = 0
        for offset in range(size):
            image_id = start + offset
            annotations = []
            for k in range(pos, pos + int(counts[offset])):
                annotations.append(
                    {
                        "bbox": boxes[k],
                        "bbox_mode": 1,
                        "category_id": categories[k],
                        "iscrowd": crowd[k],
                        "segmentation": [polygons[k]],
                    }
                )
            pos += int(counts[offset])
            yield {
                "file_name": f"images/{image_id:012d}.jpg",
                "height": 480,
                "width": 640,
                "image_id": image_id,
                "annotations": annotations,
            }


def _trim_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def _uss() -> int:
    import psutil

    return int(psutil.Process().memory_full_info().uss)


class _Reader:
    """Map-style dataset reading records through ``get``; returns a tiny summary."""

    def __init__(self, data: Any, kind: str) -> None:
        self.data = data
        self.kind = kind

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> int:
        if self.kind == "mmengine":
            record = self.data.get_data_info(index)
        elif self.kind == "pickle_each":
            record = pickle.loads(self.data[index])
        else:
            record = self.data[index]
        return len(record["annotations"])


def _collate(batch: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(batch)


def _pass_and_measure(dataset: Any, workers: int, batch_size: int) -> dict[str, Any]:
    import psutil
    import torch

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=_collate,
        persistent_workers=workers > 0,
        multiprocessing_context="fork" if workers > 0 else None,
    )
    seen = 0
    start = time.perf_counter()
    iterator = iter(loader)
    for _pid, count in iterator:
        seen += count
    pass_seconds = time.perf_counter() - start
    # persistent workers stay alive after the pass; measure them all, busy or not
    pids = {w.pid for w in getattr(iterator, "_workers", [])}
    processes = [psutil.Process()] + [psutil.Process(pid) for pid in sorted(pids)]
    infos = [p.memory_full_info() for p in processes]
    result = {
        "pss": int(sum(i.pss for i in infos)),
        "uss": int(sum(i.uss for i in infos)),
        "pss_main": int(infos[0].pss),
        "processes": len(processes),
        "pass_seconds": pass_seconds,
        "annotations_seen": seen,
    }
    del iterator, loader
    return result


def _median_get_ns(get: Any, n: int, gets: int) -> float:
    rng = numpy_generator(1)
    indices = rng.integers(0, n, size=gets).tolist() if n else []
    times = []
    clock = time.perf_counter_ns
    for i in indices:
        t0 = clock()
        get(i)
        times.append(clock() - t0)
    return float(statistics.median(times)) if times else float("nan")


def _run_child(kind: str, n: int, workers: int, gets: int, batch_size: int) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before measuring, in every approach alike)

    from catalog import SerializedList

    _trim_memory()
    if kind == "idle":
        dataset = _Reader([{"annotations": []}] * max(workers, 1), "plain_list")
        return {"kind": kind, **_pass_and_measure(dataset, workers, 1)}

    uss_before = _uss()
    records = list(synthetic_records(n))
    list_bytes = _uss() - uss_before
    out: dict[str, Any] = {"kind": kind, "n": n}
    if kind == "serialized_list":
        start = time.perf_counter()
        data = SerializedList(records, name="bench", progress=False)
        out["build_seconds"] = time.perf_counter() - start
        out["bytes"] = data.nbytes
        start = time.perf_counter()
        del records  # mmengine's build frees its input list itself; time ours separately
        out["free_input_seconds"] = time.perf_counter() - start
        _trim_memory()
        out["median_get_ns"] = _median_get_ns(data.__getitem__, n, gets)
    elif kind == "mmengine":
        from mmengine.dataset import BaseDataset

        class _InMemory(BaseDataset):
            def load_data_list(self) -> list[dict]:
                return records

        start = time.perf_counter()
        data = _InMemory(serialize_data=True, lazy_init=False)
        out["build_seconds"] = time.perf_counter() - start
        out["bytes"] = int(data.data_bytes.nbytes + data.data_address.nbytes)
        del records
        _trim_memory()
        out["median_get_ns"] = _median_get_ns(data.get_data_info, n, gets)
    elif kind == "pickle_each":
        start = time.perf_counter()
        data = [pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) for record in records]
        out["build_seconds"] = time.perf_counter() - start
        out["bytes"] = sum(map(len, data))
        del records
        _trim_memory()
        out["median_get_ns"] = _median_get_ns(lambda i: pickle.loads(data[i]), n, gets)
    elif kind == "plain_list":
        start = time.perf_counter()
        data = list(records)
        out["build_seconds"] = time.perf_counter() - start
        out["bytes"] = list_bytes
        del records
        out["median_get_ns"] = _median_get_ns(data.__getitem__, n, gets)
    else:
        raise ValueError(f"unknown approach {kind!r}; choose from {APPROACHES}")
    out.update(_pass_and_measure(_Reader(data, kind), workers, batch_size))
    return out


def _spawn_child(kind: str, args: argparse.Namespace) -> dict[str, Any] | None:
    command = [
        sys.executable,
        "-m",
        __spec__.name,
        "--child",
        kind,
        "--n",
        str(args.n),
        "--workers",
        str(args.workers),
        "--gets",
        str(args.gets),
        "--batch-size",
        str(args.batch_size),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"[{kind}] failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _mmengine_available() -> bool:
    try:
        import mmengine.dataset  # noqa: F401
    except ImportError:
        return False
    return True


def _report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    mib = 2**20
    lines = [
        f"records: {args.n:,}  workers: {args.workers}  gets: {args.gets:,}  "
        f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)",
        f"{'approach':<20} {'build s':>9} {'MiB':>9} {'get us':>8} "
        f"{'PSS MiB':>9} {'USS MiB':>9} {'pass s':>8}",
    ]
    for kind in APPROACHES:
        r = results.get(kind)
        if r is None:
            continue
        lines.append(
            f"{kind:<20} {r.get('build_seconds', 0.0):>9.2f} {r.get('bytes', 0) / mib:>9.1f} "
            f"{r.get('median_get_ns', float('nan')) / 1000:>8.1f} {r['pss'] / mib:>9.1f} "
            f"{r['uss'] / mib:>9.1f} {r['pass_seconds']:>8.2f}"
        )
    idle = results.get("idle")
    ours = results.get("serialized_list")
    mm = results.get("mmengine")
    plain = results.get("plain_list")
    if ours and mm:
        lines.append(
            f"build speed-up vs mmengine: {mm['build_seconds'] / ours['build_seconds']:.2f}x "
            "(target >= 2x); counting the time to free the input list, which mmengine's "
            f"build includes: {mm['build_seconds'] / (ours['build_seconds'] + ours['free_input_seconds']):.2f}x"
        )
        lines.append(
            f"median get, ours / mmengine: {ours['median_get_ns'] / mm['median_get_ns']:.2f} "
            "(target <= 1)"
        )
        lines.append(f"summed PSS, ours / mmengine: {ours['pss'] / mm['pss']:.2f}")
        lines.append(
            f"buffer, ours / mmengine's pickles: {ours['bytes'] / mm['bytes']:.2f} (target <= 0.6)"
        )
        floor = results.get("pickle_each")
        if floor:
            lines.append(
                f"pickling each record alone takes {floor['build_seconds']:.2f} s: a build that "
                "pickles records one by one is at most "
                f"{mm['build_seconds'] / floor['build_seconds']:.2f}x faster than mmengine's"
            )
    elif ours:
        lines.append("mmengine not installed: its row and ratios are skipped")
    if ours and idle:
        bound = ours["bytes"] + idle["pss"]
        lines.append(
            f"summed PSS, ours / (buffer + {idle['processes']} idle interpreters): "
            f"{ours['pss'] / bound:.2f} (target <= 1.2)"
        )
    if plain and idle:
        bound = plain["bytes"] + idle["pss"]
        lines.append(
            f"summed PSS, plain list / (its objects + idle interpreters): {plain['pss'] / bound:.2f}"
            f"; plain list PSS / ours: {plain['pss'] / ours['pss']:.2f}"
            if ours
            else ""
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="number of records")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers")
    parser.add_argument("--gets", type=int, default=20_000, help="random gets timed")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--only", nargs="*", choices=APPROACHES, default=None, help="run only these approaches"
    )
    parser.add_argument("--json", default=None, help="also write the raw figures to this file")
    parser.add_argument("--child", choices=APPROACHES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be >= 1")
    if args.child:
        result = _run_child(args.child, args.n, args.workers, args.gets, args.batch_size)
        print(json.dumps(result))
        return 0

    kinds = list(args.only or APPROACHES)
    if "mmengine" in kinds and not _mmengine_available():
        print("mmengine is not installed; skipping its row (pip install mmengine)")
        kinds.remove("mmengine")
    results: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        print(f"running {kind} ...", flush=True)
        result = _spawn_child(kind, args)
        if result is not None:
            results[kind] = result
    report = _report(results, args)
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
