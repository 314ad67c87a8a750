"""Test helpers: catalogs restored after each test (put ``isolated_catalogs`` in an autouse
fixture of your ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .dataset_catalog import DatasetCatalog
from .metadata import MetadataCatalog

__all__ = ["isolated_catalogs"]


@contextmanager
def isolated_catalogs(*, empty: bool = False) -> Iterator[None]:
    """Snapshot DatasetCatalog and MetadataCatalog and put them back on exit (registrations,
    loaded records, every Metadata key); ``empty=True`` starts the block with both empty.
    The on-disk cache is not touched.

    Example:
        >>> from catalog import DatasetCatalog
        >>> with isolated_catalogs():
        ...     DatasetCatalog.register("doc_isolated", list)
        ...     "doc_isolated" in DatasetCatalog
        True
        >>> "doc_isolated" in DatasetCatalog
        False
        >>> with isolated_catalogs(empty=True):
        ...     DatasetCatalog.list()
        []
    """
    datasets = DatasetCatalog.snapshot()
    metadata = MetadataCatalog.snapshot()
    try:
        if empty:
            DatasetCatalog.clear()
            MetadataCatalog.clear()
        yield
    finally:
        DatasetCatalog.restore(datasets)
        MetadataCatalog.restore(metadata)
