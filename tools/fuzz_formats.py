"""Seeds and mutations of the non-COCO format loaders, for ``tools/fuzz_loaders.py``.

One entry per format of :data:`FORMATS`: valid seed inputs (built here, plus the public files
under ``../shared/external`` where there are some) and a mutation that returns one malformed
(or still valid) input as bytes with a description. JSON formats (LVIS, COCO panoptic,
Cityscapes polygons, OpenMMLab) use the COCO fuzzer's structural and byte mutations with the
format's own keys, plus format-specific ones (odd ``coco_url``, path traversal, colliding
keys, ids outside the category maps, huge coordinates, many large objects). Pascal VOC uses XML
mutations: entity bombs, external entities and DTDs, deep nesting, huge attributes, many
elements, encodings, odd numbers. Semantic segmentation inputs are file trees, described as
JSON (``{"gt": [names], "img": [names], "links": [[name, target]]}``).

The oracles that run an input are in :mod:`tools.fuzz_oracles`.

Example:
    >>> import random
    >>> data, what = mutate_format("voc", seeds("voc")[0], random.Random(0))
    >>> isinstance(data, bytes) and isinstance(what, str)
    True
"""

from __future__ import annotations

import copy
import glob
import json
import os
import random
from typing import Any

from tools.fuzz_loaders import VALUES, mutate
from tools.fuzz_xml import mutate_xml, voc_xml

__all__ = [
    "FORMATS", "FORMAT_FIELDS", "PNG_CASE", "seeds", "mutate_format", "instance_ids_png", "voc_xml",
    "mutate_xml",
]

FORMATS = ("lvis", "voc", "panoptic", "cityscapes", "sem_seg", "openmmlab")
_EXTERNAL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "external")

#: The keys each JSON loader reads, per list section (what the structural mutations aim at).
FORMAT_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "lvis": {
        "images": ("id", "file_name", "coco_url", "height", "width", "neg_category_ids",
                   "not_exhaustive_category_ids"),
        "categories": ("id", "name", "synonyms", "frequency", "image_count", "instance_count"),
        "annotations": ("id", "image_id", "category_id", "bbox", "area", "segmentation"),
    },
    "panoptic": {
        "annotations": ("image_id", "file_name", "segments_info"),
        "images": ("id", "file_name", "height", "width"),
    },
    "cityscapes": {"objects": ("label", "polygon", "deleted")},
    "openmmlab": {
        "data_list": ("img_path", "img_id", "height", "width", "seg_map_path", "instances"),
    },
}

_ODD_URLS = [
    "http://images.cocodataset.org/val2017/../../etc/passwd", "http://h/../x.jpg",
    "http://h/val2017/", "http://h/val2017/.", "http://h/./x.jpg", "x.jpg", "/x.jpg", "",
    "http://h/a\\b/x.jpg", "http://h/val2017/x\x00.jpg", "file:///etc/passwd",
    "http://u:p@h:99/val2017/x.jpg?q=../../a#frag", "http://h/%2e%2e/x.jpg", "//", "///",
    "http://h/val2017/x.jpg/", "http://h/ /x.jpg", "http://h/val2017/é\u202e.jpg",
    "http://h/" + "a" * 5000 + "/x.jpg", "\ud800", "http://h/val2017/\ud800.jpg",
    "http://h/val2017/x.jpg?v=1", "http://h/val2017/x.jpg#top", "http://h/x?p=/val2017/y.jpg",
]
_TRAVERSAL = [
    "../x.png", "../../etc/passwd", "/etc/passwd", "a/../../b.png", "..\\..\\b.png",
    "C:\\x.png", "\\\\server\\share\\x.png", "a/./b.png", "x\x00.png", "", ".", "..", "a/..",
    "é/\u202egnp.x", "a" * 5000 + ".png", "./", "a//b.png",
]
_COLLIDING_ENTRY = ["file_name", "image_id", "annotations", "sem_seg_file_name"]
_COLLIDING_INSTANCE = ["category_id", "iscrowd", "segmentation", "bbox_mode"]


