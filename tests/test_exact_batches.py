"""Exact batches: one source of randomness per sample (issue 11, items 3 and 4).

``build_detection_train_loader`` must yield the same batches for any ``num_workers``, with or
without persistent workers, with either transport, and after ``load_state_dict`` at any step,
even when the mapper returns None ("use another record") for a third of the records, by index
or by a random draw, and draws from the sample generator, catmap augmentations and the global
RNGs of numpy, ``random`` and torch. Each rank draws its own replacements (they follow the
global stream position).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from mappers import transforms as T
from mappers.random_state import get_generator
from samplers import (
    ConcatSampler,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    TrainingSampler,
    build_detection_train_loader,
)
from tests.dist_helpers import run_distributed

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SEED = 11
N = 24
BATCHES = 6
BATCH_SIZE = 4

_AUGMENT = T.AugmentationList([T.RandomFlip(prob=0.5), T.RandomBrightness(0.5, 1.5)])


def _records(n: int = N) -> list[dict]:
    """Tiny records, landscape and portrait (for aspect-ratio grouping)."""
    return [
        {"file_name": f"{i}.jpg", "image_id": i, "height": 4 + 2 * (i % 2), "width": 6 - 2 * (i % 2)}
        for i in range(n)
    ]


class NoisyMapper:
    """None for every third record and, with ``random_none``, for about a third of the others
    (a draw of the sample generator); otherwise a sample holding draws of every source."""

    def __init__(self, random_none: bool) -> None:
        self.random_none = random_none

    def __call__(self, record: dict) -> dict | None:
        index = record["image_id"]
        if index % 3 == 0:
            return None
        rng = get_generator()
        if self.random_none and rng.random() < 1 / 3:
            return None
        aug_input = T.AugInput(np.arange(24, dtype=np.uint8).reshape(2, 4, 3) + index)
        _AUGMENT(aug_input)
        return {
            "image_id": index,
            "image": torch.from_numpy(np.ascontiguousarray(aug_input.image)),
            "generator": float(rng.random()),
            "numpy": float(np.random.random()),
            "python": random.random(),
            "torch": torch.rand(2),
        }


class IndexMapper:
    """None for every third record, else the record's index (no random draw at all)."""

    def __call__(self, record: dict) -> int | None:
        return None if record["image_id"] % 3 == 0 else record["image_id"]


def _canonical(batch: list[Any]) -> list[Any]:
    if batch and isinstance(batch[0], int):
        return list(batch)
    return [
        (
            s["image_id"],
            s["image"].numpy().tobytes(),
            s["generator"],
            s["numpy"],
            s["python"],
            tuple(s["torch"].tolist()),
        )
        for s in batch
    ]


