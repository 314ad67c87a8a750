"""The loading story, top to bottom (as detectron2's ``build.py``):

1. name -> loader -> shared records -> views: ``get_detection_dataset_dicts`` runs the registered
   loader once per machine and returns the records as one shared ``SerializedList`` (a filter
   or a concatenation is a view of it, never a copy);
2. sampler: which indices, in what order, on this rank (``TrainingSampler`` by default);
3. mapper: ``MapDataset(records, mapper)`` maps each sample with its own seed;
4. batch: index batches (grouped by aspect ratio) -> ``ResumableLoader`` -> lists of samples.

The builders keep detectron2's signatures: keywords, or a detectron2 config (yacs, OmegaConf
or a mapping) first; proposal files (pickles) are refused.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset

from catalog._common import (
    CatmapError,
    check_bool,
    check_positive_size,
    check_float,
    check_int,
    check_seed,
    check_str,
    config_value,
    is_config_container,
    is_detectron2_config,
    plain_container,
    plain_names,
    shared_counters,
    torch_generator,
)
from catalog.dataset_catalog import get_detection_dataset_dicts
from catalog.storage.records import SerializedList
from mappers.dataset_mapper import DatasetMapper
from mappers.datasets import DatasetFromList, MapDataset
from mappers.datasets import records_of

from .batching import AspectRatioGroupedDataset, GroupedBatchSampler, ResumableBatchSampler, aspect_ratio_group_ids
from .errors import LoaderCallError, SamplerConfigError
from .loader import ResumableLoader, WorkerSeeder, trivial_batch_collator, worker_init_reset_seed
from .registry import build_train_sampler
from .stream import (
    InferenceSampler, RandomSubsetTrainingSampler, RepeatFactorTrainingSampler, TrainingSampler,
    get_rank, get_world_size, repeat_factors_from_category_frequency, shared_random_seed,
)

__all__ = ["LoaderCallError", "WorkerOptions", "build_batch_data_loader", "build_detection_test_loader",
           "build_detection_train_loader", "trivial_batch_collator", "worker_init_reset_seed"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- 1. name -> shared records -> views
def resolve_records(dataset: Any, *, for_training: bool) -> tuple[Any, Sequence[dict] | None]:
    """(dataset to map, its records or None) from a name, names, a list or a torch Dataset."""
    names = plain_names(dataset)  # a ListConfig / any sequence of names
    if names is not None:
        dataset = names
    elif is_config_container(dataset):
        dataset = plain_container(dataset)
    if isinstance(dataset, str) or (isinstance(dataset, (list, tuple)) and dataset
                                    and all(isinstance(name, str) for name in dataset)):
        dataset = get_detection_dataset_dicts(dataset, filter_empty=for_training)
    if isinstance(dataset, SerializedList):  # the shared records are the dataset: fresh dicts
        return dataset, dataset
    if isinstance(dataset, (list, tuple)):
        if not dataset:
            raise ValueError("the dataset is an empty list: nothing to load")
        items = list(dataset)
        base = DatasetFromList(items, copy=False)  # serialized: one copy for all workers
        return base, base.records if isinstance(base.records, SerializedList) else items
    if isinstance(dataset, (Dataset, IterableDataset)) or (
            hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        return dataset, records_of(dataset)
    raise LoaderCallError("dataset must be a name, a list of names, a list of records or a "
                          f"torch Dataset, got {type(dataset).__name__}", argument="dataset")


# ---------------------------------------------------------------- the DataLoader options
@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """The DataLoader options every builder takes as keywords (detectron2's names, plus
    ``transport``: "auto" / "slab" / "dataloader")."""

    num_workers: int = 0
    collate_fn: Callable[[list[Any]], Any] | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    multiprocessing_context: Any = None
    timeout: float | None = None
    worker_init_fn: Callable[[int], Any] | None = None
    transport: str = "auto"


_OPTION_FIELDS = dataclasses.fields(WorkerOptions)
_OPTION_NAMES = frozenset(field.name for field in _OPTION_FIELDS)


def _call_error(exc: TypeError, signature: inspect.Signature, owner: str) -> LoaderCallError:
    found = re.search(r"'([^']+)'", str(exc))
    return LoaderCallError(f"{owner}: {exc} (arguments: {', '.join(signature.parameters)}; or "
                           "a detectron2 config as the first argument)",
                           argument=found.group(1) if found else "")


def _builder(from_config: Callable[..., dict[str, Any]] | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a builder ``fn(..., *, options)`` each WorkerOptions field as a keyword and, with
    ``from_config``, detectron2's config form ``fn(cfg, ...)``; a call that fits neither
    raises :class:`LoaderCallError` naming the argument."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(fn).parameters.values() if p.name != "options"]
        added = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                   annotation=f.type) for f in _OPTION_FIELDS]
        signature = inspect.signature(fn).replace(parameters=own + added)
        config_signature = inspect.signature(from_config) if from_config else None

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if config_signature is not None and is_detectron2_config(args[0] if args else kwargs.get("cfg")):
                args = args or (kwargs.pop("cfg"),)
                mine = {k: v for k, v in kwargs.items() if k in config_signature.parameters}
                try:
                    config_signature.bind(*args, **mine)
                except TypeError as exc:
                    raise _call_error(exc, config_signature, f"{fn.__name__}(cfg, ...)") from None
                kwargs = {**from_config(*args, **mine),
                          **{k: v for k, v in kwargs.items() if k not in mine}}
                args = ()
            try:
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise _call_error(exc, signature, fn.__name__) from None
            options = {}
            for name in _OPTION_NAMES & kwargs.keys():
                options[name] = kwargs.pop(name)
            return fn(*args, options=WorkerOptions(**options), **kwargs)

        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        return wrapper

    return decorate


# ---------------------------------------------------------------- 2.-4. sampler -> batches -> loader
def _no_sampler(dataset: Any, sampler: Any, owner: str) -> None:
    if sampler is not None:
        raise LoaderCallError(f"{owner}: sampler must be None for the IterableDataset "
                              f"{type(dataset).__name__} (it decides its own order), got "
                              f"{type(sampler).__name__}", argument="sampler")


class _CollatedBatches(IterableDataset):
    def __init__(self, batches: Iterable[Any], collate_fn: Callable[[list[Any]], Any]) -> None:
        self.batches, self.collate_fn = batches, collate_fn

    def __iter__(self) -> Iterator[Any]:
        return map(self.collate_fn, self.batches)


def _iterable_loader(dataset: IterableDataset, batch_size: int, options: WorkerOptions, *,
                     grouping: bool, drop_last: bool, seed: int, rank: int) -> Iterable[Any]:
    """Batches of an IterableDataset as detectron2 makes them (no sampler, not resumable)."""
    if options.collate_fn is not None and not callable(options.collate_fn):
        raise SamplerConfigError(f"collate_fn must be callable, got {options.collate_fn!r}")
    if options.num_workers > 0:
        shared_counters()
    common = {"num_workers": options.num_workers, "worker_init_fn": WorkerSeeder(seed, rank),
              "generator": torch_generator(seed, rank), "pin_memory": options.pin_memory}
    if options.num_workers > 0:
        common.update(persistent_workers=options.persistent_workers,
                      multiprocessing_context=options.multiprocessing_context)
        if options.prefetch_factor is not None:
            common["prefetch_factor"] = options.prefetch_factor
    if not grouping:
        return DataLoader(dataset, batch_size=batch_size, drop_last=drop_last,
                          collate_fn=options.collate_fn or trivial_batch_collator, **common)
    singles = DataLoader(dataset, batch_size=1, collate_fn=operator.itemgetter(0), **common)
    grouped = AspectRatioGroupedDataset(singles, batch_size, drop_last)
    return grouped if options.collate_fn is None else _CollatedBatches(grouped, options.collate_fn)


@_builder(None)
def build_batch_data_loader(dataset: Any, sampler: Any, total_batch_size: int, *,
                            aspect_ratio_grouping: bool = False, drop_last: bool = True,
                            group_ids: Any = None, seed: int | None = None,
                            options: WorkerOptions) -> ResumableLoader | Iterable[Any]:
    """Batches of ``total_batch_size / world_size`` samples per rank, resumable, each sample
    mapped with its own seed (``seed``, else the sampler's, else a shared random one);
    grouping from ``group_ids`` or the dataset's records.

    Example:
        >>> loader = build_batch_data_loader(
        ...     list(range(10)), TrainingSampler(10, seed=0, rank=0, world_size=1), 4)
        >>> len(next(iter(loader)))
        4
    """
    rank, world_size = getattr(sampler, "rank", None), getattr(sampler, "world_size", None)
    rank = rank if isinstance(rank, int) else get_rank()
    world_size = world_size if isinstance(world_size, int) else get_world_size()
    total = check_positive_size(total_batch_size, "batch_size", error=SamplerConfigError,
                                where="build_batch_data_loader (total_batch_size)")
    if total % world_size:
        raise ValueError(f"total_batch_size {total} does not divide by the world size {world_size}; "
                         "each rank gets total_batch_size / world_size")
    batch_size = total // world_size
    seed = check_seed(seed, "seed", error=SamplerConfigError, where="build_batch_data_loader")
    seed = getattr(sampler, "seed", None) if seed is None else seed
    seed = seed if isinstance(seed, int) else shared_random_seed()
    if isinstance(dataset, IterableDataset):
        _no_sampler(dataset, sampler, "build_batch_data_loader")
        return _iterable_loader(dataset, batch_size, options, drop_last=drop_last, rank=rank,
                                grouping=aspect_ratio_grouping or group_ids is not None, seed=seed)
    if group_ids is None and aspect_ratio_grouping:
        records = records_of(dataset)
        if records is None:
            raise ValueError(f"aspect_ratio_grouping needs the records' width and height, but "
                             f"{type(dataset).__name__} names no records (a `records` attribute, "
                             "see mappers.datasets.records_of); pass group_ids or aspect_ratio_grouping=False")
        group_ids = aspect_ratio_group_ids(records)
    if group_ids is not None:
        if len(group_ids) != len(dataset):
            raise ValueError(f"build_batch_data_loader: {len(group_ids)} group ids for {len(dataset)} records")
        batch_sampler: Any = GroupedBatchSampler(sampler, group_ids, batch_size, drop_last)
    else:
        batch_sampler = ResumableBatchSampler(sampler, batch_size, drop_last)
    if options.num_workers > 0:
        shared_counters()  # rate-limited warnings count across the workers
    return ResumableLoader(dataset, batch_sampler, **vars(options), seed=seed, rank=rank)


# ---------------------------------------------------------------- detectron2 config form
def _typed(cfg: Any, key: str, default: Any, check: Callable[..., Any], **options: Any) -> Any:
    error = functools.partial(LoaderCallError, argument=key)
    return check(config_value(cfg, key, default), f"config key {key}", error=error, **options)


def _check_names(value: Any, what: str, argument: str) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise LoaderCallError(f"{what} must be a dataset name or a non-empty list of names, got "
                              f"{repr(value)[:80]}", argument=argument)
    return list(names)


def _config_seed(cfg: Any) -> int | None:
    seed = _typed(cfg, "SEED", -1, check_int)
    return seed if seed >= 0 else None


def _refuse_proposal_files(cfg: Any, key: str) -> None:
    if _typed(cfg, "MODEL.LOAD_PROPOSALS", False, check_bool) and config_value(cfg, key, ()):
        raise LoaderCallError(
            f"{key} with MODEL.LOAD_PROPOSALS=True: catmap does not load proposal files (detectron2 "
            "reads them with pickle, which can run code from the file); attach 'proposal_boxes', "
            "'proposal_objectness_logits' and 'proposal_bbox_mode' to the records in the dataset's "
            f"loader function and leave {key} empty", argument=key)


def _dataset_mapper(cfg: Any, is_train: bool) -> Any:
    try:
        return DatasetMapper(cfg, is_train=is_train)
    except TypeError as exc:
        if isinstance(exc, CatmapError):
            raise
        raise LoaderCallError(f"the default mapper DatasetMapper(cfg, is_train={is_train}) cannot be "
                              f"built from this config ({exc}); pass mapper=...", argument="mapper") from exc


def _config_train_sampler(cfg: Any, dataset: Any) -> Any:
    name = _typed(cfg, "DATALOADER.SAMPLER_TRAIN", "TrainingSampler", check_str)
    seed = _config_seed(cfg)
    if name == "TrainingSampler":
        return TrainingSampler(len(dataset), seed=seed)
    if name == "RepeatFactorTrainingSampler":
        threshold = _typed(cfg, "DATALOADER.REPEAT_THRESHOLD", 0.0, check_float)
        sqrt = _typed(cfg, "DATALOADER.REPEAT_SQRT", True, check_bool)
        factors = repeat_factors_from_category_frequency(dataset, float(threshold), sqrt=sqrt)
        return RepeatFactorTrainingSampler(factors, seed=seed)
    if name == "RandomSubsetTrainingSampler":
        key = "DATALOADER.RANDOM_SUBSET_RATIO"  # no default: a missing key is a ConfigKeyError
        ratio = check_float(config_value(cfg, key), f"config key {key}", above=0, maximum=1,
                            error=functools.partial(LoaderCallError, argument=key))
        return RandomSubsetTrainingSampler(len(dataset), ratio, seed_shuffle=seed)
    return build_train_sampler(name, dataset)


def train_loader_from_config(cfg: Any, mapper: Any = None, *, dataset: Any = None,
                             sampler: Any = None) -> dict[str, Any]:
    if dataset is None:
        _refuse_proposal_files(cfg, "DATASETS.PROPOSAL_FILES_TRAIN")
        keypoints = _typed(cfg, "MODEL.KEYPOINT_ON", False, check_bool)
        dataset = get_detection_dataset_dicts(
            _check_names(config_value(cfg, "DATASETS.TRAIN"), "config key DATASETS.TRAIN", "DATASETS.TRAIN"),
            filter_empty=_typed(cfg, "DATALOADER.FILTER_EMPTY_ANNOTATIONS", True, check_bool),
            min_keypoints=_typed(cfg, "MODEL.ROI_KEYPOINT_HEAD.MIN_KEYPOINTS_PER_IMAGE", 1, check_int)
            if keypoints else 0)
    if mapper is None:
        mapper = _dataset_mapper(cfg, True)
    if sampler is None and not isinstance(dataset, IterableDataset):
        sampler = _config_train_sampler(cfg, dataset)
    return {"dataset": dataset, "sampler": sampler, "mapper": mapper,
            "total_batch_size": _typed(cfg, "SOLVER.IMS_PER_BATCH", 16, check_int),
            "aspect_ratio_grouping": _typed(cfg, "DATALOADER.ASPECT_RATIO_GROUPING", True, check_bool),
            "num_workers": _typed(cfg, "DATALOADER.NUM_WORKERS", 4, check_int),
            "seed": getattr(sampler, "seed", None) if sampler is not None else _config_seed(cfg)}


def inference_loader_from_config(cfg: Any, dataset_name: Any, mapper: Any = None) -> dict[str, Any]:
    _refuse_proposal_files(cfg, "DATASETS.PROPOSAL_FILES_TEST")
    dataset = get_detection_dataset_dicts(_check_names(dataset_name, "dataset_name", "dataset_name"),
                                          filter_empty=False)
    return {"dataset": dataset, "mapper": mapper if mapper is not None else _dataset_mapper(cfg, False),
            "num_workers": _typed(cfg, "DATALOADER.NUM_WORKERS", 4, check_int),
            "sampler": InferenceSampler(len(dataset))}


# ---------------------------------------------------------------- the builders
@_builder(train_loader_from_config)
def build_detection_train_loader(dataset: Any, *, mapper: Callable[[Any], Any] | None, sampler: Any = None,
                                 total_batch_size: int, aspect_ratio_grouping: bool = True,
                                 seed: int | None = None, options: WorkerOptions) -> ResumableLoader | Iterable[Any]:
    """An endless, resumable loader of training batches (lists of mapped samples) from a name,
    names, records, a Dataset or an IterableDataset; also ``(cfg, mapper=None, ...)``.

    Example:
        >>> records = [{"file_name": f"{i}.jpg", "height": 4, "width": 6} for i in range(8)]
        >>> loader = build_detection_train_loader(records, mapper=None, total_batch_size=2, seed=0)
        >>> batch = next(iter(loader))
        >>> len(batch), sorted(batch[0])
        (2, ['file_name', 'height', 'width'])
    """
    seed = check_seed(seed, "seed", error=SamplerConfigError, where="build_detection_train_loader")
    seed = shared_random_seed() if seed is None else seed
    # 1. name -> loader -> shared records -> views
    base, records = resolve_records(dataset, for_training=True)
    if isinstance(base, IterableDataset):  # a stream decides its own order: no sampler
        _no_sampler(base, sampler, "build_detection_train_loader")
        mapped = MapDataset(base, mapper, seed=seed) if mapper is not None else base
        return build_batch_data_loader.__wrapped__(mapped, None, total_batch_size, seed=seed, options=options,
                                                   aspect_ratio_grouping=aspect_ratio_grouping)
    # 2. sampler
    if sampler is None:
        sampler = TrainingSampler(len(base), seed=seed)
    size = getattr(sampler, "dataset_size", None)
    if isinstance(size, int) and size != len(base):
        raise ValueError(f"build_detection_train_loader: the sampler draws from {size} records, the "
                         f"dataset has {len(base)}")
    # 3. mapper
    mapped = MapDataset(base, mapper, seed=seed) if mapper is not None else base
    # 4. batch
    group_ids = None
    if aspect_ratio_grouping and records is not None:
        group_ids = aspect_ratio_group_ids(records)
    elif aspect_ratio_grouping:
        logger.warning("build_detection_train_loader: %s names no records (see mappers.datasets.records_of); "
                       "batches are not grouped by aspect ratio", type(dataset).__name__)
    # the undecorated builder: the options are already bound
    return build_batch_data_loader.__wrapped__(mapped, sampler, total_batch_size, group_ids=group_ids,
                                               options=options)


@_builder(inference_loader_from_config)
def build_detection_test_loader(dataset: Any, *, mapper: Callable[[Any], Any] | None, sampler: Any = None,
                                batch_size: int = 1, options: WorkerOptions) -> ResumableLoader | Iterable[Any]:
    """A finite loader giving each record once over all ranks; also ``(cfg, dataset_name)``.

    Example:
        >>> loader = build_detection_test_loader([{"i": i} for i in range(5)], mapper=None,
        ...                                      batch_size=2)
        >>> len(loader)
        3
    """
    batch_size = check_positive_size(batch_size, "batch_size", error=SamplerConfigError,
                                     where="build_detection_test_loader")
    base, _ = resolve_records(dataset, for_training=False)
    mapped = MapDataset(base, mapper, seed=0) if mapper is not None else base
    if isinstance(mapped, IterableDataset):
        _no_sampler(mapped, sampler, "build_detection_test_loader")
        return _iterable_loader(mapped, batch_size, options, grouping=False, drop_last=False, seed=0,
                                rank=get_rank())
    sampler = InferenceSampler(len(mapped)) if sampler is None else sampler
    rank = getattr(sampler, "rank", None)
    if options.num_workers > 0:
        shared_counters()  # rate-limited warnings count across the workers
    return ResumableLoader(mapped, BatchSampler(sampler, batch_size, drop_last=False), **vars(options),
                           seed=0, rank=rank if isinstance(rank, int) else get_rank(),
                           sample_seeds=False, reseed_each_pass=False)
