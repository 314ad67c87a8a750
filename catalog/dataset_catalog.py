"""DatasetCatalog: dataset names mapped to loader functions, each loaded once per process;
get_detection_dataset_dicts: registered datasets joined into one filtered record list.

``get`` -> ``share_across_local_ranks`` (one rank per machine builds) -> ``load_with_cache``
(file-backed entries) -> the loader. What the loader sets in ``MetadataCatalog`` travels with
the records as the data-only ``extra`` dict and is set again where they came from elsewhere.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ._common import (DatasetAlreadyRegisteredError, DatasetNotRegisteredError, EmptyDatasetError,
                      MetadataConflictError)
from .metadata import MetadataCatalog, NamedContainer, values_equal
from .registry import check_name
from .storage.cache import load_with_cache
from .storage.records import SerializedList, concat_records
from .storage.shard_cache import drop_shard_sources
from .storage.sharing import share_across_local_ranks, this_rank_only_active

__all__ = ["DatasetCatalog", "DatasetEntry", "LazyProvider", "get_detection_dataset_dicts"]

logger = logging.getLogger(__name__)

_MISSING: Any = object()


class LazyProvider(Protocol):
    """Names registered on first use (the builtin datasets): :meth:`names` lists them and
    :meth:`materialize` registers one (returns whether it did). Installed with
    ``DatasetCatalog._set_lazy_provider``; :mod:`catalog.formats.builtin` is the one user."""

    def names(self) -> list[str]: ...

    def materialize(self, name: str) -> bool: ...


@dataclass
class DatasetEntry:
    """One registration: the loader, the files its records come from, and ``cache_key``
    (a JSON dict of what else they depend on; None: never cached).

    Example:
        >>> entry = DatasetEntry("toy", lambda: [{"file_name": "a.jpg"}])
        >>> entry.cache_key is None, entry.source_files
        (True, ())
    """

    name: str
    func: Callable[[], Any]
    source_files: tuple[str, ...] = ()
    cache_key: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    load_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


class _DatasetCatalog(NamedContainer[DatasetEntry]):
    """The dataset registry (use the singleton :data:`DatasetCatalog`); thread-safe, and
    concurrent ``get`` calls of one name run its loader once.

    Example:
        >>> DatasetCatalog.register("doc_toy", lambda: [{"file_name": "a.jpg", "image_id": 0}])
        >>> records = DatasetCatalog.get("doc_toy")
        >>> len(records), records[0]["file_name"], "doc_toy" in DatasetCatalog
        (1, 'a.jpg', True)
        >>> DatasetCatalog.remove("doc_toy")
    """

    def __init__(self) -> None:
        super().__init__("dataset", missing_error=DatasetNotRegisteredError,
                         duplicate_error=DatasetAlreadyRegisteredError, owner="DatasetCatalog")
        self._cache: dict[str, SerializedList] = {}
        # Names registered on first use, and those of them removed / cleared since.
        self._lazy: LazyProvider | None = None
        self._suppressed: set[str] = set()

    # ------------------------------------------------------------------ registration
    def register(self, name: str, func: Callable[[], Any], *,
                 source_files: Iterable[str] | None = None, cache_key: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        """Register ``func`` as the loader of dataset ``name``; it runs at the first ``get``.

        Records must be data only (see :mod:`catalog.storage.records`; else RecordFormatError
        at the first ``get``). ``source_files`` and ``cache_key`` (a JSON dict of the loader's
        options) make the entry cached on disk; ``options={"cache": False}`` turns that off.
        """
        check_name(name, "dataset")
        if not callable(func):
            raise TypeError(
                f"the loader of dataset {name!r} must be callable (a function returning a list "
                f"of dicts), got {type(func).__name__}")
        entry = DatasetEntry(name=name, func=func, source_files=tuple(map(str, source_files or ())),
                             cache_key=dict(cache_key) if cache_key is not None else None,
                             options=dict(options or {}))
        self._registry.add(name, entry)  # checks the name; DatasetAlreadyRegisteredError
        logger.debug("registered dataset %r", name)

    def entry(self, name: str) -> DatasetEntry:
        """The :class:`DatasetEntry` of ``name`` (DatasetNotRegisteredError lists close
        matches)."""
        return self._lookup(name)

    def _set_lazy_provider(self, provider: LazyProvider | None) -> None:
        """Install the provider of names registered on first use (None removes it)."""
        with self._lock:
            self._lazy = provider

    def _lazy_names(self) -> list[str]:
        """Provider names not registered yet and not removed: what ``list()`` adds."""
        provider = self._lazy
        if provider is None:
            return []
        return [n for n in provider.names()
                if n not in self._registry and n not in self._suppressed]

    def _materialize(self, name: object) -> bool:
        """Register ``name`` through the lazy provider if it is one of its names."""
        provider = self._lazy
        if provider is None or not isinstance(name, str):
            return False
        with self._lock:
            if self._registry.find(name) is not None or name in self._suppressed:
                return False
        return provider.materialize(name)

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> SerializedList:
        """The records of ``name``; the loader runs on the first call in this process
        (DatasetNotRegisteredError lists close matches)."""
        entry = self._lookup(name)
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        with entry.load_lock:
            with self._lock:
                cached = self._cache.get(name)
                if self._registry.find(name) is not entry:
                    # Removed (or replaced) while we waited for the lock.
                    raise self._unknown(name)
            if cached is not None:
                return cached
            build = functools.partial(self._run_loader, entry)
            key = entry.cache_key
            if key is not None and entry.options.get("cache", True) and entry.source_files:
                build = functools.partial(load_with_cache, name, entry.source_files, build,
                                          loader=str(key.get("loader", "catalog")), options=key)
            records, extra = share_across_local_ranks(name, build)
            metadata = extra.get("metadata") or {}
            if metadata:  # a no-op where the loader ran: equal values
                MetadataCatalog.get(name).set(**metadata)
            with self._lock:
                if self._registry.find(name) is entry and not this_rank_only_active():
                    self._cache[name] = records
            return records

    def _run_loader(self, entry: DatasetEntry) -> tuple[SerializedList, dict[str, Any]]:
        """``(records, {"metadata": what the loader set})`` from the loader."""
        name = entry.name
        before = MetadataCatalog.get(name, warn_unregistered=False).as_dict()
        logger.info("loading dataset %r", name)
        try:
            result = entry.func()
        except Exception as exc:
            exc.add_note(f"while loading dataset {name!r} (DatasetCatalog.get)")
            raise
        if isinstance(result, SerializedList):
            records = result
        elif not isinstance(result, list):
            raise TypeError(f"the loader of dataset {name!r} returned a "
                            f"{type(result).__name__}; it must return a list of dicts")
        else:
            for index, record in enumerate(result):
                if not isinstance(record, dict):
                    raise TypeError(
                        f"the loader of dataset {name!r} returned a list whose element "
                        f"{index} is a {type(record).__name__}, not a dict")
            records = SerializedList(result, name=name)
        after = MetadataCatalog.get(name, warn_unregistered=False).as_dict()
        changed = {}
        for key, value in after.items():
            if key != "name" and (key not in before or not values_equal(before[key], value)):
                changed[key] = value
        return records, {"metadata": changed}

    # ------------------------------------------------------------------ management
    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Unregister ``name`` and return its loader function (as ``dict.pop``).

        Example:
            >>> DatasetCatalog.register("doc_pop", list)
            >>> DatasetCatalog.pop("doc_pop") is list, "doc_pop" in DatasetCatalog
            (True, False)
        """
        entry = super().pop(name, _MISSING)
        if entry is not _MISSING:
            return entry.func
        if default is not _MISSING:
            return default
        raise self._unknown(name)

    def _on_removed(self, name: str, entry: DatasetEntry) -> None:
        self._cache.pop(name, None)
        drop_shard_sources(name)
        if self._lazy is not None and name in self._lazy.names():
            self._suppressed.add(name)

    def _on_cleared(self) -> None:
        self._cache.clear()
        drop_shard_sources()
        if self._lazy is not None:
            self._suppressed.update(self._lazy.names())

    def is_loaded(self, name: str) -> bool:
        """Whether dataset ``name`` has been loaded (and cached) in this process."""
        return name in self._cache

    def _extra_state(self) -> Any:
        return dict(self._cache), set(self._suppressed), self._lazy

    def _set_extra_state(self, state: Any) -> None:
        cache, suppressed, self._lazy = state
        self._cache, self._suppressed = dict(cache), set(suppressed)


