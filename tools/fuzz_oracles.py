"""Run one fuzzed input through a format loader and judge the outcome (``tools/fuzz_loaders.py``).

:func:`run_case` writes the input where the loader expects it (an LVIS / panoptic / OpenMMLab
json, a VOC directory, a Cityscapes tree, a semantic-segmentation file tree), calls the loader
and returns ``(summary, problems, detail)``: ``summary`` is ``"ok"`` (records returned),
``"typed"`` (a :class:`~catalog._common.CatmapError`) or ``"untyped"`` (anything else);
``problems`` lists ``"untyped"``, ``"accepted-malformed"`` (the oracle says the input must be
refused, or the records break an invariant of the record format) and ``"rejected-valid"``
(the oracle says the input is valid). The oracles:

* LVIS: the COCO reference (:mod:`tools.coco_reference`) on the file with ``file_name`` taken
  from ``coco_url`` as documented, plus the LVIS keys' rules; the loader must agree on error vs
  records, skip counts and instances per image;
* Pascal VOC: an independent reading of the policy with ElementTree (numbers must be plain
  ASCII decimals), same error vs records and kept-object count;
* panoptic, Cityscapes, OpenMMLab: invariants of the records (every file inside its root, ids
  unique and in range, categories in the maps, finite non-empty boxes, valid polygons, one
  record per entry, OpenMMLab values carried over unchanged, no key shadowing another);
* semantic segmentation: the pairs expected from the files created.

Example:
    >>> import tempfile
    >>> from tools.fuzz_formats import seeds
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     run_case("voc", seeds("voc")[0], tmp)[:2]
    ('ok', [])
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import xml.etree.ElementTree as ET
from typing import Any

from tools.coco_reference import Invalid, _outcome, _parse
from tools.fuzz_formats import PNG_CASE

__all__ = ["run_case", "voc_reference", "lvis_reference", "PANOPTIC_META"]

PANOPTIC_META = {"thing_dataset_id_to_contiguous_id": {1: 0, 3: 1},
                 "stuff_dataset_id_to_contiguous_id": {92: 2, 184: 3}}
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_VOC = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
        "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
        "train", "tvmonitor")
_I64 = (-(2**63), 2**63 - 1)


def _num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _inside(path: Any, root: str) -> bool:
    if type(path) is not str or "\x00" in path:
        return False
    return os.path.normpath(path).startswith(os.path.normpath(root) + os.sep)


def _polygons_ok(segm: Any) -> bool:
    return type(segm) is list and all(
        type(p) is list and len(p) >= 6 and len(p) % 2 == 0 and all(map(_num, p)) for p in segm
    )


def _box_problems(ann: dict, k: int, xyxy: bool) -> list[str]:
    b = ann.get("bbox")
    if type(b) is not list or len(b) != 4 or not all(map(_num, b)):
        return [f"bbox {b!r:.60}"]
    w, h = (b[2] - b[0], b[3] - b[1]) if xyxy else (b[2], b[3])
    out = [] if w > 0 and h > 0 else [f"empty bbox {b}"]
    cat = ann.get("category_id")
    if type(cat) is not int or not 0 <= cat < k:
        out.append(f"category_id {cat!r} not in 0..{k - 1}")
    if ann.get("iscrowd", 0) not in (0, 1) or type(ann.get("iscrowd", 0)) is not int:
        out.append(f"iscrowd {ann.get('iscrowd')!r}")
    return out


# ------------------------------------------------------------------------------------ LVIS
def lvis_reference(data: bytes) -> tuple:
    """``("ok", skip counts, [(image id, instances kept)] by id)`` or ``("error", why)``."""
    try:
        doc = _parse(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
            raise Invalid("top level")
        images, lists = [], []
        for img in doc["images"]:
            if isinstance(img, dict):
                url = img.get("coco_url")
                if url is not None:
                    parts = url.split("/") if isinstance(url, str) else []
                    tail = parts[-2:] if len(parts) >= 3 else []
                    if len(tail) != 2 or "?" in url or "#" in url or any(
                        p in ("", ".", "..") or "\x00" in p or "\\" in p for p in tail
                    ):
                        raise Invalid("coco_url")
                    img = dict(img, file_name="/".join(tail))
                for key in ("neg_category_ids", "not_exhaustive_category_ids"):
                    ids = img.get(key)
                    if ids is not None and not (isinstance(ids, list) and all(
                            type(i) is int and _I64[0] <= i <= _I64[1] for i in ids)):
                        raise Invalid(key)
                    lists.extend(ids or [])
            images.append(img)
        doc = dict(doc, images=images)
        result = _outcome(doc, ())
        cats = doc.get("categories") or []
        if not set(lists) <= {c["id"] for c in cats}:
            raise Invalid("id list holds an unknown category")
        for cat in cats:
            syn, freq = cat.get("synonyms"), cat.get("frequency")
            if syn is not None and not (isinstance(syn, list) and syn and all(
                    isinstance(s, str) for s in syn)):
                raise Invalid("synonyms")
            if freq is not None and freq not in ("r", "c", "f"):
                raise Invalid("frequency")
            for key in ("image_count", "instance_count"):
                v = cat.get(key)
                if v is not None and not (type(v) is int and 0 <= v <= _I64[1]):
                    raise Invalid(key)
    except Invalid as exc:
        return ("error", str(exc))
    # result[2] is already in image-id order (as the loader returns records)
    kept = list(zip(sorted(img["id"] for img in images), result[2], strict=True))
    return ("ok", result[1], kept)


def _lvis(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.coco import load_coco_records
    from tools.fuzz_loaders import _counts_dict

    path = _write(work, "lvis.json", data)
    root = os.path.join(work, "images")
    reference = lvis_reference(data)
    expect = reference[0]

    def check(result: Any) -> list[str]:
        records, categories, counts = result
        got = ("ok", _counts_dict(counts.as_tuple()),
               [(r["image_id"], len(r["annotations"])) for r in records])
        out = [] if got == reference else [f"got {got!r:.150} reference {reference!r:.150}"]
        for r in records:
            if "coco_url" in str(r.get("file_name")) or not isinstance(r.get("file_name"), str):
                out.append(f"file_name {r.get('file_name')!r:.80}")
            for ann in r["annotations"]:
                out += _box_problems(ann, len(categories), xyxy=False)
                segm = ann.get("segmentation", [])
                if not (_polygons_ok(segm) or isinstance(segm, dict) and "counts" in segm):
                    out.append(f"segmentation {ann['segmentation']!r:.60}")
        return out

    return expect, (lambda: load_coco_records(path, root, lvis=True), check)


# -------------------------------------------------------------------------------- Pascal VOC
def voc_reference(data: bytes) -> tuple:
    """``("ok", objects kept, objects skipped)`` or ``("error", why)`` for one VOC XML file."""
    if len(data) > 4 * 1024 * 1024:
        return ("error", "too large")
    if b"<!DOCTYPE" in data or b"<\x00!\x00D\x00O\x00C" in data or b"\x00<\x00!\x00D\x00O" in data:
        return ("error", "DTD")
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError, LookupError) as exc:
        return ("error", f"parse: {exc}")
    stack, count = [(root, 1)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > 64 or count > 200_000:
            return ("error", "too deep or too many elements")
        stack.extend((child, depth + 1) for child in node)

    def text(node: ET.Element | None) -> str | None:
        return None if node is None or node.text is None else node.text.strip()

    for key in ("width", "height"):
        node = root.find("size/" + key)
        if node is not None:
            t = text(node)
            if not t or not _NUMBER.match(t) or not float(t).is_integer() or not (
                    1 <= float(t) <= 2**20):
                return ("error", f"size {key} {t!r:.30}")
    kept = skipped = 0
    for obj in root.findall("object"):
        name, box = text(obj.find("name")), obj.find("bndbox")
        if not name or name not in _VOC or box is None:
            return ("error", f"object name {name!r:.30} / bndbox")
        coords = [text(box.find(k)) for k in ("xmin", "ymin", "xmax", "ymax")]
        if not all(c and _NUMBER.match(c) and math.isfinite(float(c)) for c in coords):
            return ("error", f"coordinates {coords!r:.60}")
        x0, y0, x1, y1 = map(float, coords)
        if x1 > x0 - 1 and y1 > y0 - 1:
            kept += 1
        else:
            skipped += 1
    return ("ok", kept, skipped)


def _voc(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.voc import load_voc_instances

    _write(work, "ImageSets/Main/fuzz.txt", b"000001\n")
    _write(work, "Annotations/000001.xml", data)
    reference = voc_reference(data)

    def check(records: list[dict]) -> list[str]:
        out = [] if len(records) == 1 and reference[0] == "ok" and len(
            records[0]["annotations"]) == reference[1] else [f"reference {reference!r:.100}"]
        for r in records:
            for key in ("height", "width"):
                if key in r and not (type(r[key]) is int and 1 <= r[key] <= 2**20):
                    out.append(f"{key} {r[key]!r}")
            for ann in r["annotations"]:
                out += _box_problems(ann, len(_VOC), xyxy=True)
        return out

    return reference[0], (lambda: load_voc_instances(work, "fuzz"), check)


# ---------------------------------------------------------------------------- COCO panoptic
def _panoptic(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.panoptic import load_coco_panoptic_json

    path = _write(work, "panoptic.json", data)
    image_dir, gt_dir = os.path.join(work, "img"), os.path.join(work, "pan")
    for name in ("img/000007.jpg", "img/000009.jpg", "pan/000007.png", "pan/000009.png",
                 "pan/sub/000011.png", "img/sub/000011.jpg"):
        _write(work, name, b"")
    doc = _plain_json(data)
    contiguous = {v: k in (1, 3) for k, v in {**PANOPTIC_META["thing_dataset_id_to_contiguous_id"],
                                              **PANOPTIC_META["stuff_dataset_id_to_contiguous_id"]}.items()}

    def check(records: list[dict]) -> list[str]:
        out = []
        anns = doc.get("annotations") if isinstance(doc, dict) else None
        if isinstance(anns, list) and len(anns) != len(records):
            out.append(f"{len(records)} records for {len(anns)} annotations")
        ids = [r["image_id"] for r in records]
        if len(set(ids)) != len(ids) or not all(type(i) is int for i in ids):
            out.append(f"image ids {ids!r:.60}")
        for n, r in enumerate(records):
            if not _inside(r["file_name"], image_dir) or not _inside(r["pan_seg_file_name"], gt_dir):
                out.append(f"path outside its root: {r['file_name']!r:.60} {r['pan_seg_file_name']!r:.60}")
            for key in ("height", "width"):
                if key in r and not (type(r[key]) is int and 1 <= r[key] <= 2**20):
                    out.append(f"{key} {r[key]!r}")
            segs = r["segments_info"]
            if isinstance(anns, list) and len(anns) == len(records) and len(segs) != len(
                    anns[n].get("segments_info", [])):
                out.append("segments dropped")
            seg_ids = [s["id"] for s in segs]
            if len(set(seg_ids)) != len(seg_ids) or not all(
                    type(i) is int and 0 <= i < 256**3 for i in seg_ids):
                out.append(f"segment ids {seg_ids!r:.60}")
            for s in segs:
                if contiguous.get(s["category_id"], None) is not s["isthing"] or s[
                        "iscrowd"] not in (0, 1):
                    out.append(f"segment {s!r:.80}")
                if "bbox" in s and not (type(s["bbox"]) is list and len(s["bbox"]) == 4 and all(
                        map(_num, s["bbox"]))):
                    out.append(f"bbox {s['bbox']!r:.60}")
                if "area" in s and not (_num(s["area"]) and s["area"] >= 0):
                    out.append(f"area {s['area']!r:.60}")
        return out

    return None, (lambda: load_coco_panoptic_json(path, image_dir, gt_dir, PANOPTIC_META), check)


# ------------------------------------------------------------------------------- Cityscapes
def _cityscapes(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.cityscapes import load_cityscapes_instances, load_cityscapes_semantic

    image_dir, gt_dir = os.path.join(work, "left", "val"), os.path.join(work, "gt", "val")
    base = "aachen/aachen_000000_000019_"
    _write(image_dir, base + "leftImg8bit.png", b"")
    _write(gt_dir, base + "gtFine_labelTrainIds.png", b"")
    to_polygons = len(data) % 3 != 0
    from_png = data.startswith(PNG_CASE)
    if from_png:
        _write(gt_dir, base + "gtFine_instanceIds.png", data[len(PNG_CASE):])
    else:
        _write(gt_dir, base + "gtFine_polygons.json", data)

    def load() -> Any:
        records = load_cityscapes_instances(image_dir, gt_dir, not from_png, to_polygons)
        if from_png:
            return records, [records[0]]
        return records, load_cityscapes_semantic(image_dir, gt_dir)

    def check(result: Any) -> list[str]:
        records, semantic = result
        out = []
        doc = _plain_json(data)
        objects = doc.get("objects") if isinstance(doc, dict) else None
        for r in records:
            size = (r["height"], r["width"])
            if (semantic[0]["height"], semantic[0]["width"]) != size:
                out.append("semantic size differs")
            if isinstance(objects, list) and len(r["annotations"]) > len(objects):
                out.append("more annotations than objects")
            for ann in r["annotations"]:
                out += _box_problems(ann, 8, xyxy=True)
                segm = ann["segmentation"]
                if to_polygons and not _polygons_ok(segm):
                    out.append(f"segmentation {segm!r:.60}")
                if not to_polygons and not (isinstance(segm, dict) and segm.get("size") == list(
                        size) and isinstance(segm.get("counts"), str)):
                    out.append(f"rle {segm!r:.60}")
        return out

    return None, (load, check)


# ------------------------------------------------------------------------------ OpenMMLab
def _openmmlab(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.openmmlab import load_annotation_file
    from catalog.box_mode import BoxMode

    path = _write(work, "ann.json", data)
    doc = _plain_json(data)

    def check(result: Any) -> list[str]:
        meta, records = result
        classes = meta.get("classes")
        k = len(classes) if isinstance(classes, (list, tuple)) else 2**31
        entries = doc.get("data_list") if isinstance(doc, dict) else None
        if not isinstance(entries, list) or len(entries) != len(records):
            return [f"{len(records)} records for data_list {entries!r:.40}"]
        out = []
        for i, (entry, r) in enumerate(zip(entries, records, strict=True)):
            if r.get("file_name") != entry.get("img_path"):
                out.append(f"entry {i}: file_name {r.get('file_name')!r:.40} is not img_path")
            if r.get("image_id") != entry.get("img_id", i):
                out.append(f"entry {i}: image_id {r.get('image_id')!r:.40} is not img_id")
            if "seg_map_path" in entry and r.get("sem_seg_file_name") != entry["seg_map_path"]:
                out.append(f"entry {i}: sem_seg_file_name is not seg_map_path")
            instances = iter(entry.get("instances") or [])
            for ann in r["annotations"]:
                out += _box_problems(ann, k, xyxy=True)
                if ann.get("bbox_mode") != BoxMode.XYXY_ABS:
                    out.append(f"entry {i}: bbox_mode {ann.get('bbox_mode')!r}")
                if not any(inst.get("bbox_label") == ann.get("category_id") and list(
                        inst.get("bbox", ())) == ann.get("bbox") for inst in instances):
                    out.append(f"entry {i}: annotation {ann!r:.80} is not from an instance")
        return out

    return None, (lambda: load_annotation_file(path), check)


# ------------------------------------------------------------------------- semantic seg
def _sem_seg(data: bytes, work: str) -> tuple[str | None, Any]:
    from catalog.formats.panoptic import load_sem_seg

    tree = json.loads(data)
    roots = {"gt": os.path.join(work, "gt"), "img": os.path.join(work, "img")}
    keys: dict[str, set[str]] = {"gt": set(), "img": set()}
    for side, root in roots.items():
        os.makedirs(root, exist_ok=True)
        ext = ".png" if side == "gt" else ".jpg"
        for name in tree[side]:
            target = os.path.normpath(os.path.join(root, name))
            try:
                _write(root, name, b"x")
            except (OSError, ValueError):
                continue
            base = os.path.basename(target)
            if _inside(target, root) and base.endswith(ext) and len(base) > len(ext) and (
                    not base.startswith(".")):
                keys[side].add(os.path.relpath(target, root)[: -len(ext)])
    for name, target in tree["links"]:
        side, link = name.split("/", 1)
        where = os.path.join(roots[side], link)
        target = where if target == "loop" else target
        try:
            os.symlink(target if target != "." else roots[side], where)
        except OSError:
            continue
        ext = ".png" if side == "gt" else ".jpg"
        if link.endswith(ext) and not os.path.isdir(where):
            keys[side].add(link[: -len(ext)])
    pairs = keys["gt"] & keys["img"]
    expect = "ok" if pairs else "error"

    def check(records: list[dict]) -> list[str]:
        got = {os.path.relpath(r["sem_seg_file_name"], roots["gt"])[:-4] for r in records}
        out = [] if got == pairs and len(records) == len(pairs) else [
            f"pairs {sorted(got)[:3]!r:.80} expected {sorted(pairs)[:3]!r:.80}"]
        for r in records:
            if not _inside(r["file_name"], roots["img"]) or not _inside(
                    r["sem_seg_file_name"], roots["gt"]):
                out.append(f"outside its root: {r!r:.80}")
        return out

    return expect, (lambda: load_sem_seg(roots["gt"], roots["img"]), check)


_RUNNERS = {"lvis": _lvis, "voc": _voc, "panoptic": _panoptic, "cityscapes": _cityscapes,
            "openmmlab": _openmmlab, "sem_seg": _sem_seg}


def _write(root: str, name: str, data: bytes) -> str:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _plain_json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def run_case(fmt: str, data: bytes, tmp: str) -> tuple[str, list[str], str]:
    """Run ``data`` through the loader of ``fmt`` in a fresh folder under ``tmp``; judge it."""
    from catalog._common import CatmapError

    work = os.path.join(tmp, "case")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    expect, (load, check) = _RUNNERS[fmt](data, work)
    try:
        result = load()
    except CatmapError as exc:
        detail = f"{type(exc).__name__}: {str(exc)[:160]}"
        return "typed", (["rejected-valid"] if expect == "ok" else []), detail
    except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
        return "untyped", ["untyped"], f"{type(exc).__name__}: {str(exc)[:200]}"
    problems = check(result)
    if expect == "error":
        problems = ["the oracle expects an error"] + problems
    return "ok", (["accepted-malformed"] if problems else []), "; ".join(problems)[:400]
