"""The slab batch transport: exact batches, lifetime, cleanup, faults, options."""

from __future__ import annotations

import gc
import itertools
import os
import queue
import signal
import threading
import time
import warnings
from typing import NamedTuple

import numpy as np
import pytest
import torch
from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from mappers.datasets import MapDataset
from mappers.errors import RefetchExhaustedError
from mappers.instances import Instances
from samplers import (
    BatchPickleError,
    LoaderWorkerError,
    ResumableBatchSampler,
    ResumableLoader,
    TrainingSampler,
    WorkerExitedError,
    build_batch_data_loader,
    build_detection_test_loader,
    build_detection_train_loader,
    to_device,
)
from samplers.errors import LoaderTimeoutError, SamplerConfigError
from samplers.loader import WorkerSeeder, seed_this_process
from samplers.slabs import SlabPool
from tests.work_counting import WorkBudgetExceeded

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="Linux only")


def _records(n=24):
    return [
        {"file_name": f"{i}.jpg", "image_id": i, "height": 3 + i % 3, "width": 5}
        for i in range(n)
    ]


class Opaque:
    """Not packable: travels pickled (with a tensor inside)."""

    def __init__(self, value):
        self.tensor = torch.full((2,), float(value))

    def __eq__(self, other):
        return isinstance(other, Opaque) and torch.equal(self.tensor, other.tensor)


def rich_mapper(record):
    """Every kind of field the transport handles, plus some it leaves to pickling."""
    i = record["image_id"]
    g = torch.Generator().manual_seed(i)
    h, w = record["height"], record["width"]
    hwc = torch.randint(0, 255, (h, w, 3), dtype=torch.uint8, generator=g)
    n = i % 4
    inst = Instances(
        (h, w),
        gt_boxes=torch.rand(n, 4, generator=g),
        gt_classes=torch.arange(n),
        gt_masks=torch.zeros(n, h, w, dtype=torch.uint8),
        gt_keypoints=torch.rand(n, 2, 3, generator=g),
        polygons=[[np.arange(6, dtype=np.float64) + k] for k in range(n)],
    )
    return {
        "image": hwc.permute(2, 0, 1),  # a CHW view of HWC bytes, as DatasetMapper returns
        "instances": inst,
        "sem_seg": torch.full((h, w), i, dtype=torch.int64),
        "image_id": i,
        "file_name": record["file_name"],
        "scalar": torch.tensor(i / 2),
        "half": torch.ones(2, dtype=torch.bfloat16) * i,
        "flags": np.array([i % 2 == 0, True]),
        "big_endian": np.arange(3, dtype=">i4"),
        "grad": torch.ones(2, requires_grad=True),
        "opaque": Opaque(i),
        "pair": (torch.tensor([i]), "x"),
    }


def _canonical(value):
    """A comparable description of a batch: types, shapes, strides, dtypes and bytes."""
    if isinstance(value, torch.Tensor):
        return ("T", value.dtype, tuple(value.shape), value.stride(), value.requires_grad,
                value.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                if value.numel() else b"")
    if isinstance(value, np.ndarray):
        return ("N", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Instances):
        return ("I", value.image_size, _canonical(value.get_fields()))
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canonical(v) for v in value])
    if isinstance(value, Opaque):
        return ("O", _canonical(value.tensor))
    return value


def _train(transport, *, workers=2, context=None, n=24, batch=4, **options):
    return build_detection_train_loader(
        _records(n), mapper=rich_mapper, total_batch_size=batch, num_workers=workers, seed=0,
        transport=transport, multiprocessing_context=context, **options,
    )


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_slab_batches_equal_the_plain_dataloader_batches(context):
    batches = 12 if context == "fork" else 6
    slab = _train("slab", context=context, workers=2 if context == "fork" else 1)
    plain = _train("dataloader")
    got = [_canonical(b) for b in itertools.islice(slab, batches)]
    want = [_canonical(b) for b in itertools.islice(plain, batches)]
    assert got == want
    assert slab.transport.kind == "slab" and plain.transport.kind == "dataloader"
    assert slab.transport.pool.fallbacks == 0  # every batch came through a slab


def test_transport_is_the_default_with_workers_and_resume_is_unchanged():
    loader = _train("auto")
    assert loader.transport.kind == "slab"
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    expected = [_canonical(next(it)) for _ in range(3)]
    resumed = _train("auto")
    resumed.load_state_dict(state)
    assert [_canonical(b) for b in itertools.islice(resumed, 3)] == expected
    zero = _train("auto", workers=0)
    assert zero.transport.kind == "dataloader"


