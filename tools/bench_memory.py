"""Benchmark the memory of R ranks x W DataLoader workers over one N-record dataset.

Three layouts run one after the other, in one run, with the same records:

``idle``
    the same job over a 1,000-record dataset: what R ranks and R x W workers cost with
    (almost) no data; the floor the other two are compared with.
``catmap``
    ``catalog.local_share.share_across_local_ranks``: local rank 0 builds the serialized
    records, the other ranks attach to the same memory; workers inherit (fork) or re-map it.
``per_rank``
    every rank builds its own serialized copy (the detectron2 / mmengine layout: one pickled
    buffer per rank, shared with that rank's forked workers).

Each rank joins a gloo process group, builds or attaches the dataset, and runs one pass over
its shard with ``W`` persistent workers; then, with every process still alive, the parent
sums the PSS (and USS) of all ranks and workers with psutil. PSS splits each shared page
between the processes that map it, so the sum counts one shared buffer once. Every rank calls
``malloc_trim(0)`` after building (both layouts), so transient build memory does not count.

Usage:
    python tools/bench_memory.py                                # R=4, W=2, N=1,000,000
    python tools/bench_memory.py --ranks 2 --workers 1 --records 100000
    python tools/bench_memory.py --start-method spawn           # DataLoader start method
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import socket
import sys
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools._bench_common import add_json_argument, write_json_results  # noqa: E402

__all__ = ["LAYOUTS", "make_records", "main", "measure_layout"]

logger = logging.getLogger(__name__)

LAYOUTS = ("idle", "catmap", "per_rank")
_IDLE_RECORDS = 1_000


def make_records(n: int):
    """A generator of ``n`` COCO-like records (about 450 bytes each once pickled).

    Example:
        >>> r = next(make_records(1)); sorted(r)
        ['annotations', 'file_name', 'height', 'image_id', 'width']
    """
    for i in range(n):
        x, y = float(i % 600), float(i % 400)
        yield {
            "file_name": f"/datasets/coco/train2017/{i:012d}.jpg",
            "height": 480,
            "width": 640,
            "image_id": i,
            "annotations": [
                {
                    "bbox": [x, y, 32.5, 40.25],
                    "bbox_mode": 1,
                    "category_id": (i + k) % 80,
                    "iscrowd": 0,
                    "segmentation": [[x, y, x + 32.5, y, x + 32.5, y + 40.25, x, y + 40.25]],
                }
                for k in range(2)
            ],
        }


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _Shard:
    """The rank's share of the records (every R-th index); items are small summaries."""

    def __init__(self, records: Any, rank: int, world: int) -> None:
        self.records = records
        self.indices = range(rank, len(records), world)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> int:
        record = self.records[self.indices[i]]
        return len(record["annotations"])


def _count(batch: list[int]) -> int:
    return sum(batch)


def _rank_main(
    rank: int,
    world: int,
    port: int,
    layout: str,
    num_records: int,
    workers: int,
    start_method: str,
    reports: Any,
    release: Any,
) -> None:
    import torch
    import torch.distributed as dist

    from catalog import SerializedList
    from catalog.local_share import share_across_local_ranks

    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), CATMAP_SHARE="1")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        start = time.perf_counter()
        n = _IDLE_RECORDS if layout == "idle" else num_records

        def build():
            return SerializedList(make_records(n), name="bench", progress=False), {}

        if layout == "per_rank":
            records, _ = build()
        else:
            records, _ = share_across_local_ranks("bench", build)
        _malloc_trim()
        dist.barrier()
        built = time.perf_counter() - start
        loader = torch.utils.data.DataLoader(
            _Shard(records, rank, world),
            batch_size=256,
            num_workers=workers,
            persistent_workers=workers > 0,
            multiprocessing_context=start_method if workers > 0 else None,
            collate_fn=_count,
        )
        iterator = iter(loader)
        total = sum(iterator)
        passed = time.perf_counter() - start - built
        worker_pids = [w.pid for w in getattr(iterator, "_workers", [])]
        reports.put(
            {
                "rank": rank,
                "pid": os.getpid(),
                "workers": worker_pids,
                "annotations": total,
                "buffer_bytes": int(records.nbytes),
                "build_s": built,
                "pass_s": passed,
            }
        )
        release.wait(timeout=600)
        del iterator
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_pids(report: dict[str, Any]) -> list[int]:
    if report["workers"]:
        return list(report["workers"])
    import psutil  # DataLoader internals changed: take the rank's child processes

    return [c.pid for c in psutil.Process(report["pid"]).children(recursive=True)]


