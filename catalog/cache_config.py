"""The cache's switches and warnings: ``CATMAP_CACHE``, ``CATMAP_CACHE_SHARED``,
``CATMAP_CACHE_DIR``, ``CATMAP_CACHE_LOCK_TIMEOUT``, and warnings given once per process.

Example:
    >>> cache_enabled(False), shared_enabled(True)
    (False, True)
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path

from .env_flags import env_flag
from .errors import CacheError, CatmapErrorWithFields

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "CacheCorruptWarning",
    "CacheSettingError",
    "CacheSkippedWarning",
    "CacheUnavailableError",
    "cache_dir",
    "cache_enabled",
    "lock_timeout",
    "shared_enabled",
    "warn_once",
]

logger = logging.getLogger(__name__)

_WARNED: set[str] = set()


class CacheCorruptWarning(UserWarning):
    """A cache entry failed verification (damaged, or not signed for this key and user);
    it is discarded and rebuilt."""


class CacheSkippedWarning(UserWarning):
    """The cache, or one entry, was not used because it is not safe or not usable; loading
    goes on without it."""


class CacheUnavailableError(CacheError, CatmapErrorWithFields):
    """The cache directory cannot be used (missing home, not writable, or untrusted).

    Attributes:
        directory: the directory, when known.
    """

    field_names = ("directory",)


class CacheSettingError(CatmapErrorWithFields, CacheError, ValueError):
    """A cache environment variable holds a value catmap cannot use.

    Attributes:
        variable: the variable's name.
        value: its value.
    """

    field_names = ("variable", "value")


#: Seconds a process waits for another one building the same cache entry before it builds the
#: records itself without the cache (``CATMAP_CACHE_LOCK_TIMEOUT`` overrides it).
DEFAULT_LOCK_TIMEOUT = 1800.0


def lock_timeout() -> float:
    """How long to wait for another process's build of an entry: ``CATMAP_CACHE_LOCK_TIMEOUT``
    (seconds, > 0) or :data:`DEFAULT_LOCK_TIMEOUT`.

    Raises:
        CacheSettingError: the variable is not a positive finite number.

    Example:
        >>> import os
        >>> os.environ["CATMAP_CACHE_LOCK_TIMEOUT"] = "90"
        >>> lock_timeout()
        90.0
        >>> del os.environ["CATMAP_CACHE_LOCK_TIMEOUT"]
    """
    value = os.environ.get("CATMAP_CACHE_LOCK_TIMEOUT", "").strip()
    if not value:
        return DEFAULT_LOCK_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise CacheSettingError(
            f"CATMAP_CACHE_LOCK_TIMEOUT={value!r} is not a positive number of seconds",
            variable="CATMAP_CACHE_LOCK_TIMEOUT",
            value=value,
        )
    return seconds


def warn_once(tag: str, message: str, category: type[Warning] = CacheSkippedWarning) -> None:
    """Warn with ``message`` the first time ``tag`` is seen in this process (log it after)."""
    if tag in _WARNED:
        logger.debug("%s", message)
        return
    _WARNED.add(tag)
    warnings.warn(message, category, stacklevel=3)


def cache_enabled(enabled: bool = True) -> bool:
    """Whether caching is on: ``enabled`` (a per-registration switch) and not ``CATMAP_CACHE=0``.

    Example:
        >>> cache_enabled(False)  # cache=False on the registration
        False
    """
    if not enabled:
        return False
    return env_flag("CATMAP_CACHE", default=True)


def shared_enabled(shared: bool | None = None) -> bool:
    """Whether a shared cache is accepted: ``shared`` if given, else ``CATMAP_CACHE_SHARED``.

    Example:
        >>> shared_enabled(True)
        True
    """
    if shared is not None:
        return bool(shared)
    return env_flag("CATMAP_CACHE_SHARED", default=False)


def cache_dir() -> Path:
    """The cache directory: ``$CATMAP_CACHE_DIR`` or ``~/.cache/catmap`` (not created here).

    Raises:
        CacheUnavailableError: no ``CATMAP_CACHE_DIR`` and no home directory.

    Example:
        >>> cache_dir().name  # ~/.cache/catmap unless CATMAP_CACHE_DIR is set  # doctest: +SKIP
        'catmap'
    """
    configured = os.environ.get("CATMAP_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    try:
        return Path("~/.cache/catmap").expanduser()
    except RuntimeError as exc:  # no HOME and no password entry
        raise CacheUnavailableError(f"no cache directory: {exc} (set CATMAP_CACHE_DIR)") from exc
