"""Boolean environment switches (``CATMAP_CACHE=0``, ``CATMAP_SHARE=off``, ...), read one way.

Part of catmap's internal API (see :mod:`catalog`): every package reads its on/off
environment variables through :func:`env_flag`.

Example:
    >>> import os
    >>> os.environ["CATMAP_EXAMPLE_FLAG"] = "Off"
    >>> env_flag("CATMAP_EXAMPLE_FLAG", default=True)
    False
    >>> del os.environ["CATMAP_EXAMPLE_FLAG"]
"""

from __future__ import annotations

import os

__all__ = ["OFF_VALUES", "ON_VALUES", "env_flag"]

#: Values (case-insensitive, surrounding spaces ignored) that switch a flag off.
OFF_VALUES = frozenset({"0", "false", "off", "no"})
#: Values that switch a flag on.
ON_VALUES = frozenset({"1", "true", "on", "yes"})


def env_flag(name: str, default: bool) -> bool:
    """The on/off value of environment variable ``name``.

    An unset or empty variable, or a value that is neither in :data:`ON_VALUES` nor in
    :data:`OFF_VALUES`, gives ``default``: a flag that is on by default is switched off only
    by an off value, one that is off by default is switched on only by an on value.

    Example:
        >>> env_flag("CATMAP_SURELY_UNSET_FLAG", default=True)
        True
    """
    value = os.environ.get(name, "").strip().lower()
    if value in OFF_VALUES:
        return False
    if value in ON_VALUES:
        return True
    return default
