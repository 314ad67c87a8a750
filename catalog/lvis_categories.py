"""LVIS categories (facts of the LVIS annotation files), read from the package data files
``catalog/data/lvis_v0_5_categories.json`` and ``catalog/data/lvis_v1_categories.json``.

Each file holds one record per category, ids ``1..N`` in order: its class name (the first
synonym) and, for LVIS v1, its frequency group ("r" rare, "c" common, "f" frequent) and the
number of LVIS v1 train images it appears in. :func:`lvis_categories` reads and checks a file
once per process; the module attributes ``LVIS_V0_5_CLASSES``, ``LVIS_V1_CLASSES``,
``LVIS_V1_FREQUENCY`` and ``LVIS_V1_IMAGE_COUNT`` are read on first access.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .errors import CatmapErrorWithFields

__all__ = [
    "LVIS_V0_5_CLASSES",
    "LVIS_V1_CLASSES",
    "LVIS_V1_FREQUENCY",
    "LVIS_V1_IMAGE_COUNT",
    "LVIS_VERSIONS",
    "LvisCategories",
    "LvisCategoriesError",
    "lvis_categories",
]

#: The LVIS versions with a bundled category file, and the file of each (in ``catalog/data``).
LVIS_VERSIONS: dict[str, str] = {
    "v0.5": "lvis_v0_5_categories.json",
    "v1": "lvis_v1_categories.json",
}

_FORMAT = "catmap-lvis-categories"
_MAX_FILE_BYTES = 1 << 20  # the bundled files are ~100 KiB; refuse anything far larger
_FREQUENCY_GROUPS = frozenset("rcf")

# Declared here, read from the data files on first access (module __getattr__ below).
#: The class name of LVIS v0.5 category id ``i + 1`` (the first synonym).
LVIS_V0_5_CLASSES: tuple[str, ...]
#: The class name of LVIS v1 category id ``i + 1`` (the first synonym).
LVIS_V1_CLASSES: tuple[str, ...]
#: The frequency group of LVIS v1 category id ``i + 1``: one character "r", "c" or "f" each.
LVIS_V1_FREQUENCY: str
#: How many LVIS v1 train images contain category id ``i + 1``.
LVIS_V1_IMAGE_COUNT: tuple[int, ...]

# Module attribute -> (LVIS version, LvisCategories field); read lazily by __getattr__.
_LAZY_ATTRIBUTES: dict[str, tuple[str, str]] = {
    "LVIS_V0_5_CLASSES": ("v0.5", "classes"),
    "LVIS_V1_CLASSES": ("v1", "classes"),
    "LVIS_V1_FREQUENCY": ("v1", "frequency"),
    "LVIS_V1_IMAGE_COUNT": ("v1", "image_count"),
}


class LvisCategoriesError(CatmapErrorWithFields, ValueError):
    """An unknown LVIS version was asked for, or its bundled category file is missing or
    malformed (a broken install).

    Attributes:
        version: the LVIS version asked for.
        path: the category file, when one was read.
        index: the position of the category record involved, when known.
        key: the key whose value is wrong, when known.

    Example:
        >>> err = LvisCategoriesError("bad", version="v1", index=3, key="name")
        >>> (err.version, err.index, err.key, isinstance(err, ValueError))
        ('v1', 3, 'name', True)
    """

    field_names = ("version", "path", "index", "key")


@dataclass(frozen=True)
class LvisCategories:
    """The categories of one LVIS version; item ``i`` of each field is category id ``i + 1``.

    Attributes:
        version: the LVIS version (``"v0.5"`` or ``"v1"``).
        classes: the class name of each category (its first synonym).
        frequency: one character per category, "r", "c" or "f" (None where the file has none).
        image_count: how many train images contain each category (None where the file has none).
    """

    version: str
    classes: tuple[str, ...]
    frequency: str | None = None
    image_count: tuple[int, ...] | None = None


@functools.cache
def lvis_categories(version: str) -> LvisCategories:
    """The bundled categories of LVIS ``version``, read and checked once per process.

    Args:
        version: ``"v0.5"`` or ``"v1"`` (see :data:`LVIS_VERSIONS`).

    Returns:
        The categories; the same object on every call with the same version.

    Raises:
        LvisCategoriesError: ``version`` is unknown, or its file is missing or malformed.

    Example:
        >>> cats = lvis_categories("v1")
        >>> len(cats.classes), cats.classes[0], cats.frequency[0], cats.image_count[0]
        (1203, 'aerosol_can', 'c', 64)
        >>> lvis_categories("v0.5").frequency is None
        True
    """
    if version not in LVIS_VERSIONS:
        raise LvisCategoriesError(
            f"unknown LVIS version {version!r}; bundled category files: {sorted(LVIS_VERSIONS)}",
            version=version,
        )
    path = resources.files(__package__).joinpath("data", LVIS_VERSIONS[version])
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LvisCategoriesError(
            f"cannot read the LVIS {version} category file {path}: {exc} (reinstall catmap; "
            "the file is package data)",
            version=version, path=str(path),
        ) from exc
    if len(raw) > _MAX_FILE_BYTES:
        raise LvisCategoriesError(
            f"the LVIS {version} category file {path} is larger than {_MAX_FILE_BYTES} bytes",
            version=version, path=str(path),
        )
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise LvisCategoriesError(
            f"the LVIS {version} category file {path} is not valid JSON: {exc}",
            version=version, path=str(path),
        ) from exc
    return _parse(document, version, str(path))


def _parse(document: Any, version: str, path: str) -> LvisCategories:
    """Check a decoded category file and build its :class:`LvisCategories`."""

    def fail(what: str, index: int | None = None, key: str | None = None) -> LvisCategoriesError:
        where = "" if index is None else f", category record {index}"
        return LvisCategoriesError(
            f"the LVIS {version} category file {path}{where}: {what}",
            version=version, path=path, index=index, key=key,
        )

    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise fail(f"is not a {_FORMAT!r} document", key="format")
    if document.get("version") != version:
        raise fail(f"holds version {document.get('version')!r}, not {version!r}", key="version")
    records = document.get("categories")
    if not isinstance(records, list) or not records:
        raise fail("'categories' is not a non-empty list", key="categories")
    keys = frozenset(records[0]) if isinstance(records[0], dict) else frozenset()
    if not {"id", "name"} <= keys <= {"id", "name", "frequency", "image_count"}:
        raise fail(f"unexpected keys {sorted(keys)}", index=0)
    for index, record in enumerate(records):
        if not isinstance(record, dict) or frozenset(record) != keys:
            raise fail(f"is not an object with the keys {sorted(keys)}", index=index)
        if type(record["id"]) is not int or record["id"] != index + 1:
            raise fail(f"id {record['id']!r} is not {index + 1} (ids run 1..N)", index, "id")
        if not isinstance(record["name"], str) or not record["name"]:
            raise fail(f"name {record['name']!r} is not a non-empty string", index, "name")
        if "frequency" in keys and record["frequency"] not in _FREQUENCY_GROUPS:
            raise fail(f"frequency {record['frequency']!r} is not 'r', 'c' or 'f'", index,
                       "frequency")
        count = record.get("image_count", 0)
        if "image_count" in keys and (type(count) is not int or count < 0):
            raise fail(f"image_count {count!r} is not an int >= 0", index, "image_count")
    return LvisCategories(
        version=version,
        classes=tuple(record["name"] for record in records),
        frequency=("".join(r["frequency"] for r in records) if "frequency" in keys else None),
        image_count=(tuple(r["image_count"] for r in records) if "image_count" in keys else None),
    )


def __getattr__(name: str) -> Any:
    """Read ``LVIS_V0_5_CLASSES``, ``LVIS_V1_CLASSES``, ... from the data files on first use."""
    if name not in _LAZY_ATTRIBUTES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    version, field = _LAZY_ATTRIBUTES[name]
    return getattr(lvis_categories(version), field)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))
