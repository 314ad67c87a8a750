"""Tests of tools/cache.py (list and clear the on-disk cache)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.storage.cache import load_with_cache

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return importlib.import_module("tools.cache")


@pytest.fixture
def filled_cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("CATMAP_CACHE_DIR", str(directory))
    monkeypatch.delenv("CATMAP_CACHE", raising=False)
    sources = {}
    for name, n in (("alpha", 3), ("beta", 5)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([{"i": i} for i in range(n)]))
        load_with_cache(name, [path], lambda p=path: (json.loads(p.read_text()), {}), loader="t")
        sources[name] = path
    return directory, sources


def test_list_shows_every_entry_with_its_state(filled_cache, capsys):
    directory, sources = filled_cache
    sources["beta"].write_text("[]")  # beta's entry is now stale
    assert _tool().main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"cache directory: {directory}" in out
    lines = {line.split()[-2]: line.split() for line in out.splitlines() if ".catmap" in line}
    assert lines["alpha"][:2] == ["ok", "3"]
    assert lines["beta"][:2] == ["stale", "5"]
    assert "2 entries" in out


def test_clear_stale_keeps_usable_entries(filled_cache, capsys):
    directory, sources = filled_cache
    sources["beta"].unlink()
    (directory / "broken.catmap").write_bytes(b"not a cache file")
    assert _tool().main(["clear", "--stale"]) == 0
    assert "removed 2 files" in capsys.readouterr().out
    assert [p.name.split("-")[0] for p in directory.glob("*.catmap")] == ["alpha"]


def test_clear_by_name_and_everything(filled_cache, capsys):
    directory, _ = filled_cache
    tool = _tool()
    tool.main(["clear", "--name", "alpha"])
    assert [p.name.split("-")[0] for p in directory.glob("*.catmap")] == ["beta"]
    tool.main(["--dir", str(directory), "clear"])
    assert list(directory.glob("*.catmap")) == []
    tool.main(["list"])
    assert "0 entries" in capsys.readouterr().out


def test_runs_as_a_script(filled_cache):
    directory, _ = filled_cache
    result = subprocess.run(
        [sys.executable, "-m", "tools.cache", "list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "CATMAP_CACHE_DIR": str(directory)},
        check=True,
        timeout=120,
    )
    assert "alpha" in result.stdout and "beta" in result.stdout


def test_refuses_a_directory_others_can_write(filled_cache, capsys):
    directory, _ = filled_cache
    os.chmod(directory, 0o777)
    tool = _tool()
    assert tool.main(["list"]) == 1
    assert "group or others can write it" in capsys.readouterr().err
    assert tool.main(["clear"]) == 1 and len(list(directory.glob("*.catmap"))) == 2


def test_lists_a_fifo_or_symlink_entry_without_reading_it(filled_cache, capsys, tmp_path):
    directory, _ = filled_cache
    os.mkfifo(directory / "fifo.catmap")
    (directory / "link.catmap").symlink_to(tmp_path / "alpha.json")
    tool = _tool()
    signal.alarm(30)  # a blocking open of the FIFO ends the test instead of hanging it
    try:
        assert tool.main(["list"]) == 0  # returns: the FIFO is opened without blocking
    finally:
        signal.alarm(0)
    out = capsys.readouterr().out
    assert "4 entries" in out and out.count("invalid") == 2
    tool.main(["clear", "--stale"])
    assert sorted(p.name.split("-")[0] for p in directory.glob("*.catmap")) == ["alpha", "beta"]
    assert (tmp_path / "alpha.json").exists()  # the link was removed, not its target


def test_never_stops_on_a_planted_or_odd_file(filled_cache, capsys):
    directory, _ = filled_cache
    (directory / "garbage.catmap").write_bytes(b"CATMAPR1" + bytes(100))
    (directory / "huge-header.catmap").write_bytes(b"CATMAPR1" + b"\xff" * 20 + bytes(10))
    (directory / "dir.catmap").mkdir()
    tool = _tool()
    assert tool.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "5 entries" in out and out.count("invalid") == 3
    assert tool.main(["clear"]) == 0
    assert sorted(p.name for p in directory.glob("*.catmap")) == ["dir.catmap"]
