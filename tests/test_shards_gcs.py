"""gs:// shards: Cloud Storage's JSON API media download, here from a server on 127.0.0.1 named
by ``STORAGE_EMULATOR_HOST`` (as Google's clients use an emulator); typed errors when
google-auth or the credentials are missing."""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

import catalog.storage.shard_cache as shard_cache
from catalog import DatasetCatalog, MissingDependencyError, register_shards
from catalog.shards import INDEX_NAME, load_shard_index
from catalog.storage.shard_cache import ShardFetchError, ShardNotFoundError
from tests.test_shards import (  # noqa: F401 (fixtures)
    _mapper,
    _sample_key,
    _without_file_name,
    coco,
    coco_dir,
    shards,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture
def gcs_emulator(shards, tmp_path, monkeypatch):
    """The shards as objects ``coco/<file>`` of bucket ``data`` behind the media download
    path of Cloud Storage's JSON API; yields the requests seen and the 403 switch."""
    seen: list[str] = []
    deny: list[bool] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            parts = path.split("/")  # "", download, storage, v1, b, BUCKET, o, OBJECT
            seen.append(self.path)
            if deny:
                self.send_error(403)
                return
            if parts[1:5] != ["download", "storage", "v1", "b"] or parts[6] != "o" or (
                    query != "alt=media" or parts[5] != "data"):
                self.send_error(400)
                return
            name = urllib.parse.unquote(parts[7])
            file = shards / name.removeprefix("coco/")
            if not name.startswith("coco/") or not file.is_file():
                self.send_error(404)
                return
            body = file.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
    yield seen, deny
    server.shutdown()
    thread.join()


def test_gs_shards_give_the_same_records_and_samples(coco, gcs_emulator, tmp_path):
    seen, _ = gcs_emulator
    register_shards("shard_coco_gs", "gs://data/coco", cache_dir=tmp_path / "cache")
    assert seen == [f"/download/storage/v1/b/data/o/coco%2F{INDEX_NAME}?alt=media"]
    records, back = DatasetCatalog.get(coco), DatasetCatalog.get("shard_coco_gs")
    assert back[0]["file_name"] == "gs://data/coco/shard-000000.tar#000000000.jpg"
    assert _without_file_name(back) == _without_file_name(records)
    mapper = _mapper(False)
    for i in (0, 5, 9):
        assert _sample_key(mapper(dict(back[i]))) == _sample_key(mapper(dict(records[i])))
    assert len(list((tmp_path / "cache").glob("*.tar"))) == 3  # one download per shard
    DatasetCatalog.remove("shard_coco_gs")


def test_gs_errors_are_typed(coco, gcs_emulator):
    _, deny = gcs_emulator
    with pytest.raises(ShardNotFoundError, match="404"):
        load_shard_index("gs://data/missing")
    deny.append(True)
    with pytest.raises(ShardFetchError, match="HTTP 403, access denied"):
        load_shard_index("gs://data/coco")


def test_gs_without_google_auth_names_the_extra(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    for name in ("google", "google.auth", "google.auth.transport.requests"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"catmap\[gcs\]"):
        load_shard_index("gs://data/coco")


def test_gs_without_credentials_is_a_typed_error(monkeypatch, tmp_path):
    pytest.importorskip("google.auth")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    monkeypatch.setattr(shard_cache, "_gcs_credentials", {})
    with pytest.raises(ShardFetchError, match="no usable Google credentials") as info:
        load_shard_index("gs://data/coco")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(info.value)
    assert info.value.url == f"gs://data/coco/{INDEX_NAME}"