def _lvis_seed() -> dict[str, Any]:
    url = "http://images.cocodataset.org/val2017/"
    return {
        "images": [
            {"id": 1, "coco_url": url + "000001.jpg", "height": 8, "width": 8,
             "neg_category_ids": [3], "not_exhaustive_category_ids": []},
            {"id": 4, "coco_url": url + "000004.jpg", "height": 6, "width": 5},
            {"id": 2, "file_name": "b.jpg", "height": 4, "width": 4,
             "neg_category_ids": [], "not_exhaustive_category_ids": [1]},
        ],
        "categories": [
            {"id": 1, "name": "acorn", "synonyms": ["acorn"], "frequency": "r",
             "image_count": 1, "instance_count": 2},
            {"id": 3, "name": "apple", "synonyms": ["apple", "pome"], "frequency": "f",
             "image_count": 2, "instance_count": 3},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 3], "area": 6,
             "segmentation": [[0, 0, 2, 0, 2, 3]]},
            {"id": 2, "image_id": 4, "category_id": 3, "bbox": [1, 1, 2, 2], "area": 4,
             "segmentation": [[1, 1, 3, 1, 3, 3, 1, 3]]},
            {"id": 3, "image_id": 2, "category_id": 3, "bbox": [0.5, 0.5, 1, 1], "area": 1,
             "segmentation": [[0.5, 0.5, 1.5, 0.5, 1.5, 1.5]]},
        ],
    }


def _panoptic_seed() -> dict[str, Any]:
    def seg(i: int, cat: int, **extra: Any) -> dict[str, Any]:
        return {"id": i, "category_id": cat, "iscrowd": 0, "bbox": [0, 0, 2, 2], "area": 4,
                **extra}

    return {
        "images": [{"id": 7, "file_name": "000007.jpg", "height": 4, "width": 6},
                   {"id": 9, "file_name": "000009.jpg", "height": 4, "width": 6}],
        "annotations": [
            {"image_id": 7, "file_name": "000007.png",
             "segments_info": [seg(1, 1), seg(2, 92), seg(3, 3, iscrowd=1)]},
            {"image_id": 9, "file_name": "000009.png", "segments_info": [seg(5, 184)]},
            {"image_id": 11, "file_name": "sub/000011.png", "segments_info": []},
        ],
        "categories": [{"id": 1, "name": "person", "isthing": 1}],
    }


def _rect(x0: int, y0: int, x1: int, y1: int) -> list[list[int]]:
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def _cityscapes_seed() -> dict[str, Any]:
    return {
        "imgHeight": 24, "imgWidth": 32,
        "objects": [
            {"label": "road", "polygon": _rect(0, 0, 31, 23)},
            {"label": "person", "polygon": _rect(2, 2, 9, 7)},
            {"label": "car", "polygon": _rect(14, 10, 25, 17)},
            {"label": "pole", "polygon": _rect(6, 0, 7, 23)},
            {"label": "cargroup", "polygon": [[27, 18], [30.5, 18], [30, 21.25]]},
            {"label": "car", "polygon": _rect(0, 20, 3, 23), "deleted": 1},
            {"label": "license plate", "polygon": _rect(15, 16, 16, 17)},
        ],
    }


def _openmmlab_seed() -> dict[str, Any]:
    return {
        "metainfo": {"classes": ["cat", "dog", "bird"], "task_name": "fuzz"},
        "data_list": [
            {"img_path": "a.jpg", "img_id": 3, "height": 8, "width": 10,
             "seg_map_path": "a.png",
             "instances": [
                 {"bbox": [0, 0, 4, 5], "bbox_label": 1, "ignore_flag": 0,
                  "mask": [[0, 0, 4, 0, 4, 5]]},
                 {"bbox": [1, 1, 3, 3], "bbox_label": 2, "ignore_flag": 1,
                  "mask": {"size": [8, 10], "counts": [1, 78, 1]}, "keypoints": [1, 1, 2]},
             ]},
            {"img_path": "b/c.jpg", "height": 4, "width": 4, "instances": []},
        ],
    }


