"""catalog._common: the one set of argument checks used by catalog, mappers and samplers."""

from __future__ import annotations

import functools
import math
import pathlib
import re

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog._common import (
    CatmapError,
    SEED_LIMIT,
    check_bool,
    check_float,
    check_int,
    check_list,
    check_positive_size,
    check_seed,
    check_str,
    is_int,
    is_number,
    validator,
)

FAST = settings(max_examples=200, deadline=None)
NOT_INTS = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.none(),
    st.just(np.bool_(True)),
    st.just([1]),
)
bounds = st.one_of(st.none(), st.integers(-(2**70), 2**70))


class TypedError(CatmapError, ValueError):
    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key


# ----------------------------------------------------------------------------- predicates
@pytest.mark.parametrize(
    "value,integer,number",
    [
        (3, True, True),
        (np.int64(-2), True, True),
        (np.uint64(2**64 - 1), True, True),
        (True, False, False),
        (np.bool_(False), False, False),
        (3.0, False, True),
        (np.float32(0.5), False, True),
        (float("nan"), False, True),
        ("3", False, False),
        (None, False, False),
    ],
)
def test_predicates(value, integer, number):
    assert is_int(value) is integer
    assert is_number(value) is number


# ----------------------------------------------------------------------------- check_int
@FAST
@given(value=st.integers(-(2**80), 2**80), low=bounds, high=bounds, numpy=st.booleans())
def test_check_int_accepts_exactly_the_ints_in_range(value, low, high, numpy):
    candidate = np.int64(value) if numpy and -(2**63) <= value < 2**63 else value
    inside = (low is None or value >= low) and (high is None or value <= high)
    if inside:
        result = check_int(candidate, "n", minimum=low, maximum=high)
        assert result == value and type(result) is int
    else:
        with pytest.raises(ValueError) as info:
            check_int(candidate, "n", minimum=low, maximum=high, where="Owner")
        assert not isinstance(info.value, TypeError)
        assert str(info.value).startswith("Owner: n must be ")


@FAST
@given(value=NOT_INTS)
def test_check_int_refuses_bools_floats_and_the_rest_as_a_type_error(value):
    with pytest.raises(TypeError, match=r"^Sampler: size must be a positive int, got "):
        check_int(value, "size", minimum=1, where="Sampler")


def test_check_int_messages_name_owner_argument_and_value():
    with pytest.raises(ValueError, match=r"^Loader: batch_size must be >= 1, got 0$"):
        check_int(0, "batch_size", minimum=1, where="Loader")
    with pytest.raises(TypeError, match=r"^batch_size must be an int, got float 2\.5$"):
        check_int(2.5, "batch_size")
    with pytest.raises(ValueError, match=r"in \[1, 2\*\*62\), got 0"):
        check_int(0, "size", minimum=1, maximum=2**62 - 1)
    with pytest.raises(ValueError, match=r"in \[2, 5\], got 6"):
        check_int(6, "n", minimum=2, maximum=5)
    with pytest.raises(TypeError, match=r"a non-negative int below 2\*\*64 or None, got str"):
        check_int("7", "seed", minimum=0, maximum=2**64 - 1, optional=True)


def test_check_int_optional_and_huge_values():
    assert check_int(None, "n", optional=True) is None
    with pytest.raises(TypeError, match="got NoneType None"):
        check_int(None, "n")
    with pytest.raises(ValueError, match=r"<= 3, got <an int of 16610 bits>"):
        check_int(10**5000, "n", maximum=3)  # past the int-to-str digit limit: still a message


def test_error_spec_single_pair_and_factory():
    with pytest.raises(TypedError, match="n must be an int"):
        check_int("x", "n", error=TypedError)
    with pytest.raises(TypedError, match="n must be >= 0"):
        check_int(-1, "n", minimum=0, error=TypedError)
    with pytest.raises(KeyError):
        check_int("x", "n", error=(KeyError, TypedError))
    with pytest.raises(TypedError):
        check_int(-1, "n", minimum=0, error=(KeyError, TypedError))
    with pytest.raises(TypedError) as info:
        check_int(-1, "n", minimum=0, error=functools.partial(TypedError, key="n"))
    assert info.value.key == "n"


# ----------------------------------------------------------------------------- check_float
float_bounds = st.one_of(st.none(), st.floats(-1e6, 1e6))


@FAST
@given(
    value=st.one_of(st.floats(), st.integers(-(2**1100), 2**1100)),
    minimum=float_bounds,
    maximum=float_bounds,
    above=float_bounds,
    below=float_bounds,
    finite=st.booleans(),
)
def test_check_float_inclusive_and_exclusive_bounds(value, minimum, maximum, above, below, finite):
    try:
        number = float(value)
    except OverflowError:  # an int past the float range counts as an infinity
        number = math.inf if value > 0 else -math.inf
    inside = (
        not math.isnan(number)
        and (not finite or math.isfinite(number))
        and (minimum is None or number >= minimum)
        and (maximum is None or number <= maximum)
        and (above is None or number > above)
        and (below is None or number < below)
    )
    options = dict(minimum=minimum, maximum=maximum, above=above, below=below, finite=finite)
    if inside:
        result = check_float(value, "x", **options)
        assert type(result) is float and result == number
    else:
        with pytest.raises(ValueError) as info:
            check_float(value, "x", where="Owner", **options)
        assert not isinstance(info.value, (TypeError, OverflowError))
        assert str(info.value).startswith("Owner: x must be ")


