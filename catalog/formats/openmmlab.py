"""OpenMMLab 2.0 annotation files (a ``metainfo`` dict and a ``data_list`` list, JSON or YAML;
pickle only when allowed), loaded as detectron2-style records or kept as entries.
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from ..box_mode import BoxMode
from ..dataset_catalog import DatasetCatalog
from .._common import AnnotationFormatError, DatasetAlreadyRegisteredError, RecordFormatError
from ..version import __version__
from .files import (
    MAX_DEPTH,
    outside_root_problem,
    parse_json,
    parse_yaml,
    read_bytes,
    read_text_lines,
    set_metadata,
)
from .validate import (
    AnnotationFieldError,
    AnnotationFieldTypeError,
    ParseDataInfoError,
    Validator,
    short_repr,
)

#: Values of the ``record_format`` option of the annotation-file loader.
RECORD_FORMATS = ("detectron2", "openmmlab")

_ENTRY_KEYS = {"img_path": "file_name", "img_id": "image_id", "seg_map_path": "sem_seg_file_name"}
_INSTANCE_KEYS = {"bbox_label": "category_id", "ignore_flag": "iscrowd", "mask": "segmentation"}
# Record keys the conversion sets, and the OpenMMLab key each comes from: an entry or instance
# may hold one only with the value the conversion gives it (else the unchecked value would
# shadow, or stand in for, the checked one).
_ENTRY_TARGETS = {**{v: k for k, v in _ENTRY_KEYS.items()}, "annotations": "instances"}
_INSTANCE_TARGETS = {**{v: k for k, v in _INSTANCE_KEYS.items()}, "bbox_mode": "bbox"}


def check_record_format(record_format: Any) -> str:
    """Return ``record_format`` if it is one of :data:`RECORD_FORMATS`, else raise ValueError."""
    if record_format not in RECORD_FORMATS:
        raise ValueError(f"record_format must be one of {RECORD_FORMATS}, got {record_format!r}")
    return record_format


def to_detectron2_record(entry: dict, *, index: int, path: str) -> dict:
    """Turn one (checked) OpenMMLab ``data_list`` entry into a detectron2-style record."""
    img_id = entry.get("img_id")
    if not isinstance(entry.get("img_path"), str):
        raise AnnotationFieldError(
            f"{path}: data_list entry {index} has no 'img_path' string, so it cannot become a "
            "record with a 'file_name' (pass record_format='openmmlab' to keep entries as "
            "they are)", path=path, index=index, img_id=img_id, key="img_path")
    record: dict[str, Any] = {k: v for k, v in entry.items() if k not in _ENTRY_TARGETS.values()}
    for key, value in entry.items():
        if key == "instances":
            record["annotations"] = [
                _annotation(inst, j, index=index, img_id=img_id, path=path)
                for j, inst in enumerate(value)
            ]
        elif key in _ENTRY_KEYS:
            record[_ENTRY_KEYS[key]] = value
    record.setdefault("image_id", index)
    record.setdefault("annotations", [])
    _check_shadowing(entry, record, _ENTRY_TARGETS, f"{path}: data_list entry {index}",
                     path=path, index=index, img_id=img_id)
    return record


def _check_shadowing(item: dict, converted: dict, targets: dict[str, str], where: str,
                     **fields: Any) -> None:
    for target, source in targets.items():
        if target in item and (source not in item or not _same(item[target], converted[target])):
            raise AnnotationFieldError(
                f"{where} holds {target!r} (value {short_repr(item[target])}) beside "
                f"{source!r}; the record's {target!r} is made from {source!r}, so the file may "
                "not set it differently (pass record_format='openmmlab' to keep entries as "
                "they are)", key=target, **fields)


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays from a pickle file
        return False


def _annotation(inst: dict, j: int, *, index: int, img_id: Any, path: str) -> dict:
    for required in ("bbox", "bbox_label"):
        if required not in inst:
            raise AnnotationFieldError(
                f"{path}: data_list entry {index} (img_id {img_id!r}) instance {j} has no "
                f"{required!r}; a catmap annotation needs a box and a class (pass "
                "record_format='openmmlab' to keep entries as they are)",
                path=path, index=index, img_id=img_id, instance=j, key=required)
    annotation: dict[str, Any] = {k: v for k, v in inst.items()
                                  if k not in _INSTANCE_TARGETS and k not in _INSTANCE_KEYS}
    for key, value in inst.items():
        if key == "bbox":
            annotation["bbox"] = list(value)
            annotation["bbox_mode"] = BoxMode.XYXY_ABS
        elif key == "ignore_flag":
            annotation["iscrowd"] = int(value)
        elif key in _INSTANCE_KEYS:
            annotation[_INSTANCE_KEYS[key]] = value
    annotation.setdefault("iscrowd", 0)
    _check_shadowing(inst, annotation, _INSTANCE_TARGETS,
                     f"{path}: data_list entry {index} (img_id {img_id!r}) instance {j}",
                     path=path, index=index, img_id=img_id, instance=j)
    return annotation

logger = logging.getLogger(__name__)

JSON_SUFFIXES = (".json",)
YAML_SUFFIXES = (".yaml", ".yml")
PICKLE_SUFFIXES = (".pkl", ".pickle")

ParseDataInfo = Callable[[dict], "dict | list[dict]"]


def _resolve(path: str | os.PathLike, data_root: str) -> str:
    path = os.fspath(path)
    if data_root and not os.path.isabs(path):
        return os.path.join(data_root, path)
    return path


def _read(ann_file: str, allow_pickle: bool, allow_yaml_aliases: bool) -> Any:
    suffix = os.path.splitext(ann_file)[1].lower()
    if suffix in JSON_SUFFIXES:
        return parse_json(read_bytes(ann_file, what="annotation file"), ann_file, bom=True)
    if suffix in YAML_SUFFIXES:
        data = read_bytes(ann_file, what="annotation file")
        return parse_yaml(data, ann_file, max_depth=MAX_DEPTH, allow_aliases=allow_yaml_aliases)
    if suffix in PICKLE_SUFFIXES:
        if not allow_pickle:
            raise AnnotationFormatError(
                f"{ann_file}: refusing to load a pickle file: unpickling runs any code the file "
                "names. If you trust the file, pass allow_pickle=True (or convert it to JSON)."
            )
        data = read_bytes(ann_file, what="annotation file")
        try:
            return pickle.loads(data)
        except (pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise AnnotationFormatError(f"{ann_file}: not a valid pickle: {exc}") from None
    raise AnnotationFormatError(
        f"{ann_file}: unsupported annotation file extension {suffix!r}; supported: "
        f"{', '.join(JSON_SUFFIXES + YAML_SUFFIXES + PICKLE_SUFFIXES)}"
    )


def _check_top_level(content: Any, ann_file: str) -> dict:
    if type(content) is not dict:
        raise AnnotationFieldTypeError(
            f"{ann_file}: the top level of an annotation file must be a dict with 'metainfo' "
            f"and 'data_list', got a {type(content).__name__}", path=ann_file)
    missing = [k for k in ("metainfo", "data_list") if k not in content]
    if missing:
        raise AnnotationFormatError(
            f"{ann_file}: missing top-level key(s) {missing}; an OpenMMLab 2.0 annotation file "
            f"has 'metainfo' and 'data_list', found keys {sorted(map(str, content))[:50]}")
    for key, expected in (("metainfo", dict), ("data_list", list)):
        if type(content[key]) is not expected:
            raise AnnotationFieldTypeError(
                f"{ann_file}: {key!r} must be a {expected.__name__}, got a "
                f"{type(content[key]).__name__}", path=ann_file, key=key)
    return content


def _classes_file(value: str | os.PathLike, data_root: str) -> list[str]:
    """The class names in the file the caller named (see the module docstring)."""
    given = os.fspath(value)
    path = given
    if data_root and not os.path.isabs(given):
        norm = os.path.normpath(given)
        if norm == os.pardir or norm.startswith(os.pardir + os.sep):
            raise AnnotationFormatError(
                f"metainfo 'classes' file {given!r} leaves data_root {data_root!r} with '..'; "
                "pass an absolute path to read a file outside data_root")
        path = os.path.join(data_root, norm)
    try:
        classes = read_text_lines(path, what="metainfo 'classes' file")
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        where = f" (resolved under data_root {data_root!r})" if path != given else ""
        raise AnnotationFormatError(
            f"metainfo 'classes' file {given!r}{where} cannot be read: {exc.strerror}") from None
    logger.debug("metainfo 'classes' read from %s", path)
    return classes


def _caller_metainfo(argument: dict | None, data_root: str) -> dict[str, Any]:
    if argument is None:
        return {}
    if not isinstance(argument, dict):
        raise TypeError(f"metainfo must be a dict or None, got {type(argument).__name__}")
    merged = dict(argument)
    classes = merged.get("classes")
    if isinstance(classes, (str, os.PathLike)):
        merged["classes"] = _classes_file(classes, data_root)
    elif classes is not None and not (
        isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
    ):
        raise TypeError(
            "metainfo['classes'] must be a list of class names or the path of a text file "
            f"with one per line, got {type(classes).__name__}")
    return merged


def _read_file(ann_file: str | os.PathLike, data_root: str, metainfo: dict | None,
               allow_pickle: bool, allow_yaml_aliases: bool) -> tuple[str, dict, dict[str, Any]]:
    """``(path, content, metainfo)``: the file's metainfo (checked, never read as file names)
    updated by the caller's ``metainfo``."""
    path = _resolve(ann_file, data_root)
    content = _check_top_level(_read(path, allow_pickle, allow_yaml_aliases), path)
    Validator(path, max_depth=MAX_DEPTH).file_metainfo(content["metainfo"])
    return path, content, {**content["metainfo"], **_caller_metainfo(metainfo, data_root)}


