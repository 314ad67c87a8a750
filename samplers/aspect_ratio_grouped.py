"""Batching of iterable datasets: AspectRatioGroupedDataset and the iterable loader path.

A map-style dataset is grouped in index space by :class:`samplers.GroupedBatchSampler`, before
anything is read. An ``IterableDataset`` has no indices: its items are grouped as they arrive,
by the ``width`` / ``height`` each item carries, as detectron2's ``AspectRatioGroupedDataset``
does. The loader builders use :func:`build_iterable_loader` for an ``IterableDataset`` (no
sampler: the dataset decides the order; not resumable).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from catalog.seeding import torch_generator
from catalog.validation import is_number

from .batch import check_batch_size
from .errors import SamplerConfigError, SamplerError
from .worker_seed import WorkerSeeder

__all__ = ["AspectRatioGroupedDataset", "ImageSizeKeyError", "build_iterable_loader"]

logger = logging.getLogger(__name__)


class ImageSizeKeyError(SamplerError, KeyError):
    """An item grouped by aspect ratio has no usable ``width`` / ``height``.

    Attributes:
        position: the item's position in the input stream.
        key: the missing or malformed key.
    """

    def __init__(self, message: str, *, position: int | None = None, key: str = "") -> None:
        super().__init__(message)
        self.position = position
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _size(item: Any, key: str, position: int) -> int | float:
    if not isinstance(item, dict):
        raise ImageSizeKeyError(
            f"AspectRatioGroupedDataset: item {position} of the stream is a "
            f"{type(item).__name__}, not a dict with 'width' and 'height'",
            position=position,
            key=key,
        )
    if key not in item:
        raise ImageSizeKeyError(
            f"AspectRatioGroupedDataset: item {position} of the stream has no {key!r} (keys: "
            f"{sorted(map(str, item))[:10]})",
            position=position,
            key=key,
        )
    value = item[key]
    if not is_number(value):
        raise ImageSizeKeyError(
            f"AspectRatioGroupedDataset: item {position} of the stream has {key}="
            f"{repr(value)[:40]}, not a number",
            position=position,
            key=key,
        )
    return value


class AspectRatioGroupedDataset(IterableDataset):
    """Batches of ``batch_size`` items of one orientation, from an iterable of dicts.

    Items with ``width > height`` are batched together, and so are the others, as in
    detectron2, so that a batch needs little padding. A batch is yielded as soon as one group
    holds ``batch_size`` items; only full batches are yielded (``drop_last=True``, the default,
    detectron2's behaviour), so the items left in the groups when a finite input ends are
    dropped; ``drop_last=False`` yields them at the end, group by group. Each iteration starts
    with empty groups (detectron2 keeps a finite input's leftovers for its next iteration).

    Args:
        dataset: an iterable of dicts with ``width`` and ``height`` (e.g. a DataLoader
            yielding single mapped samples).
        batch_size: items per batch (an int >= 1).
        drop_last: drop the partial groups left when the input ends.

    Raises:
        ImageSizeKeyError: (a KeyError) while iterating, an item is not a dict or lacks a
            numeric ``width`` / ``height``; the message names its stream position.

    Example:
        >>> items = [{"width": 4, "height": 3, "i": 0}, {"width": 3, "height": 4, "i": 1},
        ...          {"width": 5, "height": 2, "i": 2}, {"width": 2, "height": 2, "i": 3}]
        >>> [[d["i"] for d in b] for b in AspectRatioGroupedDataset(items, 2)]
        [[0, 2], [1, 3]]
    """

    def __init__(self, dataset: Iterable[Any], batch_size: int, drop_last: bool = True) -> None:
        if not isinstance(dataset, Iterable):
            raise TypeError(
                f"AspectRatioGroupedDataset: dataset must be iterable, got "
                f"{type(dataset).__name__}"
            )
        self.dataset = dataset
        self.batch_size = check_batch_size(batch_size, "AspectRatioGroupedDataset")
        self.drop_last = bool(drop_last)

    def __iter__(self) -> Iterator[list[Any]]:
        size = self.batch_size
        buckets: list[list[Any]] = [[], []]
        for position, item in enumerate(self.dataset):
            width = _size(item, "width", position)
            height = _size(item, "height", position)
            bucket = buckets[0 if width > height else 1]
            bucket.append(item)
            if len(bucket) == size:
                batch = bucket[:]
                bucket.clear()  # before the yield: the consumer may never come back
                yield batch
        for group, bucket in enumerate(buckets):
            if bucket and not self.drop_last:
                yield bucket[:]
            elif bucket:
                logger.debug("dropped %d items of group %d (drop_last=True)", len(bucket), group)

    def __repr__(self) -> str:
        return (
            f"AspectRatioGroupedDataset({self.dataset!r}, batch_size={self.batch_size}, "
            f"drop_last={self.drop_last})"
        )


class _CollatedBatches(IterableDataset):
    """Applies ``collate_fn`` to every batch of an iterable (no skipping, unlike MapDataset)."""

    def __init__(self, batches: Iterable[Any], collate_fn: Callable[[list[Any]], Any]) -> None:
        self.batches = batches
        self.collate_fn = collate_fn

    def __iter__(self) -> Iterator[Any]:
        collate = self.collate_fn
        for batch in self.batches:
            yield collate(batch)


def build_iterable_loader(
    dataset: IterableDataset,
    batch_size: int,
    *,
    aspect_ratio_grouping: bool,
    drop_last: bool,
    num_workers: int,
    collate_fn: Callable[[list[Any]], Any] | None,
    seed: int,
    rank: int,
    **dataloader_kwargs: Any,
) -> Iterable[Any]:
    """Batches of an ``IterableDataset``, as detectron2 builds them (no sampler).

    Without grouping: a ``DataLoader`` with ``batch_size``. With grouping: a ``DataLoader``
    yielding single items, wrapped in :class:`AspectRatioGroupedDataset` (and then in
    ``collate_fn``). Workers are seeded from (seed, rank, worker id); each worker iterates the
    dataset, so a dataset read by several workers must shard itself
    (``torch.utils.data.get_worker_info()``), as with any torch DataLoader.

    Args:
        dataset: the iterable dataset (usually mapped).
        batch_size: items per batch on this rank.
        aspect_ratio_grouping: group items by their ``width`` / ``height``.
        drop_last: drop incomplete batches.
        num_workers: DataLoader workers.
        collate_fn: applied to each batch; None: a batch is the list of its items (with
            grouping, the :class:`AspectRatioGroupedDataset` itself is returned).
        seed, rank: seed the workers and the DataLoader's generator.
        dataloader_kwargs: further ``DataLoader`` options (pin_memory, prefetch_factor ...).

    Returns:
        An iterable of batches (a ``DataLoader`` or an ``IterableDataset``); not resumable.

    Example:
        >>> class Stream(IterableDataset):
        ...     def __iter__(self):
        ...         return iter([{"width": 2, "height": 1}] * 4)
        >>> loader = build_iterable_loader(Stream(), 2, aspect_ratio_grouping=True,
        ...     drop_last=True, num_workers=0, collate_fn=list, seed=0, rank=0)
        >>> [len(b) for b in loader]
        [2, 2]
    """
    batch_size = check_batch_size(batch_size, "build_iterable_loader")
    if collate_fn is not None and not callable(collate_fn):
        raise SamplerConfigError(f"collate_fn must be callable, got {collate_fn!r}")
    common = {
        "num_workers": num_workers,
        "worker_init_fn": WorkerSeeder(seed, rank, 0),
        "generator": torch_generator(seed, rank),
        # options left at None are torch's defaults (some are refused without workers)
        **{key: value for key, value in dataloader_kwargs.items() if value is not None},
    }
    if not aspect_ratio_grouping:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            collate_fn=collate_fn if collate_fn is not None else _as_list,
            **common,
        )
    singles = DataLoader(dataset, batch_size=1, collate_fn=operator.itemgetter(0), **common)
    grouped = AspectRatioGroupedDataset(singles, batch_size, drop_last)
    return grouped if collate_fn is None else _CollatedBatches(grouped, collate_fn)


def _as_list(batch: list[Any]) -> list[Any]:
    return batch
