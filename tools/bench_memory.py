"""Benchmark the memory of R ranks x W DataLoader workers on the real training path.

Every layout runs the same job: R processes join a gloo process group on 127.0.0.1, each
builds a training loader over two registered COCO-shaped datasets of N/2 records each (about
1% of the images have no annotations, as in COCO train), reads every record once (so every
page of the records is resident: PSS only counts pages some process touched) and takes a few
batches through W persistent workers; then, with every process alive, the parent sums the PSS of all ranks
and their child processes. PSS splits each shared page between the processes that map it,
so the sum counts a shared buffer once.

Data memory is the anonymous and shared-memory part of PSS (``Pss_Anon + Pss_Shmem`` of
``/proc/<pid>/smaps_rollup``: private and copy-on-write pages, the records' memory file, torch
shared memory); the file-backed part (shared libraries' code, about 100 MiB here) is left
out: its PSS is split with every other process on the machine that maps the same libraries,
so it moves with unrelated processes (tens of MiB between two runs on a shared machine).
The cache is off (``CATMAP_CACHE=0``), so the records live in shared memory, not in files.
Every rank also reads every page of the shared records' arrays (offsets and columns, not only
the bytes of the records it rebuilt): a memory file's pages are resident whether or not a
process maps them, and PSS would leave out those of columns a layout never reads.

``idle``
    the catmap path over two 500-record datasets: what the interpreters, torch and the
    loader cost with (almost) no data; reported separately and subtracted below.
``catmap``
    ``build_detection_train_loader(["bench_a", "bench_b"])``: ``DatasetCatalog.get`` loads
    each dataset once per machine (shared memory file), ``get_detection_dataset_dicts``
    filters empty images (``filter_empty=True``, the default) and joins the two as a view.
``catmap_plain``
    the plain ``DatasetCatalog.get`` path: one registered dataset holding the same N
    records, passed to the builder as it is (no filter, no join), for comparison.
``per_rank``
    the detectron2 / mmengine layout: every rank loads both datasets as Python lists,
    joins and filters them, and pickles the records into one numpy buffer of its own, which
    forked workers share with their rank and spawned workers receive a copy of.

Ranks build one after another in ``per_rank`` (only to bound the transient memory of the
Python lists); every rank calls ``malloc_trim(0)`` before it reports, so build-time garbage
does not count. The buffer of one layout is its records' bytes plus offsets and columns.

Usage:
    python -m tools.bench_memory                        # R=4, W=2, N=1,000,000, fork and spawn
    python -m tools.bench_memory --ranks 2 --workers 1 --records 100000 --start-methods fork
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import os
import pickle
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from tools._bench_common import HelpFormatter, add_json_argument, write_json_results
from tools._memory_pss import process_tree_pss

__all__ = ["LAYOUTS", "make_records", "main", "measure_layout"]

logger = logging.getLogger(__name__)

LAYOUTS = ("idle", "catmap", "catmap_plain", "per_rank")
_IDLE_RECORDS = 1_000
#: One image in this many has no annotations (COCO train2017: 1,021 of 118,287).
EMPTY_EVERY = 100
_CHUNK = 8192


def make_records(n: int, start: int = 0, seed: int = 0) -> Iterator[dict]:
    """``n`` COCO-like records with image ids ``start ..`` (about 450 bytes each pickled).

    Every ``EMPTY_EVERY``-th image has no annotations; the others have two boxes with
    polygons, drawn from ``numpy.random.default_rng((seed, start))``.

    Example:
        >>> r = next(make_records(1, start=1)); sorted(r)
        ['annotations', 'file_name', 'height', 'image_id', 'width']
        >>> next(make_records(1))["annotations"]
        []
    """
    rng = np.random.default_rng((seed, start))
    for j in range(n):
        if j % _CHUNK == 0:  # draw in chunks: no n-sized Python lists
            size = min(_CHUNK, n - j)
            boxes = np.round(rng.uniform(0, 400, size=(size, 2, 4)), 2).tolist()
            cats = rng.integers(0, 80, size=(size, 2)).tolist()
        i, c = start + j, j % _CHUNK
        annotations = []
        if i % EMPTY_EVERY:
            for k in range(2):
                x, y, w, h = boxes[c][k]
                annotations.append(
                    {
                        "bbox": [x, y, w, h],
                        "bbox_mode": 1,
                        "category_id": cats[c][k],
                        "iscrowd": 0,
                        "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
                    }
                )
        yield {
            "file_name": f"/datasets/coco/train2017/{i:012d}.jpg",
            "height": 480,
            "width": 640,
            "image_id": i,
            "annotations": annotations,
        }


def _malloc_trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PerRankRecords:
    """The detectron2 / mmengine storage: records pickled into one numpy buffer per rank,
    pickled by value (spawned workers each unpickle a copy).

    Example:
        >>> records = PerRankRecords([{"a": 1}, {"a": 2}]); len(records), records[1]
        (2, {'a': 2})
    """

    def __init__(self, records: list[dict]) -> None:
        blobs = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
        self.ends = np.cumsum([len(b) for b in blobs], dtype=np.int64)
        self.buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8).copy()

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> dict:
        start = int(self.ends[i - 1]) if i else 0
        return pickle.loads(memoryview(self.buffer[start : int(self.ends[i])]))

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer and its offsets."""
        return int(self.buffer.nbytes + self.ends.nbytes)


