"""Instances: the objects of one image as aligned fields (tensors, arrays, lists or structures).

Example:
    >>> import torch
    >>> inst = Instances((480, 640), gt_classes=torch.tensor([3, 1, 2]))
    >>> inst.gt_boxes = torch.zeros(3, 4)
    >>> len(inst[inst.gt_classes > 1]), inst.has("gt_boxes")
    (2, True)
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from catalog._common import env_flag

from .structure_common import as_index

__all__ = ["Instances", "as_detectron2_types"]

#: Environment switch: "0" keeps catmap's types when detectron2 is imported (tools/check_detectron2.py).
DETECTRON2_TYPES_ENV = "CATMAP_DETECTRON2_TYPES"


def _normalize_index(item: Any, length: int) -> slice | torch.Tensor:
    """Turn an index into a slice (an int keeps a length-1 slice), an int64 index tensor or a
    bool mask tensor (see :func:`~mappers.structure_common.as_index`)."""
    if isinstance(item, (bool, np.bool_)):
        raise TypeError("Instances cannot be indexed by a single bool; use a bool mask")
    index = as_index(item, length, "Instances")
    if isinstance(index, int):
        return slice(index, index + 1)
    return index


def _index_value(value: Any, index: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if isinstance(index, torch.Tensor):
            index = index.to(value.device)
        return value[index]
    if isinstance(value, np.ndarray):
        return value[index.cpu().numpy() if isinstance(index, torch.Tensor) else index]
    if isinstance(value, (list, tuple)):
        if isinstance(index, slice):
            picked = value[index]
        elif index.dtype == torch.bool:
            picked = list(itertools.compress(value, index.tolist()))
        else:
            picked = [value[i] for i in index.tolist()]
        return type(value)(picked) if isinstance(value, tuple) else list(picked)
    return value[index]


class Instances:
    """Fields of one length, set as attributes or with :meth:`set`; ``image_size`` is (h, w)."""

    def __init__(self, image_size: tuple[int, int], **fields: Any) -> None:
        self._image_size = (int(image_size[0]), int(image_size[1]))
        self._fields: dict[str, Any] = {}
        for name, value in fields.items():
            self.set(name, value)

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) of the image."""
        return self._image_size

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            super().__setattr__(name, value)
        else:
            self.set(name, value)

    def __getattr__(self, name: str) -> Any:
        if name == "_fields" or name not in self._fields:
            raise AttributeError(
                f"Instances has no field {name!r}; fields: {list(self.__dict__.get('_fields', {}))}"
            )
        return self._fields[name]

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            super().__delattr__(name)
        else:
            self.remove(name)

    def set(self, name: str, value: Any) -> None:
        """Set field ``name``; its length must match the existing fields'."""
        if name == "image_size":
            raise ValueError("'image_size' is reserved; it is not a field")
        try:
            length = len(value)
        except TypeError:
            raise TypeError(
                f"Instances field {name!r} must have a length (tensor, array, list), got "
                f"{type(value).__name__}"
            ) from None
        for other, existing in self._fields.items():
            if other != name:  # the first other field has the length of them all
                if len(existing) != length:
                    raise ValueError(
                        f"Instances field {name!r} has length {length}, but the other fields "
                        f"({other!r} ...) have length {len(existing)}"
                    )
                break
        self._fields[name] = value

    def has(self, name: str) -> bool:
        """Whether field ``name`` exists."""
        return name in self._fields

    def get(self, name: str) -> Any:
        """Return field ``name``."""
        try:
            return self._fields[name]
        except KeyError:
            raise KeyError(
                f"Instances has no field {name!r}; fields: {list(self._fields)}"
            ) from None

    def remove(self, name: str) -> None:
        """Delete field ``name``."""
        if name not in self._fields:
            raise KeyError(f"Instances has no field {name!r}; fields: {list(self._fields)}")
        del self._fields[name]

    def get_fields(self) -> dict[str, Any]:
        """Return the name → value dict of fields (the live dict, not a copy)."""
        return self._fields

    def to(self, *args: Any, **kwargs: Any) -> Instances:
        """Return a new Instances with every field that has ``.to`` moved/cast (torch style)."""
        out = Instances(self._image_size)
        for name, value in self._fields.items():
            if hasattr(value, "to"):
                value = value.to(*args, **kwargs)
            out._fields[name] = value
        return out

    def __getitem__(self, item: Any) -> Instances:
        """Select instances by int (keeps a length-1 Instances), slice, bool mask or indices."""
        index = _normalize_index(item, len(self))
        out = Instances(self._image_size)
        for name, value in self._fields.items():
            out._fields[name] = _index_value(value, index)
        return out

    def __len__(self) -> int:
        for value in self._fields.values():
            return len(value)
        return 0

    def __iter__(self):
        raise TypeError("Instances is not iterable; index it (inst[i]) or read its fields")

    @staticmethod
    def cat(instance_lists: Sequence[Instances]) -> Instances:
        """Concatenate Instances of the same image size and fields."""
        if len(instance_lists) == 0:
            raise ValueError("Instances.cat needs at least one Instances")
        for i, inst in enumerate(instance_lists):
            if not isinstance(inst, Instances):
                raise ValueError(f"Instances.cat: element {i} is a {type(inst).__name__}")
        if len(instance_lists) == 1:
            return instance_lists[0]
        first = instance_lists[0]
        names = list(first._fields)
        for i, inst in enumerate(instance_lists[1:], start=1):
            if inst.image_size != first.image_size:
                raise ValueError(
                    f"Instances.cat: element {i} has image_size {inst.image_size}, element 0 "
                    f"has {first.image_size}"
                )
            if set(inst._fields) != set(names):
                raise ValueError(
                    f"Instances.cat: element {i} has fields {sorted(inst._fields)}, element 0 "
                    f"has {sorted(names)}"
                )
        out = Instances(first.image_size)
        for name in names:
            values = [inst._fields[name] for inst in instance_lists]
            v0 = values[0]
            if isinstance(v0, torch.Tensor):
                joined: Any = torch.cat(values, dim=0)
            elif isinstance(v0, np.ndarray):
                joined = np.concatenate(values, axis=0)
            elif isinstance(v0, list):
                joined = list(itertools.chain(*values))
            elif isinstance(v0, tuple):
                joined = tuple(itertools.chain(*values))
            elif hasattr(type(v0), "cat"):
                joined = type(v0).cat(values)
            else:
                raise ValueError(
                    f"Instances.cat: field {name!r} of type {type(v0).__name__} cannot be "
                    "concatenated (give the type a 'cat' classmethod)"
                )
            out._fields[name] = joined
        return out

    def __repr__(self) -> str:
        parts = []
        for name, value in self._fields.items():
            if isinstance(value, (torch.Tensor, np.ndarray)):
                desc = f"{type(value).__name__}{tuple(value.shape)}"
            else:
                desc = f"{type(value).__name__}(len={len(value)})"
            parts.append(f"{name}: {desc}")
        return (
            f"Instances(num_instances={len(self)}, image_height={self._image_size[0]}, "
            f"image_width={self._image_size[1]}, fields=[{', '.join(parts)}])"
        )

    __str__ = __repr__


