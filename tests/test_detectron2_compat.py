"""detectron2 semantics that catmap keeps by default (issue 13, items 5 and 6).

Written from detectron2's documented behaviour (its docstrings and API), not from its tests:
each test names the behaviour it pins. Structures (``Boxes``, ``BoxMode`` containers) have
their own tests; here they are only consumed the way a detectron2 model consumes a batch.
"""

from __future__ import annotations

import itertools
import json
import pickle
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import IterableDataset

from catalog import DatasetCatalog, SerializedList, register_coco_instances
from catalog._common import ConfigKeyError
from mappers import (
    DatasetFromList,
    ImageLimits,
    ImageNotFoundError,
    ImageReadError,
    ImageTooLargeError,
    MapDataset,
    MissingDependencyError,
    read_image,
    set_image_limits,
)
from mappers.datasets import PickledList
from mappers.datasets import ToIterableDataset
from samplers import (
    AspectRatioGroupedDataset,
    ConcatSampler,
    GroupedBatchSampler,
    ImageSizeKeyError,
    InferenceSampler,
    LoaderCallError,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    ResumableBatchSampler,
    SamplerConfigError,
    SupersededIteratorError,
    TrainingSampler,
    build_detection_test_loader,
    build_detection_train_loader,
)


def take(iterable, n):
    return list(itertools.islice(iterable, n))


SAMPLER_FACTORIES = {
    "training": lambda: TrainingSampler(13, seed=5, rank=1, world_size=2),
    "subset": lambda: RandomSubsetTrainingSampler(20, 0.5, seed_shuffle=1, seed_subset=2,
                                                  rank=0, world_size=1),
    "repeat": lambda: RepeatFactorTrainingSampler(torch.tensor([1.0, 2.5, 1.0, 3.0]), seed=4,
                                                  rank=0, world_size=1),
    "concat": lambda: ConcatSampler([3, 5], seed=2, rank=0, world_size=1),
}  # fmt: skip


# ---------------------------------------------------------------- 1. iter() restarts
@pytest.mark.parametrize("name", sorted(SAMPLER_FACTORIES))
def test_each_iter_of_a_training_sampler_restarts_from_the_seed(name):
    # detectron2: __iter__ seeds a fresh generator each time, so iterators are the same stream
    sampler = SAMPLER_FACTORIES[name]()
    first = take(sampler, 40)
    assert take(sampler, 40) == first
    assert take(SAMPLER_FACTORIES[name](), 40) == first


@pytest.mark.parametrize("name", sorted(SAMPLER_FACTORIES))
def test_load_state_dict_then_iter_resumes_at_the_saved_position(name):
    sampler = SAMPLER_FACTORIES[name]()
    stream = iter(sampler)
    take(stream, 17)
    state = sampler.state_dict()
    expected = take(stream, 25)
    resumed = SAMPLER_FACTORIES[name]()
    resumed.load_state_dict(state)
    assert take(resumed, 25) == expected
    assert take(resumed, 25) == expected  # the loaded position is where iter() starts now
    assert resumed.state_dict() != state  # ... and the position moved while iterating


def test_a_superseded_iterator_raises_instead_of_mixing_streams():
    sampler = TrainingSampler(10, seed=0, rank=0, world_size=1)
    old = iter(sampler)
    next(old)
    new = iter(sampler)
    assert next(new) == take(TrainingSampler(10, seed=0, rank=0, world_size=1), 1)[0]
    with pytest.raises(SupersededIteratorError, match="superseded"):
        next(old)


def test_inference_sampler_yields_its_shard_on_every_iter():
    sampler = InferenceSampler(7, rank=1, world_size=2)
    assert list(sampler) == list(sampler) == [4, 5, 6]


def test_batch_samplers_restart_with_their_sampler():
    batches = ResumableBatchSampler(TrainingSampler(9, seed=1, rank=0, world_size=1), 4)
    assert take(batches, 5) == take(batches, 5)
    grouped = GroupedBatchSampler(
        TrainingSampler(9, seed=1, rank=0, world_size=1), [i % 2 for i in range(9)], 2
    )
    assert take(grouped, 6) == take(grouped, 6)


def test_loader_continues_across_iter_through_its_delivered_state():
    # the catmap loader is the resumable layer: a new iter() continues after the last batch
    records = [{"i": i, "width": 4, "height": 3} for i in range(10)]
    loader = build_detection_train_loader(records, mapper=None, total_batch_size=2, seed=0)
    reference = build_detection_train_loader(records, mapper=None, total_batch_size=2, seed=0)
    expected = take(reference, 6)
    assert take(loader, 3) + take(loader, 3) == expected


