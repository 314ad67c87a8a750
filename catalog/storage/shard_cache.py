"""Shard storage: fetching tar shards (local directory, ``s3://``, ``gs://``, ``http(s)://``),
a node-local shard cache and the byte source that serves one sample's image from a shard.

- **Fetching**: ``http(s)://`` through urllib; ``s3://`` through boto3, which reads
  ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
  ``AWS_DEFAULT_REGION`` as every AWS client does (MinIO or another S3-compatible store
  needs no code). botocore's retries (``AWS_RETRY_MODE``, default adaptive, and
  ``AWS_MAX_ATTEMPTS``, default 8) handle throttling (SlowDown); on top, a whole download is
  retried with exponential backoff when the connection breaks, the server still throttles or
  the bytes do not hash to the shard's SHA-256. At most ``max_concurrency`` downloads run at
  once in a process. boto3 was chosen by measurement (``tools/bench_shards.py``'s ``fetch``
  stage, docs/shards.md): obstore is faster but hangs in a forked DataLoader worker, s3fs is
  slower. ``gs://bucket/object``: Cloud Storage's JSON API media download through urllib,
  with an OAuth token from google-auth's application default credentials (extra ``gcs``;
  ``GOOGLE_APPLICATION_CREDENTIALS``), or at ``STORAGE_EMULATOR_HOST`` without credentials,
  as Google's own clients do; retried like ``http(s)://``.
- **Cache**: one file per shard named by its SHA-256 under ``$CATMAP_CACHE_DIR/shards``
  (0700, owned by this user), capped in bytes, least recently used shard evicted first. A
  per-shard file lock makes the local ranks of a machine download each shard once; a download
  goes to a temporary name and is renamed only once its hash is right, so a ``kill -9`` never
  leaves a half-written shard under a name that is read.
- **Sources**: :data:`SHARD_SOURCES` maps a URL prefix to a :class:`ShardReader`; only program
  code adds to it (``catalog.register_shards``), never a data file. ``mappers.image_io`` asks
  it first, so a record whose ``file_name`` is ``<prefix><shard>#<key>.<ext>`` is read from
  its shard, and the sample's SHA-256 is checked on every read.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from filelock import FileLock

from .._common import CatmapErrorWithFields, MissingDependencyError, missing_dependency
from .cache import cache_dir
from .records_file import foreign

__all__ = [
    "SHARD_SOURCES", "ShardCache", "ShardCorruptError", "ShardError", "ShardFetchError",
    "ShardNotFoundError", "ShardReader", "drop_shard_sources", "fetch_bytes", "fetch_to_file",
    "install_shard_sources", "is_url", "shard_cache_dir",
]

_CHUNK = 1 << 20
_TMP = re.compile(r"^\.(?P<sha>[0-9a-f]{64})\.tmp-(?P<pid>\d+)$")
_SHARD_FILE = re.compile(r"^[0-9a-f]{64}\.tar$")
_RETRYABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                    "InternalError", "ServiceUnavailable", "503", "500"}


class ShardError(CatmapErrorWithFields, OSError):
    """A shard, its index or one of its samples could not be used; ``url``, ``shard``,
    ``key`` and ``dataset`` name it."""

    field_names = ("url", "shard", "key", "dataset")

    def __str__(self) -> str:  # OSError formats its args specially; keep the plain message
        return str(self.args[0]) if self.args else ""


class ShardNotFoundError(ShardError, FileNotFoundError):
    """A shard or index file does not exist at its URL."""


class ShardFetchError(ShardError):
    """A shard could not be downloaded (network, permissions, throttling after all retries)."""


class ShardCorruptError(ShardError):
    """A shard, index or sample does not match its recorded SHA-256 or layout."""


def is_url(location: str) -> bool:
    """True for an object-store URL (``s3://bucket/key``); False for a local path."""
    return "://" in location and not location.startswith("file://")


def _split_s3(url: str) -> tuple[str, str]:
    if not url.startswith(("s3://", "s3a://")):
        raise ShardFetchError(f"{url}: only s3://, gs://, http(s):// and local directories are "
                              "supported", url=url)
    bucket, _, key = url.partition("://")[2].partition("/")
    return bucket, key


_clients: dict[tuple[Any, ...], Any] = {}
_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION", "AWS_PROFILE",
        "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE")