def _as_detectron2(value: Any, d2: Any) -> Any:
    """``value`` rebuilt as the detectron2 class of the same name, sharing its fields."""
    if type(value) is Instances:
        out = d2.Instances.__new__(d2.Instances)
        out._image_size = value._image_size
        out._fields = {k: _as_detectron2(v, d2) for k, v in value._fields.items()}
        return out
    if not type(value).__module__.startswith("mappers.structures."):
        return value
    cls = getattr(d2, type(value).__name__)
    out = cls.__new__(cls)
    out.__dict__.update(vars(value))  # tensor / polygons: the same objects, nothing copied
    if type(value).__name__ == "BitMasks":
        out.image_size = value.image_size  # an attribute in detectron2, a property here
    return out


def as_detectron2_types(sample: dict[str, Any]) -> dict[str, Any]:
    """``sample`` with its ``Instances`` (and the structures in them) as detectron2's classes
    when ``detectron2.structures`` is imported in this process and ``CATMAP_DETECTRON2_TYPES``
    is not "0"; otherwise ``sample`` itself. Tensors and polygon arrays are shared, not copied.

    Example:
        >>> as_detectron2_types({"instances": Instances((2, 2))})["instances"]  # no detectron2
        Instances(num_instances=0, image_height=2, image_width=2, fields=[])
    """
    d2 = sys.modules.get("detectron2.structures")
    if d2 is None or not env_flag(DETECTRON2_TYPES_ENV, True):
        return sample
    for key, value in sample.items():
        if type(value) is Instances:
            sample[key] = _as_detectron2(value, d2)
    return sample
