"""The tools are calm with a newcomer's files: no overwrite without --overwrite, --import of a
module in the current directory without PYTHONPATH, defaults shown by --help."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.shapes_dataset import OutputExistsError, generate_shapes_dataset

ROOT = Path(__file__).resolve().parents[1]
TOOLS = sorted(p.stem for p in (ROOT / "tools").glob("*.py")
               if not p.stem.startswith("_") and "def main(" in p.read_text())


def test_user_annotation_file_is_not_overwritten(tmp_path):
    (tmp_path / "annotations.json").write_text('{"mine": true}')
    with pytest.raises(OutputExistsError, match="--overwrite"):
        generate_shapes_dataset(tmp_path, num_images=2)
    assert (tmp_path / "annotations.json").read_text() == '{"mine": true}'
    result = subprocess.run(
        [sys.executable, "-m", "tools.shapes_dataset", "--out", str(tmp_path),
         "--num-images", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2 and "--overwrite" in result.stderr
    assert (tmp_path / "annotations.json").read_text() == '{"mine": true}'
    generated = generate_shapes_dataset(tmp_path, num_images=2, overwrite=True)
    assert generated.generated and "mine" not in (tmp_path / "annotations.json").read_text()


def test_own_output_with_other_settings_is_regenerated(tmp_path):
    generate_shapes_dataset(tmp_path, num_images=2)
    again = generate_shapes_dataset(tmp_path, num_images=3)
    assert again.generated and again.num_images == 3


def test_import_option_finds_modules_of_the_current_directory(tmp_path):
    (tmp_path / "my_datasets.py").write_text(
        "from catalog import DatasetCatalog\n"
        "DatasetCatalog.register('cwd_ds', lambda: [{'file_name': 'a.jpg', 'height': 4, "
        "'width': 4, 'image_id': 1, 'annotations': []}])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "catmap_tools.analyze_dataset", "--import", "my_datasets",
         "--dataset", "cwd_ds", "--out", str(tmp_path / "stats")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert "cannot import" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_help_shows_defaults(tool, capsys):
    module = importlib.import_module(f"tools.{tool}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    takes_values = re.search(r"^\s+--[\w-]+ [A-Z_]+", text, re.MULTILINE)
    assert "(default:" in text or not takes_values, text
