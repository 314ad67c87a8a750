"""catalog.registry: the one name lookup (registrations, module-backed names, "did you mean")."""

from __future__ import annotations

import pickle
import re
import types

import pytest

from catalog import DatasetCatalog, DatasetNotRegisteredError, Metadata, MetadataCatalog
from catalog.registry import (
    Registry,
    RegistryKeyError,
    check_name,
    close_matches,
    did_you_mean,
)
from mappers.compose import Compose
from mappers.dataset_mapper import TRANSFORMS
from mappers.errors import PipelineStepError
from mappers.compose import ApplyAugmentations
from mappers.dataset_mapper import AUGMENTATIONS
from samplers import SAMPLERS, build_train_sampler


def test_register_forms_and_lookup():
    reg: Registry = Registry("widget")

    @reg.register()
    class A:
        pass

    @reg.register
    def b() -> int:
        return 2

    @reg.register("Cee")
    class C:
        pass

    def d() -> int:
        return 4

    assert reg.register("Dee", d) is d
    assert reg.get("A") is A and reg.get("b") is b and reg.get("Cee") is C
    assert reg.names() == ["A", "b", "Cee", "Dee"]  # registration order
    assert list(reg) == reg.names() and len(reg) == 4
    assert "Dee" in reg and "d" not in reg and 3 not in reg
    assert reg.find("nope") is None and reg.find("nope", 7) == 7
    assert reg.items()[0] == ("A", A)


def test_duplicates_and_bad_names():
    reg: Registry = Registry("widget", owner="WIDGETS")
    reg.register("x", len)
    reg.register("x", len)  # the same object again: a no-op
    with pytest.raises(ValueError, match=re.escape("call WIDGETS.remove('x')")):
        reg.register("x", abs)
    strict: Registry = Registry("widget", replace_same=False)
    strict.register("x", len)
    with pytest.raises(ValueError, match="already registered"):
        strict.register("x", len)
    with pytest.raises(TypeError, match="must be a str"):
        reg.register(3, len)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="must not be empty"):
        reg.add("", len)
    with pytest.raises(TypeError, match="dataset name must be a str"):
        check_name(b"x", "dataset")


def test_unknown_name_error_lists_close_matches_and_pickles():
    reg: Registry = Registry("sampler")
    for name in ("TrainingSampler", "InferenceSampler", "ConcatSampler"):
        reg.register(name, object())
    with pytest.raises(RegistryKeyError) as info:
        reg.get("TrainingSamplr")
    error = info.value
    assert isinstance(error, KeyError)
    assert str(error).startswith("sampler 'TrainingSamplr' is not registered. Did you mean: ")
    assert "Did you mean: TrainingSampler" in str(error)
    assert "Registered: TrainingSampler, InferenceSampler, ConcatSampler" in str(error)
    assert (error.name, error.kind) == ("TrainingSamplr", "sampler")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RegistryKeyError and str(again) == str(error)
    assert again.name == "TrainingSamplr"
    with pytest.raises(RegistryKeyError, match="Registered: "):
        reg.get("zzzz")  # nothing alike: no hint, every name listed
    assert "Did you mean" not in did_you_mean("zzzz", reg.names())


def test_custom_missing_error():
    reg: Registry = Registry("dataset", missing_error=DatasetNotRegisteredError)
    with pytest.raises(DatasetNotRegisteredError, match="'nope' is not registered"):
        reg.get("nope")


def test_module_backed_registry_finds_names_added_to_all_later():
    module = types.ModuleType("fake_transforms")
    module.Flip = type("Flip", (), {})
    module.hidden = object()  # not in __all__: not found
    module.__all__ = ["Flip"]
    reg: Registry = Registry("augmentation", module=module)
    assert reg.get("Flip") is module.Flip and "hidden" not in reg
    with pytest.raises(RegistryKeyError, match="Did you mean: Flip"):
        reg.get("Flp")
    # A transform added to the module later is found without registering it by hand.
    module.Rotate = type("Rotate", (), {})
    module.__all__.append("Rotate")
    assert reg.get("Rotate") is module.Rotate and reg.names() == ["Flip", "Rotate"]
    # Registered names take precedence; module names cannot be popped.
    mine = object()
    reg.register("Flip", mine)
    assert reg.get("Flip") is mine and reg.names() == ["Flip", "Rotate"]
    assert reg.pop("Flip") is mine and reg.get("Flip") is module.Flip
    with pytest.raises(RegistryKeyError):
        reg.pop("Rotate")


def test_pop_clear_snapshot_restore():
    reg: Registry = Registry("thing")
    reg.register("a", 1)
    state = reg.snapshot()
    reg.register("b", 2)
    assert reg.pop("b") == 2 and reg.pop("b", None) is None
    with pytest.raises(RegistryKeyError):
        reg.pop("b")
    reg.clear()
    assert reg.names() == []
    reg.restore(state)
    assert reg.names() == ["a"]


def test_augmentations_registry_is_backed_by_the_transforms_module():
    from mappers import transforms as T

    assert set(AUGMENTATIONS.names()) == set(T.__all__)
    assert AUGMENTATIONS.get("RandomFlip") is T.RandomFlip
    built = ApplyAugmentations([{"type": "RandomFlip", "prob": 1.0}])
    assert "RandomFlip" in repr(built)
    with pytest.raises(PipelineStepError, match="Did you mean: RandomFlip") as info:
        ApplyAugmentations([{"type": "RandomFlp"}])
    assert isinstance(info.value.__cause__, RegistryKeyError)


def _hint(text: str) -> str:
    match = re.search(r" Did you mean: [^?]*\?", text)
    assert match is not None, text
    return match.group(0)


def test_every_name_lookup_gives_the_same_did_you_mean():
    """Datasets, metadata keys, Compose steps, augmentations and samplers: one hint format."""
    DatasetCatalog.register("RandomFlipper", list)
    messages = []
    with pytest.raises(DatasetNotRegisteredError) as info:
        DatasetCatalog.get("RandomFlipr")
    messages.append(str(info.value))
    with pytest.raises(AttributeError) as info_attr:
        Metadata(name="m", RandomFlipper=1).RandomFlipr  # noqa: B018
    messages.append(str(info_attr.value))
    TRANSFORMS.register("RandomFlipper", Compose)
    try:
        with pytest.raises(RegistryKeyError) as info_step:
            Compose([{"type": "RandomFlipr"}])
        messages.append(str(info_step.value))
    finally:
        TRANSFORMS.pop("RandomFlipper")
    SAMPLERS.register("RandomFlipper", lambda dataset_dicts: iter(()))
    try:
        with pytest.raises(RegistryKeyError) as info_sampler:
            build_train_sampler("RandomFlipr", [{}])
        messages.append(str(info_sampler.value))
    finally:
        SAMPLERS.pop("RandomFlipper")
    MetadataCatalog.get("RandomFlipper")
    with pytest.raises(KeyError) as info_meta:
        MetadataCatalog.pop("RandomFlipr")
    messages.append(str(info_meta.value))
    hints = [_hint(m) for m in messages]
    assert all(h.startswith(" Did you mean: RandomFlipper") for h in hints), hints


def test_close_matches_best_first():
    names = ["coco_2017_val", "coco_2017_train", "voc_2007_train"]
    assert close_matches("coco_2017_trian", names)[0] == "coco_2017_train"
    assert close_matches("lvis", names) == []
