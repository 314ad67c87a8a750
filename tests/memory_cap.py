"""Run Python code in a child process with a hard memory cap: 3 GiB of address space on top of
what the interpreter has mapped once torch and catmap are imported (a CUDA build of torch alone
reserves more than 3 GiB of virtual memory, a CPU build about 1 GiB). A bigger allocation fails
in the child (MemoryError, or a native abort that fails the test) instead of swapping the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CAP_BYTES = 3 << 30

PROLOGUE = f"""
import resource, torch, catalog, mappers
def _mapped_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
_cap = _mapped_bytes() + {CAP_BYTES}
resource.setrlimit(resource.RLIMIT_AS, (_cap, _cap))
del _cap, _mapped_bytes
"""


def run_capped(code: str, *, timeout: float = 300, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    """Run ``code`` in ``python -c`` under the cap, from the repository root."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", PROLOGUE + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