_client_lock = threading.Lock()


def _s3_client() -> Any:
    """One boto3 S3 client per process and AWS environment (a client does not survive fork)."""
    pid = (os.getpid(), *(os.environ.get(name) for name in _ENV))
    with _client_lock:
        if pid not in _clients:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise missing_dependency("boto3", "shards", "reading s3:// shards") from None
            retries = {"total_max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS") or 8),
                       "mode": os.environ.get("AWS_RETRY_MODE") or "adaptive"}
            config = Config(retries=retries,  # type: ignore[arg-type]
                            max_pool_connections=32, connect_timeout=30, read_timeout=60)
            _clients.clear()
            _clients[pid] = boto3.session.Session().client("s3", config=config)
        return _clients[pid]


_GCS_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
_gcs_credentials: dict[int, Any] = {}


def _gcs_request(url: str) -> urllib.request.Request:
    """The media download request of ``gs://bucket/object`` (ShardFetchError without usable
    credentials, MissingDependencyError without google-auth)."""
    bucket, _, name = url.partition("://")[2].partition("/")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    base = emulator if "://" in emulator else f"http://{emulator}" if emulator else (
        "https://storage.googleapis.com")
    quote = functools.partial(urllib.parse.quote, safe="")
    request = urllib.request.Request(
        f"{base}/download/storage/v1/b/{quote(bucket)}/o/{quote(name)}?alt=media")
    if emulator:
        return request
    try:
        import google.auth
        import google.auth.transport.requests
        from google.auth.exceptions import GoogleAuthError
    except ImportError:
        raise missing_dependency("google-auth", "gcs", "reading gs:// shards") from None
    with _client_lock:
        credentials = _gcs_credentials.get(os.getpid())
        try:
            if credentials is None:
                credentials = google.auth.default(scopes=[_GCS_SCOPE])[0]
                _gcs_credentials.clear()
                _gcs_credentials[os.getpid()] = credentials
            if not credentials.valid:
                credentials.refresh(google.auth.transport.requests.Request())
        except GoogleAuthError as exc:
            raise ShardFetchError(
                f"{url}: no usable Google credentials ({exc}); set "
                "GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login` "
                "(STORAGE_EMULATOR_HOST for an emulator)", url=url) from exc
    request.add_header("Authorization", f"Bearer {credentials.token}")
    return request


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in (408, 429, 500, 502, 503, 504)
    if isinstance(exc, (urllib.error.URLError, ConnectionError, TimeoutError)):
        return True
    try:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            ParamValidationError,
        )
    except ImportError:
        return False
    if isinstance(exc, (NoCredentialsError, ParamValidationError)):
        return False
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code")) in _RETRYABLE_CODES
    return isinstance(exc, (BotoCoreError, ConnectionError, TimeoutError))