#: The process-wide dataset registry.
DatasetCatalog = _DatasetCatalog()
MetadataCatalog.datasets = DatasetCatalog


def get_detection_dataset_dicts(names: str | Sequence[str], filter_empty: bool = True,
                                min_keypoints: int = 0,
                                check_consistency: bool = True) -> SerializedList:
    """The records of one or several registered datasets, joined in order and filtered.

    ``filter_empty`` drops images with no non-crowd annotation, ``min_keypoints`` those with
    fewer visible keypoints, ``check_consistency`` refuses datasets whose ``thing_classes``
    differ (MetadataConflictError). Filters read the numpy columns; the result is a view
    over the cached lists (no record copied). EmptyDatasetError when nothing is left.

    Example:
        >>> DatasetCatalog.register("doc_a", lambda: [
        ...     {"file_name": "a.jpg", "height": 4, "width": 4, "image_id": 0,
        ...      "annotations": [{"bbox": [0, 0, 2, 2], "bbox_mode": 1, "category_id": 0}]},
        ...     {"file_name": "b.jpg", "height": 4, "width": 4, "image_id": 1, "annotations": []}])
        >>> len(get_detection_dataset_dicts("doc_a"))
        1
        >>> DatasetCatalog.remove("doc_a")
    """
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise ValueError("get_detection_dataset_dicts needs at least one dataset name")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"dataset names must be strs, got {type(name).__name__}: {name!r}")

    parts = []
    for name in names:
        records = DatasetCatalog.get(name)
        if len(records) == 0:
            raise EmptyDatasetError(f"dataset {name!r} is empty (its loader returned no records)")
        parts.append(records)
    first_name, first_classes = None, None
    for name in names if check_consistency else ():
        classes = MetadataCatalog.get(name).get("thing_classes")
        if classes is None:
            continue
        if first_classes is None:
            first_name, first_classes = name, classes
        elif not values_equal(first_classes, classes):
            raise MetadataConflictError(
                f"datasets {first_name!r} and {name!r} have different thing_classes: "
                f"{list(first_classes)!r:.300} vs {list(classes)!r:.300}; pass "
                "check_consistency=False to join them anyway")

    label = names[0] if len(names) == 1 else "+".join(names)
    # One dataset's own list, or a view over the shared buffers of several: nothing is copied.
    dataset = parts[0] if len(parts) == 1 else concat_records(parts, name=label)

    keep = np.ones(len(dataset), dtype=bool)
    if filter_empty:
        # non-crowd annotations per record, from each base's own columns (no joined arrays)
        counts = []
        for part in parts:
            columns = part.columns
            non_crowd = np.zeros(len(columns.iscrowd) + 1, dtype=np.int64)
            np.cumsum(columns.iscrowd == 0, out=non_crowd[1:])
            offsets = columns.category_offsets
            counts.append(non_crowd[offsets[1:]] - non_crowd[offsets[:-1]])
        keep &= np.concatenate(counts) > 0
        logger.info("removed %d images with no usable annotations from %s; %d left",
                    int((~keep).sum()), label, int(keep.sum()))  # fmt: skip
    if min_keypoints > 0:
        enough = _enough_keypoints(dataset, min_keypoints, keep)
        dropped = int((keep & ~enough).sum())
        keep &= enough
        logger.info("removed %d images with fewer than %d visible keypoints from %s; %d left",
                    dropped, min_keypoints, label, int(keep.sum()))  # fmt: skip
    if not keep.all():
        dataset = dataset.subset(np.flatnonzero(keep))
    if len(dataset) == 0:
        raise EmptyDatasetError(
            f"no images left in {label} after filtering (filter_empty={filter_empty}, "
            f"min_keypoints={min_keypoints})")

    if logger.isEnabledFor(logging.INFO):  # the table is only made to be logged
        classes = MetadataCatalog.get(names[0]).get("thing_classes")
        histogram = _format_counts(parts, keep, classes)
        if histogram:
            logger.info("distribution of instances among all categories of %s:\n%s", label,
                        histogram)
    return dataset


