"""Loader builders: join a dataset (catalog), a mapper (mappers) and a sampler into batches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from torch.utils.data import BatchSampler, IterableDataset

from catalog.log_limits import shared_counters
from mappers.datasets import records_of

from .aspect_ratio_grouped import build_iterable_loader
from .batch import ResumableBatchSampler, check_batch_size
from .distributed import get_rank, get_world_size, shared_random_seed
from .grouped_batch import GroupedBatchSampler, aspect_ratio_group_ids
from .inference import InferenceSampler
from .loader_config import (
    LoaderCallError,
    configurable,
    inference_loader_from_config,
    train_loader_from_config,
)
from .loader_inputs import resolve_dataset
from .resumable_loader import ResumableLoader
from .stream import check_seed
from .training import TrainingSampler
from .worker_options import WorkerOptions, takes_worker_options
from .worker_seed import worker_init_reset_seed

__all__ = [
    "build_batch_data_loader",
    "build_detection_train_loader",
    "build_detection_test_loader",
    "trivial_batch_collator",
    "worker_init_reset_seed",
]

logger = logging.getLogger(__name__)


def trivial_batch_collator(batch: list[Any]) -> list[Any]:
    """A ``collate_fn`` that returns the batch as the list of samples it is.

    Example:
        >>> trivial_batch_collator([{"a": 1}, {"a": 2}])
        [{'a': 1}, {'a': 2}]
    """
    return batch


def _sampler_world_size(sampler: Any) -> tuple[int, int]:
    world = getattr(sampler, "world_size", None)
    rank = getattr(sampler, "rank", None)
    return (
        get_rank() if not isinstance(rank, int) else rank,
        get_world_size() if not isinstance(world, int) else world,
    )


def _no_sampler(dataset: Any, sampler: Any, owner: str) -> None:
    if sampler is not None:
        raise LoaderCallError(
            f"{owner}: sampler must be None for the IterableDataset {type(dataset).__name__} "
            f"(it decides its own order), got {type(sampler).__name__}",
            argument="sampler",
        )


def _per_rank_batch_size(total_batch_size: Any, world_size: int) -> int:
    total = check_batch_size(total_batch_size, "build_batch_data_loader (total_batch_size)")
    if total % world_size != 0:
        raise ValueError(
            f"total_batch_size {total} does not divide by the world size {world_size}; "
            "each rank gets total_batch_size / world_size"
        )
    return total // world_size


def _iterable_loader(
    dataset: Any, batch_size: int, options: WorkerOptions, *, grouping: bool,
    drop_last: bool, seed: int, rank: int,
) -> Iterable[Any]:
    """The batches of an IterableDataset (no sampler, not resumable), as detectron2 makes them."""
    if options.num_workers > 0:
        shared_counters()
    return build_iterable_loader(
        dataset,
        batch_size,
        aspect_ratio_grouping=grouping,
        drop_last=drop_last,
        num_workers=options.num_workers,
        collate_fn=options.collate_fn,
        seed=seed,
        rank=rank,
        pin_memory=options.pin_memory,
        persistent_workers=options.persistent_workers and options.num_workers > 0,
        prefetch_factor=options.prefetch_factor,
        multiprocessing_context=options.multiprocessing_context,
    )


def _resumable_loader(
    dataset: Any, batch_sampler: Any, options: WorkerOptions, **loader_kwargs: Any
) -> ResumableLoader:
    """A :class:`ResumableLoader` with the builders' options (``loader_kwargs``: seed, rank ...)."""
    if options.num_workers > 0:
        shared_counters()  # rate-limited warnings count across the workers (spawn included)
    collate_fn = options.collate_fn
    return ResumableLoader(
        dataset,
        batch_sampler,
        num_workers=options.num_workers,
        collate_fn=collate_fn if collate_fn is not None else trivial_batch_collator,
        pin_memory=options.pin_memory,
        persistent_workers=options.persistent_workers,
        prefetch_factor=options.prefetch_factor,
        multiprocessing_context=options.multiprocessing_context,
        timeout=options.timeout,
        worker_init_fn=options.worker_init_fn,
        transport=options.transport,
        **loader_kwargs,
    )