# ---------------------------------------------------------------- 2. leftover groups
def test_grouped_batch_sampler_yields_full_groups_only():
    # detectron2's GroupedBatchSampler yields a group once it holds batch_size indices and
    # never a partial one, also when a finite sampler ends
    groups = [0, 1, 0, 1, 0, 1, 0]
    batches = list(GroupedBatchSampler(InferenceSampler(7, rank=0, world_size=1), groups, 3))
    assert batches == [[0, 2, 4], [1, 3, 5]]
    endless = GroupedBatchSampler(TrainingSampler(7, seed=3, rank=0, world_size=1), groups, 3)
    for batch in take(endless, 50):
        assert len(batch) == 3 and len({groups[i] for i in batch}) == 1


def test_grouped_batch_sampler_leftovers_are_opt_in():
    groups = [0, 1, 0, 1, 0, 1, 0]
    sampler = InferenceSampler(7, rank=0, world_size=1)
    batches = list(GroupedBatchSampler(sampler, groups, 3, drop_last=False))
    assert batches == [[0, 2, 4], [1, 3, 5], [6]]


# ---------------------------------------------------------------- 3. any items, iterables
def test_dataset_from_list_serializes_items_that_are_not_dicts():
    items = [("a.jpg", 3), "b.jpg", 7, {"file_name": "c.jpg"}]
    dataset = DatasetFromList(items)  # serialize=True is the default, as in detectron2
    assert isinstance(dataset.records, PickledList)
    assert [dataset[i] for i in range(4)] == items
    dataset[0]  # a fresh object on every access: editing it changes nothing stored
    assert dataset[3] is not dataset[3]
    records = DatasetFromList([{"file_name": "a.jpg"}]).records
    assert isinstance(records, SerializedList)


def test_map_dataset_over_an_iterable_skips_none():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(6))

    mapped = MapDataset(Stream(), lambda x: x * 10 if x % 3 else None)
    assert isinstance(mapped, IterableDataset)
    assert list(mapped) == [10, 20, 40, 50]


