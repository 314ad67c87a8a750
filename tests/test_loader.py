"""Loader builders: batching, grouping, worker seeding, exact resume, the test loader."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from catalog import DatasetCatalog, MetadataCatalog
from samplers import (
    InferenceSampler,
    NotResumableError,
    RepeatFactorTrainingSampler,
    ResumableLoader,
    TrainingSampler,
    build_batch_data_loader,
    build_detection_test_loader,
    build_detection_train_loader,
    trivial_batch_collator,
    worker_init_reset_seed,
)


def _records(n=24):
    # odd records are landscape (group 0), even ones portrait (group 1)
    return [
        {
            "file_name": f"{i}.jpg",
            "image_id": i,
            "height": 4,
            "width": 6 if i % 2 else 3,
            "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": i % 3}],
        }
        for i in range(n)
    ]


def image_id(record):
    return record["image_id"]


def random_draws(record):
    info = get_worker_info()
    return (
        record["image_id"],
        info.id if info is not None else -1,
        float(np.random.random()),
        random.random(),
        float(torch.rand(1)),
    )


class Squares(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return index * index


def test_trivial_batch_collator_returns_the_list():
    batch = [{"a": 1}, {"b": 2}]
    assert trivial_batch_collator(batch) is batch


def test_train_loader_yields_grouped_list_batches_forever():
    loader = build_detection_train_loader(_records(), mapper=image_id, total_batch_size=4, seed=0)
    batches = list(itertools.islice(loader, 30))  # 5 passes
    assert all(isinstance(b, list) and len(b) == 4 for b in batches)
    assert all(len({i % 2 for i in b}) == 1 for b in batches)
    counts = np.bincount(np.concatenate(batches), minlength=24)
    assert counts.min() >= 4


def test_train_loader_without_grouping_follows_the_sampler():
    loader = build_detection_train_loader(
        _records(), mapper=image_id, total_batch_size=4, aspect_ratio_grouping=False, seed=3
    )
    flat = list(itertools.chain(*itertools.islice(loader, 6)))
    expected = list(itertools.islice(TrainingSampler(24, seed=3, rank=0, world_size=1), 24))
    assert flat == expected


@pytest.mark.parametrize("num_workers", [0, 2])
def test_train_loader_resumes_exactly_and_counts_delivered_batches(num_workers):
    make = lambda seed: build_detection_train_loader(  # noqa: E731
        _records(), mapper=image_id, total_batch_size=4, num_workers=num_workers, seed=seed
    )
    loader = make(0)
    it = iter(loader)
    head = [next(it) for _ in range(7)]
    state = loader.state_dict()
    tail = [next(it) for _ in range(6)]
    assert state["batches"] == 7 and loader.batches_delivered == 13
    resumed = make(1)
    resumed.load_state_dict(state)
    assert list(itertools.islice(resumed, 6)) == tail
    # the same position gives the same state whatever num_workers is
    reference = make(0)
    ref_it = iter(reference)
    assert [next(ref_it) for _ in range(7)] == head
    assert reference.state_dict() == state


def test_resume_maps_no_skipped_record():
    calls = []

    def counting(record):
        calls.append(record["image_id"])
        return record["image_id"]

    loader = build_detection_train_loader(_records(), mapper=counting, total_batch_size=2, seed=0)
    it = iter(loader)
    for _ in range(40):
        next(it)
    state = loader.state_dict()
    calls.clear()
    resumed = build_detection_train_loader(_records(), mapper=counting, total_batch_size=2, seed=0)
    resumed.load_state_dict(state)
    batch = next(iter(resumed))
    assert sorted(calls) == sorted(batch)


def test_new_iter_after_prefetching_restarts_at_the_last_delivered_batch():
    loader = build_detection_train_loader(
        _records(),
        mapper=image_id,
        total_batch_size=2,
        num_workers=2,
        seed=0,
        aspect_ratio_grouping=False,
    )
    uninterrupted = list(
        itertools.islice(
            iter(
                build_detection_train_loader(
                    _records(),
                    mapper=image_id,
                    total_batch_size=2,
                    seed=0,
                    aspect_ratio_grouping=False,
                )
            ),
            10,
        )
    )
    first = list(itertools.islice(iter(loader), 4))  # workers prefetched more than 4 batches
    second = list(itertools.islice(iter(loader), 6))
    assert first + second == uninterrupted


def test_train_loader_from_names_and_a_list_of_names():
    DatasetCatalog.register("loader_test_a", lambda: _records(8))
    DatasetCatalog.register("loader_test_b", lambda: _records(8)[:4])
    try:
        one = build_detection_train_loader(
            "loader_test_a", mapper=image_id, total_batch_size=2, seed=0
        )
        assert len(one.dataset) == 8
        both = build_detection_train_loader(
            ["loader_test_a", "loader_test_b"], mapper=image_id, total_batch_size=2, seed=0
        )
        assert len(both.dataset) == 12
        assert all(len(b) == 2 for b in itertools.islice(both, 10))
        test = build_detection_test_loader("loader_test_b", mapper=image_id, batch_size=3)
        assert list(test) == [[0, 1, 2], [3]]
    finally:
        for name in ("loader_test_a", "loader_test_b"):
            DatasetCatalog.remove(name)
            MetadataCatalog.remove(name)


def test_train_loader_with_a_custom_sampler_and_a_torch_dataset(caplog):
    sampler = RepeatFactorTrainingSampler([1.0] * 10, seed=0, rank=0, world_size=1)
    loader = build_detection_train_loader(
        Squares(), mapper=None, sampler=sampler, total_batch_size=5
    )
    assert "not grouped by aspect ratio" in caplog.text
    batch = next(iter(loader))
    assert len(batch) == 5 and all(int(np.sqrt(x)) ** 2 == x for x in batch)
    with pytest.raises(ValueError, match="draws from 7 records, the dataset has 10"):
        build_detection_train_loader(
            Squares(), mapper=None, sampler=TrainingSampler(7, seed=0), total_batch_size=5
        )


@pytest.mark.parametrize(
    "dataset,exc,match",
    [
        ([], ValueError, "empty list"),
        (42, TypeError, "got int"),
    ],
)
def test_train_loader_dataset_errors(dataset, exc, match):
    with pytest.raises(exc, match=match):
        build_detection_train_loader(dataset, mapper=None, total_batch_size=2, seed=0)


def test_batch_loader_checks_the_total_batch_size():
    sampler = TrainingSampler(10, seed=0, rank=0, world_size=4)
    with pytest.raises(ValueError, match="does not divide by the world size 4"):
        build_batch_data_loader(list(range(10)), sampler, 6)
    loader = build_batch_data_loader(list(range(10)), sampler, 8)
    assert len(next(iter(loader))) == 2
    with pytest.raises(ValueError, match="total_batch_size"):
        build_batch_data_loader(list(range(10)), sampler, 0)


def test_batch_loader_grouping_needs_records():
    from mappers.datasets import DatasetFromList, MapDataset

    sampler = TrainingSampler(24, seed=0, rank=0, world_size=1)
    mapped = MapDataset(DatasetFromList(_records()), image_id, seed=0)
    loader = build_batch_data_loader(mapped, sampler, 4, aspect_ratio_grouping=True)
    assert all(len({i % 2 for i in b}) == 1 for b in itertools.islice(loader, 10))
    with pytest.raises(ValueError, match="width and height"):
        build_batch_data_loader(
            Squares(), TrainingSampler(10, seed=0), 2, aspect_ratio_grouping=True
        )
    with pytest.raises(ValueError, match="3 group ids for 10 records"):
        build_batch_data_loader(Squares(), TrainingSampler(10, seed=0), 2, group_ids=[0, 1, 0])


def test_batch_loader_takes_iterable_datasets_without_a_sampler():
    # detectron2: an IterableDataset decides its own order, so a sampler is a caller error
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match="sampler must be None"):
        build_batch_data_loader(Stream(), TrainingSampler(3, seed=0), 1)
    loader = build_batch_data_loader(Stream(), None, 2, drop_last=False)
    assert list(loader) == [[0, 1], [2]]


def test_loader_over_a_plain_sampler_is_not_resumable():
    loader = build_batch_data_loader(
        list(range(5)), InferenceSampler(5, rank=0, world_size=1), 2, drop_last=False
    )
    assert len(loader) == 3 and list(loader) == [[0, 1], [2, 3], [4]]
    with pytest.raises(NotResumableError, match="state_dict"):
        loader.state_dict()
    with pytest.raises(NotResumableError):
        loader.load_state_dict(
            {"type": "ResumableLoader", "version": 2, "batches": 0, "iteration": 0, "seed": 0,
             "batch_sampler": {}, "config": {"sample_seeds": False}}
        )


def test_loader_state_errors():
    loader = build_detection_train_loader(_records(), mapper=None, total_batch_size=2, seed=0)
    with pytest.raises(Exception, match="written by 'TrainingSampler'"):
        loader.load_state_dict(TrainingSampler(24, seed=0).state_dict())
    state = loader.state_dict()
    with pytest.raises(Exception, match="'batches' must be a non-negative int"):
        loader.load_state_dict(dict(state, batches=-4))


def test_workers_are_seeded_from_seed_rank_worker_and_pass():
    def draws(seed):
        loader = build_detection_train_loader(
            _records(8),
            mapper=random_draws,
            total_batch_size=2,
            num_workers=2,
            seed=seed,
            aspect_ratio_grouping=False,
        )
        return list(itertools.chain(*itertools.islice(loader, 8)))

    torch.manual_seed(0)
    np.random.seed(0)
    a = draws(5)
    torch.manual_seed(1)
    np.random.seed(1)
    b = draws(5)
    assert a == b  # global RNG state of the main process does not matter
    assert a != draws(6)
    by_worker = {}
    for _, worker, *values in a:
        by_worker.setdefault(worker, []).append(tuple(values))
    assert set(by_worker) == {0, 1}
    assert by_worker[0][0] != by_worker[1][0]  # workers draw different numbers


def test_worker_init_reset_seed_in_a_plain_dataloader():
    from torch.utils.data import DataLoader

    from catalog._common import torch_generator

    def run():
        loader = DataLoader(
            _records(4),
            batch_size=None,
            num_workers=1,
            collate_fn=random_draws,
            worker_init_fn=worker_init_reset_seed,
            generator=torch_generator(3),
        )
        return list(loader)

    assert run() == run()


def test_test_loader_covers_every_record_once():
    loader = build_detection_test_loader(_records(7), mapper=image_id, batch_size=3)
    assert len(loader) == 3
    assert list(loader) == [[0, 1, 2], [3, 4, 5], [6]]
    shards = [
        build_detection_test_loader(
            _records(7),
            mapper=image_id,
            sampler=InferenceSampler(7, rank=r, world_size=3),
            batch_size=2,
            num_workers=1,
        )
        for r in range(3)
    ]
    assert [len(s) for s in shards] == [2, 1, 1]
    assert sorted(itertools.chain(*itertools.chain(*shards))) == list(range(7))
    with pytest.raises(ValueError, match="batch_size"):
        build_detection_test_loader(_records(3), mapper=None, batch_size=0)


def test_resumable_loader_repr_and_len_of_endless_loader():
    loader = build_detection_train_loader(_records(), mapper=None, total_batch_size=2, seed=0)
    assert isinstance(loader, ResumableLoader) and "batches_delivered=0" in repr(loader)
    with pytest.raises(TypeError):
        len(loader)


def test_persistent_workers_re_iter_continues_after_the_last_delivered_batch():
    sampler = TrainingSampler(24, seed=1, rank=0, world_size=1)
    loader = build_batch_data_loader(
        list(range(24)), sampler, 2, num_workers=2, persistent_workers=True, prefetch_factor=4
    )
    reference = build_batch_data_loader(
        list(range(24)), TrainingSampler(24, seed=1, rank=0, world_size=1), 2
    )
    expected = list(itertools.islice(reference, 12))
    got = []
    for _ in range(3):
        got += list(itertools.islice(iter(loader), 4))
    assert got == expected
    assert loader.state_dict()["batches"] == 12


def test_loader_state_re_shards_to_another_world_size():
    def loader_for(rank, world):
        sampler = TrainingSampler(30, seed=2, rank=rank, world_size=world)
        return build_batch_data_loader(list(range(30)), sampler, 6)

    global_stream = list(itertools.islice(TrainingSampler(30, seed=2, rank=0, world_size=1), 200))
    saved = loader_for(1, 2)  # 3 indices per batch on each of 2 ranks
    list(itertools.islice(saved, 4))  # 4 batches: the two ranks consumed 24 indices
    state = saved.state_dict()
    for rank in range(3):
        resumed = loader_for(rank, 3)  # 2 indices per batch on each of 3 ranks
        resumed.load_state_dict(state)
        flat = list(itertools.chain(*itertools.islice(resumed, 5)))
        assert flat == global_stream[24 + rank :: 3][:10]


# --------------------------------------------------------------------------- sample seeds
# Every sample's augmentations come from a generator seeded from (seed, global position).


def position_draw(record):
    from mappers.random_state import get_generator

    return record["image_id"], float(get_generator().random())


@pytest.fixture(scope="module")
def image_records(tmp_path_factory):
    """12 tiny PNG images (landscape and portrait) with two boxes each."""
    from PIL import Image

    root = tmp_path_factory.mktemp("seeded_images")
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        height, width = (14, 20) if i % 3 else (20, 14)
        path = root / f"{i}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        records.append(
            {
                "file_name": str(path),
                "image_id": i,
                "height": height,
                "width": width,
                "annotations": [
                    {"bbox": [1, 2, 6, 5], "bbox_mode": 1, "category_id": i % 3},
                    {"bbox": [3, 1, 10, 9], "bbox_mode": 0, "category_id": 1},
                ],
            }
        )
    return records


def _augmenting_mapper():
    from mappers import DatasetMapper
    from mappers.transforms import RandomFlip, ResizeShortestEdge

    return DatasetMapper(
        True,
        augmentations=[
            ResizeShortestEdge((8, 10, 12, 16), max_size=24, sample_style="choice"),
            RandomFlip(prob=0.5),
        ],
    )


def _image_loader(records, *, seed, num_workers=0):
    return build_detection_train_loader(
        records,
        mapper=_augmenting_mapper(),
        total_batch_size=3,
        num_workers=num_workers,
        seed=seed,
    )


def _assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for batch_got, batch_expected in zip(got, expected, strict=True):
        assert [s["image_id"] for s in batch_got] == [s["image_id"] for s in batch_expected]
        for a, b in zip(batch_got, batch_expected, strict=True):
            assert a["image"].shape == b["image"].shape and torch.equal(a["image"], b["image"])
            boxes_a, boxes_b = a["instances"].gt_boxes, b["instances"].gt_boxes
            boxes_a, boxes_b = (
                getattr(boxes_a, "tensor", boxes_a),
                getattr(boxes_b, "tensor", boxes_b),
            )
            assert torch.equal(torch.as_tensor(boxes_a), torch.as_tensor(boxes_b))
            assert torch.equal(a["instances"].gt_classes, b["instances"].gt_classes)


def test_resume_gives_identical_augmented_tensors(image_records):
    loader = _image_loader(image_records, seed=4)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    expected = [next(it) for _ in range(3)]
    resumed = _image_loader(image_records, seed=99)  # the state's seed wins
    resumed.load_state_dict(state)
    got = list(itertools.islice(resumed, 3))
    _assert_same_batches(got, expected)
    # the augmentations really vary: several output sizes and both flip outcomes occur
    samples = [s for batch in head + expected for s in batch]
    assert len({tuple(s["image"].shape) for s in samples}) > 1
    flipped = set()
    for s in samples:
        boxes = s["instances"].gt_boxes
        boxes = torch.as_tensor(getattr(boxes, "tensor", boxes))
        scale = s["image"].shape[2] / s["width"]
        # the first box starts at x=1 before flipping
        flipped.add(bool(abs(float(boxes[0, 0]) - 1 * scale) > 1e-3))
    assert flipped == {True, False}


def test_augmented_batches_do_not_depend_on_num_workers(image_records):
    reference = list(itertools.islice(_image_loader(image_records, seed=7), 6))
    with_workers = _image_loader(image_records, seed=7, num_workers=2)
    it = iter(with_workers)
    head = [next(it) for _ in range(4)]
    state = with_workers.state_dict()
    del it
    _assert_same_batches(head, reference[:4])
    resumed = _image_loader(image_records, seed=0)  # no workers: resumes the 2-worker run
    resumed.load_state_dict(state)
    _assert_same_batches(list(itertools.islice(resumed, 2)), reference[4:])


def test_positions_and_seeds_give_different_augmentations():
    def draws(seed):
        loader = build_detection_train_loader(
            _records(8), mapper=position_draw, total_batch_size=2, seed=seed
        )
        return list(itertools.chain(*itertools.islice(loader, 12)))  # 3 passes

    a = draws(1)
    values = [value for _, value in a]
    assert len(set(values)) == len(values)  # a record seen again in a later pass differs too
    assert a == draws(1)
    b = draws(2)
    assert [value for _, value in b] != values
    # the main process's generator is untouched by the per-sample generators
    from mappers.random_state import get_generator, seed_generator

    seed_generator(5)
    expected = get_generator().random()
    seed_generator(5)
    draws(3)
    assert get_generator().random() == expected


def test_sample_seeds_follow_the_global_stream_position_on_any_world_size():
    def loader_for(rank, world, seed=2):
        sampler = TrainingSampler(30, seed=seed, rank=rank, world_size=world)
        mapped = [{"image_id": i} for i in range(30)]
        from mappers.datasets import MapDataset

        return build_batch_data_loader(MapDataset(mapped, position_draw, seed=0), sampler, 6)

    single = list(itertools.chain(*itertools.islice(loader_for(0, 1), 20)))  # 120 samples
    for rank in range(2):
        flat = list(itertools.chain(*itertools.islice(loader_for(rank, 2), 4)))
        assert flat == single[rank::2][:12]
    saved = loader_for(1, 2)
    list(itertools.islice(saved, 4))  # the two ranks consumed 24 positions
    state = saved.state_dict()
    assert state["batch_sampler"]["position"] == 24
    for rank in range(3):
        resumed = loader_for(rank, 3, seed=8)
        resumed.load_state_dict(state)
        flat = list(itertools.chain(*itertools.islice(resumed, 5)))
        assert flat == single[24 + rank :: 3][:10]


def test_refetch_still_works_with_sample_seeds():
    def odd_only(record):
        return position_draw(record) if record["image_id"] % 2 else None

    def run():
        loader = build_detection_train_loader(
            _records(12),
            mapper=odd_only,
            total_batch_size=4,
            seed=3,
            aspect_ratio_grouping=False,
        )
        return list(itertools.islice(loader, 6))

    batches = run()
    assert all(len(b) == 4 and all(i % 2 for i, _ in b) for b in batches)
    assert batches == run()


def test_sample_seeded_dataset_keys():
    from samplers import SampleSeededDataset

    ds = SampleSeededDataset([{"image_id": i} for i in range(3)])
    assert len(ds) == 3 and ds[2] == {"image_id": 2} and "SampleSeededDataset" in repr(ds)
    assert ds[(1, 5)] == {"image_id": 1}
    with pytest.raises(TypeError, match=r"\(index, seed\) pair or an \(index, position, seed\)"):
        ds[(1, 2, 3, 4)]
    mapped = SampleSeededDataset([{"image_id": 0}, {"image_id": 1}])
    from mappers.datasets import MapDataset

    draws = SampleSeededDataset(MapDataset(list(mapped.dataset), position_draw, seed=0))
    assert draws[(0, 11)] == draws[(0, 11)] and draws[(0, 11)] != draws[(0, 12)]
    assert draws[(1, 11)][1] == draws[(0, 11)][1]  # the seed, not the record, decides
    from samplers import sample_seed

    assert draws[(1, 7, 3)] == draws[(1, sample_seed(3, 7))]  # (index, position, loader seed)


def test_sample_seeds_option_of_the_resumable_loader():
    from torch.utils.data import BatchSampler

    from samplers import ResumableBatchSampler

    plain = BatchSampler(InferenceSampler(4, rank=0, world_size=1), 2, drop_last=False)
    with pytest.raises(TypeError, match="iter_with_positions"):
        ResumableLoader(_records(4), plain, collate_fn=list, sample_seeds=True)
    auto = ResumableLoader(_records(4), plain, collate_fn=list)
    assert not auto.sample_seeds and list(auto)[1][0]["image_id"] == 2

    def first_draws(sample_seeds):
        from mappers.datasets import MapDataset

        sampler = TrainingSampler(6, seed=0, rank=0, world_size=1)
        loader = ResumableLoader(
            MapDataset(_records(6), position_draw, seed=0),
            ResumableBatchSampler(sampler, 3),
            collate_fn=list,
            seed=0,
            sample_seeds=sample_seeds,
        )
        return next(iter(loader))

    from mappers.random_state import seed_generator

    seed_generator(1)
    off_a = first_draws(False)
    seed_generator(2)
    off_b = first_draws(False)
    assert off_a != off_b  # without sample seeds, the process generator decides
    seed_generator(1)
    on_a = first_draws(True)
    seed_generator(2)
    assert first_draws(True) == on_a


def test_position_state_errors():
    from samplers import GroupedBatchSampler, ResumableBatchSampler, SamplerStateError

    batches = ResumableBatchSampler(TrainingSampler(6, seed=0, rank=0, world_size=1), 2)
    state = batches.state_dict()
    with pytest.raises(SamplerStateError, match="lacks key.*'position'"):
        batches.load_state_dict({k: v for k, v in state.items() if k != "position"})
    with pytest.raises(SamplerStateError, match="'position' must be a non-negative int"):
        batches.load_state_dict(dict(state, position=-2))
    grouped = GroupedBatchSampler(
        TrainingSampler(6, shuffle=False, seed=0, rank=0, world_size=1), [0, 1, 0, 1, 0, 1], 2
    )
    assert next(grouped.iter_with_positions()) == [(0, 0), (2, 2)]
    state = grouped.state_dict()
    assert (state["buckets"], state["bucket_positions"], state["position"]) == (
        [[], [1]],
        [[], [1]],
        3,
    )
    with pytest.raises(SamplerStateError, match="one global stream position per pending index"):
        grouped.load_state_dict(dict(state, bucket_positions=[[], []]))
    bad = [[state["position"] + 5] * len(b) for b in state["buckets"]]
    with pytest.raises(SamplerStateError, match="is not a drawn position"):
        grouped.load_state_dict(dict(state, bucket_positions=bad))
    loader = build_detection_train_loader(_records(), mapper=None, total_batch_size=2, seed=0)
    with pytest.raises(SamplerStateError, match="'seed' must be a non-negative int"):
        loader.load_state_dict(dict(loader.state_dict(), seed="x"))
