"""catmap's internal vocabulary, used by catalog, mappers and samplers alike: the error base
classes and catalog's typed errors, argument checks, seed derivation, environment switches,
config values (OmegaConf, detectron2-style configs), a garbage-collector pause, and the
rate-limited warnings of :mod:`catalog._log_limits`.

Internal: import it as ``from catalog._common import ...``; the public errors are re-exported
by :mod:`catalog`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

# numpy >= 2 imports numpy.random lazily; import it now, not first on a background thread
# (a prefetcher) while another thread forks a worker, which would leave the import lock held.
import numpy.random  # noqa: F401

from ._log_limits import (  # noqa: F401  (re-exported: the library imports them from here)
    FIRST_PER_KIND, counts, log_summary, reset_counts, shared_counters, warn_limited)

# --------------------------------------------------------------------------------- errors


class CatmapError(Exception):
    """Base class of every error catmap raises on purpose.

    Pickles with its type, message and attributes, so an error raised in a DataLoader worker
    or another rank arrives whole; builds from one message string, as torch's re-raise does.
    """

    def __reduce__(self):
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls: type, args: tuple, state: dict) -> CatmapError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class CatmapErrorWithFields(CatmapError):
    """A CatmapError whose keyword arguments named in ``field_names`` become attributes
    (default None); the message stays the only positional argument."""

    field_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str = "", **fields: Any) -> None:
        unknown = sorted(set(fields) - set(self.field_names))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword argument(s) {unknown}; "
                f"its fields are {list(self.field_names)}")
        super().__init__(message)
        for name in self.field_names:
            setattr(self, name, fields.get(name))


class _PlainMessage:
    """Mixin for errors whose builtin base (KeyError, OSError) would reformat the message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DatasetNotRegisteredError(_PlainMessage, CatmapError, KeyError):
    """A dataset name was looked up that is not in the DatasetCatalog."""


class DatasetAlreadyRegisteredError(CatmapError, ValueError):
    """``DatasetCatalog.register`` was called with a name that is already registered."""


class MetadataConflictError(CatmapError, ValueError):
    """A metadata key was set to a value different from the one it already holds."""


class AnnotationFormatError(CatmapError, ValueError):
    """An annotation file is not in the expected format (wrong structure, refused format)."""


class EmptyDatasetError(CatmapError, ValueError):
    """A dataset (or a dataset after filtering) has no records."""


class RecordFormatError(CatmapError, ValueError):
    """A record does not follow the record format (missing or malformed key)."""


class CacheError(CatmapError, RuntimeError):
    """The on-disk cache could not be read or written."""


class SharedAttachError(CatmapError, RuntimeError):
    """A rank could not attach to the record buffer another local rank published."""


class NestedLoadError(CatmapError, RuntimeError):
    """``DatasetCatalog.get`` was called inside a dataset loader while the local ranks share
    records: the other ranks wait for the outer dataset and cannot load the inner one."""


class DatasetFileNotFoundError(_PlainMessage, CatmapErrorWithFields, FileNotFoundError):
    """A file or directory a registered dataset needs does not exist (e.g. a builtin dataset
    whose files are not under the dataset root). Fields: ``path``, ``dataset``, ``env_var``
    (the variable that chooses the dataset root).

    Example:
        >>> err = DatasetFileNotFoundError("not found", path="/d/coco", dataset="coco_2017_val")
        >>> isinstance(err, FileNotFoundError), err.path, str(err)
        (True, '/d/coco', 'not found')
    """

    field_names = ("path", "dataset", "env_var")


class MissingDependencyError(CatmapErrorWithFields, ImportError):
    """An optional dependency is not installed; fields ``extra`` and ``package``."""

    field_names = ("extra", "package")


def missing_dependency(package: str, extra: str, purpose: str) -> MissingDependencyError:
    """The error for ``package`` (installed by the catmap extra ``extra``) missing for
    ``purpose``."""
    return MissingDependencyError(
        f"{purpose} needs {package}, which is not installed: pip install \"catmap[{extra}]\" "
        f"(or pip install {package})", extra=extra, package=package)