def _stream(url: str, sink: Callable[[bytes], Any]) -> None:
    """Pass the bytes of ``url`` (s3:// or a local path) to ``sink`` chunk by chunk."""
    if not is_url(url):
        path = url[len("file://"):] if url.startswith("file://") else url
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read1(_CHUNK):  # what a pipe or file has now
                    sink(chunk)
        except FileNotFoundError as exc:
            raise ShardNotFoundError(f"{path}: no such file", url=url) from exc
        return
    if url.startswith(("http://", "https://", "gs://")):
        gcs = url.startswith("gs://")
        try:
            with urllib.request.urlopen(_gcs_request(url) if gcs else url,
                                        timeout=60) as response:
                while chunk := response.read(_CHUNK):
                    sink(chunk)
        except urllib.error.HTTPError as exc:
            if gcs and exc.code in (401, 403):
                raise ShardFetchError(f"{url}: HTTP {exc.code}, access denied (the credentials "
                                      "cannot read this object)", url=url) from exc
            if exc.code in (403, 404, 410):
                raise ShardNotFoundError(f"{url}: HTTP {exc.code}", url=url) from exc
            raise
        return
    bucket, key = _split_s3(url)
    try:
        from botocore.exceptions import ClientError
        body = _s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        for chunk in body.iter_chunks(_CHUNK):
            sink(chunk)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code"))
        if code in ("NoSuchKey", "404", "NoSuchBucket"):
            raise ShardNotFoundError(f"{url}: not found ({code})", url=url) from exc
        raise


def _with_retries(url: str, attempts: int, action: Callable[[], Any]) -> Any:
    """``action()``, retried with exponential backoff on transient and hash failures."""
    for attempt in range(attempts):
        try:
            return action()
        except (ShardNotFoundError, ShardFetchError, MissingDependencyError):
            raise
        except ShardCorruptError:
            if attempt + 1 == attempts:
                raise
        except Exception as exc:
            if not _retryable(exc) or attempt + 1 == attempts:
                raise ShardFetchError(f"{url}: download failed after {attempt + 1} attempt(s):"
                                      f" {type(exc).__name__}: {exc}", url=url) from exc
        time.sleep(min(0.1 * 2**attempt, 5.0))
    raise AssertionError("unreachable")


def fetch_bytes(url: str, *, attempts: int = 4, max_bytes: int = 1 << 34) -> bytes:
    """The whole content of ``url`` (a small file such as a shard index), retried.

    Example:
        >>> fetch_bytes("s3://bucket/shards/index.catmap-shards")  # doctest: +SKIP
    """
    def action() -> bytes:
        parts: list[bytes] = []
        total = [0]

        def sink(chunk: bytes) -> None:
            total[0] += len(chunk)
            if total[0] > max_bytes:
                raise ShardCorruptError(f"{url}: more than {max_bytes} bytes", url=url)
            parts.append(chunk)
        _stream(url, sink)
        return b"".join(parts)
    return _with_retries(url, attempts, action)


def fetch_to_file(url: str, handle: BinaryIO, sha256: str | None, *, attempts: int = 4) -> int:
    """Download ``url`` into ``handle`` (truncated before each try); check its SHA-256."""
    def action() -> int:
        handle.seek(0)
        handle.truncate()
        digest = hashlib.sha256()

        def sink(chunk: bytes) -> None:
            digest.update(chunk)
            handle.write(chunk)
        _stream(url, sink)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise ShardCorruptError(f"{url}: SHA-256 {digest.hexdigest()} differs from the "
                                    f"index's {sha256}", url=url)
        handle.flush()
        return handle.tell()
    return _with_retries(url, attempts, action)


def shard_cache_dir() -> Path:
    """``$CATMAP_CACHE_DIR/shards`` (default ``~/.cache/catmap/shards``)."""
    return cache_dir() / "shards"