def _memory(pid: int) -> tuple[int, int]:
    import psutil

    info = psutil.Process(pid).memory_full_info()
    return int(info.pss), int(info.uss)


def measure_layout(
    layout: str, ranks: int, workers: int, num_records: int, start_method: str
) -> dict[str, Any]:
    """Run one layout and return the summed PSS / USS of its ranks and workers (bytes)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    release = ctx.Event()
    started = time.perf_counter()
    job = mp.start_processes(
        _rank_main,
        args=(ranks, _free_port(), layout, num_records, workers, start_method, reports, release),
        nprocs=ranks,
        join=False,
        start_method="spawn",
    )
    try:
        got = []
        while len(got) < ranks:
            try:
                got.append(reports.get(timeout=5))
            except Exception:  # queue.Empty: check that no rank died
                for process in job.processes:
                    if process.exitcode not in (None, 0):
                        raise RuntimeError(
                            f"layout {layout}: a rank exited with code {process.exitcode}"
                        ) from None
                if time.perf_counter() - started > 1800:
                    raise TimeoutError(f"layout {layout}: ranks did not finish in 30 min") from None
        rank_mem = [_memory(r["pid"]) for r in got]
        worker_mem = [_memory(pid) for r in got for pid in _worker_pids(r)]
    finally:
        release.set()
        while not job.join():  # join() returns False while some rank is still running
            continue
    result = {
        "layout": layout,
        "ranks": ranks,
        "workers_per_rank": workers,
        "records": _IDLE_RECORDS if layout == "idle" else num_records,
        "processes": len(rank_mem) + len(worker_mem),
        "buffer_bytes": max(r["buffer_bytes"] for r in got),
        "pss_ranks": sum(p for p, _ in rank_mem),
        "pss_workers": sum(p for p, _ in worker_mem),
        "uss_total": sum(u for _, u in rank_mem + worker_mem),
        "build_s": max(r["build_s"] for r in got),
        "pass_s": max(r["pass_s"] for r in got),
        "annotations": sum(r["annotations"] for r in got),
    }
    result["pss_total"] = result["pss_ranks"] + result["pss_workers"]
    return result


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--start-method", default="fork", choices=("fork", "spawn", "forkserver"))
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    results = {}
    for layout in args.layouts:
        res = measure_layout(layout, args.ranks, args.workers, args.records, args.start_method)
        results[layout] = res
        print(
            f"{layout:>9}: PSS total {_mib(res['pss_total'])} MiB (ranks {_mib(res['pss_ranks'])}, "
            f"workers {_mib(res['pss_workers'])}), USS {_mib(res['uss_total'])} MiB, "
            f"buffer {_mib(res['buffer_bytes'])} MiB, build {res['build_s']:.1f} s, "
            f"pass {res['pass_s']:.1f} s, {res['processes']} processes",
            flush=True,
        )
    print()
    print(
        f"R={args.ranks} ranks x W={args.workers} workers ({args.start_method}), "
        f"N={args.records:,} records"
    )
    if "catmap" in results and "per_rank" in results:
        c, p = results["catmap"], results["per_rank"]
        buf = c["buffer_bytes"]
        print(f"buffer: {_mib(buf)} MiB")
        print(
            f"catmap   PSS: {_mib(c['pss_total'])} MiB = {c['pss_total'] / buf:.2f} buffers\n"
            f"per_rank PSS: {_mib(p['pss_total'])} MiB = {p['pss_total'] / buf:.2f} buffers\n"
            f"per_rank / catmap: {p['pss_total'] / c['pss_total']:.2f}x"
        )
        if "idle" in results:
            floor = results["idle"]["pss_total"] + buf
            print(
                f"target floor (one buffer + {results['idle']['processes']} idle processes): "
                f"{_mib(floor)} MiB; catmap / floor = {c['pss_total'] / floor:.2f}x, "
                f"per_rank / floor = {p['pss_total'] / floor:.2f}x"
            )
    write_json_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