class Pictures(IterableDataset):
    """A stream of dicts with width / height, like a mapped detectron2 dataset."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield {"i": i, "width": 4 if i % 3 else 2, "height": 3}


def test_train_loader_takes_an_iterable_dataset_and_groups_by_aspect_ratio():
    loader = build_detection_train_loader(Pictures(12), mapper=None, total_batch_size=2, seed=0)
    assert isinstance(loader, AspectRatioGroupedDataset)
    batches = list(loader)
    assert batches and all(len(b) == 2 for b in batches)
    for batch in batches:
        assert len({d["width"] > d["height"] for d in batch}) == 1
    plain = build_detection_train_loader(
        Pictures(5), mapper=None, total_batch_size=2, aspect_ratio_grouping=False, seed=0
    )
    assert [[d["i"] for d in b] for b in plain] == [[0, 1], [2, 3]]  # drop_last, in order


def test_loaders_refuse_a_sampler_for_an_iterable_dataset():
    with pytest.raises(LoaderCallError, match="sampler must be None") as info:
        build_detection_train_loader(
            Pictures(4), mapper=None, sampler=TrainingSampler(4, seed=0), total_batch_size=2
        )
    assert info.value.argument == "sampler"


def test_test_loader_takes_an_iterable_dataset():
    loader = build_detection_test_loader(Pictures(5), mapper=lambda d: d["i"], batch_size=2)
    assert list(loader) == [[0, 1], [2, 3], [4]]


def test_loaders_take_lists_of_items_that_are_not_dicts():
    items = [("x", i) for i in range(6)]
    loader = build_detection_test_loader(items, mapper=lambda item: item[1], batch_size=4)
    assert list(loader) == [[0, 1, 2, 3], [4, 5]]
    train = build_detection_train_loader(
        items, mapper=None, total_batch_size=3, aspect_ratio_grouping=False, seed=0
    )
    assert all(item in items for item in next(iter(train)))


def test_aspect_ratio_grouped_dataset_restart_starts_with_empty_buckets():
    items = [{"width": w, "height": h, "i": i} for i, (w, h) in enumerate([(1, 0), (0, 1)] * 3)]
    grouped = AspectRatioGroupedDataset(items, 2)
    for _ in range(3):  # leave each iteration after its first batch, as detectron2's test does
        first = next(iter(grouped))
        assert [d["i"] for d in first] == [0, 2]
        assert all(len(bucket) < 2 for bucket in grouped._buckets)
    it = iter(grouped)
    next(it)
    assert [len(bucket) for bucket in grouped._buckets] == [0, 1]  # item 1 pending
    # a new iteration drops the abandoned one's pending item: batches as from a fresh dataset
    assert [[d["i"] for d in b] for b in grouped] == [[0, 2], [1, 3]]
    assert grouped._buckets == [[], []]


def test_aspect_ratio_grouped_dataset_batches_like_orientations():
    items = [{"width": w, "height": 3, "i": i} for i, w in enumerate([4, 2, 5, 2, 6, 1])]
    grouped = AspectRatioGroupedDataset(items, 2)
    assert [[d["i"] for d in b] for b in grouped] == [[0, 2], [1, 3]]  # 4 and 5 left over
    kept = AspectRatioGroupedDataset(items, 2, drop_last=False)
    assert [[d["i"] for d in b] for b in kept] == [[0, 2], [1, 3], [4], [5]]
    assert list(grouped) == list(grouped)  # each iteration starts with empty groups
    with pytest.raises(ImageSizeKeyError, match="item 1 .* no 'height'") as info:
        list(AspectRatioGroupedDataset([{"width": 1, "height": 2}, {"width": 3}], 2))
    assert info.value.position == 1 and isinstance(info.value, KeyError)


def test_to_iterable_dataset_takes_shard_sampler():
    dataset = ToIterableDataset(["a", "b", "c"], [2, 0], shard_sampler=False)
    assert list(dataset) == ["c", "a"]


# ---------------------------------------------------------------- 4. config calls
def _write_coco(tmp_path, sizes, empty=()):
    images, annotations = [], []
    for i, (w, h) in enumerate(sizes):
        pixels = np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"{i}.jpg", quality=95)
        images.append({"id": i + 1, "file_name": f"{i}.jpg", "width": w, "height": h})
        if i not in empty:
            annotations.append({
                "id": i + 1, "image_id": i + 1, "category_id": 7 + i % 2, "iscrowd": 0,
                "bbox": [2.0, 3.0, w / 2, h / 3], "area": w * h / 6.0,
                "segmentation": [[2, 3, 2 + w / 2, 3, 2 + w / 2, 3 + h / 3]],
            })  # fmt: skip
    categories = [{"id": 7, "name": "cat"}, {"id": 8, "name": "dog"}]
    path = tmp_path / "instances.json"
    path.write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    return path


@pytest.fixture()
def tiny_coco(tmp_path):
    sizes = [(64, 48), (48, 64), (80, 60), (60, 80), (72, 40), (40, 72), (50, 50), (66, 44)]
    path = _write_coco(tmp_path, sizes, empty=(6,))
    register_coco_instances("compat_tiny_train", {}, str(path), str(tmp_path))
    return "compat_tiny_train"


def _cfg(dataset, **dataloader):
    return {
        "DATASETS": {"TRAIN": (dataset,), "TEST": (dataset,)},
        "DATALOADER": {"NUM_WORKERS": 0, "ASPECT_RATIO_GROUPING": True,
                       "FILTER_EMPTY_ANNOTATIONS": True, "SAMPLER_TRAIN": "TrainingSampler",
                       **dataloader},
        "INPUT": {"MIN_SIZE_TRAIN": (32,), "MAX_SIZE_TRAIN": 96,
                  "MIN_SIZE_TRAIN_SAMPLING": "choice", "MIN_SIZE_TEST": 32, "MAX_SIZE_TEST": 96,
                  "FORMAT": "BGR", "MASK_FORMAT": "polygon", "RANDOM_FLIP": "horizontal",
                  "CROP": {"ENABLED": False, "TYPE": "relative_range", "SIZE": [0.9, 0.9]}},
        "MODEL": {"MASK_ON": False, "KEYPOINT_ON": False, "LOAD_PROPOSALS": False},
        "SOLVER": {"IMS_PER_BATCH": 2},
        "SEED": 3,
    }  # fmt: skip


def _identity(record):
    return record


@pytest.mark.parametrize(
    "sampler,extra,expected",
    [
        ("TrainingSampler", {}, TrainingSampler),
        ("RepeatFactorTrainingSampler", {"REPEAT_THRESHOLD": 0.5}, RepeatFactorTrainingSampler),
        ("RandomSubsetTrainingSampler", {"RANDOM_SUBSET_RATIO": 0.5}, RandomSubsetTrainingSampler),
    ],
)
def test_train_loader_from_a_config_mapping(tiny_coco, sampler, extra, expected):
    cfg = _cfg(tiny_coco, SAMPLER_TRAIN=sampler, **extra)
    loader = build_detection_train_loader(cfg, mapper=_identity)
    assert isinstance(loader.batch_sampler.sampler, expected)
    assert isinstance(loader.batch_sampler, GroupedBatchSampler)
    assert loader.batch_sampler.batch_size == 2  # SOLVER.IMS_PER_BATCH over 1 rank
    assert loader.loader.num_workers == 0
    assert len(loader.dataset) == 7  # FILTER_EMPTY_ANNOTATIONS dropped the empty image
    batch = next(iter(loader))
    assert len(batch) == 2 and len({r["width"] > r["height"] for r in batch}) == 1


def test_config_keys_and_explicit_overrides(tiny_coco):
    cfg = _cfg(tiny_coco, ASPECT_RATIO_GROUPING=False, FILTER_EMPTY_ANNOTATIONS=False)
    cfg["SOLVER"]["IMS_PER_BATCH"] = 4
    loader = build_detection_train_loader(cfg, _identity, total_batch_size=3)
    assert isinstance(loader.batch_sampler, ResumableBatchSampler)
    assert len(loader.dataset) == 8 and loader.batch_sampler.batch_size == 3
    assert loader.batch_sampler.sampler.seed == 3  # SEED
    records = [{"file_name": "x.jpg", "width": 3, "height": 2}] * 4
    mine = build_detection_train_loader(cfg, mapper=_identity, dataset=records)
    assert len(mine.dataset) == 4


def test_config_as_omegaconf_and_as_attributes(tiny_coco):
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(_cfg(tiny_coco))
    assert len(next(iter(build_detection_train_loader(cfg, mapper=_identity)))) == 2

    def namespace(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{k: namespace(v) for k, v in value.items()})
        return value

    loader = build_detection_train_loader(namespace(_cfg(tiny_coco)), mapper=_identity)
    assert len(next(iter(loader))) == 2


def test_config_as_yacs_cfgnode(tiny_coco):
    yacs_config = pytest.importorskip("yacs.config")
    cfg = yacs_config.CfgNode(_cfg(tiny_coco))
    assert len(next(iter(build_detection_train_loader(cfg, mapper=_identity)))) == 2


def test_test_loader_from_a_config(tiny_coco):
    loader = build_detection_test_loader(_cfg(tiny_coco), tiny_coco, mapper=_identity)
    assert len(loader) == 8  # not filtered, batch size 1, InferenceSampler
    assert isinstance(loader.batch_sampler.sampler, InferenceSampler)


def test_bad_calls_give_typed_errors_naming_the_argument(tiny_coco):
    cases = [
        (lambda: build_detection_train_loader([{"a": 1}], total_batch_size=2), "mapper"),
        (lambda: build_detection_train_loader([{"a": 1}], mapper=None), "total_batch_size"),
        (lambda: build_detection_train_loader(
            [{"a": 1}], mapper=None, total_batch_size=2, batch=3), "batch"),
        (lambda: build_detection_train_loader(_cfg(tiny_coco), _identity, mapping=1), "mapping"),
        (lambda: build_detection_test_loader(_cfg(tiny_coco), mapper=_identity), "dataset_name"),
        (lambda: build_detection_test_loader(_cfg(tiny_coco), 42, mapper=_identity),
         "dataset_name"),
        (lambda: build_detection_train_loader(
            _cfg(tiny_coco, NUM_WORKERS="4"), mapper=_identity), "DATALOADER.NUM_WORKERS"),
        (lambda: build_detection_train_loader(
            _cfg(tiny_coco, SAMPLER_TRAIN="RandomSubsetTrainingSampler",
                 RANDOM_SUBSET_RATIO=1.5), mapper=_identity), "DATALOADER.RANDOM_SUBSET_RATIO"),
    ]  # fmt: skip
    for call, argument in cases:
        with pytest.raises(LoaderCallError) as info:
            call()
        assert info.value.argument == argument, info.value
        assert isinstance(info.value, TypeError) and argument in str(info.value)


def test_keypoint_on_filters_images_with_few_visible_keypoints():
    def record(i, visible):
        keypoints = [1.0, 1.0, 2.0] * visible + [0.0, 0.0, 0.0] * (3 - visible)
        annotation = {"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": 0,
                      "keypoints": keypoints}  # fmt: skip
        return {"file_name": f"{i}.jpg", "height": 4, "width": 5, "image_id": i,
                "annotations": [annotation]}  # fmt: skip

    DatasetCatalog.register("compat_keypoints", lambda: [record(0, 1), record(1, 3)])
    cfg = {"DATASETS": {"TRAIN": ["compat_keypoints"]}, "SOLVER": {"IMS_PER_BATCH": 1},
           "DATALOADER": {"NUM_WORKERS": 0},
           "MODEL": {"KEYPOINT_ON": True, "ROI_KEYPOINT_HEAD": {"MIN_KEYPOINTS_PER_IMAGE": 2}}}
    assert len(build_detection_train_loader(cfg, mapper=_identity).dataset) == 1
    cfg["MODEL"]["KEYPOINT_ON"] = False
    assert len(build_detection_train_loader(cfg, mapper=_identity).dataset) == 2


def test_serialized_items_survive_pickling_for_spawned_workers():
    dataset = DatasetFromList([("a", 1), ("b", 2)])
    assert [pickle.loads(pickle.dumps(dataset))[i] for i in range(2)] == [("a", 1), ("b", 2)]


def test_bad_values_give_typed_errors():
    with pytest.raises(SamplerConfigError, match="total_batch_size"):
        build_detection_train_loader([{"a": 1}], mapper=None, total_batch_size="2")
    with pytest.raises(SamplerConfigError, match="seed"):
        build_detection_train_loader([{"a": 1}], mapper=None, total_batch_size=1, seed=-1)


def test_config_errors_name_the_key(tiny_coco):
    cfg = _cfg(tiny_coco)
    del cfg["DATASETS"]["TRAIN"]
    with pytest.raises(ConfigKeyError, match="DATASETS.TRAIN") as info:
        build_detection_train_loader(cfg, mapper=_identity)
    assert isinstance(info.value, KeyError)
    cfg = _cfg(tiny_coco)
    cfg["MODEL"]["LOAD_PROPOSALS"] = True
    assert next(iter(build_detection_train_loader(cfg, mapper=_identity)))  # no files: fine
    cfg["DATASETS"]["PROPOSAL_FILES_TRAIN"] = ("proposals.pkl",)
    with pytest.raises(LoaderCallError, match="pickle") as info:
        build_detection_train_loader(cfg, mapper=_identity)
    assert info.value.argument == "DATASETS.PROPOSAL_FILES_TRAIN"
    cfg = _cfg(tiny_coco, SAMPLER_TRAIN="RandomSubsetTrainingSampler")
    with pytest.raises(ConfigKeyError, match="RANDOM_SUBSET_RATIO"):
        build_detection_train_loader(cfg, mapper=_identity)


# ---------------------------------------------------------------- 5. remote paths
@pytest.fixture()
def jpeg_bytes(tmp_path):
    path = tmp_path / "a.jpg"
    pixels = np.random.default_rng(0).integers(0, 255, (24, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)
    return path, path.read_bytes()


def test_read_image_through_fsspec_urls(jpeg_bytes):
    fsspec = pytest.importorskip("fsspec")
    path, data = jpeg_bytes
    local = read_image(str(path), "BGR")
    url = "memory://compat/a.jpg"
    with fsspec.open(url, "wb") as handle:
        handle.write(data)
    set_image_limits(remote_roots=("memory://compat/", "nosuchproto://"))  # the opt-in
    try:
        np.testing.assert_array_equal(read_image(url, "BGR"), local)
        np.testing.assert_array_equal(read_image(path.as_uri(), "BGR"), local)
        with pytest.raises(ImageNotFoundError, match="memory://compat/missing.jpg"):
            read_image("memory://compat/missing.jpg")
        with pytest.raises(ImageTooLargeError, match="byte limit") as info:
            read_image(url, max_bytes=100)
        assert info.value.path == url and info.value.limit == 100
        with pytest.raises(ImageTooLargeError, match="24 pixels|768 pixels|pixels"):
            read_image(url, max_pixels=100)
        with pytest.raises(ImageReadError, match="nosuchproto://x.jpg"):
            read_image("nosuchproto://x.jpg")
    finally:
        fsspec.filesystem("memory").rm(url)
        set_image_limits(ImageLimits())


def test_local_files_have_the_same_byte_bound(jpeg_bytes):
    path, data = jpeg_bytes
    with pytest.raises(ImageTooLargeError, match=f"{len(data)} bytes"):
        read_image(str(path), max_bytes=len(data) - 1)
    assert read_image(str(path), max_bytes=len(data)).shape == (24, 32, 3)


def test_missing_fsspec_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # makes "import fsspec" fail
    set_image_limits(remote_roots=("s3://bucket/",))
    try:
        with pytest.raises(MissingDependencyError, match=r"catmap\[remote\]"):
            read_image("s3://bucket/a.jpg")
    finally:
        set_image_limits(ImageLimits())


# ---------------------------------------------------------------- other silent differences
def test_dataset_catalog_pop_and_read_only_records():
    DatasetCatalog.register("compat_pop", lambda: [{"file_name": "a.jpg"}])
    loader = DatasetCatalog.pop("compat_pop")
    assert loader() == [{"file_name": "a.jpg"}] and "compat_pop" not in DatasetCatalog
    records = SerializedList([{"file_name": "a.jpg"}])
    with pytest.raises(TypeError):
        records[0] = {"file_name": "b.jpg"}  # an edit that would be lost is refused loudly


# ---------------------------------------------------------------- 6. end to end
def test_a_detectron2_training_script_data_part_runs_with_changed_imports(tiny_coco):
    structures = pytest.importorskip("mappers.structures")
    cfg = _cfg(tiny_coco)
    cfg["SOLVER"]["IMS_PER_BATCH"] = 4
    loader = build_detection_train_loader(cfg)  # the mapper is DatasetMapper(cfg, True)
    batch = next(iter(loader))
    assert len(batch) == 4
    for sample in batch:
        image = sample["image"]
        assert isinstance(image, torch.Tensor) and image.ndim == 3 and image.shape[0] == 3
        assert min(image.shape[1:]) == 32  # INPUT.MIN_SIZE_TRAIN
        boxes = sample["instances"].gt_boxes
        assert isinstance(boxes, structures.Boxes) and boxes.tensor.shape[1] == 4
        assert sample["instances"].gt_classes.dtype == torch.int64
    images = structures.ImageList.from_tensors([s["image"] for s in batch], size_divisibility=32)
    assert images.tensor.shape[0] == 4 and images.tensor.shape[2] % 32 == 0
    assert images.tensor.shape[3] % 32 == 0


README_EXAMPLE = '''
from catalog import register_coco_instances          # detectron2.data.datasets
from mappers.structures import ImageList             # detectron2.structures
from samplers import build_detection_train_loader    # detectron2.data

register_coco_instances("my_train", {}, json_file, image_root)
cfg = {
    "DATASETS": {"TRAIN": ("my_train",)},
    "DATALOADER": {"NUM_WORKERS": 0, "SAMPLER_TRAIN": "RepeatFactorTrainingSampler",
                   "REPEAT_THRESHOLD": 0.3, "ASPECT_RATIO_GROUPING": True},
    "INPUT": {"MIN_SIZE_TRAIN": (32, 40), "MAX_SIZE_TRAIN": 96, "FORMAT": "BGR"},
    "SOLVER": {"IMS_PER_BATCH": 2},
    "SEED": 0,
}
loader = build_detection_train_loader(cfg)  # maps with DatasetMapper(cfg, is_train=True)
data = iter(loader)
batch = next(data)
images = ImageList.from_tensors([d["image"] for d in batch], size_divisibility=32)
gt_boxes = [d["instances"].gt_boxes.tensor for d in batch]

state = loader.state_dict()  # catmap: resume exactly where this run stops
'''


def test_readme_moving_from_detectron2_example_runs(tmp_path):
    pytest.importorskip("mappers.structures")
    sizes = [(64, 48), (48, 64), (80, 60), (60, 80)]
    json_file = _write_coco(tmp_path, sizes)
    scope = {"json_file": str(json_file), "image_root": str(tmp_path)}
    exec(compile(README_EXAMPLE, "README-moving-from-detectron2", "exec"), scope)
    assert scope["images"].tensor.shape[0] == 2
    assert all(boxes.shape[1] == 4 for boxes in scope["gt_boxes"])
    resumed = build_detection_train_loader(scope["cfg"])
    resumed.load_state_dict(scope["state"])
    expected = next(scope["data"])
    got = next(iter(resumed))
    assert [d["file_name"] for d in got] == [d["file_name"] for d in expected]
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a["image"], b["image"])