def seeds(fmt: str) -> list[bytes]:
    """The valid seed inputs of ``fmt`` (built-in ones first, then public sample files)."""
    if fmt == "lvis":
        files = sorted(glob.glob(os.path.join(_EXTERNAL, "lvis", "*.json")))
        return [json.dumps(_lvis_seed()).encode()] + [_read(f) for f in files]
    if fmt == "voc":
        files = sorted(glob.glob(os.path.join(_EXTERNAL, "voc", "**", "*.xml"), recursive=True))
        from tools.fuzz_oracles import voc_reference

        own = voc_xml([("dog", (48, 240, 195, 371)), ("person", (8, 12, 352, 498))]).encode()
        # the public files whose classes are VOC's (others are refused, as they must be)
        return [own] + [d for d in map(_read, files) if voc_reference(d)[0] == "ok"]
    if fmt == "panoptic":
        return [json.dumps(_panoptic_seed()).encode()]
    if fmt == "cityscapes":
        return [json.dumps(_cityscapes_seed()).encode()]
    if fmt == "openmmlab":
        files = sorted(glob.glob(os.path.join(_EXTERNAL, "mmengine", "annotations",
                                              "dummy_annotation.json")))
        return [json.dumps(_openmmlab_seed()).encode()] + [_read(f) for f in files]
    if fmt == "sem_seg":
        tree = {"gt": ["a.png", "sub/b.png", "sub/deep/c.png", "only_gt.png"],
                "img": ["a.jpg", "sub/b.jpg", "sub/deep/c.jpg", "only_img.jpg"], "links": []}
        return [json.dumps(tree).encode()]
    raise ValueError(f"unknown format {fmt!r}; one of {FORMATS}")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def mutate_format(fmt: str, seed: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random mutation of the seed ``seed`` of format ``fmt``: ``(bytes, description)``."""
    if fmt == "voc":
        return mutate_xml(seed, rng)
    if fmt == "sem_seg":
        return _mutate_tree(seed, rng)
    if fmt == "cityscapes" and rng.random() < 0.15:
        return instance_ids_png(rng)
    if rng.random() < 0.35:
        doc = json.loads(seed)
        what = _SPECIFIC[fmt](doc, rng)
        return json.dumps(doc).encode(), what
    values = VALUES + _TRAVERSAL[:6] + _ODD_URLS[:4] + [[0, 0, -1, 2], [10**30, 0, 1, 1]]
    return mutate(seed, rng, fields=FORMAT_FIELDS[fmt], values=values)


#: Prefix of a Cityscapes input that is a ``*_instanceIds.png`` (read with from_json=False).
PNG_CASE = b"instanceIds.png\n"


def instance_ids_png(rng: random.Random) -> tuple[bytes, str]:
    """A Cityscapes ``*_instanceIds.png`` input (after :data:`PNG_CASE`): random ids, or a
    damaged, RGB, oversized ("decompression bomb"), non-PNG or scattered-ids image."""
    import io

    import numpy as np
    from PIL import Image

    kind = rng.choice(["ids"] * 3 + ["truncate", "flip", "rgb", "bomb", "gif", "scattered"])
    h, w = rng.randint(1, 40), rng.randint(1, 40)
    values = [0, 7, 24, 26, 26000, 26001, 24003, 33000, 1000, 34, 65535, 999]
    ids = np.array([[rng.choice(values) if rng.random() < 0.3 else 0 for _ in range(w)]
                    for _ in range(h)], np.uint16)
    if kind == "scattered":  # 150 car ids, each at two opposite corners of a 2048 x 2048 image
        ids = np.zeros((2048, 2048), np.uint16)
        for i in range(150):
            ids[0, i] = ids[-1, -1 - i] = 26000 + i
    image = {"rgb": Image.new("RGB", (w, h)), "bomb": Image.new("1", (6000, 6000))}.get(
        kind, Image.fromarray(ids))
    buffer = io.BytesIO()
    image.save(buffer, "GIF" if kind == "gif" else "PNG")
    data = bytearray(buffer.getvalue())
    pos = rng.randrange(len(data))
    if kind == "truncate":
        data = data[:pos]
    elif kind == "flip":
        data[pos] = rng.randrange(256)
    return PNG_CASE + bytes(data), f"instanceIds png: {kind} {h}x{w} (byte {pos})"


def _pick(items: Any, rng: random.Random) -> Any:
    return rng.choice(items) if isinstance(items, list) and items else None


def _lvis_specific(doc: dict[str, Any], rng: random.Random) -> str:
    img, cat, ann = (_pick(doc.get(k), rng) for k in ("images", "categories", "annotations"))
    kind = rng.randrange(7)
    if kind == 0 and isinstance(img, dict):
        img["coco_url"] = rng.choice(_ODD_URLS)
        return f"coco_url := {img['coco_url']!r:.60}"
    if kind == 1 and isinstance(img, dict):
        key = rng.choice(["neg_category_ids", "not_exhaustive_category_ids"])
        img[key] = rng.choice([[99999], [True], ["1"], "1", {"1": 1}, [1.0], [2**63], None])
        return f"image {key} := {img[key]!r}"
    if kind == 2 and isinstance(cat, dict):
        key = rng.choice(["synonyms", "frequency", "image_count", "instance_count"])
        cat[key] = rng.choice([[], [""], [1], "r", "x", "F", -1, True, 2**64, 1.5, ["a", None]])
        return f"category {key} := {cat[key]!r}"
    if kind == 3 and isinstance(ann, dict):
        ann["category_id"] = rng.choice([99999, -1, 2, True, "1", 1.0])
        return f"annotation category_id := {ann['category_id']!r}"
    if kind == 4 and isinstance(ann, dict):
        ann["bbox"] = rng.choice([[0, 0, -1, 2], [0, 0, 0, 0], [0, 0, 1e308, 1e308], [1, 2, 3]])
        return f"annotation bbox := {ann['bbox']!r}"
    if kind == 5 and isinstance(img, dict):
        img.pop("coco_url", None)
        img["file_name"] = rng.choice(_TRAVERSAL)
        return f"file_name := {img['file_name']!r:.60}"
    if isinstance(doc.get("categories"), list) and isinstance(cat, dict):
        doc["categories"].append(copy.deepcopy(cat))
        return "duplicate category"
    return "unchanged"


def _panoptic_specific(doc: dict[str, Any], rng: random.Random) -> str:
    ann = _pick(doc.get("annotations"), rng)
    segs = ann.get("segments_info") if isinstance(ann, dict) else None
    seg = _pick(segs, rng)
    kind = rng.randrange(7)
    if kind == 0 and isinstance(ann, dict):
        ann["file_name"] = rng.choice(_TRAVERSAL)
        return f"annotation file_name := {ann['file_name']!r:.60}"
    if kind == 1 and isinstance(seg, dict):
        seg["id"] = rng.choice([256**3, -1, 2**63, True, 1.0, "1"])
        return f"segment id := {seg['id']!r}"
    if kind == 2 and isinstance(seg, dict):
        seg["category_id"] = rng.choice([2, 0, -1, 92.0, True, 10**20])
        return f"segment category_id := {seg['category_id']!r}"
    if kind == 3 and isinstance(segs, list) and isinstance(seg, dict):
        segs.append(copy.deepcopy(seg))
        return "duplicate segment"
    if kind == 5 and isinstance(ann, dict):
        ann["segments_info"] = [{"id": i, "category_id": 1} for i in range(150_000)]
        ann["segments_info"].append({"id": 149_999, "category_id": 1})
        return "150,000 segments, the last id twice"
    if kind == 4 and isinstance(doc.get("annotations"), list) and isinstance(ann, dict):
        doc["annotations"].append(copy.deepcopy(ann))
        return "duplicate annotation (same image_id)"
    img = _pick(doc.get("images"), rng)
    if isinstance(img, dict):
        img["file_name"] = rng.choice(_TRAVERSAL)
        return f"image file_name := {img['file_name']!r:.60}"
    return "unchanged"


def _cityscapes_specific(doc: dict[str, Any], rng: random.Random) -> str:
    objs = doc.get("objects")
    obj = _pick(objs, rng)
    kind = rng.randrange(6)
    if kind == 0 and isinstance(obj, dict):
        obj["label"] = rng.choice(["group", "cargroup", "roadgroup", "", "Car", "car ", "x",
                                   "persongroupgroup", "license plategroup", "rider"])
        return f"label := {obj['label']!r}"
    if kind == 1 and isinstance(obj, dict):
        obj["polygon"] = rng.choice([
            [[0, 0], [1e300, 0], [0, 1]], [[0, 0], [2**70, 0], [0, 1]], [[0, 0], [5, 5]],
            [[0, 0], [True, 1], [2, 2]], [[0, 0, 0], [1, 1], [2, 2]], [[-5, -5], [-1, -5], [-1, -1]],
            [[0, 0], [3, 0], [0, 3]] * 3000, [], [[0, 0], [0, 0], [0, 0]],
        ])
        return f"polygon := {str(obj['polygon'])[:60]}"
    if kind == 2:
        side = rng.choice([0, -1, 1, 2**25, 5793, 10**20, True, 1.5])
        doc[rng.choice(["imgHeight", "imgWidth"])] = side
        return f"image side := {side!r}"
    if kind == 3 and isinstance(objs, list):
        count = rng.choice([50, 400])
        doc["imgHeight"], doc["imgWidth"] = 4096, 4096
        objs.extend({"label": "car", "polygon": _rect(0, 0, 4095, 4095)} for _ in range(count))
        return f"{count} image-sized car objects on a 4096 x 4096 image"
    if kind == 4 and isinstance(obj, dict):
        obj["polygon"] = [[10 ** 400, 1], [2, 2], [3, 1]]
        return "polygon with a 401-digit int"
    if isinstance(obj, dict):
        obj["deleted"] = rng.choice([0, None, False])
        return f"deleted := {obj['deleted']!r}"
    return "unchanged"


def _openmmlab_specific(doc: dict[str, Any], rng: random.Random) -> str:
    entry = _pick(doc.get("data_list"), rng)
    inst = _pick(entry.get("instances") if isinstance(entry, dict) else None, rng)
    kind = rng.randrange(5)
    if kind == 0 and isinstance(entry, dict):
        key = rng.choice(_COLLIDING_ENTRY)
        entry[key] = rng.choice(["../../etc/passwd", 5, {"a": 1}, [], "x.jpg"])
        return f"entry {key} := {entry[key]!r} (beside the OpenMMLab key)"
    if kind == 1 and isinstance(inst, dict):
        key = rng.choice(_COLLIDING_INSTANCE)
        inst[key] = rng.choice([1, 99, -1, "x", [[1, 2]], 2])
        return f"instance {key} := {inst[key]!r} (beside the OpenMMLab key)"
    if kind == 2 and isinstance(inst, dict):
        inst["bbox_label"] = rng.choice([3, -1, 2**40, True, 1.0])
        return f"bbox_label := {inst['bbox_label']!r}"
    if kind == 3 and isinstance(entry, dict):
        entry["img_path"] = rng.choice(_TRAVERSAL)
        return f"img_path := {entry['img_path']!r:.60}"
    meta = doc.get("metainfo")
    if isinstance(meta, dict):
        meta["classes"] = rng.choice([[], ["a"], "cat", [1, 2], ["a"] * 3, None, "../c.txt"])
        return f"metainfo classes := {meta['classes']!r}"
    return "unchanged"


_SPECIFIC = {"lvis": _lvis_specific, "panoptic": _panoptic_specific,
             "cityscapes": _cityscapes_specific, "openmmlab": _openmmlab_specific}

_ODD_NAMES = ["..png", ".png", ".hidden.png", "a b.png", "é\u202e.png", "x\n.png", "a.PNG",
              "a.png.jpg", "../escape.png", "dir.png/inner.png", "c" * 250 + ".png",
              "/".join(["d"] * 60) + "/deep.png", "a.png ", "\udcff.png"]


def _mutate_tree(seed: bytes, rng: random.Random) -> tuple[bytes, str]:
    tree = json.loads(seed)
    side = rng.choice(["gt", "img"])
    ext = ".png" if side == "gt" else ".jpg"
    kind = rng.randrange(5)
    if kind == 0:
        name = rng.choice(_ODD_NAMES).replace(".png", ext)
        tree[side].append(name)
        other = "img" if side == "gt" else "gt"
        tree[other].append(name.replace(ext, ".jpg" if side == "gt" else ".png"))
        what = f"pair {name!r:.60}"
    elif kind == 1 and tree[side]:
        tree[side].pop(rng.randrange(len(tree[side])))
        what = f"remove a {side} file"
    elif kind == 2:
        target = rng.choice(["/", "..", ".", "/etc/passwd", "loop", "missing"])
        tree["links"].append([side + "/lnk" + rng.choice(["", ext]), target])
        what = f"symlink in {side} -> {target}"
    elif kind == 3:
        tree[side].extend(f"many/{i}{ext}" for i in range(rng.choice([10, 500])))
        what = f"many {side} files"
    else:
        tree[side].append(rng.choice(tree[side] or ["a" + ext]).upper())
        what = f"case variant in {side}"
    return json.dumps(tree, ensure_ascii=True).encode(), what