def read_metainfo(ann_file: str | os.PathLike, *, data_root: str | os.PathLike = "",
                  metainfo: dict | None = None, allow_pickle: bool = False,
                  allow_yaml_aliases: bool = False) -> dict[str, Any]:
    """The merged metainfo of an annotation file (argument over file), records not built."""
    return _read_file(ann_file, os.fspath(data_root), metainfo, allow_pickle,
                      allow_yaml_aliases)[2]


def _num_classes(metainfo: dict[str, Any]) -> int | None:
    classes = metainfo.get("classes")
    return len(classes) if isinstance(classes, (list, tuple)) else None


def load_annotation_file(
    ann_file: str | os.PathLike, *, data_root: str | os.PathLike = "",
    data_prefix: dict[str, str] | None = None, metainfo: dict | None = None,
    parse_data_info: ParseDataInfo | None = None, allow_pickle: bool = False,
    allow_yaml_aliases: bool = False, record_format: str = "detectron2",
    allow_outside_root: bool = False,
) -> tuple[dict[str, Any], list[dict]]:
    """Load an OpenMMLab 2.0 annotation file: ``(metainfo, records)``.

    Example:
        >>> meta, records = load_annotation_file(
        ...     "train.json", data_root="data/toy", data_prefix={"img_path": "images"}
        ... )  # doctest: +SKIP
        >>> records[0]["img_path"]  # doctest: +SKIP
        'data/toy/images/0001.jpg'

    An ``img_path`` / ``seg_map_path`` that is absolute or climbs out with ``..`` is refused
    (the data file may not name files outside the data root) unless ``allow_outside_root``.
    """
    check_record_format(record_format)
    data_root = os.fspath(data_root)
    path, content, merged = _read_file(ann_file, data_root, metainfo, allow_pickle,
                                       allow_yaml_aliases)
    prefixes = {key: _resolve(prefix, data_root) for key, prefix in (data_prefix or {}).items()}
    raw_mode = record_format == "openmmlab"
    num_classes = _num_classes(merged)
    validator = Validator(path, num_classes=None if raw_mode else num_classes,
                          max_depth=MAX_DEPTH)
    records: list[dict] = []
    unknown_labels = 0
    for index, raw in enumerate(content["data_list"]):
        info = validator.data_info(raw, index)
        for key in ("img_path", "seg_map_path"):  # the file's names, before parse_data_info
            value = raw.get(key)
            problem = None if allow_outside_root or not isinstance(value, str) \
                else outside_root_problem(value)
            if problem:
                raise AnnotationFieldError(
                    f"{path}: data_list entry {index} {key} {value!r} {problem}; pass "
                    "allow_outside_root=True to read files outside the data root",
                    path=path, index=index, img_id=raw.get("img_id"), key=key)
        if raw_mode:  # kept as mmengine keeps it; what conversion would refuse is counted
            info = raw
            unknown_labels += _unknown_labels(raw, num_classes)
        parsed = parse_data_info(info) if parse_data_info is not None else info
        if isinstance(parsed, dict):
            parsed = [parsed]
        elif not isinstance(parsed, list) or not all(isinstance(p, dict) for p in parsed):
            raise ParseDataInfoError(
                f"{path}: parse_data_info returned a {type(parsed).__name__} for data_list "
                f"entry {index}; it must return a dict or a list of dicts", index=index)
        for record in parsed:
            if prefixes:
                record = dict(record)  # a YAML alias may share one dict between entries
            for key, prefix in prefixes.items():
                value = record.get(key)
                if not isinstance(value, str):
                    found = "no key" if key not in record else f"a {type(value).__name__} under"
                    raise RecordFormatError(
                        f"{path}: data_list entry {index} has {found} {key!r} named in "
                        f"data_prefix (its keys: {sorted(map(str, record))[:50]})")
                record[key] = os.path.join(prefix, value)
            if record_format == "detectron2":
                record = to_detectron2_record(record, index=index, path=path)
            records.append(record)
    if raw_mode:
        _report_kept(path, validator.skips.counts, unknown_labels, num_classes)
    else:
        validator.skips.report(path, logger)
    logger.info("loaded %d records from %s", len(records), path)
    return merged, records


