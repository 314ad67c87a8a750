"""PSS of a process and its children, split into data (anonymous + shared memory) and all.

Used by ``tools/bench_memory.py``. The file-backed part of PSS (shared libraries' code) is
split with every process on the machine that maps the same files, so it moves with unrelated
processes; the anonymous and shared-memory part is what a job's data costs.
"""

from __future__ import annotations

import contextlib

__all__ = ["data_pss", "process_tree_pss"]


def data_pss(pid: int) -> tuple[int, int]:
    """``(PSS, anonymous + shared-memory PSS)`` of a process in bytes, from
    ``/proc/<pid>/smaps_rollup`` (the second is the first where the kernel does not split it).

    Example:
        >>> import os
        >>> total, data = data_pss(os.getpid()); 0 < data <= total
        True
    """
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Pss", "Pss_Anon", "Pss_Shmem"):
                fields[key] = int(rest.split()[0]) * 1024
    total = fields["Pss"]
    if "Pss_Anon" not in fields:  # kernels before 5.10
        return total, total
    return total, fields["Pss_Anon"] + fields.get("Pss_Shmem", 0)


def process_tree_pss(pid: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(PSS of the process, PSS of its child processes), each ``(total, data)``, bytes."""
    import psutil

    own = data_pss(pid)
    children = [0, 0]
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            total, data = data_pss(child.pid)
            children[0] += total
            children[1] += data
    return own, (children[0], children[1])