def _summary(record: dict) -> int:
    return len(record["annotations"])


def _register(layout: str, half: int) -> Any:
    from catalog import DatasetCatalog, SerializedList

    def loader(start: int, n: int, name: str) -> Any:
        # a list is the usual loader result; streaming keeps build-time objects out
        return lambda: SerializedList(make_records(n, start), name=name, progress=False)

    if layout == "catmap_plain":
        DatasetCatalog.register("bench_all", loader(0, 2 * half, "bench_all"))
        return DatasetCatalog.get("bench_all")
    DatasetCatalog.register("bench_a", loader(0, half, "bench_a"))
    DatasetCatalog.register("bench_b", loader(half, half, "bench_b"))
    return ["bench_a", "bench_b"]


def _per_rank_records(half: int, rank: int, world: int) -> PerRankRecords:
    import torch.distributed as dist

    records = None
    for turn in range(world):  # one rank at a time: bounds the transient Python lists
        if turn == rank:
            joined = list(make_records(half, 0)) + list(make_records(half, half))
            kept = [r for r in joined if any(not a["iscrowd"] for a in r["annotations"])]
            records = PerRankRecords(kept)
            del joined, kept
            _malloc_trim()
        dist.barrier()
    assert records is not None  # noqa: S101 - every rank takes its turn above
    return records


def _read_every_record(layout: str, dataset: Any) -> int:
    """Read every record once in this rank (what an epoch does), and every page of the
    shared records' arrays, so that all of their memory is mapped by some process: PSS counts
    only pages a process touched, and shared memory nobody touched would escape the sum."""
    from catalog import DatasetCatalog, get_detection_dataset_dicts

    if layout == "per_rank":
        records: Any = dataset
    elif layout == "catmap_plain":
        records = DatasetCatalog.get("bench_all")
        _touch_arrays(records)
    else:
        for name in dataset:
            _touch_arrays(DatasetCatalog.get(name))
        records = get_detection_dataset_dicts(dataset)
    return sum(len(records[i]["annotations"]) for i in range(len(records)))


def _touch_arrays(records: Any) -> int:
    """Read one byte of every page of a SerializedList's arrays (no copy)."""
    total = 0
    for array in (records.buffer, records.ends, *records.columns.arrays()):
        raw = np.frombuffer(memoryview(array).cast("B"), dtype=np.uint8) if array.size else None
        if raw is not None:
            total += int(raw[::4096].sum())
    return total


