"""Skip a test module or test when an optional library cannot be imported here.

``pytest.importorskip`` only catches ``ImportError``; torchvision from PyPI beside the local
CPU build of torch fails with a ``RuntimeError`` ("operator torchvision::nms does not exist"),
so integrations with such libraries use :func:`import_or_skip` instead.

CI names the libraries it installs in ``CATMAP_TEST_REQUIRE`` (space-separated module names,
e.g. "torchvision"): for those a failed import fails the test instead of skipping it.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["import_or_skip"]


def import_or_skip(name: str) -> ModuleType:
    """Import ``name`` or skip the calling test (module) with the reason it failed."""
    try:
        return importlib.import_module(name)
    except Exception as error:  # ImportError, or a binary built for another torch
        if name.split(".")[0] in os.environ.get("CATMAP_TEST_REQUIRE", "").split():
            raise
        pytest.skip(f"{name} is not usable here: {type(error).__name__}: {error}",
                    allow_module_level=True)
