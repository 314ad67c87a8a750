"""Shards (issue 24): a COCO dataset written as WebDataset tar shards and read back through
``register_shards`` from a directory and from an S3 server on 127.0.0.1 (moto in server
mode, the real boto3 client) gives the same records and the same mapped samples."""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from catalog import (
    DatasetCatalog,
    MetadataCatalog,
    register_coco_instances,
    register_shards,
    verify_shards,
    write_shards,
)
from catalog.shards import INDEX_NAME, ShardWriteError, load_shard_index
from catalog.storage.shard_cache import (
    ShardCache,
    ShardCorruptError,
    ShardError,
    ShardNotFoundError,
)
from mappers import DatasetMapper
from mappers import transforms as T
from mappers.errors import ImageReadError
from mappers.image_io import read_file_bytes
from samplers import build_detection_train_loader
from tests.image_bytes import jpeg_bytes, photo_like

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N_IMAGES = 10
SHARD_SIZE = 4  # 3 shards: 4 + 4 + 2


@pytest.fixture(scope="module")
def coco_dir(tmp_path_factory) -> Path:
    """A COCO instances file with 10 JPEG photos of two sizes and a few boxes each."""
    root = tmp_path_factory.mktemp("coco_shards")
    images, annotations = [], []
    for i in range(N_IMAGES):
        height, width = (48, 64) if i % 2 else (64, 40)
        (root / f"img{i}.jpg").write_bytes(jpeg_bytes(photo_like(height, width, seed=i)))
        images.append({"id": i + 1, "file_name": f"img{i}.jpg", "height": height, "width": width})
        for j in range(1 + i % 3):
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": 1 + (i + j) % 2, "iscrowd": 0,
                                "bbox": [2.0 + j, 3.0, 10.0, 12.0], "area": 120.0,
                                "segmentation": [[2, 3, 12, 3, 12, 15, 2, 15]]})
    categories = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
    (root / "instances.json").write_text(json.dumps(
        {"images": images, "annotations": annotations, "categories": categories}))
    return root


@pytest.fixture
def coco(coco_dir) -> str:
    register_coco_instances("shard_coco", {}, str(coco_dir / "instances.json"), str(coco_dir))
    return "shard_coco"


@pytest.fixture
def shards(coco, tmp_path) -> Path:
    out = tmp_path / "shards"
    write_shards(coco, out, shard_size=SHARD_SIZE)
    return out


def _without_file_name(records) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "file_name"} for r in records]


def _mapper(is_train: bool, **options) -> DatasetMapper:
    augmentations = [T.ResizeShortestEdge((32, 40), max_size=80, sample_style="choice"),
                     T.RandomFlip(prob=0.5)] if is_train else []
    return DatasetMapper(is_train, augmentations=augmentations, image_format="BGR",
                         use_instance_mask=True, **options)


def _sample_key(sample: dict) -> tuple:
    instances = sample.get("instances")
    boxes = b"" if instances is None else instances.gt_boxes.tensor.numpy().tobytes()
    return (sample["image_id"], tuple(sample["image"].shape), sample["image"].numpy().tobytes(),
            boxes)


def _batches(name: str, count: int = 4, workers: int = 0) -> list[list[tuple]]:
    loader = build_detection_train_loader(DatasetCatalog.get(name), mapper=_mapper(True),
                                          total_batch_size=2, num_workers=workers, seed=5,
                                          aspect_ratio_grouping=True)
    return [[_sample_key(s) for s in batch] for batch in itertools.islice(loader, count)]


def _assert_same_as_original(original: str, sharded: str, workers: int = 0) -> None:
    records, back = DatasetCatalog.get(original), DatasetCatalog.get(sharded)
    assert _without_file_name(back) == _without_file_name(records)
    assert MetadataCatalog.get(sharded).thing_classes == ["cat", "dog"]
    assert (MetadataCatalog.get(sharded).thing_dataset_id_to_contiguous_id
            == MetadataCatalog.get(original).thing_dataset_id_to_contiguous_id)
    test_mapper = _mapper(False)
    for a, b in zip(records, back):
        assert _sample_key(test_mapper(dict(b))) == _sample_key(test_mapper(dict(a)))
    assert _batches(sharded, workers=workers) == _batches(original)