def test_check_float_messages():
    with pytest.raises(TypeError, match=r"^ratio must be a number in \(0, 1\], got str 'half'$"):
        check_float("half", "ratio", above=0, maximum=1)
    with pytest.raises(ValueError, match=r"^ratio must be in \(0, 1\], got 0$"):
        check_float(0, "ratio", above=0, maximum=1)
    with pytest.raises(ValueError, match=r"must be positive and finite, got inf"):
        check_float(math.inf, "w", above=0)
    with pytest.raises(TypeError, match="must be a positive finite number, got bool True"):
        check_float(True, "w", above=0)
    with pytest.raises(ValueError, match=r"must be a number \(not NaN\)"):
        check_float(math.nan, "t", finite=False)
    assert check_float(math.inf, "t", minimum=0, finite=False) == math.inf
    assert check_float(np.float32(0.25), "p") == 0.25
    assert check_float(None, "t", optional=True) is None


# ----------------------------------------------------------------------------- the small ones
def test_check_bool_accepts_only_true_and_false():
    assert check_bool(True, "shuffle") is True
    assert check_bool(np.bool_(False), "shuffle") is False
    for bad in (0, 1, "yes", None, 1.0):
        with pytest.raises(TypeError, match="shuffle must be true or false"):
            check_bool(bad, "shuffle")


@FAST
@given(seed=st.one_of(st.none(), st.integers(-(2**66), 2**66)))
def test_check_seed_range(seed):
    if seed is None or 0 <= seed < SEED_LIMIT:
        assert check_seed(seed) == seed
    else:
        with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
            check_seed(seed)


def test_check_seed_not_optional():
    with pytest.raises(TypeError, match="seed must be a non-negative int below 2"):
        check_seed(None, optional=False, where="SampleRandomness")
    assert check_seed(np.uint64(2**64 - 1), optional=False) == 2**64 - 1


def test_probability_size_str():
    assert check_float(1, "prob", minimum=0, maximum=1) == 1.0
    with pytest.raises(ValueError, match=r"prob must be in \[0, 1\], got 1.5"):
        check_float(1.5, "prob", minimum=0, maximum=1)
    assert check_positive_size(np.int16(0), allow_zero=True) == 0
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        check_positive_size(0)
    with pytest.raises(ValueError, match=r"in \[1, 4\]"):
        check_positive_size(5, maximum=4)
    assert check_str("a", "name") == "a"
    with pytest.raises(TypeError, match="name must be a str, got bytes"):
        check_str(b"a", "name")


def test_check_list():
    assert check_list([np.int8(1), 2], "sizes", check_int, what="ints") == [1, 2]
    assert check_list(None, "sizes", check_int, what="ints", optional=True) is None
    for bad in ("3,3", b"12", {"a": 1}, 3):
        with pytest.raises(TypeError, match="sizes must be a list of ints"):
            check_list(bad, "sizes", check_int, what="ints")
    with pytest.raises(TypedError, match="^C: sizes element 1 must be >= 1, got 0$"):
        check_list([1, 0], "sizes", check_int, what="ints", minimum=1, error=TypedError, where="C")


# ----------------------------------------------------------------------------- attrs
@attrs.define(kw_only=True)
class _Options:
    seed: int | None = attrs.field(default=None, validator=validator(check_seed, error=TypedError))
    ratio: float = attrs.field(
        default=0.5, validator=validator(check_float, above=0, maximum=1, error=TypedError)
    )


@FAST
@given(seed=st.one_of(st.none(), st.integers(-(2**65), 2**65), st.floats(), st.booleans()))
def test_attrs_validator_runs_the_very_check(seed):
    try:
        direct = check_seed(seed, "option 'seed'", error=TypedError)
    except TypedError as exc:
        with pytest.raises(TypedError) as info:
            _Options(seed=seed)
        assert str(info.value) == str(exc)
    else:
        assert _Options(seed=seed).seed == direct


def test_attrs_validator_names_the_option():
    with pytest.raises(TypedError, match=r"^option 'ratio' must be in \(0, 1\], got 2$"):
        _Options(ratio=2)


# ----------------------------------------------------------------------------- users
def test_sampler_constructor_and_config_share_the_check():
    from samplers import TrainingSampler, build_train_sampler
    from samplers.errors import SamplerConfigError

    with pytest.raises(SamplerConfigError) as direct:
        TrainingSampler(4, seed=-1, rank=0, world_size=1)
    with pytest.raises(SamplerConfigError) as by_name:
        build_train_sampler({"name": "TrainingSampler", "seed": -1}, [{}] * 4, rank=0, world_size=1)
    tail = r"seed must be in [0, 2**64), got -1"
    assert str(direct.value) == f"TrainingSampler: {tail}"
    assert str(by_name.value) == f"sampler TrainingSampler: option '{tail}".replace(
        "seed must", "seed' must"
    )


#: Files not converted yet (others were editing them); the lead converts them last (issue 15).
#: Trim this set as they are converted.
_NOT_YET_CONVERTED: set[str] = set()


def test_no_hand_written_int_check_outside_validation():
    root = pathlib.Path(__file__).resolve().parents[1]
    pattern = re.compile(r"isinstance\([^()]*, bool\)\s+or\s+not\s+isinstance")
    found = []
    for package in ("catalog", "mappers", "samplers"):
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name == "catalog/validation.py" or name in _NOT_YET_CONVERTED:
                continue
            text = path.read_text(encoding="utf-8")
            found += [f"{name}:{text[: m.start()].count(chr(10)) + 1}" for m in
                      pattern.finditer(text)]
    assert found == [], f"use catalog._common instead: {found}"
