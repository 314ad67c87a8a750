"""SECURITY.md promises that no other test pinned: rank messages are data, every catmap error
pickles whole, mask resampling and XML element counts are bounded; SECURITY.md names a test
for each promise, and every test it names exists."""

from __future__ import annotations

import ast
import os
import pathlib
import pickle
import re

import msgspec
import pytest
import torch

import catalog  # noqa: F401  (every package's errors are registered)
import mappers  # noqa: F401
import samplers  # noqa: F401
from catalog import AnnotationFormatError
from catalog._common import CatmapError
from catalog.formats.files import MAX_XML_ELEMENTS, parse_xml_bytes
from catalog.storage.records import decode, encode
from mappers.errors import StructureShapeError
from mappers.structures import BitMasks


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_rank_messages_are_data_and_a_pickle_is_never_run(tmp_path):
    """What ranks send each other is decoded by the records' data-only decoder: a pickle that
    would run code is a decode error, and nothing runs."""
    marker = str(tmp_path / "pwned")
    message = {"name": "toy", "ranks": [0, 1], "sizes": [3, 4]}
    assert decode(encode(message)) == message
    for hostile in (pickle.dumps(_RunsCode(marker)), pickle.dumps([_RunsCode(marker)], 2)):
        try:
            value = decode(hostile)
        except (msgspec.DecodeError, ValueError, TypeError):
            continue
        assert not isinstance(value, _RunsCode)  # decoded as plain data at most
    assert not os.path.exists(marker)


def _all_errors() -> list[type]:
    seen, stack = [], [CatmapError]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def test_every_catmap_error_pickles_with_its_type_message_and_fields():
    errors = _all_errors()
    assert len(errors) > 40  # catalog, mappers and samplers errors
    for cls in errors:
        error = cls("what went wrong")
        error.__dict__["field"] = 7
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is cls and str(back) == str(error), cls
        assert back.__dict__ == error.__dict__, cls


@pytest.mark.parametrize("box, match", [
    ([0.0, 0.0, 1e9, 10.0], "samples per axis"),  # ~1e9 samples: refused before any work
    ([0.0, float("nan"), 5.0, 5.0], "finite"),
])
def test_mask_resampling_bounds_its_work(box, match):
    masks = BitMasks(torch.ones((1, 8, 8), dtype=torch.bool))
    with pytest.raises(StructureShapeError, match=match):
        masks.crop_and_resize(torch.tensor([box], dtype=torch.float32), 28)


def test_xml_element_count_is_bounded():
    """Pascal VOC XML: at most 200,000 elements, however small the file."""
    assert len(parse_xml_bytes(b"<a>" + b"<b/>" * 1000 + b"</a>", "ok.xml")) == 1000
    flood = b"<a>" + b"<b/>" * MAX_XML_ELEMENTS + b"</a>"  # 800 KB, under the byte cap
    with pytest.raises(AnnotationFormatError, match="elements"):
        parse_xml_bytes(flood, "flood.xml")


def test_every_test_security_md_names_exists():
    """SECURITY.md's table maps each promise to tests; each one must exist (and the table
    must name tests of its own guarantees, the mask budget and the fuzzing among them)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    text = (root / "SECURITY.md").read_text(encoding="utf-8")
    table = text.split("## Promises and the tests that pin them", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", table)
    assert len(named) >= 50
    for path, name in named:
        assert (root / path).is_file(), path
        if name:
            tree = ast.parse((root / path).read_text(encoding="utf-8"))
            defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"SECURITY.md names {path}::{name}, which does not exist"
    for promise in ("SampleBudgetError", "3 GiB", "SIGBUS"):
        assert promise in text