# ------------------------------------------------------------------------------ format
def test_shards_are_tar_files_that_tarfile_and_webdataset_read(coco, shards):
    names = sorted(p.name for p in shards.glob("*.tar"))
    assert names == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    records = DatasetCatalog.get(coco)
    with tarfile.open(shards / names[0]) as tar:
        members = tar.getmembers()
        assert [m.name for m in members[:4]] == ["000000000.jpg", "000000000.json",
                                                 "000000001.jpg", "000000001.json"]
        assert {(m.mtime, m.uid, m.gid, m.mode) for m in members} == {(0, 0, 0, 0o444)}
        image = tar.extractfile(members[0]).read()
        assert image == Path(records[0]["file_name"]).read_bytes()
        assert json.loads(tar.extractfile(members[1]).read()) == json.loads(
            json.dumps(records[0]))

    import webdataset as wds

    urls = [str(shards / n) for n in names]
    samples = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
    assert [s["__key__"] for s in samples] == [f"{i:09d}" for i in range(N_IMAGES)]
    for sample, record in zip(samples, records):
        assert sample["jpg"] == Path(record["file_name"]).read_bytes()
        assert json.loads(sample["json"])["image_id"] == record["image_id"]
    decoded = next(iter(wds.WebDataset(urls[:1], shardshuffle=False).decode("rgb8")))
    assert decoded["jpg"].shape == (64, 40, 3)


def test_sidecar_index_holds_columns_records_and_shard_hashes(coco, shards):
    index = load_shard_index(shards)
    records = DatasetCatalog.get(coco)
    assert index.records == [json.loads(json.dumps(r)) for r in records]
    assert index.metadata["thing_classes"] == ["cat", "dog"]
    assert list(index.columns["height"]) == [r["height"] for r in records]
    assert list(index.columns["width"]) == [r["width"] for r in records]
    for i, record in enumerate(records):
        assert list(index.category_ids(i)) == [a["category_id"] for a in record["annotations"]]
        image = Path(record["file_name"]).read_bytes()
        assert bytes(index.columns["sha256"][i]) == hashlib.sha256(image).digest()
        shard = index.shards[int(index.columns["shard"][i])]
        with open(shards / shard.name, "rb") as handle:
            handle.seek(int(index.columns["offset"][i]))
            assert handle.read(int(index.columns["size"][i])) == image
    for shard in index.shards:
        assert hashlib.sha256((shards / shard.name).read_bytes()).hexdigest() == shard.sha256
    assert b"pickle" not in (shards / INDEX_NAME).read_bytes()[:2]  # msgpack, first byte a map
    assert verify_shards(shards)["samples"] == N_IMAGES


def test_output_is_identical_and_an_interrupted_write_resumes(coco, coco_dir, shards,
                                                                tmp_path):
    again = tmp_path / "again"
    write_shards(coco, again, shard_size=SHARD_SIZE, workers=1)
    for path in shards.iterdir():
        if path.is_file():
            assert (again / path.name).read_bytes() == path.read_bytes(), path.name
    # interrupt: the last shard's image is missing, the first two shards finish
    resumed = tmp_path / "resumed"
    last = coco_dir / "img9.jpg"
    saved = last.read_bytes()
    last.unlink()
    try:
        with pytest.raises(ShardWriteError, match="record 9"):
            write_shards(coco, resumed, shard_size=SHARD_SIZE, workers=1)
    finally:
        last.write_bytes(saved)
        os.utime(last, ns=(0, 0))
    assert not (resumed / INDEX_NAME).exists()
    inodes = {n: (resumed / n).stat().st_ino for n in ("shard-000000.tar", "shard-000001.tar")}
    write_shards(coco, resumed, shard_size=SHARD_SIZE, workers=1)
    assert {n: (resumed / n).stat().st_ino for n in inodes} == inodes  # kept, not rewritten
    assert sorted(p.name for p in resumed.iterdir()) == sorted(
        p.name for p in shards.iterdir())
    assert verify_shards(resumed)["shards"] == 3
    # a finished shard whose bytes changed is written again
    (resumed / "shard-000001.tar").unlink()
    (resumed / INDEX_NAME).unlink()
    write_shards(coco, resumed, shard_size=SHARD_SIZE)
    assert verify_shards(resumed)["samples"] == N_IMAGES


