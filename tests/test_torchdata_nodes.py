"""catmap samplers and MapDataset inside a torchdata.nodes graph with forked process workers.

torchdata's prefetcher threads run the graph while ParallelMapper forks its workers; a module
imported lazily on such a thread (numpy.random, formerly imported on first use by
``catalog._common.derive_seed``) leaves a forked child holding the import lock forever. The
graph runs in a fresh interpreter (where nothing has imported numpy.random yet), bounded by a
timeout, so a deadlock fails the test instead of hanging it.

The second test resumes such a graph (``samplers.torchdata_support.SampleKeysNode`` +
``MapKeys`` in process workers) from ``Loader.state_dict()`` and checks that the samples,
replacements for rejected records and random draws included, equal the uninterrupted run.
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


RESUME_SCRIPT = """
import itertools
import torchdata.nodes as tn
from mappers.datasets import MapDataset
from mappers.random_state import get_generator
from samplers import ResumableBatchSampler, TrainingSampler
from samplers.torchdata_support import MapKeys, SampleKeysNode, SeededBatchSampler

def mapper(record):  # rejects some records, augments the rest from the sample's generator
    return None if record % 5 == 2 else (record, float(get_generator().random()))

def batches():
    return ResumableBatchSampler(TrainingSampler(40, seed=3, rank=0, world_size=1), 4)

dataset = MapDataset(list(range(40)), mapper, seed=3)
expected = [MapKeys(dataset)(keys) for keys in
            itertools.islice(SeededBatchSampler(batches(), seed=3), 9)]

def graph():
    node = SampleKeysNode(batches(), seed=3)
    node = tn.ParallelMapper(node, map_fn=MapKeys(dataset), num_workers=2, method="process",
                             multiprocessing_context="fork")
    return tn.Loader(tn.Prefetcher(node, prefetch_factor=2))

loader = graph()
it = iter(loader)
first = [next(it) for _ in range(4)]
state = loader.state_dict()
resumed = graph()
resumed.load_state_dict(state)
rest = list(itertools.islice(resumed, 5))
assert first + rest == expected, (first + rest, expected)
assert all(value % 5 != 2 for batch in expected for value, _ in batch)
print("OK", rest[0])
"""


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_torchdata_nodes_process_workers_resume_with_the_same_samples():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run([sys.executable, "-c", RESUME_SCRIPT], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the torchdata.nodes graph with process workers did not finish in 90 s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("OK")
