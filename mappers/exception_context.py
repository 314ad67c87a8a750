"""Adding where an error happened to an exception that is re-raised as it is.

``MapDataset`` names the record a mapper failed on, and the loader names the DataLoader worker
and dataset index; both keep the exception's own type, fields and traceback, so code that
catches the type still does.
"""

from __future__ import annotations

import logging

__all__ = ["add_context"]

logger = logging.getLogger(__name__)


def add_context(exc: BaseException, context: str) -> None:
    """Append ``[context]`` to ``exc``'s message in place (as a note where the message is not a
    single string, or for an ``OSError``, whose ``args`` carry errno and file name).

    Args:
        exc: the exception about to be re-raised.
        context: where it happened, e.g. ``"DataLoader worker 1, dataset index 7"``.

    Example:
        >>> error = ValueError("bad box")
        >>> add_context(error, "index 3")
        >>> str(error)
        'bad box [index 3]'
    """
    args = exc.args
    if not isinstance(exc, OSError) and len(args) == 1 and isinstance(args[0], str):
        exc.args = (f"{args[0]} [{context}]",)
    elif not isinstance(exc, OSError) and not args:
        exc.args = (f"[{context}]",)
    elif hasattr(exc, "add_note"):
        exc.add_note(f"[{context}]")
    else:  # Python 3.10 and an exception whose args are not a plain message
        logger.error("%s raised %s", context, type(exc).__name__)
