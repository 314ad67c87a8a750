"""Torch shared-memory tensors holding a SerializedList's arrays (spawn / forkserver workers).

A SerializedList that is not mapped from a file moves its buffer, offsets and columns (record
columns and annotation columns) once
into torch shared memory when it is first sent to multiprocessing workers; the workers
attach to those tensors (:func:`_rebuild_from_shared`) instead of unpickling a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__: list[str] = []


class _SharedTensors:
    __slots__ = ("tensors",)

    def __init__(self, tensors: tuple[Any, ...]) -> None:
        self.tensors = tensors


def _dtype_table() -> dict[str, Any]:
    import torch

    return {
        np.dtype(np.uint8).str: torch.uint8,
        np.dtype(np.int32).str: torch.int32,
        np.dtype(np.int64).str: torch.int64,
    }


class _LazyDtypes(dict):
    def __missing__(self, key: str) -> Any:
        self.update(_dtype_table())
        return dict.__getitem__(self, key)


_TORCH_DTYPES: dict[str, Any] = _LazyDtypes()


def _rebuild_from_shared(tensors: tuple[Any, ...], name: str | None) -> Any:
    from .annotation_columns import AnnotationColumns
    from .serialized_list import RecordColumns, SerializedList

    views = [t.numpy() for t in tensors]
    return SerializedList.from_arrays(
        views[0],
        views[1],
        RecordColumns(*views[2:7]),
        annotations=AnnotationColumns(*views[7:]),
        name=name,
        owner=_SharedTensors(tensors),
    )