SAMPLERS: dict[str, Callable[[], Any]] = {
    "training": lambda: TrainingSampler(N, seed=SEED, rank=0, world_size=1),
    "random_subset": lambda: RandomSubsetTrainingSampler(
        N, 0.5, seed_shuffle=SEED, seed_subset=SEED + 1, rank=0, world_size=1
    ),
    "repeat_factor": lambda: RepeatFactorTrainingSampler(
        [1.0 + (i % 4) * 0.5 for i in range(N)], seed=SEED, rank=0, world_size=1
    ),
    "concat": lambda: ConcatSampler(
        [N // 3, N - N // 3], weights=[2.0, 1.0], seed=SEED, rank=0, world_size=1
    ),
    "grouped": lambda: TrainingSampler(N, seed=SEED, rank=0, world_size=1),
}


def _loader(kind: str, random_none: bool, workers: int = 0, **options: Any) -> Any:
    return build_detection_train_loader(
        _records(),
        mapper=NoisyMapper(random_none),
        sampler=SAMPLERS[kind](),
        total_batch_size=BATCH_SIZE,
        aspect_ratio_grouping=kind == "grouped",
        num_workers=workers,
        seed=SEED,
        **options,
    )


def _take(loader: Any, count: int, iterator: Any = None) -> list[list[tuple]]:
    it = iter(loader) if iterator is None else iterator
    return [_canonical(batch) for batch in itertools.islice(it, count)]


_REFERENCE: dict[tuple[str, bool], list[list[tuple]]] = {}


def _reference(kind: str, random_none: bool) -> list[list[tuple]]:
    """The batches of a num_workers=0 loader (computed once per case)."""
    key = (kind, random_none)
    if key not in _REFERENCE:
        _REFERENCE[key] = _take(_loader(kind, random_none), BATCHES)
    return _REFERENCE[key]


CASES = [(kind, random_none) for kind in SAMPLERS for random_none in (False, True)]


@pytest.mark.parametrize(("kind", "random_none"), CASES)
def test_reference_batches_are_well_formed(kind, random_none):
    batches = _reference(kind, random_none)
    ids = [s[0] for batch in batches for s in batch]
    assert len(batches) == BATCHES and all(len(b) == BATCH_SIZE for b in batches)
    assert all(i % 3 for i in ids)  # every None was replaced
    assert _take(_loader(kind, random_none), BATCHES) == batches  # a fresh loader repeats
    samples = [s for batch in batches for s in batch]
    assert len({s[2:] for s in samples}) == len(samples)  # every sample draws anew
    if kind == "grouped":  # (a replacement may come from the other group: not checked)
        assert batches != _reference("training", random_none)


@pytest.mark.parametrize(("kind", "random_none"), CASES)
@pytest.mark.parametrize(
    ("workers", "transport"), [(1, "auto"), (2, "auto"), (4, "auto"), (2, "dataloader")]
)
def test_same_batches_for_any_number_of_workers(kind, random_none, workers, transport):
    loader = _loader(kind, random_none, workers, transport=transport)
    assert _take(loader, BATCHES) == _reference(kind, random_none)


@pytest.mark.parametrize("transport", ["auto", "dataloader"])
@pytest.mark.parametrize("workers", [1, 4])
def test_same_batches_with_persistent_workers_over_several_iterators(workers, transport):
    # each iter() goes on after the last delivered batch; a persistent worker started for the
    # first iterator maps the later ones (no per-pass worker reseed reaches it)
    loader = _loader("training", True, workers, transport=transport, persistent_workers=True)
    got = []
    for count in (2, 1, 3):
        got += _take(loader, count)
    assert got == _reference("training", True)


@pytest.mark.parametrize(("kind", "random_none"), CASES)
def test_resume_at_every_step_without_workers(kind, random_none):
    reference = _reference(kind, random_none)
    for k in range(BATCHES):
        first = _loader(kind, random_none)
        assert _take(first, k) == reference[:k]
        resumed = _loader(kind, random_none)
        resumed.load_state_dict(first.state_dict())
        assert _take(resumed, BATCHES - k) == reference[k:], f"resumed after {k} batches"


@pytest.mark.parametrize("kind", list(SAMPLERS))
@pytest.mark.parametrize(("saved_with", "resumed_with"), [((2, "auto"), (4, "dataloader"))])
def test_resume_across_worker_counts_and_transports(kind, saved_with, resumed_with):
    reference = _reference(kind, True)
    k = 1 + len(kind) % (BATCHES - 1)  # a different step for each sampler
    first = _loader(kind, True, saved_with[0], transport=saved_with[1])
    assert _take(first, k) == reference[:k]
    state = first.state_dict()
    resumed = _loader(kind, True, resumed_with[0], transport=resumed_with[1])
    resumed.load_state_dict(state)
    assert _take(resumed, BATCHES - k) == reference[k:]


def _index_only_loader(kind: str, workers: int = 0, **options: Any) -> Any:
    return build_detection_train_loader(
        _records(),
        mapper=IndexMapper(),
        sampler=SAMPLERS[kind](),
        total_batch_size=BATCH_SIZE,
        aspect_ratio_grouping=kind == "grouped",
        num_workers=workers,
        seed=SEED,
        **options,
    )


@pytest.mark.parametrize("kind", list(SAMPLERS))
def test_refetch_alone_is_the_same_for_any_workers_and_after_resume(kind):
    # No random draw but MapDataset's own: only the choice of replacements can differ.
    reference = _take(_index_only_loader(kind), BATCHES)
    assert all(i % 3 for batch in reference for i in batch)
    assert _take(_index_only_loader(kind, 2), BATCHES) == reference
    assert _take(_index_only_loader(kind, 4, transport="dataloader"), BATCHES) == reference
    first = _index_only_loader(kind)
    _take(first, 2)
    resumed = _index_only_loader(kind)
    resumed.load_state_dict(first.state_dict())
    assert _take(resumed, BATCHES - 2) == reference[2:]


@pytest.fixture(scope="module")
def png_records(tmp_path_factory):
    """12 tiny PNG records; the files of every third one are missing (DatasetMapper skips)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("exact_batches")
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        height, width = (10, 14) if i % 2 else (14, 10)
        path = root / f"{i}.png"
        if i % 3:
            Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        box = {"bbox": [1, 2, 6, 5], "bbox_mode": 1, "category_id": i % 2}
        records.append(
            {"file_name": str(path), "image_id": i, "height": height, "width": width,
             "annotations": [box]}
        )
    return records


def _dataset_mapper_loader(records: list[dict], workers: int = 0, **options: Any) -> Any:
    from mappers import DatasetMapper

    mapper = DatasetMapper(
        True,
        augmentations=[
            T.ResizeShortestEdge((6, 8, 12), max_size=20, sample_style="choice"),
            T.RandomFlip(prob=0.5),
        ],
        skip_bad_images=True,
    )
    return build_detection_train_loader(
        records, mapper=mapper, total_batch_size=3, num_workers=workers, seed=SEED, **options
    )


def _mapped(batch: list[dict]) -> list[tuple]:
    return [
        (s["image_id"], tuple(s["image"].shape), s["image"].numpy().tobytes(),
         torch.as_tensor(getattr(s["instances"].gt_boxes, "tensor", s["instances"].gt_boxes))
         .numpy().tobytes())
        for s in batch
    ]


def test_dataset_mapper_with_unreadable_images_same_for_workers_and_resume(png_records):
    # DatasetMapper's planned (shape-only) augmentations and skip_bad_images refetch
    reference = [_mapped(b) for b in itertools.islice(_dataset_mapper_loader(png_records), 5)]
    assert all(s[0] % 3 for batch in reference for s in batch)
    assert len({s[1] for batch in reference for s in batch}) > 1  # sizes vary
    workers = _dataset_mapper_loader(png_records, 2)
    assert [_mapped(b) for b in itertools.islice(workers, 5)] == reference
    first = _dataset_mapper_loader(png_records, 2, transport="dataloader")
    assert [_mapped(b) for b in itertools.islice(first, 2)] == reference[:2]
    resumed = _dataset_mapper_loader(png_records)
    resumed.load_state_dict(first.state_dict())
    assert [_mapped(b) for b in itertools.islice(resumed, 3)] == reference[2:]


def test_main_process_global_rngs_are_restored_after_each_sample():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    expected = (random.random(), np.random.random(), torch.rand(1).item())
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    _take(_loader("training", True), 2)
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected


# ------------------------------------------------------------------------------ ranks


class LoggingMapper:
    """Records the index of every call (in this process) and fails every third record."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, record: dict) -> int | None:
        self.calls.append(record["image_id"])
        return None if record["image_id"] % 3 == 0 else record["image_id"]


def _replacements(calls: list[int]) -> list[int]:
    """The index mapped after each failing call."""
    return [calls[j + 1] for j in range(len(calls) - 1) if calls[j] % 3 == 0]


def _rank_run(rank: int, world_size: int, n: int, batches: int) -> tuple[list, list[int]]:
    mapper = LoggingMapper()
    loader = build_detection_train_loader(
        [{"file_name": f"{i}.jpg", "image_id": i} for i in range(n)],
        mapper=mapper,
        total_batch_size=4 * world_size,
        aspect_ratio_grouping=False,
        seed=SEED,
    )
    got = [list(batch) for batch in itertools.islice(loader, batches)]
    return got, _replacements(mapper.calls)


def test_ranks_follow_the_global_stream_in_process():
    # rank r of 2 yields exactly positions r, r + 2, ... of the one-rank stream
    def run(rank, world, batches):
        mapper = LoggingMapper()
        sampler = TrainingSampler(60, seed=SEED, rank=rank, world_size=world)
        loader = build_detection_train_loader(
            [{"file_name": f"{i}.jpg", "image_id": i} for i in range(60)],
            mapper=mapper, sampler=sampler, total_batch_size=4 * world,
            aspect_ratio_grouping=False, seed=SEED,
        )
        flat = list(itertools.chain(*itertools.islice(loader, batches)))
        return flat, _replacements(mapper.calls)

    single, _ = run(0, 1, 20)
    (rank0, rep0), (rank1, rep1) = run(0, 2, 10), run(1, 2, 10)
    assert rank0 == single[0::2] and rank1 == single[1::2]
    _assert_distinct_sequences(rep0, rep1)


def _assert_distinct_sequences(a: list[int], b: list[int]) -> None:
    length = min(len(a), len(b))
    assert length >= 10
    same = sum(x == y for x, y in zip(a[:length], b[:length], strict=True))
    assert same <= length // 4, (a, b)  # the same generator on both ranks gives ~all equal


def test_two_gloo_ranks_draw_their_own_replacements():
    results = run_distributed(_rank_run, 2, 60, 10, deadline=120)
    (batches0, rep0), (batches1, rep1) = results
    assert all(i % 3 for batch in batches0 + batches1 for i in batch)
    _assert_distinct_sequences(rep0, rep1)
    single, _ = _rank_run(0, 1, 60, 20)
    flat = list(itertools.chain(*single))
    assert list(itertools.chain(*batches0)) == flat[0::2]
    assert list(itertools.chain(*batches1)) == flat[1::2]