def test_kept_batch_survives_a_thousand_later_batches():
    loader = build_batch_data_loader(
        MapDataset(list(range(50)), lambda i: {"x": torch.full((2, 3), i), "i": i}, seed=0),
        TrainingSampler(50, seed=0, rank=0, world_size=1), 2, num_workers=2,
    )
    it = iter(loader)
    kept = next(it)
    kept_copy = [{"x": s["x"].clone(), "i": s["i"]} for s in kept]
    part = next(it)[1]["x"][0]  # one row of one tensor of another batch
    part_copy = part.clone()
    for _ in range(1000):
        batch = next(it)
        assert torch.equal(batch[0]["x"], torch.full((2, 3), batch[0]["i"]))
    assert all(torch.equal(a["x"], b["x"]) and a["i"] == b["i"] for a, b in zip(kept, kept_copy, strict=True))
    assert torch.equal(part, part_copy)
    pool = loader.transport.pool
    assert pool.fallbacks == 0
    free = pool.free_count()
    del kept, part
    gc.collect()
    assert pool.free_count() == free + 2  # both held slabs came back


def test_pool_exhaustion_falls_back_without_overwriting():
    loader = ResumableLoader(
        MapDataset(_records(24), rich_mapper, seed=0),
        ResumableBatchSampler(TrainingSampler(24, seed=0, rank=0, world_size=1), 2),
        num_workers=2, seed=0, transport="slab", slabs=3,
    )
    kept = list(itertools.islice(loader, 10))
    snapshot = [_canonical(b) for b in kept]
    for _ in itertools.islice(loader, 5):
        pass
    assert loader.transport.pool.fallbacks > 0
    assert [_canonical(b) for b in kept] == snapshot
    plain = ResumableLoader(
        MapDataset(_records(24), rich_mapper, seed=0),
        ResumableBatchSampler(TrainingSampler(24, seed=0, rank=0, world_size=1), 2),
        num_workers=2, seed=0, transport="dataloader",
    )
    plain = list(itertools.islice(plain, 10))
    assert snapshot == [_canonical(b) for b in plain]


def _open_fds():
    return {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in map(int, os.listdir("/proc/self/fd"))
            if os.path.exists(f"/proc/self/fd/{fd}")}


def _slab_mappings():
    with open("/proc/self/maps") as maps:
        return [line for line in maps if "catmap-slab" in line]


def test_deleting_the_loader_frees_every_slab_and_fd():
    gc.collect()
    shm_before = set(os.listdir("/dev/shm"))
    fds_before = _open_fds()
    loader = _train("slab")
    it = iter(loader)
    kept = next(it)
    for _ in range(4):
        next(it)
    assert any("catmap-slab" in target for target in _open_fds().values())
    del it, loader
    gc.collect()
    # only the kept batch's slab is still mapped (a mapping holds one fd) ...
    assert len(_slab_mappings()) == 1
    assert sum("catmap-slab" in target for target in _open_fds().values()) == 1
    assert kept[0]["image"].sum() >= 0  # ... and it stays readable after the loader is gone
    del kept
    gc.collect()
    assert _slab_mappings() == []
    assert _open_fds().keys() <= fds_before.keys()  # no new fd (memfds included) is left
    # /dev/shm is shared with every process on the machine: look at names of this test only
    new = set(os.listdir("/dev/shm")) - shm_before
    assert not [name for name in new if "catmap" in name or f"_{os.getpid()}_" in name]


class QueueWait(NamedTuple):
    """One wait of torch's DataLoader iterator for a batch from its workers."""

    timeout: float
    #: "batch", "expired" (the whole timeout ran out; a dead worker found only then counts
    #: too), "worker died" (the wait was cut short by a worker's death) or "error".
    outcome: str


def _queue_waits(monkeypatch, expired_budget: int) -> list[QueueWait]:
    """Record every wait of the multi-process DataLoader iterator for a batch (torch's
    ``_try_get_data``); past ``expired_budget`` waits that run out, fail at once."""
    waits: list[QueueWait] = []
    real = _MultiProcessingDataLoaderIter._try_get_data

    def try_get_data(self, timeout=MP_STATUS_CHECK_INTERVAL):
        try:
            success, data = real(self, timeout)
        except RuntimeError as exc:
            expired = isinstance(exc.__cause__, queue.Empty)
            died = "exited unexpectedly" in str(exc)
            waits.append(QueueWait(timeout, "expired" if expired else
                                   "worker died" if died else "error"))
            raise
        waits.append(QueueWait(timeout, "batch" if success else "expired"))
        if sum(w.outcome == "expired" for w in waits) > expired_budget:
            raise WorkBudgetExceeded(f"more than {expired_budget} batch waits ran out: {waits}")
        return success, data

    monkeypatch.setattr(_MultiProcessingDataLoaderIter, "_try_get_data", try_get_data)
    return waits