def _enough_keypoints(dataset: SerializedList, min_keypoints: int, keep: np.ndarray) -> np.ndarray:
    enough = np.zeros(len(dataset), dtype=bool)
    for index in np.flatnonzero(keep).tolist():
        visible = 0
        for anno in dataset[index].get("annotations") or ():
            keypoints = anno.get("keypoints") if isinstance(anno, dict) else None
            if keypoints:
                visible += int((np.asarray(keypoints[2::3]) > 0).sum())
        enough[index] = visible >= min_keypoints
    return enough


def _format_counts(parts: Sequence[SerializedList], keep: np.ndarray,
                   class_names: Sequence[str] | None) -> str:
    """The table of non-crowd instances per category in the records ``keep`` marks (read from
    each part's own columns: no joined arrays)."""
    ids, start = [np.zeros(0, np.int32)], 0
    for part in parts:
        columns = part.columns
        kept = np.repeat(keep[start : start + len(part)], np.diff(columns.category_offsets))
        kept &= (columns.iscrowd == 0) & (columns.category_ids >= 0)
        ids.append(columns.category_ids[kept])
        start += len(part)
    ids = np.concatenate(ids)
    num_classes = len(class_names) if class_names is not None else 0
    if len(ids):
        num_classes = max(num_classes, int(ids.max()) + 1)
    if num_classes == 0:
        return ""
    counts = np.bincount(ids, minlength=num_classes)
    labels = list(map(str, range(num_classes)))
    if class_names is not None:
        labels[: len(class_names)] = map(str, class_names)
    rows = [("category", "#instances"), *zip(labels, counts.tolist(), strict=True),
            ("total", int(counts.sum()))]
    name_width = max(len(str(name)) for name, _ in rows)
    count_width = max(len(str(count)) for _, count in rows)
    lines = [f"{name:<{name_width}} | {count:>{count_width}}" for name, count in rows]
    rule = f"{'-' * name_width} | {'-' * count_width}"
    return "\n".join([lines[0], rule, *lines[1:-1], rule, lines[-1]])