@takes_worker_options
def build_batch_data_loader(
    dataset: Any,
    sampler: Any,
    total_batch_size: int,
    *,
    aspect_ratio_grouping: bool = False,
    drop_last: bool = True,
    group_ids: Any = None,
    options: WorkerOptions,
) -> ResumableLoader | Iterable[Any]:
    """Batches of ``total_batch_size / world_size`` samples per rank, resumable.

    Also takes the :class:`~samplers.worker_options.WorkerOptions` fields as keywords.

    Args:
        dataset: a map-style dataset (usually a mapped one), or an ``IterableDataset``: then
            ``sampler`` must be None and the batches come from a plain DataLoader (grouped by
            :class:`~samplers.aspect_ratio_grouped.AspectRatioGroupedDataset` with
            ``aspect_ratio_grouping``), as in detectron2; such a loader is not resumable.
        sampler: yields dataset indices for this rank (a catmap training sampler for resume).
        total_batch_size: the batch size summed over all ranks; must divide by world size.
        aspect_ratio_grouping: batch records of the same orientation together; the groups come
            from the records' width / height (the dataset's ``records``, see
            :mod:`mappers.record_source`) or from ``group_ids``.
        num_workers, persistent_workers, prefetch_factor: DataLoader options.
        pin_memory: pin batches for CUDA; the slab transport pins each slab once instead of
            copying every batch. Without CUDA: a warning, nothing pinned.
        collate_fn: default :func:`trivial_batch_collator` (batches are lists).
        drop_last: drop incomplete batches at the end of a finite sampler.
        group_ids: explicit group id per dataset index (implies grouping).
        multiprocessing_context: how workers start ("fork", "spawn", "forkserver"; default:
            Python's default).
        timeout: seconds to wait for one batch before ``LoaderTimeoutError`` names the worker
            and the dataset index it is stuck on; None: 300 s with workers; 0: forever.
        worker_init_fn: called in each worker after catmap's own seeding.
        transport: ``"auto"`` (the slab transport with workers on Linux: batches cross
            through recycled shared memory, see :mod:`samplers.transport`), ``"slab"`` or
            ``"dataloader"`` (torch's own path).

    Returns:
        A :class:`ResumableLoader`; its workers are seeded from (seed, rank, worker id, pass)
        for numpy, ``random`` and torch, where seed is the sampler's seed. Each sample is
        mapped with the augmentation generator (``mappers.random_state``) seeded from (seed,
        its global stream position), so augmented batches are the same for any
        ``num_workers``, after ``load_state_dict`` and on any world size.

    Raises:
        ValueError: ``total_batch_size`` does not divide by the world size, or grouping was
            asked for a dataset without width/height records.
        LoaderCallError: (a TypeError) a sampler was given with an IterableDataset.

    Example:
        >>> loader = build_batch_data_loader(
        ...     list(range(10)), TrainingSampler(10, seed=0, rank=0, world_size=1), 4)
        >>> len(next(iter(loader)))
        4
    """
    rank, world_size = _sampler_world_size(sampler)
    batch_size = _per_rank_batch_size(total_batch_size, world_size)
    if isinstance(dataset, IterableDataset):
        _no_sampler(dataset, sampler, "build_batch_data_loader")
        return _iterable_loader(
            dataset, batch_size, options, grouping=aspect_ratio_grouping or group_ids is not None,
            drop_last=drop_last, seed=shared_random_seed(), rank=rank,
        )
    if group_ids is None and aspect_ratio_grouping:
        records = records_of(dataset)
        if records is None:
            raise ValueError(
                f"aspect_ratio_grouping needs the records' width and height, but "
                f"{type(dataset).__name__} names no records (a `records` attribute, see "
                f"mappers.record_source); pass group_ids or aspect_ratio_grouping=False"
            )
        group_ids = aspect_ratio_group_ids(records)
    if group_ids is not None:
        if len(group_ids) != len(dataset):
            raise ValueError(
                f"build_batch_data_loader: {len(group_ids)} group ids for {len(dataset)} records"
            )
        batch_sampler: Any = GroupedBatchSampler(sampler, group_ids, batch_size, drop_last)
    else:
        batch_sampler = ResumableBatchSampler(sampler, batch_size, drop_last)
    seed = getattr(sampler, "seed", None)
    if not isinstance(seed, int):
        seed = shared_random_seed()
    return _resumable_loader(dataset, batch_sampler, options, seed=seed, rank=rank)


_Builder = Callable[..., Any]


def _detectron2_builder(
    from_config: Callable[..., dict[str, Any]],
) -> Callable[[_Builder], _Builder]:
    """A builder that takes the WorkerOptions as keywords and a detectron2 config first."""

    def decorate(fn: _Builder) -> _Builder:
        return configurable(from_config)(takes_worker_options(fn))

    return decorate


