"""Choosing a training sampler by name from a config (a name, a dict or a YAML mapping).


Example YAML::

    sampler:
      name: RepeatFactorTrainingSampler
      repeat_threshold: 0.001

Built-in names: TrainingSampler, RandomSubsetTrainingSampler, RepeatFactorTrainingSampler,
ConcatSampler. Each is registered as an attrs options class whose fields are the options; a
user entry may also be any callable ``fn(dataset_dicts, **options) -> sampler``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
from torch.utils.data import Sampler

from catalog.config_values import plain_container
from catalog.registry import Registry
from catalog.validation import (
    check_bool, check_float, check_list, check_positive_size, check_seed, validator,
)

from .errors import SamplerConfigError
from .stream import (
    ConcatSampler, RandomSubsetTrainingSampler, RepeatFactorTrainingSampler, TrainingSampler,
    repeat_factors_from_category_frequency,
)

__all__ = ["SAMPLERS", "build_train_sampler", "TrainingSamplerOptions",
           "RandomSubsetTrainingSamplerOptions", "RepeatFactorTrainingSamplerOptions",
           "ConcatSamplerOptions"]

logger = logging.getLogger(__name__)

#: Registry of training samplers chosen by name (``@SAMPLERS.register()``).
SAMPLERS = Registry("sampler")


# ---------------------------------------------------------------------- validators
# The constructors' own checks (catalog.validation), raising SamplerConfigError.
_boolean = validator(check_bool, error=SamplerConfigError)
_optional_seed = validator(check_seed, error=SamplerConfigError)
_optional_positive_number = validator(check_float, above=0, optional=True, error=SamplerConfigError)
_subset_ratio = validator(check_float, above=0, maximum=1, error=SamplerConfigError)
_sizes = validator(
    check_list, check=check_positive_size, what="ints", element="of part", error=SamplerConfigError
)
_optional_weights = validator(
    check_list, check=check_float, what="numbers", element="of part", above=0, optional=True,
    error=SamplerConfigError,
)


# ---------------------------------------------------------------------- built-in options
class _BuiltFromSize:
    """Options whose fields are the keyword arguments of ``SAMPLER(len(dataset_dicts), ...)``."""

    SAMPLER: ClassVar[Callable[..., Sampler]]

    def build(
        self, dataset_dicts: Sequence[Any], *, rank: int | None, world_size: int | None
    ) -> Sampler:
        """The sampler over ``dataset_dicts`` for ``rank`` of ``world_size``."""
        options = attrs.asdict(self, recurse=False)  # type: ignore[arg-type]
        return self.SAMPLER(len(dataset_dicts), **options, rank=rank, world_size=world_size)


@SAMPLERS.register("TrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class TrainingSamplerOptions(_BuiltFromSize):
    """Options of ``TrainingSampler``: ``shuffle`` (bool), ``seed`` (int or null)."""

    SAMPLER = TrainingSampler
    shuffle: bool = attrs.field(default=True, validator=_boolean)
    seed: int | None = attrs.field(default=None, validator=_optional_seed)


@SAMPLERS.register("RandomSubsetTrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class RandomSubsetTrainingSamplerOptions(_BuiltFromSize):
    """Options of ``RandomSubsetTrainingSampler``: ``subset_ratio`` (required, in (0, 1]),
    ``shuffle``, ``seed_shuffle``, ``seed_subset``.
    """

    SAMPLER = RandomSubsetTrainingSampler
    subset_ratio: float = attrs.field(validator=_subset_ratio)
    shuffle: bool = attrs.field(default=True, validator=_boolean)
    seed_shuffle: int | None = attrs.field(default=None, validator=_optional_seed)
    seed_subset: int | None = attrs.field(default=None, validator=_optional_seed)


@SAMPLERS.register("RepeatFactorTrainingSampler")
@attrs.define(kw_only=True, frozen=True)
class RepeatFactorTrainingSamplerOptions:
    """Options of ``RepeatFactorTrainingSampler``: exactly one of ``repeat_threshold`` (factors
    from category frequency, with ``sqrt``) and ``times`` (one constant factor, as
    RepeatDataset); ``shuffle``, ``seed``.
    """

    repeat_threshold: float | None = attrs.field(default=None, validator=_optional_positive_number)
    times: float | None = attrs.field(default=None, validator=_optional_positive_number)
    sqrt: bool = attrs.field(default=True, validator=_boolean)
    shuffle: bool = attrs.field(default=True, validator=_boolean)
    seed: int | None = attrs.field(default=None, validator=_optional_seed)

    def __attrs_post_init__(self) -> None:
        if (self.repeat_threshold is None) == (self.times is None):
            raise SamplerConfigError(
                "give exactly one of the options 'repeat_threshold' (class-balanced factors) "
                "and 'times' (a constant factor)"
            )

    def build(
        self, dataset_dicts: Sequence[Any], *, rank: int | None, world_size: int | None
    ) -> Sampler:
        if self.times is not None:
            factors: Any = [float(self.times)] * len(dataset_dicts)
        else:
            factors = repeat_factors_from_category_frequency(
                dataset_dicts, self.repeat_threshold, sqrt=self.sqrt
            )
        return RepeatFactorTrainingSampler(
            factors, shuffle=self.shuffle, seed=self.seed, rank=rank, world_size=world_size
        )


def _optional_part_configs(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SamplerConfigError(
            f"option 'samplers' must be a list with one sampler config (or null) per part, "
            f"got {value!r}"
        )


@SAMPLERS.register("ConcatSampler")
@attrs.define(kw_only=True, frozen=True)
class ConcatSamplerOptions:
    """Options of ``ConcatSampler``: ``sizes`` (required, records of each part, summing to the
    dataset length), ``weights``, ``samplers`` (one sampler config or null per part, built on
    that part's records), ``shuffle``, ``seed``.
    """

    sizes: list[int] = attrs.field(validator=_sizes)
    weights: list[float] | None = attrs.field(default=None, validator=_optional_weights)
    samplers: list[Any] | None = attrs.field(default=None, validator=_optional_part_configs)
    shuffle: bool = attrs.field(default=True, validator=_boolean)
    seed: int | None = attrs.field(default=None, validator=_optional_seed)

    def build(
        self, dataset_dicts: Sequence[Any], *, rank: int | None, world_size: int | None
    ) -> Sampler:
        if sum(self.sizes) != len(dataset_dicts):
            raise SamplerConfigError(
                f"option 'sizes' sums to {sum(self.sizes)}, the dataset has {len(dataset_dicts)} "
                "records"
            )
        parts = None
        if self.samplers is not None:
            if len(self.samplers) != len(self.sizes):
                raise SamplerConfigError(
                    f"option 'samplers' has {len(self.samplers)} entries for {len(self.sizes)} parts"
                )
            parts = []
            start = 0
            for size, part_cfg in zip(self.sizes, self.samplers, strict=True):
                part_dicts = dataset_dicts[start : start + size]
                start += size
                parts.append(None
                             if part_cfg is None
                             else build_train_sampler(part_cfg, part_dicts, rank=0, world_size=1))
        try:
            return ConcatSampler(
                self.sizes, weights=self.weights, samplers=parts, shuffle=self.shuffle,
                seed=self.seed, rank=rank, world_size=world_size,
            )
        except (TypeError, ValueError) as exc:
            raise SamplerConfigError(str(exc)) from exc


# ---------------------------------------------------------------------- building
def _split_config(cfg: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(cfg, str):
        return cfg, {}
    if not isinstance(cfg, Mapping):
        raise SamplerConfigError(
            f"a sampler config is a name or a mapping with a 'name' key, got {type(cfg).__name__}"
        )
    options = plain_container(cfg)  # a DictConfig / any Mapping, nested values plain
    keys = [k for k in ("name", "type") if k in options]
    if len(keys) != 1:
        raise SamplerConfigError(
            f"a sampler config needs exactly one of the keys 'name' / 'type', got keys "
            f"{sorted(map(str, options))}"
        )
    name = options.pop(keys[0])
    if not isinstance(name, str):
        raise SamplerConfigError(f"the sampler name must be a str, got {name!r}")
    bad = [k for k in options if not isinstance(k, str)]
    if bad:
        raise SamplerConfigError(f"sampler {name}: option names must be strs, got {bad!r}")
    return name, options


def _build_from_options_class(
    name: str, entry: type, options: dict[str, Any], dataset_dicts: Any, rank: Any, world_size: Any
) -> Any:
    accepted = [f.name for f in attrs.fields(entry)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise SamplerConfigError(
            f"sampler {name}: unknown option(s) {', '.join(map(repr, unknown))}; accepted: "
            f"{', '.join(accepted)}"
        )
    try:
        spec = entry(**options)
    except SamplerConfigError as exc:
        raise SamplerConfigError(f"sampler {name}: {exc}") from None
    except TypeError as exc:  # a required option is missing
        required = [f.name for f in attrs.fields(entry) if f.default is attrs.NOTHING]
        raise SamplerConfigError(
            f"sampler {name}: {exc}; required option(s): {', '.join(required)}"
        ) from None
    try:
        return spec.build(dataset_dicts, rank=rank, world_size=world_size)
    except SamplerConfigError as exc:
        raise SamplerConfigError(f"sampler {name}: {exc}") from None


def _build_from_callable(name: str, entry: Any, options: dict[str, Any], dataset_dicts: Any) -> Any:
    try:
        signature = inspect.signature(entry)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(dataset_dicts, **options)
        except TypeError as exc:
            accepted = [p for p in list(signature.parameters)[1:]]
            raise SamplerConfigError(
                f"sampler {name}: {exc}; accepted options: {', '.join(accepted) or 'none'}"
            ) from None
    return entry(dataset_dicts, **options)


def build_train_sampler(
    cfg: str | Mapping[str, Any], dataset_dicts: Sequence[Any], *, rank: int | None = None,
    world_size: int | None = None,
) -> Sampler:
    """Build the training sampler a config names.

    Example:
        >>> s = build_train_sampler({"name": "TrainingSampler", "seed": 3}, [{}] * 5,
        ...                         rank=0, world_size=1)
        >>> type(s).__name__, s.seed
        ('TrainingSampler', 3)
    """
    name, options = _split_config(cfg)
    entry = SAMPLERS.get(name)
    if attrs.has(entry) and callable(getattr(entry, "build", None)):
        sampler = _build_from_options_class(name, entry, options, dataset_dicts, rank, world_size)
    elif callable(entry):
        sampler = _build_from_callable(name, entry, options, dataset_dicts)
    else:
        raise SamplerConfigError(f"sampler {name}: the registered {entry!r} is not callable")
    if not hasattr(sampler, "__iter__"):
        raise SamplerConfigError(
            f"sampler {name}: the registered builder returned {type(sampler).__name__}, which is "
            "not iterable"
        )
    logger.info("built training sampler %r", sampler)
    return sampler
