"""Pausing the garbage collector while building millions of small objects (records) that
form no cycles: a running collector would rescan them again and again."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused(*, promote: bool = False) -> Iterator[None]:
    """Disable the collector inside the block. ``promote``: move what it created to the
    oldest generation on exit (freeze + unfreeze), so the next collections do not rescan
    it; skipped when the application froze objects itself."""
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
