"""Helpers shared by the benchmark scripts in tools/: the ``--json`` option and its file.

Example:
    >>> from argparse import ArgumentParser
    >>> parser = ArgumentParser(); add_json_argument(parser)
    >>> parser.parse_args([]).json_out is None, parser.parse_args(["--json", "r.json"]).json_out
    (True, 'r.json')
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["HelpFormatter", "add_json_argument", "write_json_results"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` shows every option's default and keeps the description's line breaks."""


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--json FILE`` (stored as ``json_out``, default None) to a benchmark's parser.

    Args:
        parser: the benchmark's argument parser.
    """
    parser.add_argument("--json", dest="json_out", help="also write the results to this file")


def write_json_results(path: str | None, results: Any) -> None:
    """Write ``results`` as indented JSON to ``path``; nothing when ``path`` is None or empty.

    Args:
        path: the ``--json`` value.
        results: JSON-serializable benchmark figures.

    Example:
        >>> write_json_results(None, {"seconds": 1.0})  # no file asked for: writes nothing
    """
    if not path:
        return
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
