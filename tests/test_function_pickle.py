"""mappers.datasets: lambdas by value through cloudpickle, everything else by reference."""

from __future__ import annotations

import builtins
import functools
import pickle
import subprocess
import sys

import pytest

from mappers.datasets import PicklableCallable, needs_by_value, unwrap, wrap_for_pickling
from mappers.errors import MapFuncPickleError


def module_level(record: dict) -> int:
    return record["image_id"]


class Holder:
    def method(self, x: int) -> int:
        return x


def test_what_needs_by_value():
    def nested(x: int) -> int:
        return x

    local_class = type("Local", (), {"m": lambda self: 1})
    assert not needs_by_value(module_level) and not needs_by_value(len)
    assert not needs_by_value(Holder().method) and not needs_by_value(Holder())
    assert needs_by_value(nested) and needs_by_value(lambda: 0)
    assert needs_by_value(local_class().m)  # a method whose function is a lambda
    assert needs_by_value(functools.partial(module_level, key=lambda r: r))
    assert not needs_by_value(functools.partial(module_level, 1))


def test_wrap_only_what_needs_it_and_round_trip():
    assert wrap_for_pickling(module_level) is module_level
    offset = 5
    wrapped = wrap_for_pickling(lambda r: r["image_id"] + offset)
    assert isinstance(wrapped, PicklableCallable) and unwrap(wrapped) is wrapped.fn
    restored = pickle.loads(pickle.dumps(wrapped))
    assert isinstance(restored, PicklableCallable) and restored({"image_id": 1}) == 6
    # by reference: the payload names the function, no cloudpickle involved
    payload = pickle.dumps(PicklableCallable(module_level))
    assert b"cloudpickle" not in payload and pickle.loads(payload)({"image_id": 2}) == 2


def test_by_value_payload_loads_in_a_fresh_interpreter():
    payload = pickle.dumps(PicklableCallable(lambda r: r * 3))
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read())(7))"
    out = subprocess.run(
        [sys.executable, "-c", code], input=payload, capture_output=True, check=True, timeout=120
    )
    assert out.stdout.strip() == b"21"


def test_missing_cloudpickle_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_cloudpickle(name, *args, **kwargs):
        if name == "cloudpickle":
            raise ImportError("no cloudpickle")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cloudpickle)
    with pytest.raises(MapFuncPickleError, match=r'pip install "catmap\[spawn\]"') as info:
        pickle.dumps(PicklableCallable(lambda x: x))
    assert isinstance(info.value, pickle.PicklingError)
    assert pickle.loads(pickle.dumps(PicklableCallable(module_level)))({"image_id": 4}) == 4


def test_unpicklable_closure_is_a_typed_error():
    import threading

    lock = threading.Lock()
    with pytest.raises(MapFuncPickleError, match="cloudpickle could not pickle"):
        pickle.dumps(PicklableCallable(lambda x: lock))
