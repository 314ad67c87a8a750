"""OmegaConf / Hydra configs: every list or mapping argument accepts DictConfig / ListConfig and
any Sequence / Mapping, and ``hydra.utils.instantiate`` builds the loaders (README snippet)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pytest

from catalog import DatasetCatalog, MetadataCatalog, get_detection_dataset_dicts
from catalog._common import is_config_container, plain_container, plain_names, plain_value
from mappers import Compose
from samplers import (
    build_detection_test_loader,
    build_detection_train_loader,
    build_train_sampler,
)

omegaconf = pytest.importorskip("omegaconf")
OmegaConf = omegaconf.OmegaConf


def _records(prefix, n=4):
    return [
        {
            "file_name": f"{prefix}{i}.jpg",
            "image_id": i,
            "height": 4,
            "width": 6 if i % 2 else 3,
            "annotations": [{"bbox": [0, 0, 1, 1], "bbox_mode": 1, "category_id": i % 2}],
        }
        for i in range(n)
    ]


@pytest.fixture
def two_datasets():
    DatasetCatalog.register("cfg_a", lambda: _records("a"))
    DatasetCatalog.register("cfg_b", lambda: _records("b", 6))
    return "cfg_a", "cfg_b"


class Names(Sequence):
    """A Sequence that is neither a list nor a tuple (as other config systems hand out)."""

    def __init__(self, *names):
        self._names = names

    def __len__(self):
        return len(self._names)

    def __getitem__(self, index):
        return self._names[index]


class ReadOnly(Mapping):
    def __init__(self, **values):
        self._values = values

    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


def file_name(record):
    return record["file_name"]


# ----------------------------------------------------------------------- plain_container
def test_plain_container_converts_configs_and_any_sequence_or_mapping():
    cfg = OmegaConf.create({"names": ["a", "b"], "n": "${x}", "x": 2, "sub": {"k": [1]}})
    plain = plain_container(cfg)
    assert plain == {"names": ["a", "b"], "n": 2, "x": 2, "sub": {"k": [1]}}
    assert type(plain["names"]) is list and type(plain["sub"]) is dict
    assert plain_container(Names("a", "b")) == ["a", "b"]
    assert plain_container(ReadOnly(k=OmegaConf.create([1]))) == {"k": [1]}
    assert type(plain_container(ReadOnly(k=OmegaConf.create([1])))["k"]) is list
    for scalar in ("ab", b"ab", 3, None):
        assert plain_container(scalar) is scalar or plain_container(scalar) == scalar
    assert plain_value((1, OmegaConf.create([2]))) == (1, [2])
    assert is_config_container(cfg) and not is_config_container({"a": 1})


def test_plain_names_only_for_sequences_of_strs():
    assert plain_names(OmegaConf.create(["a", "b"])) == ["a", "b"]
    assert plain_names(Names("a")) == ["a"]
    assert plain_names("a") is None and plain_names([]) is None
    assert plain_names([{"file_name": "x"}]) is None and plain_names({"a": 1}) is None


# ----------------------------------------------------------------------- the builders
@pytest.mark.parametrize("kind", ["listconfig", "sequence", "tuple"])
def test_a_config_list_of_names_is_several_datasets(two_datasets, kind):
    names = {
        "listconfig": OmegaConf.create(list(two_datasets)),
        "sequence": Names(*two_datasets),
        "tuple": tuple(two_datasets),
    }[kind]
    expected = [r["file_name"] for r in get_detection_dataset_dicts(list(two_datasets))]
    assert [r["file_name"] for r in get_detection_dataset_dicts(names)] == expected
    assert len(expected) == 10

    test_loader = build_detection_test_loader(names, mapper=file_name, batch_size=3)
    assert list(itertools.chain(*test_loader)) == expected

    train = build_detection_train_loader(
        names, mapper=file_name, total_batch_size=2, seed=0, aspect_ratio_grouping=True
    )
    reference = build_detection_train_loader(
        list(two_datasets), mapper=file_name, total_batch_size=2, seed=0
    )
    assert list(itertools.islice(train, 6)) == list(itertools.islice(reference, 6))


def test_a_listconfig_of_records_is_a_record_list():
    records = OmegaConf.create(_records("r", 3))
    loader = build_detection_test_loader(records, mapper=file_name)
    assert list(itertools.chain(*loader)) == ["r0.jpg", "r1.jpg", "r2.jpg"]


def test_register_coco_instances_and_metadata_take_dictconfig(tmp_path):
    from catalog import register_coco_instances

    register_coco_instances(
        "cfg_coco",
        OmegaConf.create({"thing_colors": [[1, 2, 3]], "note": "${x}", "x": "resolved"}),
        tmp_path / "missing.json",
        tmp_path,
    )
    meta = MetadataCatalog.get("cfg_coco")
    assert meta.thing_colors == [[1, 2, 3]] and type(meta.thing_colors) is list
    assert meta.note == "resolved"
    MetadataCatalog.get("cfg_meta").set(**OmegaConf.create({"thing_classes": ["cat", "dog"]}))
    classes = MetadataCatalog.get("cfg_meta").thing_classes
    assert classes == ["cat", "dog"] and type(classes) is list
    # the same values again (as plain lists) are no conflict
    MetadataCatalog.get("cfg_meta").set(thing_classes=["cat", "dog"])
    MetadataCatalog.get("cfg_meta2").set(**ReadOnly(stuff=OmegaConf.create({"a": [1]})))
    assert type(MetadataCatalog.get("cfg_meta2").stuff) is dict


def test_build_train_sampler_from_a_dictconfig(two_datasets):
    records = get_detection_dataset_dicts(list(two_datasets))
    cfg = OmegaConf.create(
        {
            "name": "ConcatSampler",
            "sizes": [4, 6],
            "weights": [1, 3],
            "samplers": [{"name": "TrainingSampler", "seed": 3}, None],
            "seed": 5,
        }
    )
    sampler = build_train_sampler(cfg, records, rank=0, world_size=1)
    reference = build_train_sampler(plain_container(cfg), records, rank=0, world_size=1)
    assert list(itertools.islice(sampler, 40)) == list(itertools.islice(reference, 40))
    assert sampler.state_dict() == reference.state_dict()


class RecordKwargs:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __call__(self, data):
        return data


def test_compose_step_configs_get_plain_arguments():
    from mappers import TRANSFORMS

    TRANSFORMS.register("RecordKwargsForConfigTest", RecordKwargs)
    try:
        pipe = Compose([OmegaConf.create({"type": "RecordKwargsForConfigTest",
                                          "sizes": [1, 2], "extra": {"a": [3]}})])
    finally:
        TRANSFORMS.pop("RecordKwargsForConfigTest")
    kwargs = pipe.transforms[0].kwargs
    assert kwargs == {"sizes": [1, 2], "extra": {"a": [3]}}
    assert type(kwargs["sizes"]) is list and type(kwargs["extra"]["a"]) is list


def test_compose_takes_a_listconfig_of_steps():
    steps = OmegaConf.create([{"type": "ToTensor", "keys": ["image"]}])
    pipe = Compose(steps)
    assert len(pipe) == 1
    assert pipe.transforms[0].keys == ("image",)
    assert len(Compose(OmegaConf.create({"type": "ToTensor"}))) == 1


# ----------------------------------------------------------------------- Hydra instantiate
README_HYDRA_SNIPPET = '''
from hydra.utils import instantiate
from omegaconf import OmegaConf

from catalog import register_coco_instances

cfg = OmegaConf.create("""
datasets: {train: [shapes_a, shapes_b]}
train_loader:
  _target_: samplers.build_detection_train_loader
  dataset: ${datasets.train}
  mapper:
    _target_: mappers.DatasetMapper
    is_train: true
    augmentations:
      - {_target_: mappers.transforms.ResizeShortestEdge, short_edge_length: [32, 40], max_size: 64}
      - {_target_: mappers.transforms.RandomFlip}
  total_batch_size: 4
  seed: 0
