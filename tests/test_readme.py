"""The README's training-script example runs as written and resumes exactly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tools.shapes_dataset import generate_shapes_dataset

README = Path(__file__).resolve().parents[1] / "README.md"


def _example(tag: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- readme-example: {tag} -->\s*```python\n(.*?)```", text, re.S)
    if match is None:
        raise LookupError(f"README.md has no python block tagged {tag!r}")
    return match.group(1)


@pytest.mark.distributed  # starts DataLoader worker processes
def test_training_script_example_runs_and_resumes(tmp_path):
    shapes = generate_shapes_dataset(tmp_path / "shapes", num_images=24, seed=3)
    namespace = {
        "json_file": str(shapes.json_file),
        "image_root": str(shapes.image_root),
        "checkpoint": str(tmp_path / "ckpt.pth"),
        "__name__": "readme_example",
    }
    exec(compile(_example("training-script"), "README.md", "exec"), namespace)

    assert namespace["step"] == 9
    assert len(namespace["classes"]) == len(shapes.class_names)
    expected = next(iter(namespace["loader"]))  # what the first loader produces next
    resumed = namespace["next_batch"]
    assert [s["image_id"] for s in resumed] == [s["image_id"] for s in expected]
    for got, want in zip(resumed, expected, strict=True):
        assert torch.equal(got["image"], want["image"])
        assert torch.equal(got["instances"].gt_boxes.tensor, want["instances"].gt_boxes.tensor)
