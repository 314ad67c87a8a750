"""Choosing a training sampler by name from a config (``{"name": ..., **options}``): an entry is
an attrs options class with ``build(dataset_dicts, rank=, world_size=)``, or any callable
``fn(dataset_dicts, **options) -> sampler``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from torch.utils.data import Sampler

from catalog._common import (
    check_bool,
    check_float,
    check_list,
    check_positive_size,
    check_seed,
    plain_container,
    validator,
)
from catalog.registry import Registry

from .errors import SamplerConfigError
from .stream import (ConcatSampler, RandomSubsetTrainingSampler, RepeatFactorTrainingSampler,
                     TrainingSampler, repeat_factors_from_category_frequency)

logger = logging.getLogger(__name__)

#: Training samplers chosen by name (``@SAMPLERS.register()``).
SAMPLERS = Registry("sampler")

_bool = validator(check_bool, error=SamplerConfigError)
_seed = validator(check_seed, error=SamplerConfigError)
_positive = validator(check_float, above=0, optional=True, error=SamplerConfigError)
_ratio = validator(check_float, above=0, maximum=1, error=SamplerConfigError)
_sizes = validator(check_list, check=check_positive_size, what="ints", element="of part",
                   error=SamplerConfigError)
_weights = validator(check_list, check=check_float, what="numbers", element="of part", above=0,
                     optional=True, error=SamplerConfigError)


def _part_configs(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence)):
        raise SamplerConfigError(f"option 'samplers' must be a list with one sampler config (or "
                                 f"null) per part, got {value!r}")


@SAMPLERS.register("TrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class TrainingSamplerOptions:
    shuffle: bool = attrs.field(default=True, validator=_bool)
    seed: int | None = attrs.field(default=None, validator=_seed)

    def build(self, dataset_dicts: Sequence[Any], **where: Any) -> Sampler:
        return TrainingSampler(len(dataset_dicts), self.shuffle, self.seed, **where)


@SAMPLERS.register("RandomSubsetTrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class RandomSubsetTrainingSamplerOptions:
    subset_ratio: float = attrs.field(validator=_ratio)
    shuffle: bool = attrs.field(default=True, validator=_bool)
    seed_shuffle: int | None = attrs.field(default=None, validator=_seed)
    seed_subset: int | None = attrs.field(default=None, validator=_seed)

    def build(self, dataset_dicts: Sequence[Any], **where: Any) -> Sampler:
        return RandomSubsetTrainingSampler(len(dataset_dicts), self.subset_ratio, self.shuffle,
                                           self.seed_shuffle, self.seed_subset, **where)


@SAMPLERS.register("RepeatFactorTrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class RepeatFactorTrainingSamplerOptions:
    """Exactly one of ``repeat_threshold`` (class-balanced factors, with ``sqrt``) and ``times``
    (one constant factor, as RepeatDataset)."""

    repeat_threshold: float | None = attrs.field(default=None, validator=_positive)
    times: float | None = attrs.field(default=None, validator=_positive)
    sqrt: bool = attrs.field(default=True, validator=_bool)
    shuffle: bool = attrs.field(default=True, validator=_bool)
    seed: int | None = attrs.field(default=None, validator=_seed)

    def __attrs_post_init__(self) -> None:
        if (self.repeat_threshold is None) == (self.times is None):
            raise SamplerConfigError("give exactly one of the options 'repeat_threshold' "
                                     "(class-balanced factors) and 'times' (a constant factor)")

    def build(self, dataset_dicts: Sequence[Any], **where: Any) -> Sampler:
        factors: Any = ([float(self.times)] * len(dataset_dicts) if self.times is not None else
                        repeat_factors_from_category_frequency(dataset_dicts, self.repeat_threshold, self.sqrt))
        return RepeatFactorTrainingSampler(factors, shuffle=self.shuffle, seed=self.seed, **where)


@SAMPLERS.register("ConcatSampler")
@attrs.define(kw_only=True, frozen=True)
class ConcatSamplerOptions:
    """``sizes`` (records of each part, summing to the dataset length), ``weights``,
    ``samplers`` (one config or null per part, built on that part's records)."""

    sizes: list[int] = attrs.field(validator=_sizes)
    weights: list[float] | None = attrs.field(default=None, validator=_weights)
    samplers: list[Any] | None = attrs.field(default=None, validator=_part_configs)
    shuffle: bool = attrs.field(default=True, validator=_bool)
    seed: int | None = attrs.field(default=None, validator=_seed)

    def build(self, dataset_dicts: Sequence[Any], **where: Any) -> Sampler:
        if sum(self.sizes) != len(dataset_dicts):
            raise SamplerConfigError(f"option 'sizes' sums to {sum(self.sizes)}, the dataset has "
                                     f"{len(dataset_dicts)} records")
        parts = None
        if self.samplers is not None:
            if len(self.samplers) != len(self.sizes):
                raise SamplerConfigError(f"option 'samplers' has {len(self.samplers)} entries for "
                                         f"{len(self.sizes)} parts")
            starts = [sum(self.sizes[:j]) for j in range(len(self.sizes))]
            parts = [None if cfg is None else
                     build_train_sampler(cfg, dataset_dicts[start:start + size], rank=0, world_size=1)
                     for start, size, cfg in zip(starts, self.sizes, self.samplers)]
        try:
            return ConcatSampler(self.sizes, weights=self.weights, samplers=parts,
                                 shuffle=self.shuffle, seed=self.seed, **where)
        except (TypeError, ValueError) as exc:
            raise SamplerConfigError(str(exc)) from exc


def _split_config(cfg: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(cfg, str):
        return cfg, {}
    if not isinstance(cfg, Mapping):
        raise SamplerConfigError(f"a sampler config is a name or a mapping with a 'name' key, got "
                                 f"{type(cfg).__name__}")
    options = plain_container(cfg)  # a DictConfig / any Mapping, nested values plain
    keys = [k for k in ("name", "type") if k in options]
    if len(keys) != 1:
        raise SamplerConfigError(f"a sampler config needs exactly one of the keys 'name' / 'type', "
                                 f"got keys {sorted(map(str, options))}")
    name = options.pop(keys[0])
    if not isinstance(name, str):
        raise SamplerConfigError(f"the sampler name must be a str, got {name!r}")
    if any(not isinstance(k, str) for k in options):
        raise SamplerConfigError(f"sampler {name}: option names must be strs, got {list(options)!r}")
    return name, options


def _options(name: str, entry: type, options: dict[str, Any]) -> Any:
    accepted = [f.name for f in attrs.fields(entry)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise SamplerConfigError(f"sampler {name}: unknown option(s) {', '.join(map(repr, unknown))}; "
                                 f"accepted: {', '.join(accepted)}")
    try:
        return entry(**options)
    except SamplerConfigError as exc:
        raise SamplerConfigError(f"sampler {name}: {exc}") from None
    except TypeError as exc:  # a required option is missing
        required = [f.name for f in attrs.fields(entry) if f.default is attrs.NOTHING]
        raise SamplerConfigError(f"sampler {name}: {exc}; required option(s): {', '.join(required)}") from None


def build_train_sampler(cfg: str | Mapping[str, Any], dataset_dicts: Sequence[Any], *,
                        rank: int | None = None, world_size: int | None = None) -> Sampler:
    """The training sampler a config names, over ``dataset_dicts`` (SamplerConfigError on a bad
    option, RegistryKeyError on an unknown name).

    Example:
        >>> s = build_train_sampler({"name": "TrainingSampler", "seed": 3}, [{}] * 5,
        ...                         rank=0, world_size=1)
        >>> type(s).__name__, s.seed
        ('TrainingSampler', 3)
    """
    name, options = _split_config(cfg)
    entry = SAMPLERS.get(name)
    if attrs.has(entry) and callable(getattr(entry, "build", None)):
        spec = _options(name, entry, options)
        try:
            sampler = spec.build(dataset_dicts, rank=rank, world_size=world_size)
        except SamplerConfigError as exc:
            raise SamplerConfigError(f"sampler {name}: {exc}") from None
    elif callable(entry):
        try:
            inspect.signature(entry).bind(dataset_dicts, **options)
        except TypeError as exc:
            accepted = list(inspect.signature(entry).parameters)[1:]
            raise SamplerConfigError(f"sampler {name}: {exc}; accepted options: "
                                     f"{', '.join(accepted) or 'none'}") from None
        except ValueError:  # no signature (a builtin): call it as it is
            pass
        sampler = entry(dataset_dicts, **options)
    else:
        raise SamplerConfigError(f"sampler {name}: the registered {entry!r} is not callable")
    if not hasattr(sampler, "__iter__"):
        raise SamplerConfigError(f"sampler {name}: the registered builder returned "
                                 f"{type(sampler).__name__}, which is not iterable")
    logger.info("built training sampler %r", sampler)
    return sampler
