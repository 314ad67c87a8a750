"""The messages of :mod:`catalog.validation`: how a check names the value, its type and range.

Example:
    >>> int_kind(1, None), float_range(0.0, 1.0, None, None), bound_text(2**32)
    ('a positive int', 'in [0, 1]', '2**32')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "ErrorSpec",
    "bound_text",
    "failure",
    "float_kind",
    "float_range",
    "float_value",
    "int_kind",
    "int_range",
    "short_repr",
]

#: An exception class / factory ``message -> exception``, or a pair (wrong type, wrong value).
ErrorSpec = (
    Callable[[str], BaseException]
    | tuple[Callable[[str], BaseException], Callable[[str], BaseException]]
)


def short_repr(value: Any, limit: int = 80) -> str:
    """The repr of ``value`` cut to ``limit`` characters (safe for huge ints)."""
    try:
        text = repr(value)
    except ValueError:  # an int past the interpreter's digit limit
        text = f"<an int of {int(value).bit_length()} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _big_power_of_two(value: float) -> bool:
    return isinstance(value, int) and value >= 2**16 and value & (value - 1) == 0


def bound_text(value: float) -> str:
    """A bound as the message shows it (``2**32`` for a large power of two)."""
    if _big_power_of_two(value):
        return f"2**{int(value).bit_length() - 1}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _errors(error: ErrorSpec) -> tuple[Callable[[str], BaseException], ...]:
    return tuple(error) if isinstance(error, tuple) else (error, error)


def failure(error: ErrorSpec, wrong_type: bool, where: str, name: str, text: str) -> BaseException:
    """The error to raise: ``<where>: <name> must be <text>``, of the type ``error`` gives
    for a wrong type or a wrong value."""
    for_type, for_value = _errors(error)
    prefix = f"{where}: " if where else ""
    return (for_type if wrong_type else for_value)(f"{prefix}{name} must be {text}")


def int_range(minimum: int | None, maximum: int | None) -> str:
    """The range phrase of an int check: "in [0, 10]", ">= 1", "<= 5" or ""."""
    if minimum is not None and maximum is not None:
        if _big_power_of_two(maximum + 1):
            return f"in [{minimum}, {bound_text(maximum + 1)})"
        return f"in [{minimum}, {bound_text(maximum)}]"
    if minimum is not None:
        return f">= {minimum}"
    return "" if maximum is None else f"<= {bound_text(maximum)}"


def int_kind(minimum: int | None, maximum: int | None) -> str:
    """The type phrase of an int check: "a positive int", "a non-negative int below 2**32"."""
    if minimum == 0 and maximum is not None:
        if _big_power_of_two(maximum + 1):
            return f"a non-negative int below {bound_text(maximum + 1)}"
        return f"a non-negative int up to {bound_text(maximum)}"
    if minimum == 0:
        return "a non-negative int"
    if minimum == 1 and maximum is None:
        return "a positive int"
    text = int_range(minimum, maximum)
    return f"an int {text}" if text else "an int"


def float_range(
    minimum: float | None, maximum: float | None, above: float | None, below: float | None
) -> str:
    """The range phrase of a float check: "in (0, 1]", "positive", ">= 2" or ""."""
    low = (
        f"({bound_text(above)}"
        if above is not None
        else minimum is not None and f"[{bound_text(minimum)}"
    )
    high = (
        f"{bound_text(below)})"
        if below is not None
        else maximum is not None and f"{bound_text(maximum)}]"
    )
    if low and high:
        return f"in {low}, {high}"
    if above is not None:
        return "positive" if above == 0 else f"> {bound_text(above)}"
    if minimum is not None:
        return "non-negative" if minimum == 0 else f">= {bound_text(minimum)}"
    if below is not None:
        return "negative" if below == 0 else f"< {bound_text(below)}"
    return "" if maximum is None else f"<= {bound_text(maximum)}"


def float_kind(span: str, finite: bool) -> str:
    """The type phrase: "a number in (0, 1]", "a positive finite number", "a finite number"."""
    if span.startswith("in "):
        return f"a number {span}"
    number = "finite number" if finite else "number"
    if span.startswith(("<", ">")):
        return f"a {number} {span}"
    return f"a {span} {number}" if span else f"a {number}"


def float_value(span: str, finite: bool) -> str:
    """The range phrase: "in (0, 1]", "positive and finite", "finite", "a number (not NaN)"."""
    if span.startswith("in ") or (span and not finite):
        return span
    if finite:
        return f"{span} and finite" if span else "finite"
    return "a number (not NaN)"
