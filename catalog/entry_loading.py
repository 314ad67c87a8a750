"""Loading one DatasetCatalog entry: the loader, the disk cache, and the metadata it sets.

The storage modules (:mod:`catalog.disk_cache` and below) keep an opaque ``extra`` dict next
to the records and know nothing of catalogs or metadata. This module, on the catalog side,
captures what a loader sets in ``MetadataCatalog`` while it runs (stored as
``extra["metadata"]``) and sets it again in a process that got the records without running
the loader (from the cache, or from another local rank).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .disk_cache import cache_enabled, load_with_cache
from .metadata import MetadataCatalog, values_equal
from .serialized_list import SerializedList

__all__ = ["apply_loader_metadata", "load_entry"]


def _metadata_snapshot(name: str) -> dict[str, Any]:
    return MetadataCatalog.get(name).as_dict() if name in MetadataCatalog else {}


def _metadata_changes(name: str, before: Mapping[str, Any]) -> dict[str, Any]:
    after = _metadata_snapshot(name)
    return {
        key: value
        for key, value in after.items()
        if key != "name" and (key not in before or not values_equal(before[key], value))
    }


def apply_loader_metadata(name: str, extra: Mapping[str, Any]) -> None:
    """Set the metadata a loader set when it ran (kept in ``extra["metadata"]``) on a process
    that got the records without running it (from the cache or from another local rank).

    Raises:
        MetadataConflictError: the metadata of ``name`` already holds different values.

    Example:
        >>> from catalog import MetadataCatalog
        >>> apply_loader_metadata("doc_meta", {"metadata": {"thing_classes": ["cat"]}})
        >>> MetadataCatalog.get("doc_meta").thing_classes
        ['cat']
        >>> MetadataCatalog.remove("doc_meta")
    """
    values = extra.get("metadata") or {}
    if values:
        MetadataCatalog.get(name).set(**values)


def load_entry(
    entry: Any,
    run_loader: Callable[[Any], SerializedList],
) -> tuple[SerializedList, dict[str, Any]]:
    """Load a DatasetCatalog entry, through the disk cache when the entry allows it.

    An entry is cached when it has a ``cache_key`` and ``source_files`` (file-backed
    registrations such as ``register_coco_instances``), its ``options`` do not hold
    ``cache=False`` and ``CATMAP_CACHE`` is not ``0``. The metadata the loader sets for the
    dataset is captured and stored with the records, and set again on a cache hit.

    Args:
        entry: a ``DatasetEntry`` (name, func, source_files, cache_key, options).
        run_loader: runs the entry's loader and returns its records serialized.

    Returns:
        ``(records, extra)`` where ``extra["metadata"]`` holds what the loader set.

    Example:
        >>> from catalog.dataset_catalog import DatasetEntry, as_serialized_list
        >>> entry = DatasetEntry("doc_plain", lambda: [{"a": 1}])  # no files: not cached
        >>> records, extra = load_entry(entry, lambda e: as_serialized_list(e.func(), e.name))
        >>> records[0], extra
        ({'a': 1}, {'metadata': {}})
    """
    name = entry.name

    def build() -> tuple[SerializedList, dict[str, Any]]:
        before = _metadata_snapshot(name)
        records = run_loader(entry)
        return records, {"metadata": _metadata_changes(name, before)}

    enabled = (
        entry.cache_key is not None
        and bool(entry.source_files)
        and bool(entry.options.get("cache", True))
    )
    if not cache_enabled(enabled):
        return build()
    cache_key = dict(entry.cache_key)
    records, extra = load_with_cache(
        name,
        entry.source_files,
        build,
        loader=str(cache_key.get("loader", "catalog")),
        options=cache_key,
    )
    apply_loader_metadata(name, extra)
    return records, extra
