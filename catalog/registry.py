"""A small name → object registry used for transforms and samplers chosen from configs."""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

__all__ = ["Registry", "RegistryKeyError"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RegistryKeyError(KeyError):
    """A name was looked up that is not registered; the message lists close matches."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry:
    """Maps names to classes or functions.

    Example:
        >>> TRANSFORMS = Registry("transform")
        >>> @TRANSFORMS.register()
        ... class Identity:
        ...     def __call__(self, x):
        ...         return x
        >>> TRANSFORMS.get("Identity")().__call__(1)
        1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Any] = {}
        self._lock = threading.Lock()

    @overload
    def register(self, name: str | None = None) -> Callable[[T], T]: ...

    def register(self, name: str | None = None, obj: Any = None) -> Any:
        """Register ``obj`` under ``name`` (its ``__name__`` when omitted).

        Usable as ``@REG.register()``, ``@REG.register("Name")`` or ``REG.register("Name", obj)``.

        Raises:
            TypeError: name is not a str.
            ValueError: the name is already registered to another object.
        """
        if name is not None and not isinstance(name, str):
            if callable(name) and obj is None:
                # @REG.register without parentheses.
                return self._add(name.__name__, name)
            raise TypeError(f"{self.kind} registry: name must be a str, got {type(name).__name__}")

        def decorator(target: T) -> T:
            return self._add(name or target.__name__, target)  # type: ignore[attr-defined]

        if obj is not None:
            return decorator(obj)
        return decorator

    def _add(self, name: str, target: Any) -> Any:
        with self._lock:
            existing = self._items.get(name)
            if existing is not None and existing is not target:
                raise ValueError(
                    f"{self.kind} registry: name {name!r} is already registered to {existing!r}"
                )
            self._items[name] = target
        return target

    def get(self, name: str) -> Any:
        """Return the object registered under ``name``.

        Raises:
            RegistryKeyError: (a KeyError) the name is unknown; lists close matches.
        """
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), list(self._items), n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise RegistryKeyError(
                f"no {self.kind} named {name!r}.{hint} Registered: {', '.join(sorted(self._items))}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, [{', '.join(sorted(self._items))}])"