# ------------------------------------------------------------------------------ reading
def test_directory_shards_give_the_same_records_and_mapped_samples(coco, shards):
    index = register_shards("shard_coco_dir", shards)
    assert len(index.records) == N_IMAGES
    assert DatasetCatalog.get("shard_coco_dir")[3]["file_name"] == (
        f"{shards}/shard-000000.tar#000000003.jpg")
    _assert_same_as_original(coco, "shard_coco_dir", workers=2)


def test_corrupt_sample_is_a_typed_error_or_skipped_and_verify_names_it(coco, shards):
    register_shards("shard_coco_bad", shards)
    index = load_shard_index(shards)
    offset = int(index.columns["offset"][5])
    path = shards / index.shards[int(index.columns["shard"][5])].name
    data = bytearray(path.read_bytes())
    data[offset + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    record = DatasetCatalog.get("shard_coco_bad")[5]
    with pytest.raises(ImageReadError, match="sample 000000005") as info:
        _mapper(False)(dict(record))
    assert isinstance(info.value.__cause__, ShardCorruptError)
    assert info.value.__cause__.key == "000000005"
    assert _mapper(False, skip_bad_images=True)(dict(record)) is None  # refetch replaces it
    assert _mapper(False)(dict(DatasetCatalog.get("shard_coco_bad")[4]))["image_id"] == 5
    with pytest.raises(ShardCorruptError, match="shard-000001.tar"):
        verify_shards(shards)
    (shards / "shard-000002.tar").unlink()  # a missing shard: typed, skippable the same way
    with pytest.raises(ImageReadError, match="shard file missing") as info:
        _mapper(False)(dict(DatasetCatalog.get("shard_coco_bad")[9]))
    assert isinstance(info.value.__cause__, ShardNotFoundError)
    missing = dict(DatasetCatalog.get("shard_coco_bad")[9])
    assert _mapper(False, skip_bad_images=True)(missing) is None


def test_corrupt_or_foreign_index_is_a_typed_error(shards, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / INDEX_NAME).write_bytes(b"\x80\x03cos\nsystem\n.")  # a pickle
    with pytest.raises(ShardCorruptError, match="not a catmap shard index"):
        register_shards("shard_bad_index", bad)
    data = (shards / INDEX_NAME).read_bytes()
    (bad / INDEX_NAME).write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardCorruptError):
        load_shard_index(bad)
    with pytest.raises(ShardError):
        load_shard_index(tmp_path / "nowhere")
    assert "shard_bad_index" not in DatasetCatalog


# ------------------------------------------------------------------------------ S3
@pytest.fixture
def s3_shards(shards, monkeypatch):
    """The shards uploaded to a moto S3 server on 127.0.0.1; the AWS variables point at it."""
    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ENDPOINT_URL": f"http://{host}:{port}",
                       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="data")
    for path in shards.iterdir():
        client.upload_file(str(path), "data", f"coco/{path.name}")
    yield client, "s3://data/coco"
    server.stop()


def test_s3_shards_give_the_same_records_and_mapped_samples(coco, s3_shards, tmp_path):
    client, url = s3_shards
    cache_dir = tmp_path / "cache"
    register_shards("shard_coco_s3", url, cache_dir=cache_dir)
    assert DatasetCatalog.get("shard_coco_s3")[0]["file_name"] == (
        "s3://data/coco/shard-000000.tar#000000000.jpg")
    assert not list(cache_dir.glob("*.tar"))  # records and metadata from the index alone
    _assert_same_as_original(coco, "shard_coco_s3")
    index = load_shard_index(url)
    assert sorted(p.name for p in cache_dir.glob("*.tar")) == sorted(
        f"{s.sha256}.tar" for s in index.shards)
    assert not [p for p in cache_dir.iterdir() if ".tmp-" in p.name]
    assert verify_shards(url)["shards"] == 3


def test_s3_corrupt_shard_is_refused_on_download(coco, s3_shards, tmp_path):
    client, url = s3_shards
    register_shards("shard_coco_s3_bad", url, cache_dir=tmp_path / "cache")
    body = bytearray(client.get_object(Bucket="data", Key="coco/shard-000000.tar")["Body"].read())
    body[-1] ^= 1  # the tar's zero padding: the sample is intact, the shard hash is not
    client.put_object(Bucket="data", Key="coco/shard-000000.tar", Body=bytes(body))
    record = DatasetCatalog.get("shard_coco_s3_bad")[0]
    with pytest.raises(ImageReadError, match="SHA-256") as info:
        _mapper(False)(dict(record))
    assert isinstance(info.value.__cause__, ShardCorruptError)
    assert not list((tmp_path / "cache").glob("*.tar"))  # nothing half-written kept


