"""Tests of catalog.storage.sharing (publish / attach): one owner per file descriptor, the real error surfaces.

A failure inside publish_records used to come out as ``OSError: [Errno 9] Bad file descriptor``
(the memory file's descriptor was closed by map_serialized and then again by publish_records),
hiding the real error. These tests force failures at each step and check that the original
exception comes out and that no descriptor is leaked.
"""

from __future__ import annotations

import gc
import os

import pytest

import catalog.storage.sharing as local_publish
from catalog import SerializedList, SharedAttachError
from catalog.storage.records_file import CacheCorruptError
from catalog.storage.sharing import attach_records, publish_records

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd"
)


def _records(n: int) -> SerializedList:
    return SerializedList([{"file_name": f"{i}.jpg", "image_id": i} for i in range(n)], name="toy")


def _open_fds() -> set[str]:
    gc.collect()  # records that were dropped release their mapping and descriptor
    names = os.listdir("/proc/self/fd")
    # the directory descriptor listdir used is closed by now: keep only those still open
    return {name for name in names if os.path.lexists(f"/proc/self/fd/{name}")}


def _catmap_shm_files() -> set[str]:
    if not os.path.isdir("/dev/shm"):
        return set()
    return {name for name in os.listdir("/dev/shm") if name.startswith("catmap-")}


@pytest.fixture
def transport():
    if not local_publish._memfd_usable():
        pytest.skip("memfd is not available here")
    return "memfd"


def _check_no_leak(before_fds: set[str], before_shm: set[str]) -> None:
    # Descriptors opened by the test machinery itself are not ours; none of ours may remain.
    assert _open_fds() <= before_fds
    assert _catmap_shm_files() == before_shm


def test_a_write_failure_surfaces_as_itself(transport, monkeypatch):
    def fail(out, records, **kwargs):
        out.write(b"partial")
        raise ValueError("no space left while writing the records of 'toy'")

    monkeypatch.setattr(local_publish, "write_records", fail)
    before_fds, before_shm = _open_fds(), _catmap_shm_files()
    with pytest.raises(ValueError, match="no space left while writing the records of 'toy'"):
        publish_records(_records(3))
    _check_no_leak(before_fds, before_shm)


def test_a_mapping_failure_surfaces_as_itself_not_as_ebadf(transport, monkeypatch):
    """A mapping failure leaves the descriptor to publishing, which closes it once (a second
    close raised EBADF and hid this error)."""

    def truncated(out, records, **kwargs):
        out.write(b"short")  # not a catmap records file: mapping it fails
        return 5

    monkeypatch.setattr(local_publish, "write_records", truncated)
    before_fds, before_shm = _open_fds(), _catmap_shm_files()
    with pytest.raises(CacheCorruptError, match="too short") as excinfo:
        publish_records(_records(3))
    assert not isinstance(excinfo.value.__context__, OSError)
    del excinfo
    _check_no_leak(before_fds, before_shm)


def test_the_published_list_owns_its_descriptors_and_releases_them(transport):
    before = _open_fds()
    mapped, descriptor = publish_records(_records(4))
    # the published descriptor (plus the mmap module's own duplicate) stays open while
    # the list lives
    assert str(descriptor["fd"]) in _open_fds() - before
    assert mapped.to_list() == _records(4).to_list()
    del mapped
    assert _open_fds() <= before


def test_attaching_to_a_list_with_a_different_length_fails_without_a_leak(transport):
    mapped, descriptor = publish_records(_records(3))
    before = _open_fds()
    with pytest.raises(OSError, match="mapped 3 records but the publisher has 4"):
        attach_records(dict(descriptor, num_records=4), "toy")
    assert _open_fds() <= before
    assert attach_records(descriptor, "toy").to_list() == mapped.to_list()


@pytest.mark.parametrize(
    "broken",
    [None, {"transport": "memfd"}, {"pid": "12"}, {"fd": True}, {"size": 1.5}, {"path": 3}],
)
def test_a_malformed_descriptor_is_a_typed_error(broken):
    mapped, descriptor = publish_records(_records(1))
    bad = None if broken is None else {**descriptor, **broken}
    if broken == {"transport": "memfd"}:
        bad = {"transport": "memfd"}  # every other field missing
    with pytest.raises(SharedAttachError, match="malformed descriptor for dataset 'toy'"):
        attach_records(bad, "toy")
    del mapped
