"""Test helpers for code that registers datasets: catalogs restored after each test.

Example (pytest: put this in your ``conftest.py`` and every test starts and ends with the
same catalog contents)::

    import pytest
    from catalog.testing import isolated_catalogs

    @pytest.fixture(autouse=True)
    def _isolated_catalogs():
        with isolated_catalogs():
            yield

A single test can also ask for empty catalogs (builtin names hidden too)::

    def test_only_my_datasets():
        with isolated_catalogs(empty=True):
            DatasetCatalog.register("mine", load)
            assert DatasetCatalog.list() == ["mine"]
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .dataset_catalog import DatasetCatalog
from .metadata import MetadataCatalog

__all__ = ["isolated_catalogs"]


@contextmanager
def isolated_catalogs(*, empty: bool = False) -> Iterator[None]:
    """Snapshot DatasetCatalog and MetadataCatalog, and put them back on exit.

    Everything registered, removed, loaded or set inside the block is undone on exit (also
    when the block raises): dataset registrations and their cached records, builtin datasets
    registered on first use or removed, and every Metadata (keys added to an existing one
    included). Not thread-safe against other threads registering meanwhile; the on-disk
    cache is not touched.

    Args:
        empty: start the block with both catalogs empty (the builtin datasets hidden too).

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
