"""A missing optional dependency names the catmap extra that installs it."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from catalog import MissingDependencyError
from mappers import read_image


def test_reading_an_image_without_pillow_names_the_images_extra(tmp_path, monkeypatch):
    path = tmp_path / "a.png"
    Image.fromarray(np.zeros((4, 5, 3), np.uint8)).save(path)
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    monkeypatch.setitem(sys.modules, "cv2", None)  # no other decoder to fall back on
    with pytest.raises(MissingDependencyError, match=r'pip install "catmap\[images\]"') as info:
        read_image(str(path), decoder="pillow")
    assert isinstance(info.value, ImportError)
    assert (info.value.extra, info.value.package) == ("images", "Pillow")


def test_every_missing_dependency_error_is_one_class():
    import catalog._common
    import mappers

    assert mappers.MissingDependencyError is catalog._common.MissingDependencyError