def kill_on_seven(record):
    if record["image_id"] == 7:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"x": torch.zeros(2, 2), "i": record["image_id"]}


def test_a_worker_killed_mid_batch_ends_in_a_typed_error_and_frees_its_slab(monkeypatch):
    loader = build_detection_test_loader(
        _records(16), mapper=kill_on_seven, batch_size=2, num_workers=2, timeout=60
    )
    pool = loader.transport.pool
    waits = _queue_waits(monkeypatch, expired_budget=0)
    received = 0
    it = iter(loader)
    with pytest.raises(WorkerExitedError) as info:
        for _ in range(len(loader) + 1):  # StopIteration (no error at all) fails the test
            next(it)
            received += 1
    # the death is noticed when it happens (torch's SIGCHLD check, during a wait or between
    # two), never found by the check that follows a wait of the whole 60 s timeout running
    # out, and no batch past the one holding index 7 (batches come in order) comes first
    assert waits and not [w for w in waits if w.outcome == "expired"], waits
    assert received <= 3, (waits, received)
    assert info.value.index == 7 and info.value.worker_id in (0, 1)
    assert "dataset index 7" in str(info.value)
    gc.collect()
    assert pool.free_count() == pool.num_slabs


def refetch_none(record):
    return None


@pytest.mark.parametrize("transport", ["slab", "dataloader"])
def test_worker_exceptions_keep_their_type_and_fields(transport):
    loader = build_detection_train_loader(
        _records(8), mapper=refetch_none, total_batch_size=2, num_workers=1, seed=0,
        transport=transport,
    )
    with pytest.raises(RefetchExhaustedError) as info:
        next(iter(loader))
    error = info.value
    assert isinstance(error.index, int) and error.tried >= 1 and error.last_failed
    assert f"dataset index {error.index}" in str(error) and "DataLoader worker 0" in str(error)


class Unpicklable(Exception):
    def __init__(self, message, code):  # two required args: pickle cannot rebuild it
        super().__init__(message)
        self.code = code
        self.lock = __import__("threading").Lock()


def raise_unpicklable(record):
    raise Unpicklable("bad record", 3)


def test_an_unpicklable_worker_exception_arrives_as_loader_worker_error():
    loader = build_detection_test_loader(_records(4), mapper=raise_unpicklable, num_workers=1)
    with pytest.raises(LoaderWorkerError) as info:
        next(iter(loader))
    assert info.value.exc_type.endswith("Unpicklable") and info.value.index == 0
    assert "bad record" in str(info.value)


def sleep_on_three(record):
    if record["image_id"] == 3:
        time.sleep(3)
    return record["image_id"]


@pytest.mark.parametrize("transport", ["slab", "dataloader"])
def test_timeout_names_the_worker_and_the_index(transport, monkeypatch):
    loader = build_detection_test_loader(
        _records(8), mapper=sleep_on_three, batch_size=1, num_workers=2, timeout=1.0,
        transport=transport,
    )
    waits = _queue_waits(monkeypatch, expired_budget=1)
    with pytest.raises(LoaderTimeoutError) as info:
        list(loader)
    # the work, counted: every wait for a batch was given the 1 s timeout, and the first one
    # that ran out (on index 3, whose mapper takes 3 s) ended the loop: no retry, no waiting
    # for the slow sample (a second expired wait fails the test at once)
    assert waits and {w.timeout for w in waits} == {1.0}, waits
    assert [w.outcome for w in waits].count("expired") == 1, waits
    assert waits[-1].outcome == "expired", waits
    assert info.value.index == 3 and info.value.worker_id == 1 and info.value.timeout == 1.0
    assert "worker 1" in str(info.value) and "dataset index 3" in str(info.value)


def test_option_errors_and_defaults():
    with pytest.raises(SamplerConfigError, match="transport"):
        _train("shm")
    with pytest.raises(SamplerConfigError, match="timeout"):
        _train("slab", timeout=-1)
    loader = _train("slab")
    assert loader.transport.timeout == 300.0 and loader.loader.timeout == 300.0
    assert _train("slab", timeout=0).loader.timeout == 0


