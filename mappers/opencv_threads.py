"""OpenCV in data-loading processes: one thread, set where it is safe to set.

OpenCV runs its own thread pool. A DataLoader worker forked from a process whose pool has
started inherits the pool's locks but not its threads, and the first parallel OpenCV call in
the worker (a resize, or ``cv2.setNumThreads`` itself) can deadlock. catmap therefore sets
OpenCV to one thread (``CATMAP_OPENCV_THREADS``, default 1) when it first imports cv2 in a
process, and the loader builders call :func:`limit_opencv_threads` in the main process before
workers start. Inside a forked worker whose parent had already imported cv2 it leaves the
setting alone: the worker inherits the parent's setting, and calling into the pool there is
what deadlocks. With one thread per process, N workers use N cores without oversubscription.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["OPENCV_THREADS_ENV", "get_cv2", "limit_opencv_threads"]

logger = logging.getLogger(__name__)

#: Environment variable with the number of OpenCV threads catmap sets (default 1).
OPENCV_THREADS_ENV = "CATMAP_OPENCV_THREADS"

_configured = False  # inherited by forked children, so a child never reconfigures


def _wanted_threads() -> int:
    raw = os.environ.get(OPENCV_THREADS_ENV, "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{OPENCV_THREADS_ENV} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{OPENCV_THREADS_ENV} must be >= 0, got {value}")
    return value


def _in_dataloader_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


def _configure(cv2: Any, *, imported_before: bool) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    if imported_before and _in_dataloader_worker():
        # cv2 came from the parent (fork): its pool may be half-inherited; do not touch it.
        logger.debug("cv2 inherited by a DataLoader worker: keeping the parent's thread setting")
        return
    threads = _wanted_threads()
    cv2.setNumThreads(threads)
    logger.debug("OpenCV set to %d thread(s) in process %d", threads, os.getpid())


def get_cv2() -> Any | None:
    """Import OpenCV, set to ``CATMAP_OPENCV_THREADS`` threads (default 1) on first use.

    Returns:
        The ``cv2`` module, or None when OpenCV is not installed.

    Example:
        >>> cv2 = get_cv2()
        >>> cv2 is None or cv2.getNumThreads() >= 1
        True
    """
    imported_before = "cv2" in sys.modules
    try:
        import cv2
    except ImportError:
        return None
    _configure(cv2, imported_before=imported_before)
    return cv2


def limit_opencv_threads() -> None:
    """Set OpenCV's threads in this process if it has imported cv2; call before starting
    DataLoader workers (the loader builders do), never inside a forked worker.

    Example:
        >>> limit_opencv_threads()  # a no-op when cv2 was never imported
    """
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        _configure(cv2, imported_before=False)
