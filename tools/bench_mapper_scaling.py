"""Scaling part of ``tools/bench_mapper.py``: independent processes and DataLoader workers.

Example:
    >>> from tools.bench_mapper_scaling import independent_processes  # doctest: +SKIP
    >>> independent_processes(records, 2, passes=1, cores=[0, 1])  # doctest: +SKIP
    (410.2, 352.7)
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

from tools.bench_mapper import _pin_to_one_core, mapper_pipeline

__all__ = ["dataloader_rate", "independent_processes"]


def _process_worker(records: list[dict[str, Any]], core: int, passes: int, queue: Any) -> None:
    _pin_to_one_core(core)
    _worker_init(0)  # forked: OpenCV's one-thread setting is inherited from the parent
    mapper = mapper_pipeline()
    for record in records[:4]:
        mapper(record)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(passes):
        for record in records:
            mapper(record)
    count = len(records) * passes
    queue.put((count / (time.perf_counter() - start), count / (time.process_time() - cpu_start)))


def independent_processes(
    records: list[dict[str, Any]], count: int, passes: int, cores: list[int]
) -> tuple[float, float]:
    """(total wall-clock images/s, mean images per CPU-second) of ``count`` processes.

    Each process runs the mapper pinned to its own core. The CPU-time rate shows whether
    the processes slow each other down (memory bandwidth, shared caches); the wall-clock
    total also depends on what else runs on the machine.
    """
    cores = cores or [0]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(records, cores[i % len(cores)], passes, queue))
        for i in range(count)
    ]
    for p in procs:
        p.start()
    rates = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return float(sum(r[0] for r in rates)), float(statistics.mean(r[1] for r in rates))


def _worker_init(_: int) -> None:
    """torch to one thread; OpenCV's setting (1, made in the main process) is inherited.

    ``cv2.setNumThreads`` must not be called in a forked worker: it deadlocks when the
    parent had used OpenCV's thread pool.
    """
    import torch

    torch.set_num_threads(1)


def _memory_of_tree() -> dict[str, float]:
    import psutil

    main = psutil.Process()
    procs = [main] + main.children(recursive=True)
    pss = uss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss += getattr(info, "pss", 0)
        uss += info.uss
    return {"pss_mib": pss / 2**20, "uss_mib": uss / 2**20, "processes": len(procs)}


def dataloader_rate(records: list[dict[str, Any]], workers: int, passes: int) -> dict[str, Any]:
    from torch.utils import data

    from mappers.datasets import DatasetFromList, MapDataset

    repeat = max(passes, -(-96 // len(records)))  # at least 96 images
    dataset = MapDataset(DatasetFromList(records * repeat), mapper_pipeline(), seed=0)
    loader = data.DataLoader(
        dataset,
        batch_size=2,
        num_workers=workers,
        collate_fn=list,
        worker_init_fn=_worker_init if workers else None,
        prefetch_factor=4 if workers else None,
    )
    warm = 2 * max(workers, 1)
    count = 0
    memory: dict[str, float] = {}
    start = time.perf_counter()
    for i, batch in enumerate(loader):
        if i == warm:
            start = time.perf_counter()
            count = 0
        count += len(batch)
        if i == warm + 4:
            memory = _memory_of_tree()
    elapsed = time.perf_counter() - start
    return {"workers": workers, "images_per_s": count / elapsed, **memory}


