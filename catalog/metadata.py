"""Metadata and MetadataCatalog: per-dataset facts (class names, colors, id maps, files), and
NamedContainer, the management methods both catalogs share.

A key is write-once: setting it to a different value raises :class:`MetadataConflictError`;
setting an equal value (arrays, tensors and containers compared by value) is a no-op.
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np

from ._common import MetadataConflictError, plain_value, short_repr, warn_limited
from .registry import Registry, check_name, did_you_mean

__all__ = ["Metadata", "MetadataCatalog", "LEGACY_KEYS", "NamedContainer", "values_equal"]

logger = logging.getLogger(__name__)

#: Old key -> current key; reading or writing an old key warns and uses the current one.
LEGACY_KEYS: dict[str, str] = {"class_names": "thing_classes",
                               "dataset_id_to_contiguous_id": "thing_dataset_id_to_contiguous_id",
                               "stuff_class_names": "stuff_classes"}


def values_equal(a: Any, b: Any) -> bool:
    """Whether two metadata values are equal by value (arrays element-wise with their shape,
    NaN equal to NaN; a list equals a tuple or an array of the same values).

    Example:
        >>> import numpy as np
        >>> values_equal(np.array([1, 2]), [1, 2]), values_equal([[1], [2]], [[1], [3]])
        (True, False)
    """
    if a is b:
        return True
    if _is_array(a) or _is_array(b):
        try:
            arr_a, arr_b = _to_numpy(a), _to_numpy(b)
        except (TypeError, ValueError):
            return False
        if arr_a.shape != arr_b.shape:
            return False
        both_float = all(np.issubdtype(arr.dtype, np.floating) for arr in (arr_a, arr_b))
        try:
            return bool(np.array_equal(arr_a, arr_b, equal_nan=both_float))
        except TypeError:
            return bool(np.array_equal(arr_a, arr_b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    try:
        result = a == b
    except Exception:  # an exotic __eq__ that raises: treat as different
        return False
    if isinstance(result, (bool, np.bool_)):
        return bool(result) or (  # NaN equals NaN, as in arrays
            isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating))
            and math.isnan(a) and math.isnan(b))
    try:
        return bool(np.all(result))
    except Exception:
        return False


def _is_array(value: Any) -> bool:
    torch = sys.modules.get("torch")  # only compare tensors if torch is already imported
    return isinstance(value, np.ndarray) or (torch is not None and isinstance(value, torch.Tensor))


def _to_numpy(value: Any) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class Metadata:
    """Facts about one dataset, read and written as attributes (write-once per key).

    Example:
        >>> meta = Metadata(name="toy").set(thing_classes=["cat", "dog"])
        >>> meta.thing_classes, meta.get("thing_colors", "none")
        (['cat', 'dog'], 'none')
        >>> meta.thing_classes = ["cat", "dog"]  # equal value: a no-op
        >>> sorted(meta.as_dict())
        ['name', 'thing_classes']
    """

    name: str

    def __init__(self, name: str | None = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_lock", threading.RLock())
        if name is not None:
            kwargs = {"name": name, **kwargs}
        if kwargs:
            self.set(**kwargs)

    # ------------------------------------------------------------------ reading
    def __getattr__(self, key: str) -> Any:
        # Only called when normal lookup failed, i.e. the key is not set.
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        if key in LEGACY_KEYS:
            new_key = LEGACY_KEYS[key]
            self._warn_legacy(key, new_key)
            return getattr(self, new_key)
        keys = self._keys()
        raise AttributeError(
            f"metadata of dataset {self._label()} has no key {key!r}.{did_you_mean(key, keys)} "
            f"Keys present: {', '.join(keys) if keys else '(none)'}")

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when it is not set."""
        key = self._resolve(key)
        return self.__dict__.get(key, default) if not key.startswith("_") else default

    def as_dict(self) -> dict[str, Any]:
        """A shallow copy of every key and value."""
        values = {}  # a loop, not a comprehension: one function fewer on every record's path
        for key, value in self.__dict__.items():
            if not key.startswith("_"):
                values[key] = value
        return values

    def __contains__(self, key: object) -> bool:
        return (isinstance(key, str) and not key.startswith("_")
                and self._resolve(key) in self.__dict__)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    # ------------------------------------------------------------------ writing
    def __setattr__(self, key: str, value: Any) -> None:
        self.set(**{key: value})

    def set(self, **kwargs: Any) -> Metadata:
        """Set several keys at once, atomically (a conflict sets none: MetadataConflictError
        shows both values); returns self."""
        resolved: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key.startswith("_"):
                raise AttributeError(f"metadata keys must not start with '_': {key!r}")
            new_key = self._resolve(key, warn=True)
            value = plain_value(value)  # OmegaConf containers are stored as lists / dicts
            if new_key in resolved and not values_equal(resolved[new_key], value):
                raise MetadataConflictError(
                    f"metadata of dataset {self._label()}: {key!r} and {new_key!r} given "
                    f"different values in one set(): {short_repr(resolved[new_key], 200)} vs "
                    f"{short_repr(value, 200)}")
            resolved[new_key] = value
        with self._lock:
            for key, value in resolved.items():
                if key in self.__dict__ and not values_equal(self.__dict__[key], value):
                    raise MetadataConflictError(
                        f"metadata key {key!r} of dataset {self._label()} is already set to "
                        f"{short_repr(self.__dict__[key], 200)}; refusing to change it to "
                        f"{short_repr(value, 200)}. "
                        f"Use MetadataCatalog.remove({self.get('name')!r}) to start over.")
            for key, value in resolved.items():
                if key not in self.__dict__:
                    self.__dict__[key] = value
        return self

    def __delattr__(self, key: str) -> None:
        raise AttributeError(
            f"metadata keys cannot be deleted (key {key!r} of dataset {self._label()}); "
            "use MetadataCatalog.remove(name) to start over")

    # ------------------------------------------------------------------ helpers
    def _keys(self) -> list[str]:
        return [k for k in self.__dict__ if not k.startswith("_")]

    def _label(self) -> str:
        name = self.__dict__.get("name")
        return repr(name) if name is not None else "(unnamed)"

    def _resolve(self, key: str, warn: bool = True) -> str:
        new_key = LEGACY_KEYS.get(key)
        if new_key is None:
            return key
        if warn:
            self._warn_legacy(key, new_key)
        return new_key

    @staticmethod
    def _warn_legacy(key: str, new_key: str) -> None:
        warnings.warn(f"metadata key {key!r} is renamed to {new_key!r}; using {new_key!r}",
                      DeprecationWarning, stacklevel=4)
        logger.warning("metadata key %r is renamed to %r", key, new_key)

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={short_repr(v, 60)}" for k, v in self.as_dict().items())
        return f"Metadata({items})"

    def __getstate__(self) -> dict[str, Any]:
        return self.as_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_lock", threading.RLock())
        self.__dict__.update(state)


