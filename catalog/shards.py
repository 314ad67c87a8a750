"""Shards: a registered dataset as WebDataset-compatible tar shards plus a sidecar index, and
back into the catalog from a local directory or an ``s3://``, ``gs://`` or ``http(s)://`` URL.

Layout of ``out_dir``:

- ``<prefix>-000000.tar`` ...: sample ``i`` is two members, ``<key>.<ext>`` (the image file's
  bytes) and ``<key>.json`` (its detectron2 record, sorted keys), ``key = f"{i:09d}"``; members
  have mtime 0, uid/gid 0 and mode 0444, so equal input gives byte-identical shards. Python's
  ``tarfile`` and the ``webdataset`` package read them.
- ``index.catmap-shards``: the sidecar, msgpack decoded by msgspec into a typed struct (never
  unpickled): per shard name, size, SHA-256, first sample, count; per sample byte offset and
  size in its shard, height, width, category ids, image SHA-256 and extension; the records and
  the metadata. Records and metadata come from it alone, before any image is fetched. It is
  memory-mapped (columns and records are views, shared by the machine's processes): replace
  it by rename, as ``write_shards`` does, never by rewriting the file in place.

:func:`write_shards` is resumable: each finished shard leaves a part file (its fingerprint and
columns) under ``.parts/``; a rerun keeps a shard whose fingerprint (records, image sizes and
mtimes) and file SHA-256 still match. :func:`register_shards` registers the records (each
``file_name`` becomes ``<url>/<shard>#<key>.<ext>``) and the metadata, and adds a
:class:`~catalog.storage.shard_cache.ShardReader` to ``SHARD_SOURCES``, through which
``mappers.read_image`` reads the image bytes (local directory in place; a URL through the
node-local shard cache).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import mmap
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .dataset_catalog import DatasetCatalog
from .metadata import MetadataCatalog
from .storage.records import SerializedList
from .storage.shard_cache import (
    SHARD_SOURCES,
    ShardCache,
    ShardCorruptError,
    ShardError,
    ShardNotFoundError,
    ShardReader,
    fetch_bytes,
    fetch_to_file,
    is_url,
)

__all__ = ["INDEX_NAME", "ShardIndex", "ShardWriteError", "load_shard_index", "register_shards",
           "verify_shards", "write_shards"]

logger = logging.getLogger(__name__)

FORMAT = "catmap-shards/1"
INDEX_NAME = "index.catmap-shards"
_PARTS = ".parts"
_SHARD_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}\.tar")
_EXT = re.compile(r"[a-z0-9]{1,10}")
_MAX_IMAGE_BYTES = 1 << 30
_RECORDS_CHUNK = 100_000  # records a msgpack chunk of the index (a bin holds < 4 GiB)


class ShardWriteError(ShardError):
    """A record or its image could not be written into a shard."""


class _Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    sha256: str
    size: int
    first: int
    count: int


class _Columns(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Per-sample columns, little-endian arrays as bytes (``offset``/``size``/
    ``category_offsets`` int64, ``height``/``width``/``category_ids`` int32, ``sha256`` 32
    bytes a sample, ``ext_codes`` uint8: the sample's image extension is ``ext[code]``)."""

    ext: list[str]
    ext_codes: memoryview  # memoryview: decoded from a mapped index without a copy
    offset: memoryview
    size: memoryview
    height: memoryview
    width: memoryview
    category_offsets: memoryview
    category_ids: memoryview
    sha256: memoryview