def _rank_main(
    rank: int,
    world: int,
    port: int,
    layout: str,
    num_records: int,
    workers: int,
    start_method: str,
    steps: int,
    reports: Any,
    release: Any,
) -> None:
    import torch.distributed as dist

    from samplers import build_detection_train_loader

    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), CATMAP_SHARE="1")
    os.environ.update(CATMAP_CACHE="0")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        start = time.perf_counter()
        half = (_IDLE_RECORDS if layout == "idle" else num_records) // 2
        if layout == "per_rank":
            dataset: Any = _per_rank_records(half, rank, world)
            buffer_bytes = dataset.nbytes
        else:
            dataset = _register(layout, half)
            from catalog import DatasetCatalog

            names = ["bench_all"] if layout == "catmap_plain" else dataset
            buffer_bytes = sum(DatasetCatalog.get(n).nbytes for n in names)
        loader = build_detection_train_loader(
            dataset,
            mapper=_summary,
            total_batch_size=8 * world,
            aspect_ratio_grouping=layout != "per_rank",
            num_workers=workers,
            persistent_workers=workers > 0,
            multiprocessing_context=start_method if workers > 0 else None,
            seed=0,
        )
        built = time.perf_counter() - start
        _read_every_record(layout, dataset)
        _malloc_trim()  # before forking workers: garbage they inherit would count in them
        iterator = iter(loader)
        annotations = sum(sum(next(iterator)) for _ in range(steps))
        _malloc_trim()
        dist.barrier()
        reports.put(
            {
                "rank": rank,
                "pid": os.getpid(),
                "records": len(loader.dataset) if hasattr(loader, "dataset") else None,
                "annotations": annotations,
                "buffer_bytes": int(buffer_bytes),
                "build_s": built,
                "pass_s": time.perf_counter() - start - built,
            }
        )
        release.wait(timeout=900)
        del iterator
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_layout(
    layout: str,
    ranks: int,
    workers: int,
    num_records: int,
    start_method: str,
    steps: int = 20,
) -> dict[str, Any]:
    """Run one layout and return the summed PSS of its ranks and their children (bytes).

    Example:
        >>> measure_layout("idle", 1, 0, 0, "fork", steps=1)["processes"]  # doctest: +SKIP
        1
    """
    import psutil
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    reports, release = ctx.Queue(), ctx.Event()
    started = time.perf_counter()
    args = (ranks, _free_port(), layout, num_records, workers, start_method, steps)
    job = mp.start_processes(
        _rank_main,
        args=(*args, reports, release),
        nprocs=ranks,
        join=False,
        start_method="spawn",
    )
    try:
        got: list[dict[str, Any]] = []
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
        memory = [process_tree_pss(r["pid"]) for r in got]
        processes = sum(1 + len(psutil.Process(r["pid"]).children(recursive=True)) for r in got)
    finally:
        release.set()
        while not job.join():  # join() returns False while some rank is still running
            continue
    result = {
        "layout": layout,
        "start_method": start_method,
        "ranks": ranks,
        "workers_per_rank": workers,
        "records": _IDLE_RECORDS if layout == "idle" else num_records,
        "records_after_filter": got[0]["records"],
        "processes": processes,
        "buffer_bytes": max(r["buffer_bytes"] for r in got),
        "pss_ranks": sum(own[0] for own, _ in memory),
        "pss_children": sum(children[0] for _, children in memory),
        "data_ranks": sum(own[1] for own, _ in memory),
        "data_children": sum(children[1] for _, children in memory),
        "build_s": max(r["build_s"] for r in got),
        "pass_s": max(r["pass_s"] for r in got),
        "annotations": sum(r["annotations"] for r in got),
    }
    result["pss_total"] = result["pss_ranks"] + result["pss_children"]
    result["data_total"] = result["data_ranks"] + result["data_children"]
    return result


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Data memory (data PSS minus the idle job's) of each layout, in buffers of ``catmap``;
    ``catmap_vs_plain_pss`` is the same ratio from the whole PSS, code pages included.
    Results without ``data_total`` (older ones) use ``pss_total``.

    Example:
        >>> r = {"idle": {"pss_total": 100}, "catmap": {"pss_total": 220, "buffer_bytes": 100},
        ...      "catmap_plain": {"pss_total": 215}, "per_rank": {"pss_total": 500}}
        >>> s = summarize(r); s["catmap"], s["per_rank"], round(s["catmap_vs_plain"], 3)
        (1.2, 4.0, 1.043)
    """
    def data(layout: str) -> int:
        res = results.get(layout, {})
        return res.get("data_total", res.get("pss_total", 0))

    idle = data("idle")
    buffer = results.get("catmap", results.get("catmap_plain", {})).get("buffer_bytes")
    out: dict[str, Any] = {"interpreters_bytes": idle, "buffer_bytes": buffer}
    for layout in ("catmap", "catmap_plain", "per_rank"):
        if layout in results and buffer:
            out[layout] = (data(layout) - idle) / buffer
    if "catmap" in results and "catmap_plain" in results:
        out["catmap_vs_plain"] = (data("catmap") - idle) / (data("catmap_plain") - idle)
        idle_pss = results.get("idle", {}).get("pss_total", 0)
        out["catmap_vs_plain_pss"] = (results["catmap"]["pss_total"] - idle_pss) / (
            results["catmap_plain"]["pss_total"] - idle_pss
        )
    return out


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--records", type=int, default=1_000_000, help="over both datasets")
    parser.add_argument("--steps", type=int, default=20, help="batches each rank takes")
    parser.add_argument(
        "--start-methods", nargs="+", default=["fork", "spawn"],
        choices=("fork", "spawn", "forkserver"), help="DataLoader worker start methods",
    )  # fmt: skip
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    everything: dict[str, Any] = {}
    for method in args.start_methods:
        results: dict[str, Any] = {}
        for layout in args.layouts:
            res = measure_layout(
                layout, args.ranks, args.workers, args.records, method, steps=args.steps
            )
            results[layout] = res
            print(
                f"{method:>10} {layout:>12}: data PSS {_mib(res['data_total'])} MiB (ranks "
                f"{_mib(res['data_ranks'])}, workers {_mib(res['data_children'])}; all PSS "
                f"{_mib(res['pss_total'])} MiB), buffer "
                f"{_mib(res['buffer_bytes'])} MiB, {res['records_after_filter']} records, "
                f"build {res['build_s']:.1f} s, {res['processes']} processes",
                flush=True,
            )
        summary = summarize(results)
        everything[method] = {"results": results, "summary": summary}
        print(
            f"R={args.ranks} ranks x W={args.workers} workers ({method}), N={args.records:,}: "
            f"interpreters {_mib(summary['interpreters_bytes'])} MiB; one buffer "
            f"{_mib(summary['buffer_bytes'] or 0)} MiB; data PSS in buffers: "
            + ", ".join(
                f"{k} {summary[k]:.2f}x" for k in ("catmap", "catmap_plain", "per_rank")
                if k in summary
            )
            + (
                f"; catmap / catmap_plain {summary['catmap_vs_plain']:.3f} (all PSS, code "
                f"pages included: {summary['catmap_vs_plain_pss']:.3f})"
                if "catmap_vs_plain" in summary
                else ""
            ),
            flush=True,
        )
    write_json_results(args.json_out, everything)
    return 0


if __name__ == "__main__":
    sys.exit(main())
