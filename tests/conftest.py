"""Shared pytest fixtures: every test starts and ends with the same catalog contents."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from catalog._common import reset_counts
from catalog.testing import isolated_catalogs

__all__ = ["isolated_cache_dir", "restore_catalogs"]


def pytest_configure(config: pytest.Config) -> None:
    """Point the cache at a temporary directory for the whole session, so that the doctests of
    the library modules (collected outside tests/) never write to ~/.cache/catmap either."""
    session_dir = tempfile.mkdtemp(prefix="catmap-pytest-")
    os.environ["CATMAP_CACHE_DIR"] = os.path.join(session_dir, "cache")
    os.environ.setdefault("CATMAP_DEMO_DIR", os.path.join(session_dir, "demo"))


@pytest.fixture(autouse=True)
def isolated_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Give every test its own empty on-disk dataset cache (never ~/.cache/catmap)."""
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(tmp_path_factory.mktemp("catmap-cache")))


@pytest.fixture(autouse=True)
def restore_catalogs() -> Iterator[None]:
    """Snapshot DatasetCatalog and MetadataCatalog before a test and restore them after it
    (:func:`catalog.testing.isolated_catalogs`), so that registrations made by one test never
    leak into another."""
    reset_counts()  # each test sees the first warnings of every kind
    with isolated_catalogs():
        yield
