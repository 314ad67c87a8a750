"""Spawn several torch.distributed processes (gloo on 127.0.0.1) for tests."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
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
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        results[rank] = ("ok", fn(rank, world_size, *args))
    except BaseException:  # report every failure to the parent with its traceback
        results[rank] = ("error", traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes.

    ``fn`` must be importable (a module-level function of a test module). Each process has
    joined a gloo process group on 127.0.0.1 before ``fn`` runs. Returns each rank's return
    value (which must pickle); raises AssertionError with the failing rank's traceback.
    """
    port = free_port()
    manager = mp.get_context("spawn").Manager()
    with manager:
        results = manager.dict()
        try:
            mp.start_processes(
                _worker,
                args=(world_size, port, fn, args, results, dict(env or {})),
                nprocs=world_size,
                join=True,
                start_method="spawn",
            )
        except Exception as exc:  # a rank failed: show its own traceback
            errors = [f"rank {r}:\n{v[1]}" for r, v in sorted(results.items()) if v[0] == "error"]
            raise AssertionError("\n".join(errors) or str(exc)) from exc
        out = dict(results)
    return [out[r][1] for r in range(world_size)]
