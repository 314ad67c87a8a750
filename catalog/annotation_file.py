"""OpenMMLab 2.0 annotation files: a top-level ``metainfo`` dict and a ``data_list`` list.

Formats by extension: ``.json``; ``.yaml`` / ``.yml`` (a bounded ``yaml.safe_load``: no
arbitrary objects, no anchors or aliases unless ``allow_yaml_aliases=True``, at most 100 levels
of nesting); ``.pkl`` / ``.pickle`` only with ``allow_pickle=True``, because unpickling a file
runs whatever code it names.

An annotation file is untrusted input: its bytes are parsed with bounds
(:mod:`catalog.safe_parse`), every field the loader knows is checked by type and range
(:mod:`catalog.annotation_validate`, which documents the policy), and nothing in it makes the
loader read another file. A file of class names is read only when the caller names it in the
``metainfo`` argument (``metainfo={"classes": "classes.txt"}``): an absolute path is used as
is; a relative one is resolved under ``data_root`` only (never the current directory when a
``data_root`` is given) and may not leave it with ``..``; it must be a regular UTF-8 file, not
a symbolic link, of at most 16 MiB.
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from .annotation_validate import (
    AnnotationFieldError,
    AnnotationFieldTypeError,
    AnnotationSkips,
    ParseDataInfoError,
    Validator,
)
from .dataset_catalog import DatasetCatalog
from .errors import AnnotationFormatError, DatasetAlreadyRegisteredError, RecordFormatError
from .metadata import MetadataCatalog
from .openmmlab_records import check_record_format, to_detectron2_record
from .safe_parse import MAX_DEPTH, parse_json, parse_yaml, read_bytes, read_text_lines
from .version import __version__

__all__ = [
    "AnnotationFileOptions",
    "load_annotation_file",
    "register_annotation_file",
    "read_metainfo",
    "AnnotationFieldError",
    "AnnotationFieldTypeError",
    "AnnotationSkips",
    "ParseDataInfoError",
]

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
        return parse_json(read_bytes(ann_file, what="annotation file"), ann_file)
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
            f"and 'data_list', got a {type(content).__name__}",
            path=ann_file,
        )
    missing = [k for k in ("metainfo", "data_list") if k not in content]
    if missing:
        raise AnnotationFormatError(
            f"{ann_file}: missing top-level key(s) {missing}; an OpenMMLab 2.0 annotation file "
            f"has 'metainfo' and 'data_list', found keys {sorted(map(str, content))[:50]}"
        )
    if type(content["metainfo"]) is not dict:
        raise AnnotationFieldTypeError(
            f"{ann_file}: 'metainfo' must be a dict, got a {type(content['metainfo']).__name__}",
            path=ann_file,
            key="metainfo",
        )
    if type(content["data_list"]) is not list:
        raise AnnotationFieldTypeError(
            f"{ann_file}: 'data_list' must be a list, got a {type(content['data_list']).__name__}",
            path=ann_file,
            key="data_list",
        )
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
                "pass an absolute path to read a file outside data_root"
            )
        path = os.path.join(data_root, norm)
    try:
        classes = read_text_lines(path, what="metainfo 'classes' file")
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        where = f" (resolved under data_root {data_root!r})" if path != given else ""
        raise AnnotationFormatError(
            f"metainfo 'classes' file {given!r}{where} cannot be read: {exc.strerror}"
        ) from None
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
            f"with one per line, got {type(classes).__name__}"
        )
    return merged


def _merge_metainfo(
    from_file: dict, argument: dict | None, data_root: str, ann_file: str
) -> dict[str, Any]:
    """The file's metainfo (checked, never read as file names) updated by the caller's."""
    Validator(ann_file, max_depth=MAX_DEPTH).file_metainfo(from_file)
    return {**from_file, **_caller_metainfo(argument, data_root)}


def read_metainfo(
    ann_file: str | os.PathLike,
    *,
    data_root: str | os.PathLike = "",
    metainfo: dict | None = None,
    allow_pickle: bool = False,
    allow_yaml_aliases: bool = False,
) -> dict[str, Any]:
    """The merged metainfo of an annotation file (argument over file), records not built.

    The options are those of :func:`load_annotation_file`.

    Example:
        >>> read_metainfo("ann.json", metainfo={"classes": ["cat"]})["classes"]  # doctest: +SKIP
        ['cat']
    """
    data_root = os.fspath(data_root)
    path = _resolve(ann_file, data_root)
    content = _check_top_level(_read(path, allow_pickle, allow_yaml_aliases), path)
    return _merge_metainfo(content["metainfo"], metainfo, data_root, path)


def _num_classes(metainfo: dict[str, Any]) -> int | None:
    classes = metainfo.get("classes")
    return len(classes) if isinstance(classes, (list, tuple)) else None


def load_annotation_file(
    ann_file: str | os.PathLike,
    *,
    data_root: str | os.PathLike = "",
    data_prefix: dict[str, str] | None = None,
    metainfo: dict | None = None,
    parse_data_info: ParseDataInfo | None = None,
    allow_pickle: bool = False,
    allow_yaml_aliases: bool = False,
    record_format: str = "detectron2",
) -> tuple[dict[str, Any], list[dict]]:
    """Load an OpenMMLab 2.0 annotation file: ``(metainfo, records)``.

    Each ``data_list`` entry is checked (see :mod:`catalog.annotation_validate` for the
    policy: malformed values raise :class:`AnnotationFieldError` naming the file, index,
    ``img_id``, instance and key; degenerate boxes and invalid polygons are skipped and
    reported in one warning per file) before ``parse_data_info`` sees it. The records are
    then detectron2-style (``file_name``, ``image_id``, ``annotations`` with ``bbox`` +
    ``bbox_mode``, ``category_id``, ``iscrowd`` ...; see :mod:`catalog.openmmlab_records` for
    the key mapping), unless ``record_format="openmmlab"`` keeps the OpenMMLab keys.

    Args:
        ann_file: the file; relative paths are joined to ``data_root``.
        data_root: root directory joined to a relative ``ann_file``, relative
            ``data_prefix`` values and a relative ``classes`` file named in ``metainfo``.
        data_prefix: record key -> directory; each record's value under that key is joined to
            the directory (e.g. ``{"img_path": "images"}``). Applied after ``parse_data_info``.
        metainfo: overrides the file's metainfo key by key. ``metainfo["classes"]`` may be
            the path of a text file with one class name per line (see the module docstring);
            no value in the file's own metainfo is ever read as a file name.
        parse_data_info: turns one checked ``data_list`` entry into a record (a dict) or into
            several (a list of dicts); identity by default.
        allow_pickle: allow ``.pkl`` / ``.pickle`` files (unpickling runs code).
        allow_yaml_aliases: accept YAML anchors and aliases, as long as they expand to at
            most 1,000,000 values beyond those in the file.
        record_format: ``"detectron2"`` (default) converts each entry (after
            ``parse_data_info`` and ``data_prefix``) into the record format every catmap
            function reads; ``"openmmlab"`` keeps the entries' own keys.

    Returns:
        The merged metainfo and the list of records.

    Raises:
        AnnotationFormatError: (a ValueError) unsupported or refused format, invalid
            JSON/YAML, not UTF-8, nested more than 100 levels, missing ``metainfo`` /
            ``data_list`` (names the keys found), an unreadable ``classes`` file;
            :class:`AnnotationFieldError` (a subclass) for a malformed value,
            :class:`AnnotationFieldTypeError` (also a ``TypeError``) for a wrong type.
        ParseDataInfoError: (a TypeError) ``parse_data_info`` returned something other than
            a dict or a list of dicts.
        RecordFormatError: a record lacks a key named in ``data_prefix``, or its value there
            is not a string (names the record).
        ValueError: ``record_format`` is not ``"detectron2"`` or ``"openmmlab"``.
        TypeError: the ``metainfo`` argument is not a dict, or its ``classes`` is neither a
            list of strings nor a path.

    Example:
        >>> meta, records = load_annotation_file(
        ...     "train.json", data_root="data/toy", data_prefix={"img_path": "images"}
        ... )  # doctest: +SKIP
        >>> records[0]["img_path"]  # doctest: +SKIP
        'data/toy/images/0001.jpg'
    """
    check_record_format(record_format)
    data_root = os.fspath(data_root)
    path = _resolve(ann_file, data_root)
    content = _check_top_level(_read(path, allow_pickle, allow_yaml_aliases), path)
    merged = _merge_metainfo(content["metainfo"], metainfo, data_root, path)
    prefixes = {key: _resolve(prefix, data_root) for key, prefix in (data_prefix or {}).items()}
    validator = Validator(path, num_classes=_num_classes(merged), max_depth=MAX_DEPTH)
    records: list[dict] = []
    for index, raw in enumerate(content["data_list"]):
        info = validator.data_info(raw, index)
        parsed = parse_data_info(info) if parse_data_info is not None else info
        if isinstance(parsed, dict):
            parsed = [parsed]
        elif not isinstance(parsed, list) or not all(isinstance(p, dict) for p in parsed):
            raise ParseDataInfoError(
                f"{path}: parse_data_info returned a {type(parsed).__name__} for data_list "
                f"entry {index}; it must return a dict or a list of dicts",
                index=index,
            )
        for record in parsed:
            if prefixes:
                record = dict(record)  # a YAML alias may share one dict between entries
            for key, prefix in prefixes.items():
                value = record.get(key)
                if not isinstance(value, str):
                    found = "no key" if key not in record else f"a {type(value).__name__} under"
                    raise RecordFormatError(
                        f"{path}: data_list entry {index} has {found} {key!r} named in "
                        f"data_prefix (its keys: {sorted(map(str, record))[:50]})"
                    )
                record[key] = os.path.join(prefix, value)
            if record_format == "detectron2":
                record = to_detectron2_record(record, index=index, path=path)
            records.append(record)
    validator.skips.report(path, logger)
    logger.info("loaded %d records from %s", len(records), path)
    return merged, records


class AnnotationFileOptions(TypedDict, total=False):
    """The keyword options of :func:`load_annotation_file` (its signature holds the defaults),
    as :func:`register_annotation_file` takes them."""

    data_root: str | os.PathLike
    data_prefix: dict[str, str] | None
    metainfo: dict | None
    parse_data_info: ParseDataInfo | None
    allow_pickle: bool
    allow_yaml_aliases: bool
    record_format: str


def register_annotation_file(
    name: str,
    ann_file: str | os.PathLike,
    *,
    cache: bool = True,
    **options: Unpack[AnnotationFileOptions],
) -> None:
    """Register an OpenMMLab 2.0 annotation file as dataset ``name``.

    The metainfo is read now and stored in ``MetadataCatalog.get(name)`` (so it is available
    without building the records), together with ``ann_file``; ``classes`` is also stored as
    ``thing_classes`` unless that key is given. The records are built at the first
    ``DatasetCatalog.get(name)``. ``options`` are those of :func:`load_annotation_file`, with
    its defaults; ``cache=False`` keeps the records out of the on-disk cache (``CATMAP_CACHE=0`` turns it
    off everywhere). Records built with a ``parse_data_info`` function are not cached, since
    a change to the function's code would go unnoticed.

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        AnnotationFormatError, TypeError: see :func:`load_annotation_file` (an unknown
            option is a TypeError).
        MetadataConflictError: the metadata already holds different values.

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
            "first to replace it"
        )
    bound = _LOAD_SIGNATURE.bind(ann_file, **options)  # TypeError for an unknown option
    bound.apply_defaults()
    opts = bound.arguments
    record_format = opts["record_format"]
    check_record_format(record_format)
    data_root = os.fspath(opts["data_root"])
    path = _resolve(ann_file, data_root)
    parse_data_info, metainfo = opts["parse_data_info"], opts["metainfo"]
    safety = {
        "allow_pickle": opts["allow_pickle"],
        "allow_yaml_aliases": opts["allow_yaml_aliases"],
    }
    # ann_file, not path: read_metainfo and load_annotation_file join data_root themselves
    # (passing path would join a relative data_root twice).
    meta = read_metainfo(ann_file, data_root=data_root, metainfo=metainfo, **safety)
    prefix = dict(opts["data_prefix"] or {})
    # The classes are read once, now: a classes file changed later does not change the
    # records' label check behind the metadata's back.
    fixed_metainfo = None if metainfo is None else {**metainfo, **_pick(meta, metainfo)}
    load_options = {
        **opts,
        "data_root": data_root,
        "data_prefix": prefix,
        "metainfo": fixed_metainfo,
    }

    def load() -> list[dict]:
        return load_annotation_file(**load_options)[1]

    parser_name = None
    if parse_data_info is not None:
        parser_name = (
            f"{getattr(parse_data_info, '__module__', '?')}."
            f"{getattr(parse_data_info, '__qualname__', repr(parse_data_info))}"
        )
    cache_key = {
        "loader": "catalog.annotation_file.load_annotation_file",
        "catmap_version": __version__,
        "ann_file": os.path.abspath(path),
        "data_root": data_root,
        "data_prefix": prefix,
        "parse_data_info": parser_name,
        "allow_yaml_aliases": safety["allow_yaml_aliases"],
        "record_format": record_format,
        "num_classes": _num_classes(meta),
    }
    DatasetCatalog.register(
        name,
        load,
        source_files=(path,),
        cache_key=cache_key if parse_data_info is None else None,
        options={"cache": cache},
    )
    values = {"ann_file": path, **meta}
    if "classes" in meta and "thing_classes" not in meta:
        values["thing_classes"] = meta["classes"]
    try:
        MetadataCatalog.get(name).set(**values)
    except Exception:
        DatasetCatalog.remove(name)
        raise


_LOAD_SIGNATURE = inspect.signature(load_annotation_file)


def _pick(meta: dict[str, Any], argument: dict) -> dict[str, Any]:
    """The resolved ``classes`` of ``meta`` when the caller's ``argument`` named a file."""
    if isinstance(argument.get("classes"), (str, os.PathLike)):
        return {"classes": meta["classes"]}
    return {}
