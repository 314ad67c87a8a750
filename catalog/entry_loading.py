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

__all__ = ["apply_loader_metadata", "load_records_and_metadata"]


def _metadata_snapshot(name: str) -> dict[str, Any]:
    return MetadataCatalog.get(name).as_dict() if name in MetadataCatalog else {}


def _metadata_changes(name: str, before: Mapping[str, Any]) -> dict[str, Any]:
    after = _metadata_snapshot(name)
    return {
        key: value
        for key, value in after.items()
        if key != "name" and (key not in before or not values_equal(before[key], value))
    }


def apply_loader_metadata(name: str, metadata: Mapping[str, Any]) -> None:
    """Set ``metadata``, what a loader set when it ran, on a process that got the records
    without running it (from the cache or from another local rank).

    Raises:
        MetadataConflictError: the metadata of ``name`` already holds different values.

    Example:
        >>> from catalog import MetadataCatalog
        >>> apply_loader_metadata("doc_meta", {"thing_classes": ["cat"]})
        >>> MetadataCatalog.get("doc_meta").thing_classes
        ['cat']
        >>> MetadataCatalog.remove("doc_meta")
    """
    if metadata:
        MetadataCatalog.get(name).set(**metadata)


def load_records_and_metadata(
    entry: Any,
    run_loader: Callable[[Any], SerializedList],
) -> tuple[SerializedList, dict[str, Any]]:
    """Load a DatasetCatalog entry's records and the metadata its loader sets, through the
    disk cache when the entry allows it.

    An entry is cached when it has a ``cache_key`` and ``source_files`` (file-backed
    registrations such as ``register_coco_instances``), its ``options`` do not hold
    ``cache=False`` and ``CATMAP_CACHE`` is not ``0``. The metadata the loader sets for the
    dataset is captured and stored with the records, and set again on a cache hit.

    Args:
        entry: a ``DatasetEntry`` (name, func, source_files, cache_key, options).
        run_loader: runs the entry's loader and returns its records serialized.

    Returns:
        ``(records, metadata)``: ``metadata`` holds what the loader set in
        ``MetadataCatalog.get(entry.name)`` (already set again in this process on a cache hit).

    Example:
        >>> from catalog.dataset_catalog import DatasetEntry, as_serialized_list
        >>> entry = DatasetEntry("doc_plain", lambda: [{"a": 1}])  # no files: not cached
        >>> run = lambda e: as_serialized_list(e.func(), e.name)
        >>> records, metadata = load_records_and_metadata(entry, run)
        >>> records[0], metadata
        ({'a': 1}, {})
    """
    name = entry.name

    def build() -> tuple[SerializedList, dict[str, Any]]:
        """(records, the storage's ``extra`` dict): ``{"metadata": what the loader set}``."""
        before = _metadata_snapshot(name)
        records = run_loader(entry)
        return records, {"metadata": _metadata_changes(name, before)}

    enabled = (
        entry.cache_key is not None
        and bool(entry.source_files)
        and bool(entry.options.get("cache", True))
    )
    if not cache_enabled(enabled):
        records, extra = build()
        return records, extra["metadata"]
    cache_key = dict(entry.cache_key)
    records, extra = load_with_cache(
        name,
        entry.source_files,
        build,
        loader=str(cache_key.get("loader", "catalog")),
        options=cache_key,
    )
    metadata = dict(extra.get("metadata") or {})
    apply_loader_metadata(name, metadata)
    return records, metadata