def user_init(worker_id):
    os.environ["CATMAP_TEST_USER_INIT"] = f"{worker_id}:{np.random.get_state()[1][0]}"


def report_init(record):
    return os.environ.get("CATMAP_TEST_USER_INIT")


def test_dataloader_options_pass_through_and_worker_init_runs_after_seeding():
    loader = build_detection_train_loader(
        _records(8), mapper=report_init, total_batch_size=2, num_workers=1, seed=5,
        persistent_workers=True, prefetch_factor=3, worker_init_fn=user_init,
    )
    assert loader.loader.persistent_workers and loader.loader.prefetch_factor == 3
    assert loader.transport.pool.num_slabs == 1 * 3 + 4
    batch = next(iter(loader))
    seed_this_process(WorkerSeeder(5, 0).worker_seed(0) if False else loader._seeder.worker_seed(0))
    assert batch[0] == f"0:{np.random.get_state()[1][0]}"
    second = next(iter(loader))  # persistent workers: a second pass reuses them
    assert second[0].startswith("0:")


def test_pin_memory_without_cuda_warns_and_still_delivers():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = _train("slab", pin_memory=True)
        batch = next(iter(loader))
    assert any("pin" in str(w.message) for w in caught)
    assert not loader.transport.pool.pin_memory and batch[0]["image"].dtype == torch.uint8


def test_to_device_moves_tensors_and_instances():
    batch = next(iter(_train("slab")))
    moved = to_device(batch, "cpu", non_blocking=True)
    assert torch.equal(moved[0]["image"], batch[0]["image"])
    assert isinstance(moved[0]["instances"], Instances)
    assert moved[0]["file_name"] == batch[0]["file_name"]


def test_persistent_workers_return_every_slab_after_each_pass():
    loader = build_detection_test_loader(
        _records(12), mapper=rich_mapper, batch_size=2, num_workers=2, persistent_workers=True
    )
    pool = loader.transport.pool
    first = [_canonical(b) for b in loader]
    for _ in range(2):
        assert [_canonical(b) for b in loader] == first
        gc.collect()
        assert pool.free_count() == pool.num_slabs and pool.fallbacks == 0
    it = iter(loader)
    next(it)  # a pass abandoned half-way: its prefetched batches are drained by the next one
    del it
    assert [_canonical(b) for b in loader] == first
    gc.collect()
    assert pool.free_count() == pool.num_slabs


def test_an_abandoned_iterator_keeps_its_slabs_until_its_workers_stop():
    loader = _train("slab", n=24, batch=2)
    pool = loader.transport.pool
    plain = [_canonical(b) for b in itertools.islice(_train("dataloader", n=24, batch=2), 6)]
    old = iter(loader)
    first = [_canonical(next(old)) for _ in range(2)]
    new = iter(loader)  # the old workers are still running and writing into their slabs
    rest = [_canonical(next(new)) for _ in range(4)]
    assert first + rest == plain
    del old, new
    gc.collect()
    assert pool.free_count() == pool.num_slabs


def lock_on_five(record):
    """A mapper returning a lock in sample 5 (plus, everywhere, a lambda the slab leaves alone)."""
    i = record["image_id"]
    return {"image": torch.zeros(3, 2, 2), "image_id": i,
            "extra": {"lock": threading.Lock()} if i == 5 else {"n": i}}


@pytest.mark.parametrize("transport", ["slab", "dataloader"])
def test_an_unpicklable_batch_raises_promptly_naming_indices_and_key(transport):
    # timeout=60: a regression (the batch lost in the queue's feeder thread) fails the test
    # with LoaderTimeoutError after 60 s instead of hanging for the default 300 s
    loader = build_detection_test_loader(
        _records(8), mapper=lock_on_five, num_workers=1, batch_size=2, transport=transport,
        timeout=60,
    )
    batches = iter(loader)
    assert [b[0]["image_id"] for b in itertools.islice(batches, 2)] == [0, 2]
    with pytest.raises(BatchPickleError) as info:
        next(batches)
    error = info.value
    assert error.worker_id == 0 and error.index == 4 and error.key == "batch[1]['extra']['lock']"
    assert "dataset indices [4, 5]" in str(error) and "lock" in str(error)
    if transport == "slab":  # the failed batch's slab is free again
        del batches
        gc.collect()
        assert loader.transport.pool.free_count() == loader.transport.pool.num_slabs


