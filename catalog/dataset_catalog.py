"""DatasetCatalog: dataset names mapped to loader functions, each loaded once per process.

``get`` -> ``share_across_local_ranks`` (one rank per machine builds) -> ``load_with_cache``
(file-backed entries) -> the loader. What the loader sets in ``MetadataCatalog`` travels with
the records as the data-only ``extra`` dict and is set again where they came from elsewhere.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._common import DatasetAlreadyRegisteredError, DatasetNotRegisteredError
from .metadata import MetadataCatalog, NamedContainer, values_equal
from .registry import check_name
from .storage.cache import load_with_cache
from .storage.records import SerializedList
from .storage.shard_cache import drop_shard_sources
from .storage.sharing import share_across_local_ranks, this_rank_only_active

__all__ = ["DatasetCatalog", "DatasetEntry", "LazyProvider"]

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
                f"of dicts), got {type(func).__name__}"
            )
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
        return [
            n for n in provider.names() if n not in self._registry and n not in self._suppressed
        ]

    def _materialize(self, name: object) -> bool:
        """Register ``name`` through the lazy provider if it is one of its names."""
        provider = self._lazy
        if provider is None or not isinstance(name, str):
            return False
        with self._lock:
            if name in self._registry or name in self._suppressed:
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
            build = functools.partial(self._load_here, entry)
            records, extra = share_across_local_ranks(name, build)
            metadata = extra.get("metadata") or {}
            if metadata:  # a no-op where the loader ran: equal values
                MetadataCatalog.get(name).set(**metadata)
            with self._lock:
                if self._registry.find(name) is entry and not this_rank_only_active():
                    self._cache[name] = records
            return records

    def _load_here(self, entry: DatasetEntry) -> tuple[SerializedList, dict[str, Any]]:
        """``(records, {"metadata": what the loader set})`` from the cache or the loader."""
        name = entry.name

        def run_loader() -> tuple[SerializedList, dict[str, Any]]:
            before = MetadataCatalog.get(name).as_dict() if name in MetadataCatalog else {}
            logger.info("loading dataset %r", name)
            try:
                result = entry.func()
            except Exception as exc:
                if hasattr(exc, "add_note"):  # Python >= 3.11
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
                            f"{index} is a {type(record).__name__}, not a dict"
                        )
                records = SerializedList(result, name=name)
            after = MetadataCatalog.get(name).as_dict() if name in MetadataCatalog else {}
            changed = {}
            for key, value in after.items():
                if key != "name" and (key not in before or not values_equal(before[key], value)):
                    changed[key] = value
            return records, {"metadata": changed}

        cached = entry.options.get("cache", True) and entry.source_files
        if entry.cache_key is None or not cached:
            return run_loader()
        loader = str(entry.cache_key.get("loader", "catalog"))
        return load_with_cache(name, entry.source_files, run_loader, loader=loader,
                               options=entry.cache_key)

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
        cache, suppressed, lazy = state
        self._cache = dict(cache)
        self._suppressed = set(suppressed)
        self._lazy = lazy


#: The process-wide dataset registry.
DatasetCatalog = _DatasetCatalog()
MetadataCatalog.datasets = DatasetCatalog
