"""OpenMMLab 2.0 annotation files: a top-level ``metainfo`` dict and a ``data_list`` list.

Formats by extension: ``.json``; ``.yaml`` / ``.yml`` (``yaml.safe_load`` only: no arbitrary
objects); ``.pkl`` / ``.pickle`` only with ``allow_pickle=True``, because unpickling a file runs
whatever code it names.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable
from typing import Any

from .coco import read_json_file
from .dataset_catalog import DatasetCatalog
from .errors import AnnotationFormatError, DatasetAlreadyRegisteredError, RecordFormatError
from .metadata import MetadataCatalog
from .version import __version__

__all__ = ["load_annotation_file", "register_annotation_file", "read_metainfo"]

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


def _read(ann_file: str, allow_pickle: bool) -> Any:
    suffix = os.path.splitext(ann_file)[1].lower()
    if suffix in JSON_SUFFIXES:
        return read_json_file(ann_file)
    if suffix in YAML_SUFFIXES:
        import yaml

        with open(ann_file, encoding="utf-8") as f:
            try:
                return yaml.safe_load(f)
            except yaml.YAMLError as exc:
                raise AnnotationFormatError(
                    f"{ann_file}: not valid YAML for yaml.safe_load (arbitrary Python objects "
                    f"are refused): {exc}"
                ) from None
    if suffix in PICKLE_SUFFIXES:
        if not allow_pickle:
            raise AnnotationFormatError(
                f"{ann_file}: refusing to load a pickle file: unpickling runs any code the file "
                "names. If you trust the file, pass allow_pickle=True (or convert it to JSON)."
            )
        with open(ann_file, "rb") as f:
            try:
                return pickle.load(f)
            except (pickle.UnpicklingError, EOFError) as exc:
                raise AnnotationFormatError(f"{ann_file}: not a valid pickle: {exc}") from None
    raise AnnotationFormatError(
        f"{ann_file}: unsupported annotation file extension {suffix!r}; supported: "
        f"{', '.join(JSON_SUFFIXES + YAML_SUFFIXES + PICKLE_SUFFIXES)}"
    )


def _check_top_level(content: Any, ann_file: str) -> dict:
    if not isinstance(content, dict):
        raise TypeError(
            f"{ann_file}: the top level of an annotation file must be a dict with 'metainfo' "
            f"and 'data_list', got a {type(content).__name__}"
        )
    missing = [k for k in ("metainfo", "data_list") if k not in content]
    if missing:
        raise AnnotationFormatError(
            f"{ann_file}: missing top-level key(s) {missing}; an OpenMMLab 2.0 annotation file "
            f"has 'metainfo' and 'data_list', found keys {sorted(map(str, content))}"
        )
    if not isinstance(content["metainfo"], dict):
        raise AnnotationFormatError(
            f"{ann_file}: 'metainfo' must be a dict, got a {type(content['metainfo']).__name__}"
        )
    if not isinstance(content["data_list"], list):
        raise AnnotationFormatError(
            f"{ann_file}: 'data_list' must be a list, got a {type(content['data_list']).__name__}"
        )
    return content


def _merge_metainfo(
    from_file: dict, argument: dict | None, data_root: str, ann_file: str
) -> dict[str, Any]:
    if argument is not None and not isinstance(argument, dict):
        raise TypeError(f"metainfo must be a dict or None, got {type(argument).__name__}")
    merged = {**from_file, **(argument or {})}
    for key, value in merged.items():
        if isinstance(value, str):
            path = value if os.path.isfile(value) else _resolve(value, data_root)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    merged[key] = [line.strip() for line in f if line.strip()]
                logger.debug("%s: metainfo %r read from %s", ann_file, key, path)
    return merged


def read_metainfo(
    ann_file: str | os.PathLike,
    *,
    data_root: str = "",
    metainfo: dict | None = None,
    allow_pickle: bool = False,
) -> dict[str, Any]:
    """The merged metainfo of an annotation file (argument over file), records not built.

    Example:
        >>> read_metainfo("ann.json", metainfo={"classes": ["cat"]})["classes"]  # doctest: +SKIP
        ['cat']
    """
    data_root = os.fspath(data_root)
    path = _resolve(ann_file, data_root)
    content = _check_top_level(_read(path, allow_pickle), path)
    return _merge_metainfo(content["metainfo"], metainfo, data_root, path)


def load_annotation_file(
    ann_file: str | os.PathLike,
    *,
    data_root: str | os.PathLike = "",
    data_prefix: dict[str, str] | None = None,
    metainfo: dict | None = None,
    parse_data_info: ParseDataInfo | None = None,
    allow_pickle: bool = False,
) -> tuple[dict[str, Any], list[dict]]:
    """Load an OpenMMLab 2.0 annotation file: ``(metainfo, records)``.

    Args:
        ann_file: the file; relative paths are joined to ``data_root``.
        data_root: root directory joined to a relative ``ann_file`` and relative
            ``data_prefix`` values.
        data_prefix: record key -> directory; each record's value under that key is joined to
            the directory (e.g. ``{"img_path": "images"}``). Applied after ``parse_data_info``.
        metainfo: overrides the file's metainfo key by key. Any metainfo value that is the
            path of an existing text file is replaced by its non-empty lines.
        parse_data_info: turns one raw ``data_list`` entry into a record (a dict) or into
            several (a list of dicts); identity by default.
        allow_pickle: allow ``.pkl`` / ``.pickle`` files (unpickling runs code).

    Returns:
        The merged metainfo and the list of records.

    Raises:
        AnnotationFormatError: (a ValueError) unsupported or refused format, invalid
            JSON/YAML, missing ``metainfo`` / ``data_list`` (names the keys found), wrong types.
        TypeError: the top level is not a dict; ``parse_data_info`` returned something other
            than a dict or a list of dicts; a data_list entry is not a dict.
        RecordFormatError: a record lacks a key named in ``data_prefix`` (names the record).

    Example:
        >>> meta, records = load_annotation_file(
        ...     "train.json", data_root="data/toy", data_prefix={"img_path": "images"}
        ... )  # doctest: +SKIP
        >>> records[0]["img_path"]  # doctest: +SKIP
        'data/toy/images/0001.jpg'
    """
    data_root = os.fspath(data_root)
    path = _resolve(ann_file, data_root)
    content = _check_top_level(_read(path, allow_pickle), path)
    merged = _merge_metainfo(content["metainfo"], metainfo, data_root, path)
    prefixes = {key: _resolve(prefix, data_root) for key, prefix in (data_prefix or {}).items()}
    records: list[dict] = []
    for index, raw in enumerate(content["data_list"]):
        if not isinstance(raw, dict):
            raise TypeError(
                f"{path}: data_list entry {index} is a {type(raw).__name__}, not a dict"
            )
        parsed = parse_data_info(raw) if parse_data_info is not None else raw
        if isinstance(parsed, dict):
            parsed = [parsed]
        elif not isinstance(parsed, list) or not all(isinstance(p, dict) for p in parsed):
            raise TypeError(
                f"{path}: parse_data_info returned a {type(parsed).__name__} for data_list "
                f"entry {index}; it must return a dict or a list of dicts"
            )
        for record in parsed:
            for key, prefix in prefixes.items():
                if key not in record:
                    raise RecordFormatError(
                        f"{path}: data_list entry {index} has no key {key!r} named in "
                        f"data_prefix (its keys: {sorted(map(str, record))})"
                    )
                record[key] = os.path.join(prefix, record[key])
            records.append(record)
    logger.info("loaded %d records from %s", len(records), path)
    return merged, records


def register_annotation_file(
    name: str,
    ann_file: str | os.PathLike,
    *,
    data_root: str | os.PathLike = "",
    data_prefix: dict[str, str] | None = None,
    metainfo: dict | None = None,
    parse_data_info: ParseDataInfo | None = None,
    allow_pickle: bool = False,
    cache: bool = True,
) -> None:
    """Register an OpenMMLab 2.0 annotation file as dataset ``name``.

    The metainfo is read now and stored in ``MetadataCatalog.get(name)`` (so it is available
    without building the records), together with ``ann_file``; ``classes`` is also stored as
    ``thing_classes`` unless that key is given. The records are built at the first
    ``DatasetCatalog.get(name)``. The options are those of :func:`load_annotation_file`;
    ``cache=False`` keeps the records out of the on-disk cache (``CATMAP_CACHE=0`` turns it
    off everywhere). Records built with a ``parse_data_info`` function are not cached, since
    a change to the function's code would go unnoticed.

    Raises:
        DatasetAlreadyRegisteredError: the name is taken.
        AnnotationFormatError, TypeError: see :func:`load_annotation_file`.
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
    data_root = os.fspath(data_root)
    path = _resolve(ann_file, data_root)
    # ann_file, not path: read_metainfo and load_annotation_file join data_root themselves
    # (passing path would join a relative data_root twice).
    meta = read_metainfo(
        ann_file, data_root=data_root, metainfo=metainfo, allow_pickle=allow_pickle
    )
    prefix = dict(data_prefix or {})

    def load() -> list[dict]:
        return load_annotation_file(
            ann_file,
            data_root=data_root,
            data_prefix=prefix,
            metainfo=metainfo,
            parse_data_info=parse_data_info,
            allow_pickle=allow_pickle,
        )[1]

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
