"""OpenCV is limited to the configured number of threads where it is safe to set."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cv2")

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_first_import_through_catmap_sets_one_thread():
    out = _run(
        """
        import cv2
        cv2.setNumThreads(4)
        from mappers.image_io import get_cv2, limit_opencv_threads
        assert get_cv2().getNumThreads() == 1, get_cv2().getNumThreads()
        cv2.setNumThreads(3)
        limit_opencv_threads()  # already configured in this process: left alone
        print(cv2.getNumThreads())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_thread_count_comes_from_the_environment():
    code = """
        from mappers.image_io import get_cv2
        print(get_cv2().getNumThreads())
        """
    out = _run(code, CATMAP_OPENCV_THREADS="2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    bad = _run(code, CATMAP_OPENCV_THREADS="many")
    assert bad.returncode != 0
    assert "CATMAP_OPENCV_THREADS must be an integer >= 0, got 'many'" in bad.stderr


def test_limit_before_workers_and_resize_in_forked_workers():
    out = _run(
        """
        import numpy as np, cv2, torch
        from torch.utils.data import DataLoader, Dataset
        img = np.zeros((600, 800, 3), np.uint8)
        for _ in range(5):
            cv2.resize(img, (1067, 800))        # the parent uses OpenCV's pool first
        from mappers.image_io import limit_opencv_threads
        limit_opencv_threads()
        assert cv2.getNumThreads() == 1

        class Resize(Dataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                from mappers.transforms import ResizeTransform
                return ResizeTransform(600, 800, 300 + i, 400).apply_image(img).shape

        shapes = list(DataLoader(Resize(), batch_size=None, num_workers=2,
                                 multiprocessing_context="fork"))
        print(sorted(s[0] for s in shapes))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(list(range(300, 308)))


def test_without_opencv_it_is_looked_for_once_and_resizes_still_work():
    out = _run(
        """
        import sys
        class NoOpenCV:  # as if opencv were not installed
            looked = 0
            def find_spec(self, name, path=None, target=None):
                if name == "cv2":
                    NoOpenCV.looked += 1
                    raise ModuleNotFoundError("No module named 'cv2'")
        sys.meta_path.insert(0, NoOpenCV())
        import numpy as np
        from mappers.image_io import get_cv2
        from mappers.transforms import ResizeTransform
        shapes = [ResizeTransform(6, 8, 3, 4).apply_image(np.zeros((6, 8, 3), np.uint8)).shape
                  for _ in range(3)]
        print(get_cv2(), NoOpenCV.looked, shapes[-1])
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "1", "(3,", "4,", "3)"]