class ConfigKeyError(_PlainMessage, CatmapError, KeyError):
    """A detectron2-style config lacks a key the call needs (``key``: the dotted key)."""

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key


# --------------------------------------------------------------------------------- checks
#
# Every check takes the value, the argument's name, ``error`` and ``where`` (the owner named
# first in the message) and returns the value normalized (numpy ints -> int) or raises
# "<where>: <name> must be <what>, got <type> <value>". ``error`` is one exception class (or
# callable message -> exception) or a pair (for a wrong type, for a wrong value). A bool is
# never an int or a number here.

#: An exception class / factory ``message -> exception``, or a pair (wrong type, wrong value).
ErrorSpec = (
    Callable[[str], BaseException]
    | tuple[Callable[[str], BaseException], Callable[[str], BaseException]]
)
#: Seeds are ints in ``[0, SEED_LIMIT)``: every 64-bit unsigned value (saved states hold them).
SEED_LIMIT = 2**64
_DEFAULT_ERROR: ErrorSpec = (TypeError, ValueError)
_T = TypeVar("_T")


def short_repr(value: Any, limit: int = 80) -> str:
    """The repr of ``value`` cut to ``limit`` characters (safe for huge ints)."""
    try:
        text = repr(value)
    except ValueError:  # an int past the interpreter's digit limit
        text = f"<an int of {int(value).bit_length()} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _big_power_of_two(value: float) -> bool:
    return isinstance(value, int) and value >= 2**16 and value & (value - 1) == 0


def _bound(value: float) -> str:
    if _big_power_of_two(value):
        return f"2**{int(value).bit_length() - 1}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _failure(error: ErrorSpec, wrong_type: bool, where: str, name: str, text: str):
    for_type, for_value = tuple(error) if isinstance(error, tuple) else (error, error)
    prefix = f"{where}: " if where else ""
    return (for_type if wrong_type else for_value)(f"{prefix}{name} must be {text}")


def _wrong_type(error, where, name, kind, value, optional=False) -> BaseException:
    got = f"got {type(value).__name__} {short_repr(value)}"
    return _failure(error, True, where, name, f"{kind}{' or None' if optional else ''}, {got}")


def _int_range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        if _big_power_of_two(maximum + 1):
            return f"in [{minimum}, {_bound(maximum + 1)})"
        return f"in [{minimum}, {_bound(maximum)}]"
    if minimum is not None:
        return f">= {minimum}"
    return "" if maximum is None else f"<= {_bound(maximum)}"


def _int_kind(minimum: int | None, maximum: int | None) -> str:
    if minimum == 0 and maximum is not None:
        if _big_power_of_two(maximum + 1):
            return f"a non-negative int below {_bound(maximum + 1)}"
        return f"a non-negative int up to {_bound(maximum)}"
    if minimum == 0:
        return "a non-negative int"
    if minimum == 1 and maximum is None:
        return "a positive int"
    text = _int_range(minimum, maximum)
    return f"an int {text}" if text else "an int"


def _float_range(minimum, maximum, above, below) -> str:
    low = f"({_bound(above)}" if above is not None else minimum is not None and f"[{_bound(minimum)}"
    high = f"{_bound(below)})" if below is not None else maximum is not None and f"{_bound(maximum)}]"
    if low and high:
        return f"in {low}, {high}"
    if above is not None:
        return "positive" if above == 0 else f"> {_bound(above)}"
    if minimum is not None:
        return "non-negative" if minimum == 0 else f">= {_bound(minimum)}"
    if below is not None:
        return "negative" if below == 0 else f"< {_bound(below)}"
    return "" if maximum is None else f"<= {_bound(maximum)}"