@_detectron2_builder(train_loader_from_config)
def build_detection_train_loader(
    dataset: Any,
    *,
    mapper: Callable[[Any], Any] | None,
    sampler: Any = None,
    total_batch_size: int,
    aspect_ratio_grouping: bool = True,
    seed: int | None = None,
    options: WorkerOptions,
) -> ResumableLoader | Iterable[Any]:
    """An endless, resumable loader of training batches (lists of mapped samples).

    Also callable as detectron2's ``build_detection_train_loader(cfg, mapper=None, *,
    dataset=None, sampler=None, **overrides)`` with a detectron2-style config (yacs, OmegaConf
    or a nested mapping; see :mod:`samplers.loader_config` for the keys read).

    Args:
        dataset: a registered dataset name, a list of names (joined with
            ``get_detection_dataset_dicts``), a list of records (dicts, or any items as in
            detectron2), a SerializedList, a map-style torch Dataset, or an
            ``IterableDataset`` (no sampler; batches as :func:`build_batch_data_loader` makes
            them for one, not resumable).
        mapper: ``record -> sample or None`` (None results are replaced by other records, see
            ``mappers.MapDataset``); None yields the records as they are.
        sampler: default ``TrainingSampler(len(dataset), seed=seed)``.
        total_batch_size: batch size over all ranks (divides by the world size).
        aspect_ratio_grouping: group by orientation, from the records' width / height; a torch
            Dataset without records is not grouped (a warning says so).
        seed: shared seed of the default sampler, the workers and the mapper's refetch; None
            draws one (from torch's default generator on rank 0, broadcast).
        num_workers, collate_fn, multiprocessing_context, pin_memory, persistent_workers,
            prefetch_factor, timeout, worker_init_fn, transport: the
            :class:`~samplers.worker_options.WorkerOptions`, as for
            :func:`build_batch_data_loader`.

    Returns:
        A :class:`ResumableLoader` (``state_dict`` / ``load_state_dict``). Augmentations drawn
        through ``mappers.random_state.get_generator()`` (all catmap augmentations) follow the
        sample: a restored loader yields the identical mapped batches the original would have
        produced next, whatever ``num_workers`` is.

    Example:
        >>> records = [{"file_name": f"{i}.jpg", "height": 4, "width": 6} for i in range(8)]
        >>> loader = build_detection_train_loader(records, mapper=None, total_batch_size=2, seed=0)
        >>> batch = next(iter(loader))
        >>> len(batch), sorted(batch[0])
        (2, ['file_name', 'height', 'width'])
    """
    seed = check_seed(seed, "seed", "build_detection_train_loader")
    if seed is None:
        seed = shared_random_seed()
    mapped, records = resolve_dataset(dataset, mapper, seed=seed, for_training=True)
    if isinstance(mapped, IterableDataset):
        _no_sampler(mapped, sampler, "build_detection_train_loader")
        rank, world_size = _sampler_world_size(None)
        batch_size = _per_rank_batch_size(total_batch_size, world_size)
        return _iterable_loader(
            mapped, batch_size, options, grouping=aspect_ratio_grouping, drop_last=True,
            seed=seed, rank=rank,
        )
    if sampler is None:
        sampler = TrainingSampler(len(mapped), seed=seed)
    size = getattr(sampler, "dataset_size", None)
    if isinstance(size, int) and size != len(mapped):
        raise ValueError(
            f"build_detection_train_loader: the sampler draws from {size} records, the dataset "
            f"has {len(mapped)}"
        )
    group_ids = None
    if aspect_ratio_grouping:
        if records is not None:
            group_ids = aspect_ratio_group_ids(records)
        else:
            logger.warning(
                "build_detection_train_loader: %s names no records (see mappers.record_source); "
                "batches are not grouped by aspect ratio",
                type(dataset).__name__,
            )
    return build_batch_data_loader(
        mapped, sampler, total_batch_size, group_ids=group_ids, **options.as_kwargs()
    )


@_detectron2_builder(inference_loader_from_config)
def build_detection_test_loader(
    dataset: Any,
    *,
    mapper: Callable[[Any], Any] | None,
    sampler: Any = None,
    batch_size: int = 1,
    options: WorkerOptions,
) -> ResumableLoader | Iterable[Any]:
    """A finite loader that gives each record exactly once over all ranks.

    Also callable as detectron2's ``build_detection_test_loader(cfg, dataset_name,
    mapper=None, **overrides)`` (see :mod:`samplers.loader_config`).

    Args:
        dataset: as for :func:`build_detection_train_loader` (names are not filtered).
        mapper: ``record -> sample``; None yields the records.
        sampler: default :class:`InferenceSampler` (contiguous shards, no padding).
        batch_size: samples per batch on each rank.
        num_workers, collate_fn, multiprocessing_context, pin_memory, persistent_workers,
            prefetch_factor, timeout, worker_init_fn, transport: as for
            :func:`build_detection_train_loader`.

    Returns:
        A finite, non-resumable :class:`ResumableLoader` (``loader.loader`` is the torch
        DataLoader); ``len`` is this rank's number of batches. Workers are seeded from
        (0, rank, worker id) on every pass.

    Example:
        >>> loader = build_detection_test_loader([{"i": i} for i in range(5)], mapper=None,
        ...                                      batch_size=2)
        >>> len(loader)
        3
    """
    batch_size = check_batch_size(batch_size, "build_detection_test_loader")
    mapped, _ = resolve_dataset(dataset, mapper, seed=0, for_training=False)
    if isinstance(mapped, IterableDataset):
        _no_sampler(mapped, sampler, "build_detection_test_loader")
        return _iterable_loader(
            mapped, batch_size, options, grouping=False, drop_last=False, seed=0, rank=get_rank()
        )
    if sampler is None:
        sampler = InferenceSampler(len(mapped))
    rank = getattr(sampler, "rank", None)
    rank = rank if isinstance(rank, int) else get_rank()
    return _resumable_loader(
        mapped,
        BatchSampler(sampler, batch_size, drop_last=False),
        options,
        seed=0,
        rank=rank,
        sample_seeds=False,
        reseed_each_pass=False,
    )
