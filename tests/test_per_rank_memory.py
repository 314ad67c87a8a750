"""What every rank (and spawned worker) holds or allocates per record, besides the records.

Group ids are kept compactly; the group ids' digest (taken when a loader starts, just before
workers fork) and the checks of records attached in spawned workers allocate no per-record
temporaries, whose freed pages glibc keeps and forked workers inherit.
"""

from __future__ import annotations

import hashlib
import itertools
import tracemalloc

import numpy as np

from samplers import GroupedBatchSampler, TrainingSampler
from samplers.state import array_digest


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _batches(group_ids, count: int) -> list[list[int]]:
    sampler = TrainingSampler(len(group_ids), shuffle=True, seed=3, rank=0, world_size=1)
    return list(itertools.islice(GroupedBatchSampler(sampler, group_ids, 4), count))


def test_group_ids_take_one_byte_per_record_and_batch_as_before():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, size=100_000).astype(np.int64)  # aspect_ratio_group_ids' output
    sampler = GroupedBatchSampler(TrainingSampler(len(ids), seed=3), ids, 4)
    assert sampler.group_ids.dtype == np.uint8 and sampler.group_ids.nbytes == 100_000
    assert not sampler.group_ids.flags.writeable
    assert sampler.group_ids.tolist() == ids.tolist()
    # the saved-state fingerprint is that of the int64 values (old states still load)
    assert sampler._config()["group_ids"] == array_digest(ids, "<i8")
    batches = _batches(ids, 50)
    assert batches == _batches(ids.astype(np.uint16), 50)
    for batch in batches:
        assert len({int(ids[i]) for i in batch}) == 1


def test_many_groups_take_two_bytes():
    ids = np.arange(1_000) % 300
    sampler = GroupedBatchSampler(TrainingSampler(len(ids), seed=0), ids, 2)
    assert sampler.group_ids.dtype == np.uint16 and sampler.num_groups == 300
    assert sampler.group_ids.tolist() == ids.tolist()
    empty = GroupedBatchSampler(TrainingSampler(1, seed=0), np.zeros(0, np.int64), 2)
    assert empty.num_groups == 0 and empty.group_ids.nbytes == 0


def test_array_digest_hashes_in_chunks_with_the_same_result():
    ids = (np.arange(1_000_003) % 3).astype(np.uint8)
    whole = hashlib.blake2b(ids.astype("<i8").tobytes(), digest_size=16).hexdigest()
    assert array_digest(ids, "<i8").endswith(whole)
    grid = np.arange(12.0).reshape(3, 4)
    assert array_digest(grid, "<f8").endswith(
        hashlib.blake2b(grid.astype("<f8").tobytes(), digest_size=16).hexdigest()
    )
    assert array_digest([], "<i8") == array_digest(np.zeros(0), "<i8")
    # an int64 copy of a million ids would be 8 MB (plus its bytes: 16 MB)
    assert _peak_bytes(lambda: array_digest(ids, "<i8")) < 2**20
