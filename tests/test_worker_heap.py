"""Loader workers keep freed heap between batches (``samplers.loader.keep_worker_heap``): a
batch of big images, freed and allocated again, must not fault its pages in again each time.
Page faults are counted, not timed."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from samplers import build_detection_train_loader
from samplers.loader import keep_worker_heap

#: one batch of 16 images of 1067 x 800 x 3 bytes, as the default training scale makes them
_IMAGE_BYTES = 1067 * 800 * 3
_PAGES_PER_BATCH = 16 * _IMAGE_BYTES // 4096


def _batch_faults() -> int:
    """Minor page faults while a second batch of images is allocated and written (the first
    one was freed just before, as a worker frees each batch once it is sent)."""
    images = [np.ones(_IMAGE_BYTES, np.uint8) for _ in range(16)]
    del images
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    images = [np.ones(_IMAGE_BYTES, np.uint8) for _ in range(16)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del images
    return faults


def _fault_mapper(record: dict) -> dict:
    return {"index": record["index"], "faults": _batch_faults()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_loader_workers_reuse_their_heap():
    records = [{"index": i} for i in range(8)]
    loader = build_detection_train_loader(records, mapper=_fault_mapper, total_batch_size=2,
                                          aspect_ratio_grouping=False, num_workers=1, seed=0)
    it = iter(loader)
    faults = [sample["faults"] for _ in range(4) for sample in next(it)]
    # without keep_worker_heap each of these is ~10,000 (every page of the batch again)
    assert max(faults[2:]) < _PAGES_PER_BATCH // 20, faults


def test_a_malloc_setting_of_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert keep_worker_heap() is False
