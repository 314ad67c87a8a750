"""catmap samplers and MapDataset inside a torchdata.nodes graph with forked process workers.

torchdata's prefetcher threads run the graph while ParallelMapper forks its workers; a module
imported lazily on such a thread (numpy.random, formerly imported on first use by
``catalog.seeding.derive_seed``) leaves a forked child holding the import lock forever. The
graph runs in a fresh interpreter (where nothing has imported numpy.random yet), bounded by a
timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchdata.nodes")

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
import torchdata.nodes as tn
from mappers.datasets import MapDataset
from samplers import ResumableBatchSampler, SampleSeededDataset, TrainingSampler, sample_seed

def mapper(record):
    return None if record % 7 == 3 else record * 2  # refetch draws from the seeded generator

sampler = TrainingSampler(64, seed=0, rank=0, world_size=1)
batches = ResumableBatchSampler(sampler, 1)
dataset = SampleSeededDataset(MapDataset(list(range(64)), mapper, seed=0))
keys = ((index, sample_seed(0, position)) for batch in batches.iter_with_positions()
        for index, position in batch)
node = tn.IterableWrapper(keys)
node = tn.ParallelMapper(node, map_fn=dataset.__getitem__, num_workers=2, method="process",
                         multiprocessing_context="fork")
node = tn.Batcher(node, batch_size=4)
node = tn.Prefetcher(node, prefetch_factor=2)
it = iter(tn.Loader(node))
out = [next(it) for _ in range(10)]
assert all(len(b) == 4 and all(v % 2 == 0 for v in b) for b in out), out
print("OK", out[0])
"""


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_catmap_in_a_torchdata_nodes_graph_with_fork_process_workers():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the torchdata.nodes graph with fork workers deadlocked (60 s)")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("OK")