def _unknown_labels(entry: dict, num_classes: int | None) -> int:
    """How many of ``entry``'s instances have a ``bbox_label`` outside 0..num_classes-1."""
    if num_classes is None:
        return 0
    labels = [inst.get("bbox_label") for inst in entry.get("instances") or ()]
    return sum(1 for label in labels if label is not None and not 0 <= label < num_classes)


def _report_kept(path: str, counts: dict[str, int], unknown_labels: int,
                 num_classes: int | None) -> None:
    """Warn once about the instances that raw mode keeps but conversion would refuse or drop."""
    problems = [f"{n} {what}" for n, what in (
        (unknown_labels, f"instances with a bbox_label outside 0..{(num_classes or 0) - 1}"),
        (counts["degenerate_boxes"], "instances with an empty bbox (x2 <= x1 or y2 <= y1)"),
        (counts["no_valid_polygon"], "instances without a valid mask polygon"),
        (counts["dropped_polygons"], "mask polygons with fewer than 6 or an odd count of "
         "coordinates")) if n]
    if problems:
        logger.warning("%s: kept as they are (record_format='openmmlab'), though the detectron2 "
                       "conversion refuses or drops them: %s", path, "; ".join(problems),
                       extra={"annotation_kept": {**counts, "unknown_labels": unknown_labels}})