class ShardCache:
    """A node-local, byte-capped LRU cache of shard files shared by the local ranks.

    Example:
        >>> cache = ShardCache(max_bytes=50 << 30)  # doctest: +SKIP
        >>> path = cache.get("s3://bucket/train-000000.tar", sha256)  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, max_bytes: int = 64 << 30,
                 max_concurrency: int = 8, attempts: int = 4) -> None:
        if not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"ShardCache: max_bytes must be a positive int, got {max_bytes!r}")
        if not isinstance(max_concurrency, int) or max_concurrency <= 0:
            raise ValueError(f"ShardCache: bad max_concurrency {max_concurrency!r}")
        self.root = Path(root) if root is not None else shard_cache_dir()
        self.max_bytes = max_bytes
        self.attempts = attempts
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._touched: dict[str, float] = {}
        self.downloads = 0  # shards downloaded by this process

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_slots"] = state["_slots"]._initial_value  # type: ignore[attr-defined]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_slots"] = threading.BoundedSemaphore(state["_slots"])
        self.__dict__.update(state)

    def _ensure_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = foreign(os.stat(self.root))
        if problem:
            raise ShardError(f"shard cache {self.root} {problem}; not used (chmod 700 it, or "
                             "set CATMAP_CACHE_DIR)", url=str(self.root))

    def path_of(self, sha256: str) -> Path:
        """Where the shard with this SHA-256 lives once cached."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ShardCorruptError(f"bad shard SHA-256 {sha256!r} in the index")
        return self.root / f"{sha256}.tar"

    def get(self, url: str, sha256: str) -> Path:
        """The local path of the shard at ``url``, downloaded (once per machine) if needed."""
        path = self.path_of(sha256)
        if path.exists():
            self._touch(path)
            return path
        self._ensure_root()
        with FileLock(str(self.root / f".{sha256}.lock")):
            if path.exists():  # another local rank fetched it while we waited
                self._touch(path)
                return path
            tmp = self.root / f".{sha256}.tmp-{os.getpid()}"
            try:
                with self._slots, open(tmp, "wb") as handle:
                    size = fetch_to_file(url, handle, sha256, attempts=self.attempts)
                    os.fsync(handle.fileno())
                self._evict(size, keep=path)
                os.replace(tmp, path)
                self.downloads += 1
            finally:
                if tmp.exists():
                    tmp.unlink()
        return path

    def put(self, data: bytes, sha256: str, suffix: str) -> Path:
        """Store ``data`` (e.g. a shard index) as ``<sha256><suffix>``; never evicted."""
        path = self.path_of(sha256).with_suffix(suffix)
        if not path.exists():
            self._ensure_root()
            tmp = self.root / f".{sha256}.tmp-{os.getpid()}"
            try:
                tmp.write_bytes(data)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        return path

    def _touch(self, path: Path) -> None:
        now = time.time()
        if now - self._touched.get(path.name, 0.0) > 1.0:  # LRU order: one utime a second
            self._touched[path.name] = now
            try:
                os.utime(path)
            except FileNotFoundError:
                pass

    def _evict(self, incoming: int, keep: Path) -> None:
        """Remove least recently used shards (and dead downloads) until ``incoming`` fits."""
        if incoming > self.max_bytes:
            raise ShardError(f"a shard of {incoming} bytes exceeds the shard cache's cap of "
                             f"{self.max_bytes} bytes (max_cache_bytes)", url=str(self.root))
        with FileLock(str(self.root / ".evict.lock")):
            entries = []
            for entry in os.scandir(self.root):
                tmp = _TMP.match(entry.name)
                if tmp and not _alive(int(tmp["pid"])):
                    Path(entry.path).unlink(missing_ok=True)  # left by a killed process
                elif _SHARD_FILE.match(entry.name) and entry.path != str(keep):
                    info = entry.stat()
                    entries.append((info.st_mtime, info.st_size, entry.path))
            total = sum(size for _, size, _ in entries)
            for _, size, name in sorted(entries):
                if total + incoming <= self.max_bytes:
                    break
                Path(name).unlink(missing_ok=True)  # open readers keep their file
                total -= size


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: URL prefix -> reader of the images under it; filled only by ``catalog.register_shards``
#: (and, in a spawned worker, by :func:`install_shard_sources` from the pickled dataset).
SHARD_SOURCES: dict[str, ShardReader] = {}


def install_shard_sources(sources: dict[str, ShardReader] | None) -> None:
    """Add readers shipped to a worker (``mappers.MapDataset`` pickles ``SHARD_SOURCES``)."""
    for prefix, reader in (sources or {}).items():
        SHARD_SOURCES.setdefault(prefix, reader)