def is_int(value: Any) -> bool:
    """True for a Python or numpy integer; False for a bool and a float."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """True for a Python or numpy int or float; False for a bool."""
    return is_int(value) or isinstance(value, (float, np.floating))


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None,
              optional: bool = False, error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (inclusive, each optional).

    Example:
        >>> check_int(np.int64(3), "batch_size", minimum=1)
        3
        >>> check_int(0, "batch_size", minimum=1, where="Loader")
        Traceback (most recent call last):
        ...
        ValueError: Loader: batch_size must be >= 1, got 0
    """
    if value is None and optional:
        return None  # type: ignore[return-value]
    if type(value) is not int and not is_int(value):
        raise _wrong_type(error, where, name, _int_kind(minimum, maximum), value, optional)
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        text = f"{_int_range(minimum, maximum)}, got {short_repr(number)}"
        raise _failure(error, False, where, name, text)
    return number


def check_float(value: Any, name: str, *, minimum: float | None = None,
                maximum: float | None = None, above: float | None = None,
                below: float | None = None, finite: bool = True, optional: bool = False,
                error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> float:
    """``value`` as a ``float`` within inclusive (``minimum``/``maximum``) and exclusive
    (``above``/``below``) bounds; NaN is always refused, infinities unless ``finite=False``.

    Example:
        >>> check_float(0, "subset_ratio", above=0, maximum=1)
        Traceback (most recent call last):
        ...
        ValueError: subset_ratio must be in (0, 1], got 0
    """
    if value is None and optional:
        return None  # type: ignore[return-value]
    if type(value) is not float and type(value) is not int and not (
        is_int(value) or isinstance(value, np.floating)
    ):
        span = _float_range(minimum, maximum, above, below)
        number_kind = "finite number" if finite else "number"
        if span.startswith("in "):
            kind = f"a number {span}"
        elif span.startswith(("<", ">")):
            kind = f"a {number_kind} {span}"
        else:
            kind = f"a {span} {number_kind}" if span else f"a {number_kind}"
        raise _wrong_type(error, where, name, kind, value, optional)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.inf if value > 0 else -math.inf
    if (
        math.isnan(number)
        or (finite and math.isinf(number))
        or (minimum is not None and not number >= minimum)
        or (maximum is not None and not number <= maximum)
        or (above is not None and not number > above)
        or (below is not None and not number < below)
    ):
        span = _float_range(minimum, maximum, above, below)
        if span.startswith("in ") or (span and not finite):
            text = span
        elif finite:
            text = f"{span} and finite" if span else "finite"
        else:
            text = "a number (not NaN)"
        raise _failure(error, False, where, name, f"{text}, got {short_repr(value)}")
    return number


def check_bool(value: Any, name: str, *, error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> bool:
    """``value`` as a ``bool``: only True/False (or ``numpy.bool_``), never 0 / 1."""
    if not isinstance(value, (bool, np.bool_)):
        raise _wrong_type(error, where, name, "true or false", value)
    return bool(value)


def check_str(value: Any, name: str, *, error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> str:
    """``value`` if it is a ``str``."""
    if not isinstance(value, str):
        raise _wrong_type(error, where, name, "a str", value)
    return value


def check_seed(value: Any, name: str = "seed", *, optional: bool = True,
               error: ErrorSpec = _DEFAULT_ERROR, where: str = "") -> int | None:
    """A seed: an int in ``[0, 2**64)``, or None (draw one later) unless ``optional=False``."""
    return check_int(value, name, minimum=0, maximum=SEED_LIMIT - 1, optional=optional,
                     error=error, where=where)


def check_positive_size(value: Any, name: str = "size", *, allow_zero: bool = False,
                        maximum: int | None = None, error: ErrorSpec = _DEFAULT_ERROR,
                        where: str = "") -> int:
    """A size or count: an int ``>= 1`` (``>= 0`` with ``allow_zero``), up to ``maximum``."""
    return check_int(value, name, minimum=0 if allow_zero else 1, maximum=maximum, error=error,
                     where=where)


def check_list(value: Any, name: str, check: Callable[..., _T], *, what: str,
               element: str = "element", optional: bool = False,
               error: ErrorSpec = _DEFAULT_ERROR, where: str = "", **options: Any) -> list[_T]:
    """A list or tuple whose every element passes ``check(item, ..., **options)``; element
    ``i`` is named ``f"{name} {element} {i}"`` and ``what`` names the elements in messages.

    Example:
        >>> check_list([1, 0], "weights", check_float, what="numbers", element="of part", above=0)
        Traceback (most recent call last):
        ...
        ValueError: weights of part 1 must be positive and finite, got 0
    """
    if value is None and optional:
        return None  # type: ignore[return-value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _wrong_type(error, where, name, f"a list of {what}", value, optional)
    return [check(item, f"{name} {element} {i}", error=error, where=where, **options)
            for i, item in enumerate(value)]


def validator(check: Callable[..., Any], /, *, error: ErrorSpec = _DEFAULT_ERROR,
              **options: Any) -> Callable[[Any, Any, Any], None]:
    """An attrs validator running ``check(value, f"option {name!r}", ...)``, so option classes
    run the very checks the constructors run."""

    def run(instance: Any, attribute: Any, value: Any) -> None:
        check(value, f"option {attribute.name!r}", error=error, **options)

    run.__name__ = run.__qualname__ = f"validate_{getattr(check, '__name__', 'value')}"
    return run


# --------------------------------------------------------------------------------- seeding


def derive_seed(*parts: int | None) -> int:
    """A 63-bit seed from integer parts such as (seed, epoch, position, attempt): the same parts
    give the same seed, different parts independent ones (numpy's SeedSequence); None counts
    as -1.

    Example:
        >>> derive_seed(42, 0, 1) == derive_seed(42, 0, 1) != derive_seed(42, 1, 0)
        True
    """
    entropy = [0 if part is None else int(part) + 1 for part in parts]
    if entropy and min(entropy) < 0:  # wrap every part to 64 bits
        entropy = [e & 0xFFFFFFFFFFFFFFFF for e in entropy]
    words = [value >> shift & 0xFFFFFFFF for value in entropy  # as SeedSequence splits an int
             for shift in range(0, 32 * max(1, -(-value.bit_length() // 32)), 32)]
    state = np.random.SeedSequence(np.array(words, np.uint32)).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFFFFFFFFFFFFFF


def numpy_generator(*parts: int | None) -> np.random.Generator:
    """A numpy Generator seeded from ``derive_seed(*parts)``."""
    return np.random.default_rng(derive_seed(*parts))


def torch_generator(*parts: int | None):  # -> torch.Generator
    """A torch.Generator seeded from ``derive_seed(*parts)``."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(derive_seed(*parts))
    return generator


@contextlib.contextmanager
def gc_paused(*, promote: bool = False) -> Iterator[None]:
    """Disable the garbage collector while building many small objects that form no cycles
    (records). ``promote``: move what the block created to the oldest generation on exit
    (freeze + unfreeze), so later collections do not rescan it; skipped when the
    application froze objects itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if promote and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# ----------------------------------------------------------------------- environment flags

#: Values (case-insensitive, spaces ignored) that switch a flag off / on.
OFF_VALUES = frozenset({"0", "false", "off", "no"})
ON_VALUES = frozenset({"1", "true", "on", "yes"})


def env_flag(name: str, default: bool) -> bool:
    """The on/off value of environment variable ``name``; unset, empty or unknown values give
    ``default``."""
    value = os.environ.get(name, "").strip().lower()
    if value in OFF_VALUES:
        return False
    if value in ON_VALUES:
        return True
    return default


# --------------------------------------------------------------------------- config values
#
# Hydra/OmegaConf hand builders DictConfig/ListConfig objects; the builders take plain lists and
# dicts, converted at the boundary. omegaconf is never imported unless the value came from it.

_SCALAR_SEQUENCES = (str, bytes, bytearray, memoryview)
# Top-level sections of a detectron2 config; any one of them marks an object as a config.
_SECTIONS = ("DATASETS", "DATALOADER", "INPUT", "MODEL", "SOLVER", "TEST")
_MISSING = object()


def is_config_container(value: Any) -> bool:
    """Whether ``value`` is an OmegaConf ``DictConfig`` / ``ListConfig``."""
    omegaconf = sys.modules.get("omegaconf")
    return omegaconf is not None and isinstance(value, omegaconf.Container)


def _to_container(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True)


def plain_value(value: Any) -> Any:
    """``value`` with every OmegaConf container in it (also inside dicts, lists, tuples)
    converted; a value without any is returned as the same object.

    Example:
        >>> from omegaconf import OmegaConf
        >>> plain_value({"classes": OmegaConf.create(["cat"]), "size": (2, 3)})
        {'classes': ['cat'], 'size': (2, 3)}
    """
    if is_config_container(value):
        return _to_container(value)
    is_dict = isinstance(value, dict)
    if not is_dict and (not isinstance(value, (list, tuple)) or hasattr(value, "_fields")):
        return value  # a scalar, or a namedtuple (kept)
    converted: Any = None
    for key, item in value.items() if is_dict else enumerate(value):
        new = plain_value(item)
        if new is not item:
            if converted is None:
                converted = dict(value) if is_dict else list(value)
            converted[key] = new
    if converted is None:
        return value
    return tuple(converted) if isinstance(value, tuple) else converted


def plain_container(value: Any) -> Any:
    """``value`` with its outer container made a ``dict`` (any Mapping, a DictConfig) or a
    ``list`` (any Sequence but str/bytes, a ListConfig); anything else unchanged."""
    if is_config_container(value):
        return _to_container(value)
    if isinstance(value, Mapping):
        return plain_value(dict(value))  # a new dict either way
    if isinstance(value, Sequence) and not isinstance(value, _SCALAR_SEQUENCES):
        return plain_value(list(value))
    return value


def plain_names(value: Any) -> list[str] | None:
    """The list of names when ``value`` is a non-empty sequence of strs, else None."""
    if isinstance(value, (*_SCALAR_SEQUENCES, Mapping)):
        return None
    if not (is_config_container(value) or isinstance(value, Sequence)):
        return None
    if len(value) == 0 or not isinstance(value[0], str):
        return None  # checked first: a record list is never converted
    names = plain_container(value)
    return names if all(isinstance(name, str) for name in names) else None


def _config_child(node: Any, name: str) -> Any:
    if isinstance(node, Mapping):
        return node[name] if name in node else _MISSING
    return getattr(node, name, _MISSING)


def is_detectron2_config(obj: Any) -> bool:
    """True if ``obj`` looks like a detectron2 config (a yacs CfgNode, DictConfig, dict or
    attribute object with an upper-case top-level section such as ``DATALOADER``)."""
    if isinstance(obj, (str, bytes, list, tuple)) or obj is None:
        return False
    try:
        return any(_config_child(obj, section) is not _MISSING for section in _SECTIONS)
    except Exception:  # an object whose attribute access raises is not a config
        return False


def config_value(cfg: Any, key: str, default: Any = _MISSING) -> Any:
    """The value at dotted ``key`` of a detectron2-style config (OmegaConf containers made
    plain); ``default`` when absent, else :class:`ConfigKeyError`.

    Example:
        >>> config_value({"DATALOADER": {"NUM_WORKERS": 4}}, "DATALOADER.NUM_WORKERS")
        4
    """
    node = cfg
    for name in key.split("."):
        node = _config_child(node, name)
        if node is _MISSING:
            if default is _MISSING:
                raise ConfigKeyError(f"config has no key {key!r}", key=key)
            return default
    return _to_container(node) if type(node).__module__.startswith("omegaconf") else node
