"""NamedContainer: what DatasetCatalog and MetadataCatalog share: a Registry of entries with
``list`` / ``remove`` / ``pop`` / ``clear`` / ``in`` / ``len``, snapshot / restore, and hooks for
names registered on first use (the builtin datasets).

Example:
    >>> box = NamedContainer("fruit")
    >>> box._registry.add("apple", 1)
    1
    >>> "apple" in box, box.list(), box.pop("apple"), len(box)
    (True, ['apple'], 1, 0)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .registry import Registry

__all__ = ["NamedContainer"]

V = TypeVar("V")

_MISSING: Any = object()


class NamedContainer(Generic[V]):
    """Names mapped to entries, with the catalog management methods; subclasses add how
    entries are made and override the hooks below."""

    def __init__(
        self,
        kind: str,
        *,
        missing_error: Callable[[str], KeyError] | None = None,
        duplicate_error: Callable[[str], ValueError] = ValueError,
        remove_missing_ok: bool = False,
        owner: str | None = None,
    ) -> None:
        self._registry: Registry[V] = Registry(
            kind,
            missing_error=missing_error,
            duplicate_error=duplicate_error,
            replace_same=False,
            owner=owner,
        )
        self._lock = threading.RLock()
        self._remove_missing_ok = remove_missing_ok

    # ------------------------------------------------------------------ hooks
    def _lazy_names(self) -> list[str]:
        """Names not registered yet that exist all the same (registered on first use)."""
        return []

    def _materialize(self, name: object) -> bool:
        """Register ``name`` now if it is one of :meth:`_lazy_names`; returns whether it did."""
        return False

    def _on_removed(self, name: str, entry: V) -> None:
        """Called (under the lock) after ``name`` was removed."""

    def _on_cleared(self) -> None:
        """Called (under the lock) after every name was removed."""

    def _extra_state(self) -> Any:
        """State kept beside the entries, included in :meth:`snapshot`."""
        return None

    def _set_extra_state(self, state: Any) -> None:
        """Put back what :meth:`_extra_state` returned."""

    # ------------------------------------------------------------------ lookup
    def _lookup(self, name: object) -> V:
        """The entry of ``name``, registering a lazy name first."""
        entry = self._registry.find(name, _MISSING)
        if entry is _MISSING and self._materialize(name):
            entry = self._registry.find(name, _MISSING)
        if entry is _MISSING:
            raise self._unknown(name)
        return entry

    def _unknown(self, name: object) -> KeyError:
        """The error for an unknown ``name``: close matches among :meth:`list`."""
        return self._registry.unknown(name, self.list())

    # ------------------------------------------------------------------ management
    def list(self) -> list[str]:
        """The names, in registration order, then the names registered on first use."""
        with self._lock:
            return self._registry.names() + self._lazy_names()

    def remove(self, name: str) -> None:
        """Remove ``name`` and what is kept for it."""
        if self._remove_missing_ok:
            self.pop(name, None)
        else:
            self.pop(name)

    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Remove ``name`` and return its entry (as ``dict.pop``)."""
        self._materialize(name)
        with self._lock:
            entry = self._registry.pop(name, _MISSING)
            if entry is not _MISSING:
                self._on_removed(name, entry)
                return entry
        if default is _MISSING:
            raise self._unknown(name)
        return default

    def clear(self) -> None:
        """Remove every name (those registered on first use included)."""
        with self._lock:
            self._registry.clear()
            self._on_cleared()

    def __contains__(self, name: object) -> bool:
        if name in self._registry:
            return True
        with self._lock:
            return name in self._lazy_names()

    def __len__(self) -> int:
        return len(self.list())

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def __repr__(self) -> str:
        return f"{type(self).__name__.lstrip('_')}({', '.join(self.list())})"

    # ------------------------------------------------------------------ state
    def snapshot(self) -> tuple[dict[str, V], Any]:
        """Everything this container holds, for :meth:`restore` (entries are not copied)."""
        with self._lock:
            return self._registry.snapshot(), self._extra_state()

    def restore(self, state: tuple[dict[str, V], Any]) -> None:
        """Put back a :meth:`snapshot`: the names registered since are removed."""
        entries, extra = state
        with self._lock:
            self._registry.restore(entries)
            self._set_extra_state(extra)