def drop_shard_sources(dataset: str | None = None) -> None:
    """Forget the readers of ``dataset`` (all with None): its catalog entry was removed."""
    for prefix, reader in list(SHARD_SOURCES.items()):
        if dataset is None or reader.dataset == dataset:
            del SHARD_SOURCES[prefix]


class ShardReader:
    """Serves ``<prefix><shard>#<key>.<ext>`` from the shards of one registered dataset.

    ``load()`` gives the index's shard names, shard SHA-256s and per-sample arrays (``shard``,
    ``offset``, ``size``, ``sha256``); it runs on first use, so a reader pickled to a spawned
    worker travels as ``(dataset, prefix, load, cache)`` and loads there. ``cache`` is None
    for a local directory (read in place).
    """

    def __init__(self, dataset: str, prefix: str, load: Callable[[], tuple[Any, ...]],
                 cache: ShardCache | None, loaded: tuple[Any, ...] | None = None) -> None:
        self.dataset, self.prefix, self.cache, self.load = dataset, prefix, cache, load
        self._loaded = None
        if loaded is not None:
            self._loaded = (*loaded, {n: i for i, n in enumerate(loaded[0])})

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": None}

    def _index(self) -> tuple[list[str], list[str], dict[str, np.ndarray], dict[str, int]]:
        if self._loaded is None:
            names, shas, columns = self.load()
            self._loaded = (names, shas, columns, {n: i for i, n in enumerate(names)})
        return self._loaded

    def _error(self, cls: type[ShardError], message: str, shard: str, key: str) -> ShardError:
        return cls(f"dataset {self.dataset!r}, shard {shard}, sample {key}: {message}",
                   url=self.prefix + shard, shard=shard, key=key, dataset=self.dataset)

    def locate(self, path: str) -> tuple[int, int]:
        """(shard number, sample number) of a file name under this source's prefix."""
        shard, _, member = path[len(self.prefix):].partition("#")
        key = member.partition(".")[0]
        _, _, columns, numbers = self._index()
        number = numbers.get(shard)
        if number is None or not key.isdigit() or int(key) >= len(columns["shard"]):
            raise self._error(ShardNotFoundError, f"no such sample in the index ({path})",
                              shard, key)
        if int(columns["shard"][int(key)]) != number:
            raise self._error(ShardNotFoundError, "the index puts this sample in another "
                              "shard", shard, key)
        return number, int(key)

    def shard_path(self, number: int) -> str:
        """A local file holding shard ``number`` (downloaded into the cache if remote)."""
        names, shas = self._index()[:2]
        url = self.prefix + names[number]
        if self.cache is None:
            return url[len("file://"):] if url.startswith("file://") else url
        return str(self.cache.get(url, shas[number]))

    def __call__(self, path: str, max_bytes: int | None = None) -> bytes:
        number, index = self.locate(path)
        names, _, columns, _ = self._index()
        shard, key = names[number], f"{index:09d}"
        offset, size = int(columns["offset"][index]), int(columns["size"][index])
        if max_bytes is not None and size > max_bytes:
            raise self._error(ShardCorruptError, f"{size} bytes, over the {max_bytes}-byte "
                              "limit (max_bytes)", shard, key)
        for attempt in range(2):  # a shard evicted between lookup and open is fetched again
            try:
                fd = os.open(self.shard_path(number), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError as exc:
                if self.cache is None or attempt:
                    raise self._error(ShardNotFoundError, f"shard file missing: {exc}", shard,
                                      key) from exc
                continue
            try:
                data = os.pread(fd, size, offset)
            finally:
                os.close(fd)
            break
        expected = bytes(columns["sha256"][index])
        if len(data) != size or hashlib.sha256(data).digest() != expected:
            raise self._error(ShardCorruptError, "image bytes do not match the index's "
                              "SHA-256 (a corrupt or changed shard)", shard, key)
        return data