class _Index(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: str
    dataset: str
    metadata: dict[str, Any]
    shards: list[_Shard]
    columns: _Columns
    records: list[memoryview]  # msgpack list[dict] chunks (a bin holds < 4 GiB): decoded
    # only when the records are asked for


class _Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    fingerprint: str
    shard: _Shard
    columns: _Columns


_INT64, _INT32 = np.dtype("<i8"), np.dtype("<i4")
_COLUMN_TYPES = {"offset": _INT64, "size": _INT64, "height": _INT32, "width": _INT32,
                 "category_offsets": _INT64, "category_ids": _INT32}


@dataclass(frozen=True)
class ShardIndex:
    """A decoded, validated sidecar index: ``shards``, ``records``, ``metadata`` and the
    per-sample arrays in ``columns`` (``shard``, ``offset``, ``size``, ``height``, ``width``,
    ``category_offsets``, ``category_ids``, ``sha256`` as an (n, 32) uint8 array, ``ext``
    uint8 codes into ``ext_names``).
    """

    url: str
    dataset: str
    metadata: dict[str, Any]
    shards: list[_Shard]
    raw_records: list[memoryview]
    columns: dict[str, np.ndarray]
    ext_names: list[str]

    def __len__(self) -> int:
        return len(self.columns["shard"])

    def ext(self, index: int) -> str:
        """The image extension of sample ``index``."""
        return self.ext_names[int(self.columns["ext"][index])]

    @functools.cached_property
    def records(self) -> list[dict[str, Any]]:
        """The records (decoded on first use: registering needs only the columns)."""
        return list(self.iter_records())

    def iter_records(self, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """The records, decoded a chunk at a time; with ``prefix``, each ``file_name`` is
        ``<prefix><shard>#<key>.<ext>``, what :func:`register_shards` registers."""
        decoder, count = msgspec.msgpack.Decoder(list[dict[str, Any]]), 0
        names = [s.name for s in self.shards]
        for chunk in self.raw_records:
            try:
                records = decoder.decode(chunk)
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
                raise _corrupt(self.url, f"bad records ({exc})") from exc
            if count + len(records) > len(self):
                break
            if prefix is not None:
                stop = count + len(records)
                shards = self.columns["shard"][count:stop].tolist()
                exts = self.columns["ext"][count:stop].tolist()
                for i, (record, shard, ext) in enumerate(zip(records, shards, exts), count):
                    record["file_name"] = f"{prefix}{names[shard]}#{i:09d}.{self.ext_names[ext]}"
            count += len(records)
            yield from records
        if count != len(self):
            raise _corrupt(self.url, f"more or fewer records than the {len(self)} samples")

    def category_ids(self, index: int) -> np.ndarray:
        """The category ids of sample ``index``'s annotations."""
        start, stop = self.columns["category_offsets"][index:index + 2]
        return self.columns["category_ids"][start:stop]


def _corrupt(url: str, message: str) -> ShardCorruptError:
    return ShardCorruptError(f"shard index {url}: {message}", url=url)


def _decode_index(data: bytes, url: str) -> ShardIndex:
    try:
        raw = msgspec.msgpack.decode(data, type=_Index)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise _corrupt(url, f"not a catmap shard index ({exc})") from exc
    if raw.format != FORMAT:
        raise _corrupt(url, f"format {raw.format!r}, expected {FORMAT!r}")
    n, cols = len(raw.columns.ext_codes), raw.columns
    arrays: dict[str, np.ndarray] = {}
    for name, dtype in _COLUMN_TYPES.items():
        blob = getattr(cols, name)
        expected = n + 1 if name == "category_offsets" else None
        if len(blob) % dtype.itemsize:
            raise _corrupt(url, f"column {name!r} is {len(blob)} bytes, not whole items")
        arrays[name] = np.frombuffer(blob, dtype).astype(dtype.newbyteorder("="), copy=False)
        if name != "category_ids" and len(arrays[name]) != (expected or n):
            raise _corrupt(url, f"column {name!r} has {len(arrays[name])} items for {n} samples")
    if len(cols.sha256) != 32 * n:
        raise _corrupt(url, "column 'sha256' does not match the number of samples")
    arrays["sha256"] = np.frombuffer(cols.sha256, np.uint8).reshape(n, 32)
    offsets = arrays["category_offsets"]
    if n and (offsets[0] != 0 or np.any(np.diff(offsets) < 0)
              or offsets[-1] != len(arrays["category_ids"])):
        raise _corrupt(url, "column 'category_offsets' is not a valid offsets array")
    if np.any(arrays["offset"] < 0) or np.any(arrays["size"] < 0):
        raise _corrupt(url, "negative sample offset or size")
    counts, first = [], 0
    for shard in raw.shards:
        if not _SHARD_NAME.fullmatch(shard.name) or shard.first != first or shard.count < 0:
            raise _corrupt(url, f"bad shard entry {shard.name!r} (first={shard.first}, "
                                f"count={shard.count})")
        first += shard.count
        counts.append(shard.count)
    if first != n:
        raise _corrupt(url, f"the shards hold {first} samples, the columns {n}")
    bad = next((e for e in cols.ext if not _EXT.fullmatch(e)), None)
    arrays["ext"] = np.frombuffer(cols.ext_codes, np.uint8)
    if bad is not None or len(cols.ext) > 256 or (n and arrays["ext"].max() >= len(cols.ext)):
        raise _corrupt(url, f"bad image extensions {cols.ext[:5]!r}")
    arrays["shard"] = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    sizes = np.array([s.size for s in raw.shards], np.int64)[arrays["shard"]]
    if np.any(arrays["offset"] + arrays["size"] > sizes):
        raise _corrupt(url, "a sample lies beyond the end of its shard")
    return ShardIndex(url, raw.dataset, raw.metadata, raw.shards, raw.records, arrays, cols.ext)


def _location(url: str | os.PathLike[str]) -> str:
    text = os.fspath(url)
    if is_url(text):
        return text.rstrip("/")
    return os.path.abspath(text[len("file://"):] if text.startswith("file://") else text)


def load_shard_index(url: str | os.PathLike[str]) -> ShardIndex:
    """The sidecar index of the shards at ``url`` (a directory or ``s3://bucket/prefix``).

    Example:
        >>> index = load_shard_index("s3://bucket/coco-train")  # doctest: +SKIP
        >>> len(index.records), index.metadata["thing_classes"][:2]  # doctest: +SKIP
    """
    location = _location(url)
    return _decode_index(fetch_bytes(f"{location}/{INDEX_NAME}"), location)


# ------------------------------------------------------------------------------ writing
def _json_record(record: dict[str, Any], dataset: str, index: int) -> bytes:
    try:
        return json.dumps(record, sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ShardWriteError(f"dataset {dataset!r}, record {index}: not JSON data ({exc})",
                              dataset=dataset, key=f"{index:09d}") from exc


def _image_file(record: dict[str, Any], dataset: str, index: int) -> tuple[str, os.stat_result]:
    name = record.get("file_name")
    key = f"{index:09d}"
    if not isinstance(name, (str, os.PathLike)) or is_url(os.fspath(name)):
        raise ShardWriteError(f"dataset {dataset!r}, record {index}: file_name {name!r} is not "
                              "a local file", dataset=dataset, key=key)
    path = os.fspath(name)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ShardWriteError(f"dataset {dataset!r}, record {index}: cannot read image "
                              f"{path}: {exc}", dataset=dataset, key=key) from exc
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_IMAGE_BYTES:
        raise ShardWriteError(f"dataset {dataset!r}, record {index}: {path} is not a regular "
                              f"file under {_MAX_IMAGE_BYTES} bytes", dataset=dataset, key=key)
    return path, info


def _ext(path: str) -> str:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    ext = "jpg" if ext == "jpeg" else ext
    return ext if _EXT.fullmatch(ext) else "img"


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> int:
    """Add a member with fixed metadata; return the offset of its data."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o444, 0, 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))
    return tar.offset - (len(data) + tarfile.BLOCKSIZE - 1) // tarfile.BLOCKSIZE * tarfile.BLOCKSIZE


def _file_sha256(path: str | Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _height_width(record: dict[str, Any]) -> tuple[int, int]:
    values = [record.get("height"), record.get("width")]
    return tuple(v if isinstance(v, int) and 0 <= v < 2**31 else -1 for v in values)  # type: ignore


def _write_shard(records: list[dict[str, Any]], first: int, name: str, out: Path,
                 dataset: str) -> _Part:
    """Write (or keep, when its part file still matches) one shard; return its part."""
    jsons = [_json_record(r, dataset, first + i) for i, r in enumerate(records)]
    files = [_image_file(r, dataset, first + i) for i, r in enumerate(records)]
    digest = hashlib.sha256(f"{FORMAT}\0{dataset}\0{first}\0{name}".encode())
    for data, (path, info) in zip(jsons, files):
        digest.update(b"%d\0%s\0%d\0%d\0" % (len(data), data, info.st_size, info.st_mtime_ns))
    fingerprint = digest.hexdigest()
    part_path, shard_path = out / _PARTS / f"{name}.part", out / name
    if part_path.exists() and shard_path.exists():
        try:
            part = msgspec.msgpack.decode(part_path.read_bytes(), type=_Part)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            part = None
        if (part is not None and part.fingerprint == fingerprint
                and _file_sha256(shard_path) == part.shard.sha256):
            return part  # finished by an earlier run
    offsets, sizes, shas, exts = [], [], [], []
    tmp = out / f".{name}.tmp-{os.getpid()}"
    try:
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (data, (path, _)) in enumerate(zip(jsons, files)):
                key, ext = f"{first + i:09d}", _ext(path)
                with open(path, "rb") as handle:
                    image = handle.read(_MAX_IMAGE_BYTES + 1)
                offsets.append(_member(tar, f"{key}.{ext}", image))
                sizes.append(len(image))
                shas.append(hashlib.sha256(image).digest())
                exts.append(ext)
                _member(tar, f"{key}.json", data)
        sha, size = _file_sha256(tmp), tmp.stat().st_size
        os.replace(tmp, shard_path)
    finally:
        tmp.unlink(missing_ok=True)
    hw = [_height_width(r) for r in records]
    cats = [[a.get("category_id", -1) for a in r.get("annotations", ()) if isinstance(a, dict)]
            for r in records]
    names = sorted(set(exts))
    columns = _Columns(
        ext=names, ext_codes=bytes(names.index(e) for e in exts),
        offset=np.array(offsets, _INT64).tobytes(),
        size=np.array(sizes, _INT64).tobytes(),
        height=np.array([h for h, _ in hw], _INT32).tobytes(),
        width=np.array([w for _, w in hw], _INT32).tobytes(),
        category_offsets=np.cumsum([0] + [len(c) for c in cats], dtype=np.int64).astype(
            _INT64).tobytes(),
        category_ids=np.array([i for c in cats for i in c], _INT32).tobytes(),
        sha256=b"".join(shas))
    part = _Part(fingerprint, _Shard(name, sha, size, first, len(records)), columns)
    _atomic_write(part_path, msgspec.msgpack.encode(part))
    return part


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)  # no fsync: a rerun checks every kept shard's SHA-256
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _join(parts: list[_Part]) -> _Columns:
    """The dataset's columns from its shards' parts."""
    def cat(name: str) -> bytes:
        return b"".join(getattr(p.columns, name) for p in parts)
    cat_offsets, base = [np.zeros(1, _INT64)], 0
    names = sorted({e for p in parts for e in p.columns.ext})
    for part in parts:
        offsets = np.frombuffer(part.columns.category_offsets, _INT64)
        cat_offsets.append(offsets[1:] + base)
        base += int(offsets[-1])
    return _Columns(
        ext=names, ext_codes=b"".join(bytes(p.columns.ext_codes).translate(bytes(
            names.index(e) for e in p.columns.ext).ljust(256, b"\0")) for p in parts),
        offset=cat("offset"), size=cat("size"),
        height=cat("height"), width=cat("width"),
        category_offsets=np.concatenate(cat_offsets).astype(_INT64).tobytes(),
        category_ids=cat("category_ids"), sha256=cat("sha256"))


def _plain_metadata(dataset: str) -> dict[str, Any]:
    """The dataset's metadata that msgpack can hold (others are logged and left out)."""
    plain = {}
    for key, value in MetadataCatalog.get(dataset).as_dict().items():
        if key == "name":
            continue
        try:
            msgspec.msgpack.encode(value)
        except (TypeError, msgspec.EncodeError):
            logger.warning("write_shards(%r): metadata key %r (%s) is not data; not in the "
                           "index", dataset, key, type(value).__name__)
            continue
        plain[key] = value
    return plain


def write_shards(dataset_name: str, out_dir: str | os.PathLike[str], *, shard_size: int = 1000,
                 prefix: str = "shard", workers: int | None = None,
                 progress: bool = False) -> Path:
    """Write registered dataset ``dataset_name`` as tar shards of ``shard_size`` samples and
    a sidecar index into ``out_dir``; returns the index's path. Shards are written by
    ``workers`` threads; a rerun after an interrupt keeps the shards already finished.

    Example:
        >>> write_shards("coco_2017_train", "/data/coco-shards", shard_size=2000)  # doctest: +SKIP
        PosixPath('/data/coco-shards/index.catmap-shards')
    """
    if not isinstance(shard_size, int) or isinstance(shard_size, bool) or shard_size <= 0:
        raise ValueError(f"write_shards: shard_size must be a positive int, got {shard_size!r}")
    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,100}", prefix):
        raise ValueError(f"write_shards: prefix must be letters, digits, _ or -, got {prefix!r}")
    records = [dict(r) for r in DatasetCatalog.get(dataset_name)]
    metadata = _plain_metadata(dataset_name)
    out = Path(out_dir)
    (out / _PARTS).mkdir(parents=True, exist_ok=True)
    starts = list(range(0, len(records), shard_size))
    names = [f"{prefix}-{i:06d}.tar" for i in range(len(starts))]
    workers = workers or min(8, os.cpu_count() or 1)
    bar = _progress(progress, len(starts), dataset_name)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_write_shard, records[s:s + shard_size], s, name, out,
                               dataset_name) for s, name in zip(starts, names)]
        parts = []
        for future in futures:
            parts.append(future.result())
            bar(1)
    bar(0, close=True)
    columns = _join(parts)
    index = _Index(FORMAT, dataset_name, metadata, [p.shard for p in parts], columns,
                   [memoryview(msgspec.msgpack.encode(records[i:i + _RECORDS_CHUNK]))
                    for i in range(0, len(records), _RECORDS_CHUNK)])
    _atomic_write(out / INDEX_NAME, msgspec.msgpack.encode(index))
    shutil.rmtree(out / _PARTS, ignore_errors=True)
    return out / INDEX_NAME