class _PlacingMapper:
    """DatasetMapper (resize + flip) that also reports whether its image went straight into
    the batch's slab (``image_output_space``) instead of being copied there afterwards."""

    def __init__(self):
        from mappers import DatasetMapper
        from mappers import transforms as T

        self.mapper = DatasetMapper(True, augmentations=[  # 16 shrinks, 40 enlarges
            T.ResizeShortestEdge((16, 40), 64, "choice"), T.RandomFlip()])

    def __call__(self, record):
        from mappers.dataset_mapper import image_output_space

        sample = self.mapper(record)
        space = image_output_space.get()
        sample["placed"] = space is not None and (
            sample["image"].untyped_storage().data_ptr() in space.placed)
        return sample


def test_dataset_mapper_images_are_resized_straight_into_the_slab(tmp_path):
    from PIL import Image

    from tests.image_bytes import photo_like

    records = []
    for i in range(8):
        path = tmp_path / f"{i}.jpg"
        Image.fromarray(photo_like(20 + 4 * (i % 3), 30, seed=i)).save(path, quality=90)
        records.append({"file_name": str(path), "image_id": i, "height": 20 + 4 * (i % 3),
                        "width": 30, "annotations": [
                            {"bbox": [1, 2, 10, 8], "bbox_mode": 1, "category_id": i % 3}]})

    def loader(transport, **options):
        return build_detection_train_loader(records, mapper=_PlacingMapper(), total_batch_size=4,
                                            num_workers=1, seed=0, transport=transport, **options)

    def canonical(batch):  # Boxes by their tensor; images by their pixels (the memory layout
        return _canonical([dict(  # of a shrunk one is HWC in a slab, CHW from torch without)
            s, image=s["image"].contiguous(), instances={
                k: getattr(v, "tensor", v) for k, v in s["instances"].get_fields().items()})
            for s in batch])

    slab = [b for b in itertools.islice(loader("slab"), 6)]
    plain = [b for b in itertools.islice(loader("dataloader"), 6)]
    # OpenCV enlarges straight into the slab; a shrunk image (Pillow's filter) is copied there
    assert all(s.pop("placed") for b in slab for s in b)
    assert not any(s.pop("placed") for b in plain for s in b)
    assert [canonical(b) for b in slab] == [canonical(b) for b in plain]  # the same batches
    own = [b for b in itertools.islice(loader("slab", collate_fn=lambda b: list(b)), 2)]
    assert not any(s["placed"] for b in own for s in b)  # a collate of one's own may copy them


def _worker_tagging_mapper(record):
    info = torch.utils.data.get_worker_info()
    return {"image": torch.zeros(3, 4, 5, dtype=torch.uint8), "worker": info.id if info else -1}


def test_each_worker_writes_only_its_own_slabs(monkeypatch):
    # a worker's first write to a slab faults in all its pages: steady state must not rotate
    # every slab through every worker
    loader = build_detection_train_loader(
        _records(), mapper=_worker_tagging_mapper, total_batch_size=4, num_workers=3, seed=0)
    pool = loader.transport.pool
    assert pool.lanes == 3
    seen = []  # (slab, worker) in the order batches arrive
    receive = pool.receive
    monkeypatch.setattr(pool, "receive", lambda handle: seen.append(
        (handle.slab, handle.skeleton[0]["worker"])) or receive(handle))
    workers = [batch[0]["worker"] for batch in itertools.islice(loader, 30)]
    assert len(seen) >= 30 and set(workers) == {0, 1, 2}
    assert all(slab % 3 == worker for slab, worker in seen) and pool.fallbacks == 0


def test_a_lane_without_a_free_slab_borrows_and_the_slab_goes_home():
    pool = SlabPool(5, slab_bytes=1 << 16, lanes=2)  # lane 0: slabs 0, 2, 4; lane 1: 1, 3
    own = [pool.assign(1, lane=1) for _ in range(2)]
    assert sorted(t.slab for t in own) == [1, 3]
    borrowed = pool.assign(1, lane=1)  # lane 1 is empty: from lane 0, the one with most
    assert borrowed.slab % 2 == 0 and pool.free_count() == 2
    pool.release(borrowed.slab, borrowed.serial)
    assert pool.assign(1, lane=1).slab == borrowed.slab  # home again, borrowed again
    assert [pool.assign(1, lane=0) is not None for _ in range(3)] == [True, True, False]
    assert pool.fallbacks == 1
    pool.close()
