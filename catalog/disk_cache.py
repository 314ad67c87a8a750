"""A verified on-disk cache of serialized datasets, loaded by memory-mapping.

Parsing a large annotation file takes seconds to tens of seconds; the records it yields never
change while the file does not. The cache stores a :class:`~catalog.SerializedList` in one
signed file per key and maps it back in a fraction of a second: the record buffer, its
offsets and its columns are numpy views of the mapped file, so every process (ranks and
DataLoader workers) shares the same page-cache pages.

The parts, each in its own module (all names stay importable from here):

- :mod:`catalog.cache_key`: the key (loader, options, catmap version, and each source file's
  device, inode, size, mtime and ctime; a content CRC-32 for recently changed files);
- :mod:`catalog.records_file` / :mod:`catalog.records_map`: the file format, its MAC
  (HMAC-SHA256 under a per-user secret, binding the key) and memory mapping;
- :mod:`catalog.cache_secret`: the per-user secret (``~/.config/catmap/cache.key``, 0600);
- :mod:`catalog.cache_dir`: the directory (0700, checked), safe opening, one builder per key
  (file lock), warnings; :mod:`catalog.cache_listing`: listing and clearing.

The cache stores the records and an opaque ``extra`` dict; it knows nothing of catalogs or
metadata (the catalog side is :mod:`catalog.entry_loading`).

Trust: no byte of an entry is unpickled unless its MAC proves it was written by this user
(holder of the key file) for this very key. Entries are never truncated in place (replaced by
rename, removed by unlink), so a mapped entry never faults.

Environment:
    ``CATMAP_CACHE_DIR``: the cache directory (default ``~/.cache/catmap``).
    ``CATMAP_CACHE``: ``0`` / ``false`` / ``off`` / ``no`` turns the cache off everywhere.
    ``CATMAP_CACHE_SHARED``: ``1`` accepts a directory and entries of other users (a team
    cache; entries must still carry a valid MAC, so the team shares one key file).
    ``CATMAP_CACHE_KEY_FILE``: where the secret lives.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .cache_dir import (
    CacheCorruptWarning,
    CacheSkippedWarning,
    CacheUnavailableError,
    DiskCache,
    cache_dir,
    cache_enabled,
    shared_enabled,
    warn_once,
)
from .cache_key import CACHE_SUFFIX, CacheKey, source_stamp
from .cache_listing import CacheEntry
from .cache_secret import CacheKeyFileError, key_file_path, load_secret
from .errors import CacheError
from .records_file import CacheCorruptError, UnsafeEntryError, open_entry, write_serialized
from .records_map import FileRemapper, MappedFile, map_serialized, remap_file
from .serialized_list import SerializedList

__all__ = [
    "CACHE_SUFFIX",
    "CacheCorruptError",
    "CacheCorruptWarning",
    "CacheEntry",
    "CacheError",
    "CacheKey",
    "CacheKeyFileError",
    "CacheSkippedWarning",
    "CacheUnavailableError",
    "DiskCache",
    "MappedFile",
    "FileRemapper",
    "UnsafeEntryError",
    "cache_dir",
    "cache_enabled",
    "key_file_path",
    "load_secret",
    "load_with_cache",
    "map_serialized",
    "open_entry",
    "remap_file",
    "shared_enabled",
    "source_stamp",
    "write_serialized",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# the entry point used by the catalog


def _as_serialized(records: Any, name: str) -> SerializedList:
    if isinstance(records, SerializedList):
        return records
    return SerializedList(records, name=name)


def load_with_cache(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    build: Callable[[], tuple[Any, Mapping[str, Any] | None]],
    *,
    loader: str,
    options: Mapping[str, Any] | None = None,
    enabled: bool = True,
    directory: str | os.PathLike[str] | None = None,
) -> tuple[SerializedList, dict[str, Any]]:
    """Load a file-backed dataset through the disk cache.

    On a hit the records are memory-mapped from the cache file (its MAC verified first); on a
    miss ``build()`` runs (in one process of the machine at a time: the others wait for its
    entry), its records are serialized and written to the cache, and the mapped file is
    returned. Caching problems never break loading: an unusable or untrusted directory, key
    file or entry warns (once per process for the directory) and the built records are
    returned directly.

    Args:
        name: the dataset name.
        sources: the files the dataset is read from (their size, mtime, ctime and content
            digest are in the key).
        build: loads the dataset; returns ``(records, extra)`` where ``records`` is a list of
            dicts or a SerializedList and ``extra`` JSON-serializable data to keep with it
            (e.g. metadata the loader sets), or ``None``.
        loader: identifies the loader in the key (e.g. ``"coco"``).
        options: the loader options that change its output (JSON-compatible).
        enabled: the per-registration switch (``cache=False`` turns it off);
            ``CATMAP_CACHE=0`` turns it off everywhere.
        directory: the cache directory (default :func:`cache_dir`).

    Returns:
        ``(records, extra)``.

    Example:
        >>> import tempfile, json
        >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        >>> _ = f.write(json.dumps([{"a": 1}])); f.close()
        >>> build = lambda: (json.load(open(f.name)), {"classes": ["x"]})
        >>> d = tempfile.mkdtemp()
        >>> records, extra = load_with_cache("toy", [f.name], build, loader="json", directory=d)
        >>> records[0], extra
        ({'a': 1}, {'classes': ['x']})
    """
    def plain_build() -> tuple[SerializedList, dict[str, Any]]:
        records, extra = build()
        return _as_serialized(records, name), dict(extra or {})

    if not cache_enabled(enabled):
        return plain_build()
    try:
        key = CacheKey.build(name, sources, loader=loader, options=options)
    except OSError as exc:
        logger.debug("not caching %r: cannot read its sources (%s)", name, exc)
        return plain_build()
    except TypeError as exc:
        logger.info("not caching %r: %s", name, exc)
        return plain_build()
    try:
        cache = DiskCache(directory)
    except CacheUnavailableError as exc:
        warn_once(f"no-dir:{type(exc).__name__}", f"catmap cache skipped: {exc}")
        return plain_build()

    def cacheable(records: SerializedList, extra: dict[str, Any]) -> bool:
        try:
            after = CacheKey.build(name, sources, loader=loader, options=options)
        except OSError:
            after = None
        if after != key:
            logger.warning(
                "a source of dataset %r changed while it was loading; not caching this result",
                name,
            )
            return False
        try:
            pickle.dumps(extra)
        except Exception as exc:  # any pickling failure: keep the result, skip the cache
            logger.info("not caching %r: the data kept with it cannot be pickled (%s)", name, exc)
            return False
        return True

    return cache.get_or_build(key, plain_build, cacheable=cacheable)
