"""Pausing the garbage collector around bulk record building.

Building a few million small objects (records, their lists and dicts) with the collector
running makes it rescan every object built so far, again and again; none of them form
reference cycles, so catmap's loaders pause it while they build.

Example:
    >>> with gc_paused():
    ...     records = [{"id": i} for i in range(1000)]
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused(*, promote: bool = False) -> Iterator[None]:
    """Disable the garbage collector inside the block; re-enable it after if it was enabled.

    Args:
        promote: also move what the block created to the oldest generation on exit
            (``gc.freeze()`` then ``gc.unfreeze()``). Otherwise the first allocation afterwards
            would scan millions of young objects (seconds for COCO train), and the middle
            generation would scan them again. This changes only when objects are scanned,
            never whether garbage is freed. Skipped when the application froze objects itself
            (e.g. before forking workers): unfreezing would undo that.
    """
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
