"""tools/bench_cache.py runs and reports every figure."""

from __future__ import annotations

import json

from tools.bench_cache import main


def test_bench_cache_reports_every_figure(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--mb", "2", "--repeat", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    expected = {"store", "hit", "crc32_entry", "digest_crc32", "key_build"}
    assert expected <= set(results)
    assert all(results[name] > 0 for name in expected)
    assert 1.5 < results["entry_mb"] < 3 and "hit" in capsys.readouterr().out
