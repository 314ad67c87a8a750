"""DatasetCatalog: dataset names mapped to loader functions, each loaded once per process.

A loader is any zero-argument callable returning a list of record dicts. The first
``DatasetCatalog.get(name)`` runs it and keeps the result as a :class:`SerializedList` (one
compact buffer instead of millions of Python objects); later calls return the cached list.
Names, ``list`` / ``remove`` / ``pop`` / ``clear`` / ``in`` and the "did you mean" of an unknown
name come from :class:`~catalog.named_container.NamedContainer`, shared with MetadataCatalog.

Extension hook (on-disk cache, sharing across local ranks):
    Every registration is stored as a :class:`DatasetEntry`. Loaders that read files fill in
    ``entry.source_files`` (the files the records come from) and ``entry.cache_key`` (a
    JSON-serializable dict describing everything else the records depend on: loader kind,
    options). All loading goes through the single method :meth:`_DatasetCatalog._load`
    (``entry -> SerializedList``); a cache or a cross-rank sharing layer wraps or replaces that
    one method and keys on ``entry.cache_key`` / ``entry.source_files``. ``entry.options`` is a
    free dict for per-registration switches such a layer may read (e.g. ``{"cache": False}``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .background_release import PendingRelease, wait_for_releases
from .entry_loading import apply_loader_metadata, load_records_and_metadata
from .errors import DatasetAlreadyRegisteredError, DatasetNotRegisteredError
from .local_share import share_across_local_ranks, this_rank_only_active
from .named_container import NamedContainer
from .registry import check_name
from .serialized_list import SerializedList

__all__ = ["DatasetCatalog", "DatasetEntry", "LazyProvider"]

logger = logging.getLogger(__name__)

_MISSING: Any = object()


class LazyProvider(Protocol):
    """Names registered on first use (the builtin datasets): :meth:`names` lists them and
    :meth:`materialize` registers one (returns whether it did). Installed with
    ``DatasetCatalog._set_lazy_provider``; :mod:`catalog.builtin_datasets` is the one user."""

    def names(self) -> list[str]: ...

    def materialize(self, name: str) -> bool: ...


@dataclass
class DatasetEntry:
    """One registration in the :data:`DatasetCatalog`.

    Attributes:
        name: the dataset name.
        func: the zero-argument loader returning a list of record dicts.
        source_files: the files the records are read from (empty for in-memory loaders);
            an on-disk cache invalidates on their size / modification time.
        cache_key: a JSON-serializable dict of everything else the records depend on
            (loader kind, options), or None when the records cannot be cached safely
            (an arbitrary Python function).
        options: free per-registration switches for layers plugged into ``_load``.

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
    """The dataset registry; use the module-level singleton :data:`DatasetCatalog`.

    Thread-safe: registration, removal and lookups take a lock, and concurrent ``get`` calls
    for the same name run the loader only once.

    Example:
        >>> DatasetCatalog.register("doc_toy", lambda: [{"file_name": "a.jpg", "image_id": 0}])
        >>> records = DatasetCatalog.get("doc_toy")
        >>> len(records), records[0]["file_name"], "doc_toy" in DatasetCatalog
        (1, 'a.jpg', True)
        >>> DatasetCatalog.remove("doc_toy")
    """

    def __init__(self) -> None:
        super().__init__(
            "dataset",
            missing_error=DatasetNotRegisteredError,
            duplicate_error=DatasetAlreadyRegisteredError,
            owner="DatasetCatalog",
        )
        self._cache: dict[str, SerializedList] = {}
        # Names registered on first use, and those of them removed / cleared since.
        self._lazy: LazyProvider | None = None
        self._suppressed: set[str] = set()

    # ------------------------------------------------------------------ registration
    def register(
        self,
        name: str,
        func: Callable[[], Any],
        *,
        source_files: Iterable[str] | None = None,
        cache_key: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Register ``func`` as the loader of dataset ``name``; it runs at the first ``get``.

        Args:
            name: a non-empty dataset name, e.g. ``"coco_2017_train"``.
            func: a zero-argument callable returning a list of record dicts.
            source_files: files the records are read from (for cache invalidation).
            cache_key: JSON-serializable description of the loader and its options, used by
                an on-disk cache; None (the default for plain functions) disables caching.
            options: free per-registration switches (see the module docstring).

        Raises:
            TypeError: name is not a str, or func is not callable.
            ValueError: name is empty.
            DatasetAlreadyRegisteredError: (a ValueError) the name is already registered.
        """
        check_name(name, "dataset")
        if not callable(func):
            raise TypeError(
                f"the loader of dataset {name!r} must be callable (a function returning a list "
                f"of dicts), got {type(func).__name__}"
            )
        entry = DatasetEntry(
            name=name,
            func=func,
            source_files=tuple(str(f) for f in (source_files or ())),
            cache_key=dict(cache_key) if cache_key is not None else None,
            options=dict(options or {}),
        )
        self._registry.add(name, entry)  # checks the name; DatasetAlreadyRegisteredError
        logger.debug("registered dataset %r", name)

    def entry(self, name: str) -> DatasetEntry:
        """The :class:`DatasetEntry` registered under ``name``.

        Raises:
            DatasetNotRegisteredError: (a KeyError) the name is unknown; the message lists the
                registered names and the closest matches.
        """
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
        """The records of dataset ``name`` as a :class:`SerializedList`.

        The loader runs on the first call in this process; later calls return the cached list.

        Raises:
            DatasetNotRegisteredError: (a KeyError) the name is unknown; the message lists the
                registered names and the closest matches.
            TypeError: the loader returned something other than a list of dicts (the message
                names the dataset and the index of the first bad element).
            SharedAttachError: under torch.distributed, the ranks disagree (dataset, sharing,
                caching, catmap version), a rank failed to load or attach, or a rank died.
            NestedLoadError: called inside another dataset's loader while the local ranks
                share records (get the inner dataset first, on every rank).
        """
        entry = self.entry(name)
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
            records = self._load(entry)
            with self._lock:
                if self._registry.find(name) is entry and not this_rank_only_active():
                    self._cache[name] = records
            return records

    def _load(self, entry: DatasetEntry) -> SerializedList:
        """Load ``entry``'s records: the single loading path.

        File-backed entries go through the on-disk cache (:func:`catalog.entry_loading.load_records_and_metadata`);
        under torch.distributed with several ranks per machine, one rank per machine loads and
        the others attach to its records (:func:`catalog.local_share.share_across_local_ranks`).
        The metadata the loader set travels with the records and is set here on every rank
        (a no-op where the loader ran or the cache already set it: equal values).
        """
        try:
            records, metadata = share_across_local_ranks(
                entry.name, lambda: load_records_and_metadata(entry, self._run_loader)
            )
        finally:
            wait_for_releases()  # the loader's Python records, dropped while they were stored
        apply_loader_metadata(entry.name, metadata)
        return records

    def _run_loader(self, entry: DatasetEntry) -> SerializedList:
        """Run ``entry``'s loader and serialize its result."""
        logger.info("loading dataset %r", entry.name)
        try:
            result = entry.func()
        except Exception as exc:
            if hasattr(exc, "add_note"):  # Python >= 3.11
                exc.add_note(f"while loading dataset {entry.name!r} (DatasetCatalog.get)")
            raise
        records = as_serialized_list(result, entry.name)
        if isinstance(result, list):  # freed while the records are written (cache file, shm)
            pending = PendingRelease(result)
            del result
            pending.start()
        return records

    # ------------------------------------------------------------------ management
    def list(self) -> list[str]:
        """The registered dataset names, in registration order, then the builtin names not
        used yet (they are registered on first use)."""
        return super().list()

    def remove(self, name: str) -> None:
        """Unregister dataset ``name`` and drop its cached records.

        Raises:
            DatasetNotRegisteredError: (a KeyError) the name is unknown.
        """
        self.pop(name)

    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Unregister dataset ``name`` and return its loader function (as ``dict.pop``).

        Args:
            name: the dataset name.
            default: returned when the name is unknown (else the error below).

        Raises:
            DatasetNotRegisteredError: (a KeyError) the name is unknown and no default is given.

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
        if self._lazy is not None and name in self._lazy.names():
            self._suppressed.add(name)

    def clear(self) -> None:
        """Unregister every dataset (the builtin ones included) and drop every cached list."""
        super().clear()

    def _on_cleared(self) -> None:
        self._cache.clear()
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


def as_serialized_list(result: Any, name: str) -> SerializedList:
    """Check that a loader's ``result`` is a list of dicts and serialize it.

    A SerializedList is accepted as is.

    Raises:
        TypeError: ``result`` is not a list, or one of its elements is not a dict (the message
            names the dataset and the index of the first bad element).

    Example:
        >>> len(as_serialized_list([{"a": 1}], "toy"))
        1
    """
    if isinstance(result, SerializedList):
        return result
    if not isinstance(result, list):
        raise TypeError(
            f"the loader of dataset {name!r} returned a {type(result).__name__}; it must "
            "return a list of dicts"
        )
    for index, record in enumerate(result):
        if not isinstance(record, dict):
            raise TypeError(
                f"the loader of dataset {name!r} returned a list whose element {index} is a "
                f"{type(record).__name__}, not a dict"
            )
    return SerializedList(result, name=name)


#: The process-wide dataset registry.
DatasetCatalog = _DatasetCatalog()