V = TypeVar("V")

_MISSING: Any = object()


class NamedContainer(Generic[V]):
    """Names mapped to entries, with the catalog management methods; subclasses add how
    entries are made and override the hooks below."""

    def __init__(self, kind: str, *, missing_error: Callable[[str], KeyError] | None = None,
                 duplicate_error: Callable[[str], ValueError] = ValueError,
                 remove_missing_ok: bool = False, owner: str | None = None) -> None:
        self._registry: Registry[V] = Registry(kind, missing_error=missing_error,
                                               duplicate_error=duplicate_error, replace_same=False,
                                               owner=owner)
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


class _MetadataCatalog(NamedContainer[Metadata]):
    """The per-dataset metadata registry; use the singleton :data:`MetadataCatalog`.

    Example:
        >>> from catalog import DatasetCatalog
        >>> DatasetCatalog.register("doc_meta", list)
        >>> meta = MetadataCatalog.get("doc_meta")   # created on first use
        >>> meta.thing_classes = ["person"]
        >>> MetadataCatalog.get("doc_meta").thing_classes
        ['person']
        >>> MetadataCatalog.remove("doc_meta"); DatasetCatalog.remove("doc_meta")
    """

    def __init__(self) -> None:
        super().__init__("metadata", remove_missing_ok=True, owner="MetadataCatalog")
        # Called with a name that has no Metadata yet: registers a builtin dataset (and its
        # metadata) on first use. Installed by catalog.formats.builtin.
        self._on_missing: Callable[[str], bool] | None = None
        # The dataset names, to warn about metadata of an unknown name (set by DatasetCatalog).
        self.datasets: NamedContainer[Any] | None = None

    def get(self, name: str, *, warn_unregistered: bool = True) -> Metadata:
        """The Metadata of ``name``, created on first use (a builtin dataset name registers
        the dataset). Creating it for a name that is no registered dataset logs a
        rate-limited warning with close matches, unless ``warn_unregistered=False``."""
        check_name(name, "dataset")
        meta = self._registry.find(name)
        if meta is not None:
            return meta
        hook = self._on_missing
        if hook is not None:
            hook(name)
        with self._lock:
            meta = self._registry.find(name)
            created = meta is None
            if created:
                meta = self._registry.add(name, Metadata(name=name))
        if created and warn_unregistered:
            self._warn_if_unregistered(name)
        return meta

    def _warn_if_unregistered(self, name: str) -> None:
        datasets = self.datasets
        if datasets is None or name in datasets:
            return
        candidates = [n for n in datasets.list() + self.list() if n != name]
        hint = did_you_mean(name, candidates)
        warn_limited(
            logger, "MetadataCatalog.get",
            "MetadataCatalog.get(%r): no dataset %r is registered; created empty metadata for "
            "it (a typo?).%s Register the dataset before setting its metadata to silence this.",
            name, name, hint)

    def snapshot(self) -> tuple[dict[str, Metadata], Any]:
        """Copies of every Metadata (keys set later are dropped by :meth:`restore`)."""
        entries, extra = super().snapshot()
        return {name: copy.copy(meta) for name, meta in entries.items()}, extra


#: The process-wide metadata registry.
MetadataCatalog = _MetadataCatalog()