""")
for name in cfg.datasets.train:
    register_coco_instances(name, {}, shapes.json_file, shapes.image_root)
loader = instantiate(cfg.train_loader)
batch = next(iter(loader))
'''


def test_readme_hydra_snippet_instantiates_the_train_loader(tmp_path):
    pytest.importorskip("hydra")
    from tools.shapes_dataset import generate_shapes_dataset

    shapes = generate_shapes_dataset(
        tmp_path / "shapes", num_images=6, seed=1, image_sizes=[(48, 40), (40, 48)]
    )
    scope = {"shapes": shapes}
    exec(README_HYDRA_SNIPPET, scope)  # noqa: S102 - the README text, verbatim
    batch = scope["batch"]
    assert len(batch) == 4
    # two datasets of 6 images each, not one "dataset" made of the two names
    assert len(scope["loader"].dataset) == 12
    assert all(sample["image"].shape[0] == 3 for sample in batch)
    assert min(min(sample["image"].shape[1:]) for sample in batch) in (32, 40)


def test_hydra_instantiate_of_the_test_loader_and_sampler(two_datasets):
    pytest.importorskip("hydra")
    from hydra.utils import instantiate

    loader = instantiate(
        {
            "_target_": "samplers.build_detection_test_loader",
            "dataset": list(two_datasets),
            "mapper": None,
            "batch_size": 5,
        }
    )
    assert len(loader) == 2
    records = get_detection_dataset_dicts(list(two_datasets))
    sampler = instantiate(
        {
            "_target_": "samplers.build_train_sampler",
            "cfg": {"name": "RepeatFactorTrainingSampler", "repeat_threshold": 0.5, "seed": 1},
            "dataset_dicts": records,
        }
    )
    assert sampler.dataset_size == len(records)
