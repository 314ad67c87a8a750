"""One set of argument checks, shared by catalog, mappers and samplers (internal utility).

Every check takes the value, the argument's name, the error to raise and ``where`` (the owner
named in the message: a class, a function, a record); it returns the value normalized (a numpy
integer becomes an ``int``, a number a ``float``) or raises with a message that names the
owner, the argument and the value::

    ResumableBatchSampler: batch_size must be a positive int, got float 2.5

``error`` is one exception class (or any callable ``message -> exception``), used for every
failure, or a pair ``(for a wrong type, for a wrong value)``; the default is
``(TypeError, ValueError)``. So the samplers keep raising ``SamplerConfigError`` and the mappers
their own typed errors. A ``bool`` is never an int or a number here.

:func:`validator` turns any check into an attrs validator, so option classes (e.g. the sampler
options of ``build_train_sampler``) run the very checks the constructors run.

This module imports nothing of catmap: any package may use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, overload

import numpy as np

from .validation_messages import (
    ErrorSpec,
    failure,
    float_kind,
    float_range,
    float_value,
    int_kind,
    int_range,
    short_repr,
)

__all__ = [
    "SEED_LIMIT",
    "ErrorSpec",
    "check_bool",
    "check_float",
    "check_int",
    "check_list",
    "check_positive_size",
    "check_probability",
    "check_seed",
    "check_str",
    "is_int",
    "is_number",
    "validator",
]

#: Seeds are ints in ``[0, SEED_LIMIT)``: every 64-bit unsigned value (saved states hold them).
SEED_LIMIT = 2**64


_DEFAULT_ERROR: ErrorSpec = (TypeError, ValueError)
_T = TypeVar("_T")

if TYPE_CHECKING:  # the overloads' keyword options; typing only
    from typing_extensions import Unpack

_No = Literal[False]  # optional=False (the default): the checks return no None


class _Options(TypedDict, total=False):
    """The keyword options every check takes (the overloads of :func:`check_int` and
    :func:`check_float` spell them once)."""

    error: ErrorSpec
    where: str


class _Ints(_Options, total=False):
    """The keyword options of :func:`check_int`, besides ``optional``."""

    minimum: int | None
    maximum: int | None


class _Floats(_Options, total=False):
    """The keyword options of :func:`check_float`, besides ``optional``."""

    minimum: float | None
    maximum: float | None
    above: float | None
    below: float | None
    finite: bool


def _wrong_type(
    error: ErrorSpec, where: str, name: str, kind: str, value: Any, optional: bool = False
) -> BaseException:
    """The error for a value of the wrong type: ``<name> must be <kind>[ or None], got <type>
    <value>``."""
    got = f"got {type(value).__name__} {short_repr(value)}"
    return failure(error, True, where, name, f"{kind}{' or None' if optional else ''}, {got}")


def is_int(value: Any) -> bool:
    """True for a Python or numpy integer; False for a bool (or ``numpy.bool_``) and a float.

    Example:
        >>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0)
        (True, True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """True for a Python or numpy int or float (finite or not); False for a bool.

    Example:
        >>> is_number(0.5), is_number(np.float32(2)), is_number(False), is_number("1")
        (True, True, False, False)
    """
    return is_int(value) or isinstance(value, (float, np.floating))


@overload
def check_int(value: Any, name: str, *, optional: _No = ..., **kw: Unpack[_Ints]) -> int: ...
@overload
def check_int(value: Any, name: str, *, optional: bool, **kw: Unpack[_Ints]) -> int | None: ...
def check_int(
    value: Any,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
    error: ErrorSpec = _DEFAULT_ERROR,
    where: str = "",
) -> int | None:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (both inclusive, both optional).

    Args:
        value: the value to check: a Python or numpy integer (a bool is refused).
        name: the argument's name, as the message shows it.
        minimum, maximum: inclusive bounds; None for none.
        optional: also accept None (returned as it is).
        error: the exception to raise (see the module docstring).
        where: the owner named first in the message (a class or function name).

    Returns:
        The value as a Python ``int`` (or None when ``optional``).

    Raises:
        The first error of ``error`` for a wrong type, the second for a value out of range.

    Example:
        >>> check_int(np.int64(3), "batch_size", minimum=1)
        3
        >>> check_int(0, "batch_size", minimum=1, where="Loader")
        Traceback (most recent call last):
        ...
        ValueError: Loader: batch_size must be >= 1, got 0
    """
    if value is None and optional:
        return None
    if not is_int(value):
        raise _wrong_type(error, where, name, int_kind(minimum, maximum), value, optional)
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise failure(
            error, False, where, name, f"{int_range(minimum, maximum)}, got {short_repr(number)}"
        )
    return number


@overload
def check_float(value: Any, name: str, *, optional: _No = ..., **kw: Unpack[_Floats]) -> float: ...
@overload
def check_float(value: Any, name: str, *, optional: bool, **kw: Unpack[_Floats]) -> float | None:
    ...
def check_float(
    value: Any,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    finite: bool = True,
    optional: bool = False,
    error: ErrorSpec = _DEFAULT_ERROR,
    where: str = "",
) -> float | None:
    """``value`` as a ``float``: any Python or numpy number (not a bool) within the bounds.

    Args:
        value: the value to check.
        name: the argument's name, as the message shows it.
        minimum, maximum: inclusive bounds (``>=``, ``<=``); None for none.
        above, below: exclusive bounds (``>``, ``<``); None for none.
        finite: refuse infinities (NaN is refused always: it is in no range).
        optional: also accept None (returned as it is).
        error: the exception to raise (see the module docstring).
        where: the owner named first in the message.

    Returns:
        The value as a Python ``float`` (or None when ``optional``).

    Example:
        >>> check_float(1, "subset_ratio", above=0, maximum=1)
        1.0
        >>> check_float(0, "subset_ratio", above=0, maximum=1)
        Traceback (most recent call last):
        ...
        ValueError: subset_ratio must be in (0, 1], got 0
    """
    if value is None and optional:
        return None
    span = float_range(minimum, maximum, above, below)
    if not is_number(value):
        raise _wrong_type(error, where, name, float_kind(span, finite), value, optional)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.inf if value > 0 else -math.inf
    bad = (
        math.isnan(number)
        or (finite and math.isinf(number))
        or (minimum is not None and not number >= minimum)
        or (maximum is not None and not number <= maximum)
        or (above is not None and not number > above)
        or (below is not None and not number < below)
    )
    if bad:
        raise failure(
            error, False, where, name, f"{float_value(span, finite)}, got {short_repr(value)}"
        )
    return number


def check_bool(
    value: Any, name: str, *, error: ErrorSpec = _DEFAULT_ERROR, where: str = ""
) -> bool:
    """``value`` as a ``bool``: only ``True``, ``False`` (or a ``numpy.bool_``), never 0 / 1.

    Example:
        >>> check_bool(np.bool_(True), "shuffle")
        True
        >>> check_bool("yes", "shuffle", where="TrainingSampler")
        Traceback (most recent call last):
        ...
        TypeError: TrainingSampler: shuffle must be true or false, got str 'yes'
    """
    if not isinstance(value, (bool, np.bool_)):
        raise _wrong_type(error, where, name, "true or false", value)
    return bool(value)


def check_str(value: Any, name: str, *, error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> str:
    """``value`` if it is a ``str``.

    Example:
        >>> check_str(3, "name", where="config")
        Traceback (most recent call last):
        ...
        TypeError: config: name must be a str, got int 3
    """
    if not isinstance(value, str):
        raise _wrong_type(error, where, name, "a str", value)
    return value


def check_seed(
    value: Any,
    name: str = "seed",
    *,
    optional: bool = True,
    error: ErrorSpec = _DEFAULT_ERROR,
    where: str = "",
) -> int | None:
    """A seed: an int in ``[0, 2**64)``, or None (draw one later) unless ``optional=False``.

    Example:
        >>> check_seed(None), check_seed(np.uint64(7))
        (None, 7)
    """
    return check_int(
        value, name, minimum=0, maximum=SEED_LIMIT - 1, optional=optional, error=error, where=where
    )


def check_probability(
    value: Any, name: str, *, error: ErrorSpec = _DEFAULT_ERROR, where: str = ""
) -> float:
    """A probability: a number in ``[0, 1]``, as a float.

    Example:
        >>> check_probability(1, "prob")
        1.0
    """
    return check_float(value, name, minimum=0.0, maximum=1.0, error=error, where=where)


def check_positive_size(
    value: Any,
    name: str = "size",
    *,
    allow_zero: bool = False,
    maximum: int | None = None,
    error: ErrorSpec = _DEFAULT_ERROR,
    where: str = "",
) -> int:
    """A size or count: an int ``>= 1`` (``>= 0`` with ``allow_zero``), up to ``maximum``.

    Example:
        >>> check_positive_size(np.int32(4), "batch_size")
        4
    """
    return check_int(
        value, name, minimum=0 if allow_zero else 1, maximum=maximum, error=error, where=where
    )


def check_list(
    value: Any,
    name: str,
    check: Callable[..., _T],
    *,
    what: str,
    element: str = "element",
    optional: bool = False,
    error: ErrorSpec = _DEFAULT_ERROR,
    where: str = "",
    **options: Any,
) -> list[_T] | None:
    """A list (or tuple) whose every element passes ``check(item, ..., **options)``.

    Args:
        value: the value to check (a str, bytes or mapping is refused).
        name: the argument's name.
        check: the element check, e.g. :func:`check_int`.
        what: the elements, plural, for the message (e.g. ``"ints"``).
        element: element ``i`` is named ``f"{name} {element} {i}"`` in messages.
        optional: also accept None (returned as it is).
        error, where: as for every check; passed to ``check`` too.
        **options: passed to ``check`` (e.g. ``minimum=0``).

    Example:
        >>> check_list((1, np.int64(2)), "sizes", check_int, what="ints", minimum=0)
        [1, 2]
        >>> check_list([1, 0], "weights", check_float, what="numbers", element="of part", above=0)
        Traceback (most recent call last):
        ...
        ValueError: weights of part 1 must be positive and finite, got 0
    """
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _wrong_type(error, where, name, f"a list of {what}", value, optional)
    return [
        check(item, f"{name} {element} {i}", error=error, where=where, **options)
        for i, item in enumerate(value)
    ]


def validator(
    check: Callable[..., Any], /, *, error: ErrorSpec = _DEFAULT_ERROR, **options: Any
) -> Callable[[Any, Any, Any], None]:
    """An attrs validator that runs ``check(value, f"option {name!r}", error=error, **options)``.

    Example:
        >>> import attrs
        >>> @attrs.define
        ... class Options:
        ...     seed: int | None = attrs.field(default=None, validator=validator(check_seed))
        >>> Options(seed=-1)
        Traceback (most recent call last):
        ...
        ValueError: option 'seed' must be in [0, 2**64), got -1
    """

    def run(instance: Any, attribute: Any, value: Any) -> None:
        check(value, f"option {attribute.name!r}", error=error, **options)

    run.__name__ = f"validate_{getattr(check, '__name__', 'value')}"
    run.__qualname__ = run.__name__
    return run
