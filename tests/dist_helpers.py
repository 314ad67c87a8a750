"""Spawn several torch.distributed processes (gloo on 127.0.0.1) for tests."""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
from collections.abc import Callable, Collection
from multiprocessing.connection import wait
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["free_port", "run_distributed"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int,
    world_size: int,
    port: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    results: Any,
    env: dict[str, str],
    pg_timeout: float | None,
) -> None:
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    options: dict[str, Any] = {}
    if pg_timeout is not None:
        options["timeout"] = datetime.timedelta(seconds=pg_timeout)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        **options,
    )
    try:
        results[rank] = ("ok", fn(rank, world_size, *args))
    except BaseException:  # report every failure to the parent with its traceback
        results[rank] = ("error", traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def _stop(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def _wait_all(processes: list[Any], may_exit: Collection[int], deadline: float | None) -> str:
    """Wait for every process; returns what went wrong ("" when nothing did).

    A rank not in ``may_exit`` that exits with an error stops the others at once (they would
    wait for it forever); ranks still running after ``deadline`` seconds are stopped too.
    """
    end = None if deadline is None else time.monotonic() + deadline
    running = dict(enumerate(processes))
    while running:
        left = None if end is None else max(0.0, end - time.monotonic())
        if left == 0.0:
            _stop(processes)
            return f"ranks {sorted(running)} still running after {deadline} s (a hang)"
        wait([p.sentinel for p in running.values()], timeout=left)
        for rank, process in list(running.items()):
            if process.exitcode is None:
                continue
            del running[rank]
            if process.exitcode != 0 and rank not in may_exit:
                _stop(processes)
                return f"rank {rank} exited with code {process.exitcode}"
    return ""


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    env: dict[str, str] | None = None,
    pg_timeout: float | None = None,
    may_exit: Collection[int] = (),
    deadline: float | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes.

    ``fn`` must be importable (a module-level function of a test module). Each process has
    joined a gloo process group on 127.0.0.1 before ``fn`` runs. Returns each rank's return
    value (which must pickle); raises AssertionError with the failing rank's traceback.

    Args:
        fn: the function each rank runs.
        world_size: the number of processes.
        *args: more arguments for ``fn``.
        env: environment variables set in every rank before the process group starts.
        pg_timeout: the process group's timeout in seconds (torch's default when None).
        may_exit: ranks that may die without a result (e.g. a rank that kills itself on
            purpose); their result is None and the other ranks keep running.
        deadline: seconds after which ranks still running are stopped and the call fails
            (a hang becomes a test failure); no limit when None.
    """
    port = free_port()
    manager = mp.get_context("spawn").Manager()
    with manager:
        results = manager.dict()
        context = mp.start_processes(
            _worker,
            args=(world_size, port, fn, args, results, dict(env or {}), pg_timeout),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        try:
            problem = _wait_all(context.processes, set(may_exit), deadline)
        finally:
            _stop(context.processes)
        out = dict(results)
    errors = [f"rank {r}:\n{v[1]}" for r, v in sorted(out.items()) if v[0] == "error"]
    if problem or errors:
        raise AssertionError("\n".join(errors) or problem)
    return [out[r][1] if r in out else None for r in range(world_size)]
