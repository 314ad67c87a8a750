"""The Cityscapes label definitions the loaders need (name, id, train id, instance flags).

Facts of the Cityscapes dataset's documented label table: ``id`` is the value in
``*_labelIds.png`` (and ``id * 1000 + k`` in ``*_instanceIds.png``), ``train_id`` the value in
``*_labelTrainIds.png`` (255: ignored); the 8 classes with instances that are evaluated are
the thing classes, in id order.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CityscapesLabel",
    "LABELS",
    "NAME_TO_LABEL",
    "ID_TO_LABEL",
    "THING_CLASSES",
    "STUFF_CLASSES",
    "THING_ID_TO_CONTIGUOUS",
]


class CityscapesLabel(NamedTuple):
    """One row of the Cityscapes label table.

    Example:
        >>> NAME_TO_LABEL["car"].id, NAME_TO_LABEL["car"].train_id
        (26, 13)
    """

    name: str
    id: int
    train_id: int
    has_instances: bool
    ignore_in_eval: bool


def _row(name: str, id_: int, train_id: int, instances: bool = False) -> CityscapesLabel:
    return CityscapesLabel(name, id_, train_id, instances, train_id == 255)


#: Every label, in id order (``license plate`` has id -1: never drawn).
LABELS: tuple[CityscapesLabel, ...] = (
    _row("unlabeled", 0, 255),
    _row("ego vehicle", 1, 255),
    _row("rectification border", 2, 255),
    _row("out of roi", 3, 255),
    _row("static", 4, 255),
    _row("dynamic", 5, 255),
    _row("ground", 6, 255),
    _row("road", 7, 0),
    _row("sidewalk", 8, 1),
    _row("parking", 9, 255),
    _row("rail track", 10, 255),
    _row("building", 11, 2),
    _row("wall", 12, 3),
    _row("fence", 13, 4),
    _row("guard rail", 14, 255),
    _row("bridge", 15, 255),
    _row("tunnel", 16, 255),
    _row("pole", 17, 5),
    _row("polegroup", 18, 255),
    _row("traffic light", 19, 6),
    _row("traffic sign", 20, 7),
    _row("vegetation", 21, 8),
    _row("terrain", 22, 9),
    _row("sky", 23, 10),
    _row("person", 24, 11, True),
    _row("rider", 25, 12, True),
    _row("car", 26, 13, True),
    _row("truck", 27, 14, True),
    _row("bus", 28, 15, True),
    _row("caravan", 29, 255, True),
    _row("trailer", 30, 255, True),
    _row("train", 31, 16, True),
    _row("motorcycle", 32, 17, True),
    _row("bicycle", 33, 18, True),
    _row("license plate", -1, 255),
)

NAME_TO_LABEL = {label.name: label for label in LABELS}
ID_TO_LABEL = {label.id: label for label in LABELS}
#: The 8 instance classes (contiguous ids 0..7), as detectron2's ``thing_classes``.
THING_CLASSES = [lb.name for lb in LABELS if lb.has_instances and not lb.ignore_in_eval]
#: The 19 train-id classes in train-id order, as detectron2's ``stuff_classes``.
STUFF_CLASSES = [lb.name for lb in sorted(LABELS, key=lambda lb: lb.train_id)
                 if lb.train_id != 255]
#: Cityscapes label id -> contiguous thing id.
THING_ID_TO_CONTIGUOUS = {
    lb.id: i
    for i, lb in enumerate(lb for lb in LABELS if lb.has_instances and not lb.ignore_in_eval)
}
