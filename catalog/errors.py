"""Typed errors raised by the catalog package.

Every error message names what the user needs to find the problem: the dataset, the file,
the record index and the key involved, where they are known.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "MissingDependencyError",
    "missing_dependency",
    "CatmapError",
    "CatmapErrorWithFields",
    "DatasetNotRegisteredError",
    "DatasetAlreadyRegisteredError",
    "MetadataConflictError",
    "AnnotationFormatError",
    "EmptyDatasetError",
    "RecordFormatError",
    "CacheError",
    "SharedAttachError",
    "NestedLoadError",
    "DatasetFileNotFoundError",
]


class CatmapError(Exception):
    """Base class of every error catmap raises on purpose.

    Every subclass pickles with its type, message and attributes (whatever its constructor
    takes), so an error raised in a DataLoader worker or another rank arrives whole, and can
    be built from a single message string, as torch's worker re-raise does.
    """

    def __reduce__(self):
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls: type, args: tuple, state: dict) -> CatmapError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class CatmapErrorWithFields(CatmapError):
    """A CatmapError whose keyword arguments, named in ``field_names``, become attributes.

    The message stays the only positional argument (torch's worker re-raise calls
    ``cls(message)``); every field defaults to None, and a keyword not in ``field_names``
    is a ``TypeError`` as for any constructor. A subclass sets ``field_names`` and documents
    the fields under ``Attributes``.

    Example:
        >>> err = DatasetFileNotFoundError("missing", path="/d/coco")
        >>> err.path, err.dataset
        ('/d/coco', None)
    """

    field_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str = "", **fields: Any) -> None:
        unknown = sorted(set(fields) - set(self.field_names))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword argument(s) {unknown}; "
                f"its fields are {list(self.field_names)}"
            )
        super().__init__(message)
        for name in self.field_names:
            setattr(self, name, fields.get(name))


class DatasetNotRegisteredError(CatmapError, KeyError):
    """A dataset name was looked up that is not in the DatasetCatalog."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


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
    records: the other ranks wait for the outer dataset and cannot load the inner one with it."""


class DatasetFileNotFoundError(CatmapErrorWithFields, FileNotFoundError):
    """A file or directory a registered dataset needs does not exist (e.g. a builtin dataset
    whose files are not under the dataset root).

    Args:
        message: the full message (names the dataset, the expected path and what to set).
        path: the expected path.
        dataset: the dataset name.
        env_var: the environment variable that chooses the dataset root, when there is one.

    Example:
        >>> err = DatasetFileNotFoundError("not found", path="/d/coco", dataset="coco_2017_val")
        >>> isinstance(err, FileNotFoundError), err.path, str(err)
        (True, '/d/coco', 'not found')
    """

    # FileNotFoundError's own fields (filename, strerror) stay None: str(self) is the message.
    field_names = ("path", "dataset", "env_var")

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(CatmapErrorWithFields, ImportError):
    """An optional dependency is not installed; the message names the extra to install.

    Attributes:
        extra: the catmap extra that installs it (e.g. ``"coco"``).
        package: the missing package.

    Example:
        >>> err = missing_dependency("pycocotools", "coco", "COCO evaluation")
        >>> 'pip install "catmap[coco]"' in str(err)
        True
    """

    field_names = ("extra", "package")


def missing_dependency(package: str, extra: str, purpose: str) -> MissingDependencyError:
    """The error to raise when ``package`` (installed by the catmap extra ``extra``) is
    missing for ``purpose``."""
    return MissingDependencyError(
        f"{purpose} needs {package}, which is not installed: pip install \"catmap[{extra}]\" "
        f"(or pip install {package})",
        extra=extra,
        package=package,
    )