class AnnotationFileOptions(TypedDict, total=False):
    """The keyword options of :func:`load_annotation_file` (its signature holds the defaults),
    as :func:`register_annotation_file` takes them.
    """

    data_root: str | os.PathLike
    data_prefix: dict[str, str] | None
    metainfo: dict | None
    parse_data_info: ParseDataInfo | None
    allow_pickle: bool
    allow_yaml_aliases: bool
    record_format: str
    allow_outside_root: bool


def register_annotation_file(name: str, ann_file: str | os.PathLike, *, cache: bool = True,
                             **options: Unpack[AnnotationFileOptions]) -> None:
    """Register an OpenMMLab 2.0 annotation file as dataset ``name``.

    Example:
        >>> register_annotation_file("toy_train", "train.json", data_root="data/toy")  # doctest: +SKIP
        >>> MetadataCatalog.get("toy_train").classes  # doctest: +SKIP
        ['cat', 'dog']
    """
    if not isinstance(name, str):
        raise TypeError(f"a dataset name must be a str, got {type(name).__name__}: {name!r}")
    if name in DatasetCatalog:  # fail before reading the file; register() re-checks
        raise DatasetAlreadyRegisteredError(
            f"dataset {name!r} is already registered; call DatasetCatalog.remove({name!r}) "
            "first to replace it")
    bound = _LOAD_SIGNATURE.bind(ann_file, **options)  # TypeError for an unknown option
    bound.apply_defaults()
    opts = bound.arguments
    record_format = opts["record_format"]
    check_record_format(record_format)
    data_root = os.fspath(opts["data_root"])
    path = _resolve(ann_file, data_root)
    parse_data_info, metainfo = opts["parse_data_info"], opts["metainfo"]
    safety = {"allow_pickle": opts["allow_pickle"],
              "allow_yaml_aliases": opts["allow_yaml_aliases"]}
    # ann_file, not path: read_metainfo and load_annotation_file join data_root themselves
    # (passing path would join a relative data_root twice).
    meta = read_metainfo(ann_file, data_root=data_root, metainfo=metainfo, **safety)
    prefix = dict(opts["data_prefix"] or {})
    # The classes are read once, now: a classes file changed later does not change the
    # records' label check behind the metadata's back.
    fixed_metainfo = None if metainfo is None else {**metainfo, **_pick(meta, metainfo)}
    load_options = {**opts, "data_root": data_root, "data_prefix": prefix,
                    "metainfo": fixed_metainfo}

    def load() -> list[dict]:
        return load_annotation_file(**load_options)[1]

    parser_name = None
    if parse_data_info is not None:
        parser_name = (f"{getattr(parse_data_info, '__module__', '?')}."
                       f"{getattr(parse_data_info, '__qualname__', repr(parse_data_info))}")
    cache_key = {
        "loader": "catalog.annotation_file.load_annotation_file", "catmap_version": __version__,
        "ann_file": os.path.abspath(path), "data_root": data_root, "data_prefix": prefix,
        "parse_data_info": parser_name, "allow_yaml_aliases": safety["allow_yaml_aliases"],
        "record_format": record_format, "allow_outside_root": opts["allow_outside_root"],
        "num_classes": _num_classes(meta)}
    DatasetCatalog.register(name, load, source_files=(path,), options={"cache": cache},
                            cache_key=cache_key if parse_data_info is None else None)
    values = {"ann_file": path, **meta}
    if "classes" in meta and "thing_classes" not in meta:
        values["thing_classes"] = meta["classes"]
    set_metadata(name, values)


_LOAD_SIGNATURE = inspect.signature(load_annotation_file)


def _pick(meta: dict[str, Any], argument: dict) -> dict[str, Any]:
    """The resolved ``classes`` of ``meta`` when the caller's ``argument`` named a file."""
    if isinstance(argument.get("classes"), (str, os.PathLike)):
        return {"classes": meta["classes"]}
    return {}
