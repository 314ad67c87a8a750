"""A batch is mapped in three passes (issue 25): each sample's randomness and the part of
``DatasetMapper`` that needs no pixels (record copy, drawn transforms, instances) for the whole
batch first, then the images of all, then the rest of each sample. Between two images' decode
and resize, Python costs a worker several times as much. The samples must be exactly those of
mapping one at a time, with refetches, skips and errors in the same places."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from catalog import RecordFormatError
from mappers.errors import ImageReadError
from mappers import DatasetMapper
from mappers import transforms as T
from mappers.datasets import DatasetFromList, MapDataset
from mappers.random_state import use_generator
from samplers import build_detection_train_loader
from samplers.loader import SampleSeededDataset
from tests.image_bytes import photo_like

AUGS = [T.ResizeShortestEdge((24, 32, 40), 80, "choice"), T.RandomFlip()]


def _records(tmp_path, n=12, broken_image=(), bad_box=(), bad_height=()):
    records = []
    for i in range(n):
        path = tmp_path / f"{i}.jpg"
        h, w = (20, 30) if i % 3 else (30, 20)
        if i in broken_image:
            path.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
        else:
            Image.fromarray(photo_like(h, w, seed=i)).save(path, quality=90)
        box = [1.0, 2.0, 10.0] if i in bad_box else [1.0 + i % 4, 2.0, 10.0, 8.0]
        records.append({"file_name": str(path), "image_id": i, "width": w,
                        "height": "tall" if i in bad_height else h,
                        "annotations": [{"bbox": box, "bbox_mode": 1, "category_id": i % 3},
                                        {"bbox": [0, 0, 5, 5], "bbox_mode": 1, "category_id": 1}]})
    return records


def _canonical(sample):
    fields = sample["instances"].get_fields()
    return (sample["image_id"], sample["image"].contiguous().numpy().tobytes(),
            fields["gt_boxes"].tensor.numpy().tobytes(), fields["gt_classes"].tolist())


def _both_ways(records, mapper, keys):
    """(three passes, the loader's way; one sample at a time with the global RNGs seeded)."""
    mapped = MapDataset(DatasetFromList(records), mapper, seed=0)
    batch = SampleSeededDataset(mapped, seed_globals=False).__getitems__(keys)
    single = SampleSeededDataset(mapped, seed_globals=True)
    return batch, [single[key] for key in keys]


def _stepwise(records, **options):
    """(the loader's dataset of a DatasetMapper with ``options``, mapping in passes; its mapper)."""
    mapper = DatasetMapper(is_train=True, augmentations=AUGS, **options)
    mapped = MapDataset(DatasetFromList(records), mapper, seed=0)
    return SampleSeededDataset(mapped, seed_globals=False), mapper


def test_two_passes_give_the_samples_of_one_at_a_time_with_refetches(tmp_path):
    records = _records(tmp_path, broken_image={2, 7})
    mapper = DatasetMapper(is_train=True, augmentations=AUGS, skip_bad_images=True)
    keys = [(i, 100 + i, 5) for i in range(12)] + [(2, 9, 5), (7, 10, 5)]
    batch, single = _both_ways(records, mapper, keys)
    assert [_canonical(s) for s in batch] == [_canonical(s) for s in single]
    assert {s["image_id"] for s in batch[-2:]}.isdisjoint({2, 7})  # broken images refetched
    assert len({s["image"].shape for s in batch}) > 1  # the drawn sizes differ per sample


def test_prepared_instances_equal_those_made_after_the_image(tmp_path):
    mapper = DatasetMapper(is_train=True, augmentations=AUGS)
    for k, record in enumerate(_records(tmp_path, n=6)):
        with use_generator(np.random.default_rng(k)):
            ahead = mapper.prepare(record)
        with use_generator(np.random.default_rng(k)):
            after = mapper.prepare(record)
        assert ahead.instances is not None  # made before any pixel
        after = after._replace(instances=None)  # finish makes them from the image, as before
        assert _canonical(mapper.finish(ahead)) == _canonical(mapper.finish(after))


def test_bad_annotations_are_skipped_or_raised_where_one_at_a_time_does(tmp_path):
    records = _records(tmp_path, bad_box={4})
    keys = [(i, i, 3) for i in range(12)]
    skipping = DatasetMapper(is_train=True, augmentations=AUGS, skip_bad_annotations=True)
    batch, single = _both_ways(records, skipping, keys)
    assert [_canonical(s) for s in batch] == [_canonical(s) for s in single]
    assert batch[4]["image_id"] != 4
    strict = DatasetMapper(is_train=True, augmentations=AUGS)
    mapped = MapDataset(DatasetFromList(records), strict, seed=0)
    with pytest.raises(RecordFormatError, match="bbox") as raised:
        SampleSeededDataset(mapped, seed_globals=False).__getitems__(keys)
    assert "MapDataset: map_func failed on index 4" in str(raised.value)


def test_a_malformed_record_raises_with_its_index_from_the_second_pass(tmp_path):
    dataset, _ = _stepwise(_records(tmp_path, bad_height={5}))
    keys = dataset.prepare_keys([(i, i, 0) for i in range(8)])
    assert keys[5][2] is None and keys[4][2] is not None  # prepared all but the bad one
    for key in keys[:5]:
        dataset[key]
    with pytest.raises(RecordFormatError, match="height") as raised:
        dataset[keys[5]]
    assert "index 5" in str(raised.value)


def test_images_are_read_in_a_pass_of_their_own_and_skips_are_counted_once(tmp_path):
    dataset, mapper = _stepwise(_records(tmp_path, broken_image={3}), skip_bad_images=True)
    reported = []
    keys = dataset.prepare_keys([(i, i, 0) for i in range(6)], reported.append)
    assert reported == list(range(6)) * 2  # named before its file is read, then decoded
    assert all(type(key[2][1].loaded) is tuple for key in keys if key[0] != 3)
    assert keys[3][2][1].loaded is False and mapper.num_skipped == 1  # skipped in the read pass
    samples = [dataset[key] for key in keys]
    assert mapper.num_skipped == 1 and samples[3]["image_id"] != 3  # not counted again
    one_at_a_time = SampleSeededDataset(dataset.dataset, seed_globals=True)
    assert ([_canonical(s) for s in samples]
            == [_canonical(one_at_a_time[(i, i, 0)]) for i in range(6)])


def test_records_without_a_size_draw_their_transforms_in_their_own_scope(tmp_path):
    records = _records(tmp_path)
    for record in records[::2]:
        del record["height"], record["width"]  # the plan is drawn from the decoded image
    mapper = DatasetMapper(is_train=True, augmentations=AUGS)
    batch, single = _both_ways(records, mapper, [(i, 50 + i, 3) for i in range(12)])
    assert [_canonical(s) for s in batch] == [_canonical(s) for s in single]


def test_an_image_failing_in_the_read_pass_raises_in_its_place(tmp_path):
    dataset, _ = _stepwise(_records(tmp_path, broken_image={2}))
    keys = dataset.prepare_keys([(i, i, 0) for i in range(4)])
    assert keys[2][2][1].loaded is None  # left for finish, which raises
    dataset[keys[0]], dataset[keys[1]]
    with pytest.raises(ImageReadError, match="2.jpg") as raised:
        dataset[keys[2]]
    if hasattr(raised.value, "add_note"):  # an OSError's context is a note (Python 3.11+)
        assert "index 2" in str(raised.value.__notes__)


class DrawsFromNumpy(T.Augmentation):
    """A user's augmentation in detectron2's style: it draws from numpy's global RNG."""

    def get_transform(self, image):
        return T.HFlipTransform(image.shape[1]) if np.random.rand() < 0.5 else T.NoOpTransform()


def test_the_loader_seeds_the_global_rngs_only_for_augmentations_that_may_use_them(tmp_path):
    records = _records(tmp_path)

    def loader(augmentations, workers):
        mapper = DatasetMapper(is_train=True, augmentations=augmentations)
        return build_detection_train_loader(records, mapper=mapper, total_batch_size=4,
                                            num_workers=workers, seed=2,
                                            aspect_ratio_grouping=False)

    ours, users = loader(AUGS, 0), loader([AUGS[0], DrawsFromNumpy()], 0)
    assert ours.loader.dataset.seed_globals is False
    assert users.loader.dataset.seed_globals is True
    assert DatasetMapper(is_train=True, augmentations=[T.RandomApply(T.RandomFlip())]
                         ).uses_global_rngs is False
    for augmentations in (AUGS, [AUGS[0], DrawsFromNumpy()]):
        runs = []
        for workers in (0, 2):
            it = iter(loader(augmentations, workers))
            runs.append([[_canonical(s) for s in next(it)] for _ in range(3)])
        assert runs[0] == runs[1]  # any number of workers


def test_pass_one_reads_local_files_ahead_within_the_byte_limits(tmp_path, monkeypatch):
    import mappers.dataset_mapper as dataset_mapper
    import mappers.image_io as image_io
    from mappers.errors import ImageTooLargeError

    records = _records(tmp_path, n=3)
    dataset, mapper = _stepwise(records)
    prepared = mapper.prepare(records[0])
    assert prepared.data == Path(records[0]["file_name"]).read_bytes()
    assert mapper.read(prepared).data is None  # the bytes go once the image is decoded
    one_at_a_time = SampleSeededDataset(dataset.dataset, seed_globals=True)
    expected = [_canonical(one_at_a_time[(i, i, 0)]) for i in range(3)]
    monkeypatch.setattr(dataset_mapper, "_READ_AHEAD", 100)  # larger files: read in pass two
    assert mapper.prepare(records[0]).data is None
    assert [_canonical(dataset[k]) for k in dataset.prepare_keys([(i, i, 0) for i in range(3)])
            ] == expected
    monkeypatch.setattr(dataset_mapper, "_READ_AHEAD", 4 << 20)
    monkeypatch.setattr(image_io, "_configured", None)  # both restored after the test
    monkeypatch.setenv(image_io._LIMITS_ENV, "")
    image_io.set_image_limits(max_bytes=len(prepared.data) - 1)  # a stricter limit still holds
    assert mapper.prepare(records[0]).data is None
    with pytest.raises(ImageTooLargeError, match="0.jpg"):
        dataset[dataset.prepare_keys([(0, 0, 0)])[0]]
    image_io.set_image_limits(image_io.ImageLimits())
    reads = []
    monkeypatch.setattr(dataset_mapper, "read_file_bytes", lambda *args: reads.append(args[0]))
    mapper.prepare(dict(records[0], file_name="s3://bucket/0.jpg"))  # a URL: read once, later
    mapper.prepare(records[1])
    assert reads == [records[1]["file_name"]]
