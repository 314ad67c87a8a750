"""Count the work a call does, for tests that bound work instead of wall-clock time.

The project's tests never assert on elapsed time (a slow or a fast machine would fool them);
they count what was done: calls of a function, items it was given. A budget turns runaway work
into an immediate test failure instead of a hang.

Example:
    >>> import types
    >>> box = types.SimpleNamespace(f=lambda n: n)
    >>> class Patch:  # what pytest's monkeypatch fixture offers
    ...     def setattr(self, owner, name, value):
    ...         setattr(owner, name, value)
    >>> counter = count_calls(Patch(), box, "f", budget=2)
    >>> box.f(5), counter.calls
    (5, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class WorkBudgetExceeded(AssertionError):
    """A counted function ran more often (or on more items) than the test allows."""


class CallCounter:
    """Calls of one function (and, with ``size``, the items they were given).

    Attributes:
        calls: how many times the function ran.
        items: the sum of ``size(*args, **kwargs)`` over the calls (0 without ``size``).
    """

    def __init__(
        self,
        name: str,
        budget: int | None = None,
        size: Callable[..., int] | None = None,
        item_budget: int | None = None,
    ) -> None:
        self.name = name
        self.budget = budget
        self.size = size
        self.item_budget = item_budget
        self.calls = 0
        self.items = 0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, counted (raises :class:`WorkBudgetExceeded` past a budget)."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.size is not None:
                self.items += int(self.size(*args, **kwargs))
            if self.budget is not None and self.calls > self.budget:
                raise WorkBudgetExceeded(f"{self.name} ran more than {self.budget} times")
            if self.item_budget is not None and self.items > self.item_budget:
                raise WorkBudgetExceeded(
                    f"{self.name} was given more than {self.item_budget} items"
                )
            return function(*args, **kwargs)

        return counted


def count_calls(
    monkeypatch: Any,
    owner: Any,
    name: str,
    *,
    budget: int | None = None,
    size: Callable[..., int] | None = None,
    item_budget: int | None = None,
) -> CallCounter:
    """Replace ``owner.name`` (a module function or a class attribute) by a counted wrapper.

    Args:
        monkeypatch: pytest's ``monkeypatch`` fixture (undoes the replacement after the test).
        owner: the module or class that holds the function the code under test looks up.
        name: the attribute's name.
        budget: most calls allowed; one more raises :class:`WorkBudgetExceeded`.
        size: how many items one call is given (called with the call's arguments).
        item_budget: most items allowed over all calls.

    Returns:
        The :class:`CallCounter` (read ``calls`` and ``items`` after the code under test ran).
    """
    counter = CallCounter(f"{getattr(owner, '__name__', owner)}.{name}", budget, size,
                          item_budget)
    monkeypatch.setattr(owner, name, counter.wrap(getattr(owner, name)))
    return counter
