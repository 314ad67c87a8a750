"""Choosing samplers by name: SAMPLERS and build_train_sampler."""

from __future__ import annotations

import itertools

import attrs
import numpy as np
import pytest
import yaml

from catalog import RegistryKeyError, SerializedList
from samplers import (
    SAMPLERS,
    ConcatSampler,
    RandomSubsetTrainingSampler,
    RepeatFactorTrainingSampler,
    SamplerConfigError,
    TrainingSampler,
    build_train_sampler,
)


def _records(n=6):
    return [
        {"file_name": f"{i}.jpg", "annotations": [{"category_id": 0 if i else 1}]} for i in range(n)
    ]


@pytest.fixture
def scratch_names():
    added = []
    yield added
    for name in added:
        SAMPLERS._items.pop(name, None)


def test_builtin_names_are_registered():
    assert {
        "TrainingSampler",
        "RandomSubsetTrainingSampler",
        "RepeatFactorTrainingSampler",
        "ConcatSampler",
    } <= set(SAMPLERS.names())


def test_yaml_form():
    cfg = yaml.safe_load(
        """
        sampler:
          name: RepeatFactorTrainingSampler
          repeat_threshold: 0.5
          seed: 3
        """
    )["sampler"]
    s = build_train_sampler(cfg, SerializedList(_records()), rank=0, world_size=1)
    assert isinstance(s, RepeatFactorTrainingSampler) and s.seed == 3
    # record 0 has the rare category 1 (1 image in 6): sqrt(0.5 / (1/6)) = sqrt(3)
    np.testing.assert_allclose(s.repeat_factors[:2], [np.sqrt(3.0), 1.0], rtol=1e-6)


def test_name_only_and_type_alias():
    s = build_train_sampler("TrainingSampler", _records(), rank=1, world_size=2)
    assert isinstance(s, TrainingSampler) and s.dataset_size == 6 and s.rank == 1
    t = build_train_sampler(
        {"type": "TrainingSampler", "shuffle": False}, _records(), rank=0, world_size=1
    )
    assert list(itertools.islice(t, 7)) == [0, 1, 2, 3, 4, 5, 0]


def test_each_builtin_builds_with_its_options():
    r = _records(10)
    s = build_train_sampler(
        {
            "name": "RandomSubsetTrainingSampler",
            "subset_ratio": 0.5,
            "seed_subset": 1,
            "seed_shuffle": 2,
        },
        r,
        rank=0,
        world_size=1,
    )
    assert isinstance(s, RandomSubsetTrainingSampler) and len(s.subset) == 5
    t = build_train_sampler(
        {"name": "RepeatFactorTrainingSampler", "times": 2, "seed": 0}, r, rank=0, world_size=1
    )
    assert t.repeat_factors.tolist() == [2.0] * 10
    c = build_train_sampler(
        {
            "name": "ConcatSampler",
            "sizes": [4, 6],
            "weights": [1, 1],
            "samplers": [{"name": "RepeatFactorTrainingSampler", "times": 3}, None],
            "seed": 5,
        },
        r,
        rank=0,
        world_size=1,
    )
    assert isinstance(c, ConcatSampler)
    assert isinstance(c.part_samplers[0], RepeatFactorTrainingSampler)
    assert c.part_samplers[0].dataset_size == 4
    np.testing.assert_allclose(c.weights, [0.5, 0.5])


def test_unknown_name_lists_registered_ones():
    with pytest.raises(RegistryKeyError, match="Did you mean: TrainingSampler") as info:
        build_train_sampler("TrainingSamplr", _records())
    assert "RepeatFactorTrainingSampler" in str(info.value)
    assert isinstance(info.value, KeyError)


@pytest.mark.parametrize(
    "cfg,match",
    [
        (
            {"name": "TrainingSampler", "shufle": True},
            "unknown option.*'shufle'.*accepted: shuffle, seed",
        ),
        ({"name": "TrainingSampler", "shuffle": "yes"}, "'shuffle' must be true or false"),
        ({"name": "TrainingSampler", "seed": 1.5}, "'seed' must be a non-negative int"),
        ({"name": "RandomSubsetTrainingSampler"}, "required option.*subset_ratio"),
        ({"name": "RandomSubsetTrainingSampler", "subset_ratio": 2}, r"subset_ratio.*\(0, 1\]"),
        (
            {"name": "RandomSubsetTrainingSampler", "subset_ratio": "half"},
            "'subset_ratio' must be a number",
        ),
        ({"name": "RepeatFactorTrainingSampler"}, "exactly one of"),
        (
            {"name": "RepeatFactorTrainingSampler", "times": 2, "repeat_threshold": 0.1},
            "exactly one of",
        ),
        ({"name": "RepeatFactorTrainingSampler", "repeat_threshold": -1}, "must be positive"),
        ({"name": "ConcatSampler", "sizes": [2, 2]}, "sums to 4, the dataset has 6"),
        ({"name": "ConcatSampler", "sizes": "3,3"}, "'sizes' must be a list of ints"),
        ({"name": "ConcatSampler", "sizes": [3, 3], "weights": [1, 0]}, "part 1"),
        ({"name": "ConcatSampler", "sizes": [3, 3], "samplers": [None]}, "1 entries for 2 parts"),
        ({"shuffle": True}, "exactly one of the keys 'name' / 'type'"),
        ({"name": 3}, "name must be a str"),
        (["TrainingSampler"], "a name or a mapping"),
    ],
)
def test_config_errors(cfg, match):
    with pytest.raises(SamplerConfigError, match=match) as info:
        build_train_sampler(cfg, _records(), rank=0, world_size=1)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


def test_register_an_options_class(scratch_names):
    @SAMPLERS.register("EveryOther")
    @attrs.define(kw_only=True)
    class EveryOther:
        start: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))

        def build(self, dataset_dicts, *, rank, world_size):
            return list(range(self.start, len(dataset_dicts), 2))

    scratch_names.append("EveryOther")
    assert build_train_sampler({"name": "EveryOther", "start": 1}, _records()) == [1, 3, 5]
    with pytest.raises(SamplerConfigError, match="unknown option.*'stop'"):
        build_train_sampler({"name": "EveryOther", "stop": 1}, _records())


def test_register_a_function(scratch_names):
    @SAMPLERS.register()
    def first_n(dataset_dicts, n=2):
        return TrainingSampler(n, seed=0, rank=0, world_size=1)

    scratch_names.append("first_n")
    s = build_train_sampler({"name": "first_n", "n": 3}, _records())
    assert s.dataset_size == 3
    with pytest.raises(SamplerConfigError, match="accepted options: n"):
        build_train_sampler({"name": "first_n", "m": 3}, _records())


def test_builder_returning_a_non_iterable_is_an_error(scratch_names):
    SAMPLERS.register("broken", lambda dataset_dicts: 42)
    scratch_names.append("broken")
    with pytest.raises(SamplerConfigError, match="returned int"):
        build_train_sampler("broken", _records())
