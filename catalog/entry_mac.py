"""The MAC of a cache entry: HMAC-SHA256 over SHA-256 digests of fixed-size chunks.

Hashing a few hundred MB with one HMAC runs on one core (about 1 GB/s with SHA extensions).
The entry MAC is therefore a two-level construction: the body of the file (everything after
the MAC field) is cut into 8 MiB chunks, each chunk is hashed with SHA-256 on a thread pool
(hashlib releases the GIL on large buffers), and the HMAC-SHA256 under the user's secret is
taken over a domain tag, the bytes before the MAC field, the body length and the list of
chunk digests. Forging it needs either the secret or a SHA-256 collision, like a plain HMAC
over the whole file, and a cache hit scales with the cores of the machine.

Example:
    >>> secret = bytes(32)
    >>> a = EntryMac(secret); a.update_head(b"head"); a.update_body(b"x" * 10)
    >>> b = EntryMac(secret); b.update_head(b"head"); b.update_body(b"xxxxx"); b.update_body(b"xxxxx")
    >>> a.digest() == b.digest() == entry_mac(secret, b"head", memoryview(b"x" * 10))
    True
"""

from __future__ import annotations

import hashlib
import hmac
import os
from concurrent.futures import ThreadPoolExecutor

__all__ = ["CHUNK_SIZE", "EntryMac", "entry_mac"]

CHUNK_SIZE = 8 << 20
_DOMAIN = b"catmap-cache-entry-mac-v2-chunked-sha256\0"
_MAX_THREADS = 16


class EntryMac:
    """Computes the entry MAC while a file is written (head first, then the body in pieces)."""

    def __init__(self, secret: bytes) -> None:
        self._mac = hmac.new(secret, _DOMAIN, hashlib.sha256)
        self._chunk = hashlib.sha256()
        self._chunk_fill = 0
        self._body_len = 0
        self._digests: list[bytes] = []

    def update_head(self, data: bytes | memoryview) -> None:
        """Add the bytes that precede the MAC field (call before any body bytes)."""
        self._mac.update(data)

    def update_body(self, data: bytes | memoryview) -> None:
        """Add the next piece of the body (the bytes after the MAC field)."""
        view = memoryview(data).cast("B")
        self._body_len += len(view)
        while len(view):
            take = min(len(view), CHUNK_SIZE - self._chunk_fill)
            self._chunk.update(view[:take])
            self._chunk_fill += take
            view = view[take:]
            if self._chunk_fill == CHUNK_SIZE:
                self._digests.append(self._chunk.digest())
                self._chunk = hashlib.sha256()
                self._chunk_fill = 0

    def digest(self) -> bytes:
        """The 32-byte MAC of everything added so far."""
        digests = list(self._digests)
        if self._chunk_fill:
            digests.append(self._chunk.digest())
        return _finish(self._mac.copy(), self._body_len, digests)


def _finish(mac: hmac.HMAC, body_len: int, digests: list[bytes]) -> bytes:
    mac.update(body_len.to_bytes(8, "little"))
    for digest in digests:
        mac.update(digest)
    return mac.digest()


def _sha256(view: memoryview) -> bytes:
    return hashlib.sha256(view).digest()


def entry_mac(secret: bytes, head: bytes | memoryview, body: memoryview) -> bytes:
    """The MAC of a whole entry given its head (bytes before the MAC field) and body.

    The chunk digests are computed on up to ``min(cpu count, 16)`` threads.
    """
    mac = hmac.new(secret, _DOMAIN, hashlib.sha256)
    mac.update(head)
    body = body.cast("B") if body.format != "B" else body
    chunks = [body[start : start + CHUNK_SIZE] for start in range(0, len(body), CHUNK_SIZE)]
    threads = min(len(chunks), os.cpu_count() or 1, _MAX_THREADS)
    if threads <= 1:
        digests = [_sha256(chunk) for chunk in chunks]
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="catmap-mac") as pool:
            digests = list(pool.map(_sha256, chunks))
    return _finish(mac, len(body), digests)