def test_shard_cache_evicts_least_recently_used_within_its_cap(shards, tmp_path):
    index = load_shard_index(shards)
    sizes = [s.size for s in index.shards]
    cache = ShardCache(tmp_path / "lru", max_bytes=sizes[0] + sizes[1])
    urls = [(str(shards / s.name), s.sha256) for s in index.shards]
    first = cache.get(*urls[0])
    cache.get(*urls[1])
    os.utime(first, (1, 1))  # least recently used
    cache.get(*urls[2])
    kept = sorted(p.name for p in (tmp_path / "lru").glob("*.tar"))
    assert kept == sorted(f"{sha}.tar" for _, sha in urls[1:])
    assert cache.downloads == 3
    assert cache.get(*urls[2]) and cache.downloads == 3  # a hit downloads nothing
    (tmp_path / "lru" / f".{urls[0][1]}.tmp-999999999").write_bytes(b"half")  # a killed download
    cache.get(*urls[0])
    assert not list((tmp_path / "lru").glob(".*.tmp-*"))
    with pytest.raises(ShardError, match="exceeds"):
        ShardCache(tmp_path / "tiny", max_bytes=100).get(*urls[0])
    assert np.all(index.columns["size"] > 0)


# ------------------------------------------------------------------------------ console script
def test_catmap_shards_write_and_verify(coco_dir, tmp_path, capsys):
    from tools.shards import main

    out = tmp_path / "cli"
    args = ["write", "cli_coco", str(out), "--shard-size", "6", "--no-progress",
            "--coco-json", str(coco_dir / "instances.json"), "--image-root", str(coco_dir)]
    assert main(args) == 0
    assert sorted(p.name for p in out.glob("*.tar")) == ["shard-000000.tar", "shard-000001.tar"]
    assert main(["verify", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "shards": 2, "samples": N_IMAGES, "bytes": sum(p.stat().st_size for p in out.glob("*.tar"))}
    index = load_shard_index(out)
    path, offset = out / "shard-000001.tar", int(index.columns["offset"][7])
    data = bytearray(path.read_bytes())
    data[offset: offset + 2] = b"\x00\x00"  # not a JPEG any more
    path.write_bytes(bytes(data))
    assert main(["verify", str(out)]) == 1
    error = capsys.readouterr().err
    assert "ShardCorruptError" in error and "shard-000001.tar" in error
    assert main(["write", "not_registered", str(out)]) == 1
    assert "not registered" in capsys.readouterr().err


def test_corrupt_sample_is_replaced_deterministically_by_the_loader(coco, shards):
    register_shards("shard_coco_replaced", shards)
    index = load_shard_index(shards)
    path = shards / index.shards[0].name
    data = bytearray(path.read_bytes())
    data[int(index.columns["offset"][2]) + 50] ^= 0xFF  # image_id 3 is corrupt
    path.write_bytes(bytes(data))

    def batches(workers: int) -> list[list[tuple]]:
        loader = build_detection_train_loader(
            DatasetCatalog.get("shard_coco_replaced"),
            mapper=_mapper(True, skip_bad_images=True), total_batch_size=2,
            num_workers=workers, seed=5, aspect_ratio_grouping=False)
        return [[_sample_key(s) for s in b] for b in itertools.islice(loader, 10)]

    reference = batches(0)
    assert 3 not in {key[0] for batch in reference for key in batch}  # 10 batches > a pass
    assert batches(2) == reference  # the same replacement on every run and any workers


def test_kill_9_during_a_download_leaves_no_cache_file_that_is_used(shards, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    index = load_shard_index(shards)
    shard = index.shards[0]
    fifo = tmp_path / "slow-source.tar"
    os.mkfifo(fifo)
    cache_root = tmp_path / "killed"
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from catalog.storage.shard_cache import ShardCache;"
         f"ShardCache({str(cache_root)!r}).get({str(fifo)!r}, {shard.sha256!r})"],
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    data = (shards / shard.name).read_bytes()
    with open(fifo, "wb") as writer:  # the child reads half the shard, then waits for more
        writer.write(data[: len(data) // 2])
        writer.flush()
        deadline = time.monotonic() + 60
        while not list(cache_root.glob(".*.tmp-*")):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)  # it writes what it has read
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert not list(cache_root.glob("*.tar"))  # only the temporary name was written
    (partial,) = cache_root.glob(".*.tmp-*")
    assert 0 < partial.stat().st_size < len(data)  # half-written, under a name never read
    cache = ShardCache(cache_root)  # the lock died with the child; its leftover is removed
    path = cache.get(str(shards / shard.name), shard.sha256)
    assert path.read_bytes() == data and not list(cache_root.glob(".*.tmp-*"))


def _read_image_bytes(file_name: str) -> bytes:
    return read_file_bytes(file_name)


def test_https_style_shards_from_an_http_server_on_loopback(coco, shards, tmp_path):
    import functools
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Handler, directory=str(shards))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        register_shards("shard_coco_http", url, cache_dir=tmp_path / "cache")
        records = DatasetCatalog.get(coco)
        back = DatasetCatalog.get("shard_coco_http")
        assert _without_file_name(back) == _without_file_name(records)
        mapper = _mapper(False)
        assert _sample_key(mapper(dict(back[6]))) == _sample_key(mapper(dict(records[6])))
        with pytest.raises(ShardError, match="HTTP 404"):
            load_shard_index(f"{url}/missing")
        # two local ranks at once (forked processes): the shard is downloaded once
        context = multiprocessing.get_context("fork")
        with context.Pool(2) as pool:
            names = pool.map(_read_image_bytes, [back[8]["file_name"], back[9]["file_name"]])
        assert names == [Path(records[8]["file_name"]).read_bytes(),
                         Path(records[9]["file_name"]).read_bytes()]
        assert requests.count("/shard-000002.tar") == 1
    finally:
        server.shutdown()
        thread.join()


def test_mutated_indexes_decode_or_raise_a_typed_error(shards, tmp_path):
    data = (shards / INDEX_NAME).read_bytes()
    rng = np.random.default_rng(0)
    target = tmp_path / "fuzz"
    target.mkdir()
    outcomes = {"decoded": 0, "refused": 0}
    for trial in range(300):
        mutated = bytearray(data)
        if trial % 3 == 0:
            mutated = mutated[: int(rng.integers(len(mutated)))]
        else:
            for _ in range(int(rng.integers(1, 8))):
                mutated[int(rng.integers(len(mutated)))] = int(rng.integers(256))
        (target / INDEX_NAME).write_bytes(bytes(mutated))
        try:
            index = load_shard_index(target)
            assert len(index.records) == len(index)
            outcomes["decoded"] += 1
        except ShardCorruptError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and sum(outcomes.values()) == 300


# ------------------------------------------------------------------------------ follow-ups
@pytest.mark.parametrize("where", ["directory", "s3"])
def test_spawned_worker_reads_shard_images(coco, shards, where, request, tmp_path):
    """A spawn worker starts with an empty SHARD_SOURCES: the reader travels with the
    MapDataset the loader pickles and loads the index there (from the cache's copy for s3)."""
    url = str(shards) if where == "directory" else request.getfixturevalue("s3_shards")[1]
    register_shards("shard_coco_spawn", url, cache_dir=tmp_path / "cache")
    loader = build_detection_train_loader(
        DatasetCatalog.get("shard_coco_spawn"), mapper=_mapper(True), total_batch_size=2,
        num_workers=1, multiprocessing_context="spawn", seed=5, aspect_ratio_grouping=True)
    spawned = [[_sample_key(s) for s in batch] for batch in itertools.islice(loader, 3)]
    assert spawned == _batches(coco, count=3)


def test_catalog_remove_and_clear_forget_the_shards(coco, shards):
    from catalog.storage.shard_cache import SHARD_SOURCES

    register_shards("shard_coco_removed", shards)
    file_name = DatasetCatalog.get("shard_coco_removed")[3]["file_name"]
    assert read_file_bytes(file_name) == Path(DatasetCatalog.get(coco)[3]["file_name"]).read_bytes()
    DatasetCatalog.remove("shard_coco_removed")
    assert not [r for r in SHARD_SOURCES.values() if r.dataset == "shard_coco_removed"]
    with pytest.raises(ImageReadError):  # now a plain path, which does not exist
        read_file_bytes(file_name)
    register_shards("shard_coco_removed", shards)
    DatasetCatalog.clear()
    assert not SHARD_SOURCES


def test_s3_records_are_cached_on_disk_by_the_index_sha256(coco, s3_shards, tmp_path,
                                                             monkeypatch):
    import catalog.shards as shards_module

    client, url = s3_shards
    register_shards("shard_coco_s3_cached", url, cache_dir=tmp_path / "cache")
    first = list(DatasetCatalog.get("shard_coco_s3_cached"))
    DatasetCatalog.remove("shard_coco_s3_cached")

    def not_called(*args):
        raise AssertionError("the records were decoded again")
    with monkeypatch.context() as patch:
        patch.setattr(shards_module, "_shard_records", not_called)
        register_shards("shard_coco_s3_cached", url, cache_dir=tmp_path / "cache")
        assert list(DatasetCatalog.get("shard_coco_s3_cached")) == first  # the disk cache
    DatasetCatalog.remove("shard_coco_s3_cached")
    # a changed index (other shard size) is a miss: the new records, the new shard names
    out = tmp_path / "resharded"
    write_shards(coco, out, shard_size=6)
    client.upload_file(str(out / INDEX_NAME), "data", f"coco/{INDEX_NAME}")
    register_shards("shard_coco_s3_cached", url, cache_dir=tmp_path / "cache")
    names = [r["file_name"] for r in DatasetCatalog.get("shard_coco_s3_cached")]
    assert names[4] == "s3://data/coco/shard-000000.tar#000000004.jpg" != first[4]["file_name"]


@pytest.fixture
def throttling_server(shards, tmp_path):
    """A loopback server serving ``shards`` over HTTP and as S3 bucket ``data`` (path-style
    GET ``/data/coco/<name>``), answering ``fail[name]`` requests for ``name`` with 503
    SlowDown first; ``seen`` counts the requests per file name."""
    import functools
    import http.server
    import threading

    (tmp_path / "root" / "data").mkdir(parents=True)
    (tmp_path / "root" / "data" / "coco").symlink_to(shards)
    fail: dict[str, float] = {}
    seen: dict[str, int] = {}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1].partition("?")[0]
            seen[name] = seen.get(name, 0) + 1
            if fail.get(name, 0) > 0:
                fail[name] -= 1
                body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                        b"<Message>Please reduce your request rate.</Message></Error>")
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path / "root")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", fail, seen
    server.shutdown()
    thread.join()


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_throttled_reads_back_off_then_succeed_or_fail_typed(coco, throttling_server, scheme,
                                                              tmp_path, monkeypatch):
    from catalog.storage.shard_cache import ShardFetchError

    endpoint, fail, seen = throttling_server
    if scheme == "s3":
        pytest.importorskip("boto3")
        for key, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "standard"}.items():
            monkeypatch.setenv(key, value)
    url = f"{endpoint}/data/coco" if scheme == "http" else "s3://data/coco"
    fail[INDEX_NAME] = 2
    register_shards("shard_coco_throttled", url, cache_dir=tmp_path / "cache")
    assert seen[INDEX_NAME] == 3  # two 503 SlowDown, then the index
    back, records = DatasetCatalog.get("shard_coco_throttled"), DatasetCatalog.get(coco)
    fail["shard-000000.tar"] = 3
    assert read_file_bytes(back[1]["file_name"]) == Path(records[1]["file_name"]).read_bytes()
    assert seen["shard-000000.tar"] == 4
    # a store that keeps throttling: a typed error after a bounded number of requests
    fail["shard-000001.tar"] = 1000
    with pytest.raises(ImageReadError, match="SlowDown|503") as info:
        read_file_bytes(back[5]["file_name"])
    assert isinstance(info.value.__cause__, ShardFetchError)
    assert info.value.__cause__.url.endswith("shard-000001.tar")
    assert seen["shard-000001.tar"] == (4 if scheme == "http" else 4 * 2)  # attempts (x boto's)


def test_an_index_rewritten_after_registration_is_a_typed_error(coco, shards):
    register_shards("shard_coco_rewritten", shards)
    write_shards(coco, shards, shard_size=6)  # another layout under the same directory
    with pytest.raises(ShardCorruptError, match="changed since register_shards"):
        DatasetCatalog.get("shard_coco_rewritten")
    DatasetCatalog.remove("shard_coco_rewritten")
    register_shards("shard_coco_rewritten", shards)  # registered again: the new layout
    assert DatasetCatalog.get("shard_coco_rewritten")[4]["file_name"].endswith(
        "shard-000000.tar#000000004.jpg")