def _progress(enabled: bool, total: int, name: str) -> Callable[..., None]:
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if not enabled:
        return lambda n, close=False: None
    bar = tqdm(total=total, desc=f"shards of {name}", unit="shard")
    return lambda n, close=False: bar.close() if close else bar.update(n)


# ------------------------------------------------------------------------------ reading
def _map_file(path: str | Path) -> tuple[str, Any]:
    """``(stamp, content)`` of a local file: size, mtime and inode, and a read-only map of it
    (its pages are shared by every process of the machine that maps it)."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        data = (mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if info.st_size
                else b"")
    return f"{info.st_size}-{info.st_mtime_ns}-{info.st_ino}", data


def _registered_index(location: str, identity: str, cache: ShardCache | None) -> tuple[Path, Any]:
    """The local file and content of the index registered as ``identity`` (a directory's
    index: its stamp, read in place; a remote index: its SHA-256, the shard cache's copy,
    fetched again if it is gone)."""
    url = f"{location}/{INDEX_NAME}"
    path = Path(url) if cache is None else cache.path_of(identity).with_suffix(".index")
    try:
        stamp, data = _map_file(path)
    except FileNotFoundError:
        if cache is None:
            raise ShardNotFoundError(f"shard index {url} is missing", url=url) from None
        data = fetch_bytes(url)
    if identity != (stamp if cache is None else hashlib.sha256(data).hexdigest()):
        raise _corrupt(location, "the index changed since register_shards; register it again")
    if cache is not None:
        path = cache.put(data, identity, ".index")
    return path, data


def _shard_records(location: str, prefix: str, identity: str, cache: ShardCache | None,
                   name: str | None = None) -> SerializedList:
    """The loader of a registered shard dataset: records from the sidecar alone, serialized
    a chunk at a time (never all of them as Python objects at once)."""
    index = _decode_index(_registered_index(location, identity, cache)[1], location)
    return SerializedList(index.iter_records(prefix), name=name)


def _reader_columns(index: ShardIndex) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    return ([s.name for s in index.shards], [s.sha256 for s in index.shards],
            {k: index.columns[k] for k in ("shard", "offset", "size", "sha256")})


def _load_reader_columns(location: str, identity: str, cache: ShardCache | None) -> tuple:
    """What a :class:`ShardReader` shipped to a spawned worker loads on first use."""
    return _reader_columns(_decode_index(_registered_index(location, identity, cache)[1],
                                         location))


def register_shards(name: str, url: str | os.PathLike[str], *, metadata: bool = True,
                    cache_dir: str | os.PathLike[str] | None = None,
                    max_cache_bytes: int = 64 << 30, max_concurrency: int = 8) -> ShardIndex:
    """Register the shards at ``url`` (a directory, ``s3://bucket/prefix`` with endpoint and
    credentials from the AWS environment variables, ``gs://bucket/prefix`` with Google's
    application default credentials, or ``http(s)://``) as dataset ``name``; its metadata is
    set from the index. Remote shards are read through a node-local cache under
    ``cache_dir`` (default ``$CATMAP_CACHE_DIR/shards``) of at most ``max_cache_bytes``.
    DataLoader workers (fork, spawn or forkserver) read the images; the records are cached on
    disk keyed by the index's SHA-256. ``DatasetCatalog.remove(name)`` forgets the shards.

    Example:
        >>> register_shards("coco_train_s3", "s3://bucket/coco-train")  # doctest: +SKIP
        >>> DatasetCatalog.get("coco_train_s3")[0]["file_name"]  # doctest: +SKIP
        's3://bucket/coco-train/shard-000000.tar#000000000.jpg'
    """
    location, cache = _location(url), None
    index_file = f"{location}/{INDEX_NAME}"
    if is_url(location):
        cache = ShardCache(cache_dir, max_bytes=max_cache_bytes, max_concurrency=max_concurrency)
        data = fetch_bytes(index_file)
        identity = hashlib.sha256(data).hexdigest()
        index_file = str(cache.put(data, identity, ".index"))
    else:
        try:
            identity, data = _map_file(index_file)
        except OSError as exc:
            raise ShardNotFoundError(f"shard index {index_file}: {exc}", url=location) from exc
    index, prefix = _decode_index(data, location), location + "/"
    DatasetCatalog.register(name, functools.partial(_shard_records, location, prefix, identity,
                                                    cache, name), source_files=[index_file],
                            cache_key={"format": FORMAT, "prefix": prefix, "index": identity})
    if metadata and index.metadata:
        MetadataCatalog.get(name).set(**index.metadata)
    load = functools.partial(_load_reader_columns, location, identity, cache)
    SHARD_SOURCES[prefix] = ShardReader(name, prefix, load, cache, loaded=_reader_columns(index))
    return index


# ------------------------------------------------------------------------------ verifying
def _local_shards(index: ShardIndex) -> Iterator[tuple[_Shard, str]]:
    """Each shard with a local path to it (a remote one downloaded to a temporary file)."""
    for shard in index.shards:
        url = f"{index.url}/{shard.name}"
        if not is_url(index.url):
            if not os.path.exists(url):
                raise ShardNotFoundError(f"shard {url} is missing", url=url, shard=shard.name)
            yield shard, url
            continue
        with tempfile.NamedTemporaryFile(suffix=".tar") as handle:
            fetch_to_file(url, handle, shard.sha256)
            yield shard, handle.name


def verify_shards(url: str | os.PathLike[str],
                  decode: Callable[[bytes, str], Any] | None = None) -> dict[str, int]:
    """Check every shard at ``url`` against its index: SHA-256, member names, offsets and
    sizes, image SHA-256, JSON record equal to the index's; ``decode(bytes, source)`` (e.g.
    ``mappers.decode_image``) is called on every image. Raises ShardCorruptError naming the
    shard and key of the first problem; returns counts.

    Example:
        >>> verify_shards("/data/coco-shards")  # doctest: +SKIP
        {'shards': 60, 'samples': 118287, 'bytes': 19314567890}
    """
    index = load_shard_index(url)
    total = 0
    for shard, path in _local_shards(index):
        def bad(message: str, key: str = "", shard: _Shard = shard) -> ShardCorruptError:
            where = f"{index.url}/{shard.name}" + (f" sample {key}" if key else "")
            return ShardCorruptError(f"shard {where}: {message}", url=f"{index.url}/{shard.name}",
                                     shard=shard.name, key=key, dataset=index.dataset)
        if _file_sha256(path) != shard.sha256:
            raise bad("SHA-256 differs from the index's")
        try:
            with tarfile.open(path, "r:") as tar:
                members = tar.getmembers()
                if len(members) != 2 * shard.count:
                    raise bad(f"{len(members)} members, the index says {2 * shard.count}")
                for j in range(shard.count):
                    i = shard.first + j
                    key = f"{i:09d}"
                    image, meta = members[2 * j], members[2 * j + 1]
                    if (image.name != f"{key}.{index.ext(i)}" or meta.name != f"{key}.json"
                            or not image.isfile() or not meta.isfile()
                            or image.offset_data != index.columns["offset"][i]
                            or image.size != index.columns["size"][i]):
                        raise bad(f"members {image.name}, {meta.name} do not match the index",
                                  key)
                    data = tar.extractfile(image).read()  # type: ignore[union-attr]
                    if hashlib.sha256(data).digest() != bytes(index.columns["sha256"][i]):
                        raise bad("image SHA-256 differs from the index's", key)
                    record = json.loads(tar.extractfile(meta).read())  # type: ignore[union-attr]
                    if record != json.loads(_json_record(index.records[i], index.dataset, i)):
                        raise bad("JSON record differs from the index's", key)
                    if decode is not None:
                        decode(data, f"{index.url}/{shard.name}#{image.name}")
        except (tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad(f"not a readable tar shard ({exc})") from exc
        total += shard.size
    return {"shards": len(index.shards), "samples": len(index), "bytes": total}
