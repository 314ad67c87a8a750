"""Registry: the one name → object lookup of catmap, with the one "did you mean".

Datasets, metadata, Compose steps (``TRANSFORMS``), augmentations named in configs and training
samplers (``SAMPLERS``) are all looked up here, so an unknown name always gets the same message
with its close matches.

Example:
    >>> STEPS = Registry("step")
    >>> @STEPS.register()
    ... class Identity:
    ...     def __call__(self, x):
    ...         return x
    >>> STEPS.get("Identity")()(1)
    1
    >>> STEPS.get("Identty")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    catalog.registry.RegistryKeyError: step 'Identty' is not registered. Did you mean: Identity?...
"""

from __future__ import annotations

import difflib
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, overload

from ._common import CatmapErrorWithFields, short_repr

__all__ = ["Registry", "RegistryKeyError", "check_name", "close_matches", "did_you_mean",
           "unknown_name_message"]

T = TypeVar("T")
V = TypeVar("V")

#: How alike a registered name must be to a wrong one to be suggested (difflib ratio).
MATCH_CUTOFF = 0.6

_MISSING: Any = object()


class RegistryKeyError(CatmapErrorWithFields, KeyError):
    """A name was looked up that is not registered (fields ``name``, ``kind``)."""

    field_names = ("name", "kind")

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


def close_matches(name: object, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The (at most ``n``) candidates most like ``name``, best first."""
    return difflib.get_close_matches(str(name), list(candidates), n=n, cutoff=MATCH_CUTOFF)


def did_you_mean(name: object, candidates: Iterable[str]) -> str:
    """``" Did you mean: a, b?"`` for the close matches of ``name``, or ``""`` when none."""
    close = close_matches(name, candidates)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def unknown_name_message(kind: str, name: object, candidates: Iterable[str]) -> str:
    """The message for an unknown ``name``: the close matches, then every candidate.

    Example:
        >>> print(unknown_name_message("dataset", "toy_trian", ["toy_train", "voc"]))
        dataset 'toy_trian' is not registered. Did you mean: toy_train? Registered: toy_train, voc
    """
    names = list(candidates)
    listed = ", ".join(names) if names else "(none)"
    hint = did_you_mean(name, names)
    return f"{kind} {name!r} is not registered.{hint} Registered: {listed}"


class Registry(Generic[V]):
    """Maps names to objects; thread-safe. ``kind`` names them in messages; the names in
    ``module.__all__`` are found too (registered ones win); ``missing_error`` /
    ``duplicate_error`` are the errors raised; ``replace_same`` makes registering the same
    object again a no-op; ``owner`` is named in the duplicate message (``"DatasetCatalog"``).

    Example:
        >>> import json
        >>> CODECS = Registry("codec", module=json)  # the names in json.__all__
        >>> CODECS.get("dumps")([1]), "loads" in CODECS, "scanner" in CODECS
        ('[1]', True, False)
    """

    def __init__(self, kind: str, *, module: types.ModuleType | None = None,
                 missing_error: Callable[[str], KeyError] | None = None,
                 duplicate_error: Callable[[str], ValueError] = ValueError,
                 replace_same: bool = True, owner: str | None = None) -> None:
        self.kind = kind
        self._owner = owner
        self._module = module
        self._missing_error = missing_error
        self._duplicate_error = duplicate_error
        self._replace_same = replace_same
        self._items: dict[str, V] = {}
        self._lock = threading.RLock()

    @overload
    def register(self, name: str | None = None) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T) -> T: ...

    def register(self, name: Any = None, obj: Any = _MISSING) -> Any:
        """Register ``obj`` under ``name`` (its ``__name__`` when omitted): ``@REG.register()``,
        ``@REG.register``, ``@REG.register("Name")`` or ``REG.register("Name", obj)``."""
        if name is not None and not isinstance(name, str):
            if callable(name) and obj is _MISSING:  # @REG.register without parentheses
                return self.add(name.__name__, name)
            raise TypeError(f"a {self.kind} name must be a str, got {type(name).__name__}: {name!r}")

        def decorator(target: T) -> T:
            return self.add(name or target.__name__, target)  # type: ignore[attr-defined]

        return decorator if obj is _MISSING else decorator(obj)

    def add(self, name: str, obj: Any) -> Any:
        """Register ``obj`` under ``name`` and return ``obj``."""
        check_name(name, self.kind)
        with self._lock:
            existing = self._items.get(name, _MISSING)
            if existing is not _MISSING and not (self._replace_same and existing is obj):
                if self._owner:
                    remedy = f"; call {self._owner}.remove({name!r}) first to replace it"
                else:
                    remedy = f" to {short_repr(existing)}; pop it first to replace it"
                raise self._duplicate_error(f"{self.kind} {name!r} is already registered{remedy}")
            self._items[name] = obj
        return obj

    def get(self, name: str) -> V:
        """The object registered under ``name`` (or found in the backing module)."""
        found = self.find(name, _MISSING)
        if found is _MISSING:
            raise self.unknown(name)
        return found

    def find(self, name: object, default: Any = None) -> Any:
        """The object registered under ``name``, or ``default`` (no error)."""
        with self._lock:
            found = self._items.get(name, _MISSING) if isinstance(name, str) else _MISSING
        if (found is _MISSING and self._module is not None and isinstance(name, str)
                and name in self._module_names()):
            found = getattr(self._module, name, _MISSING)
        return default if found is _MISSING else found

    def unknown(self, name: object, candidates: Iterable[str] | None = None) -> KeyError:
        """The error for an unknown ``name`` (close matches among ``candidates``, by default
        the registered names)."""
        names = self.names() if candidates is None else list(candidates)
        message = unknown_name_message(self.kind, name, names)
        if self._missing_error is not None:
            return self._missing_error(message)
        return RegistryKeyError(message, name=name, kind=self.kind)

    def _module_names(self) -> list[str]:
        if self._module is None:
            return []
        return [n for n in getattr(self._module, "__all__", ()) if isinstance(n, str)]

    def names(self) -> list[str]:
        """The names, in registration order, then those of the backing module not shadowed."""
        with self._lock:
            own = list(self._items)
        return own + [n for n in self._module_names() if n not in self._items]

    def __contains__(self, name: object) -> bool:
        return self.find(name, _MISSING) is not _MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def items(self) -> list[tuple[str, V]]:
        """``(name, object)`` pairs of the registered names (the backing module's excluded)."""
        with self._lock:
            return list(self._items.items())

    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Unregister ``name`` and return its object (as ``dict.pop``)."""
        with self._lock:
            found = self._items.pop(name, _MISSING) if isinstance(name, str) else _MISSING
        if found is not _MISSING:
            return found
        if default is not _MISSING:
            return default
        raise self.unknown(name)

    def clear(self) -> None:
        """Unregister every name (the backing module's names stay)."""
        with self._lock:
            self._items.clear()

    def snapshot(self) -> dict[str, V]:
        """A copy of the registrations, for :meth:`restore`."""
        with self._lock:
            return dict(self._items)

    def restore(self, state: dict[str, V]) -> None:
        """Put back the registrations of a :meth:`snapshot`."""
        with self._lock:
            self._items = dict(state)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, [{', '.join(self.names())}])"


def check_name(name: object, kind: str) -> None:
    """Raise TypeError / ValueError unless ``name`` is a non-empty str."""
    if not isinstance(name, str):
        raise TypeError(f"a {kind} name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError(f"a {kind} name must not be empty")
