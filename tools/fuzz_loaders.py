"""Fuzz the annotation loaders: mutate seed inputs and run each mutation through the loader.

``--format coco`` (the default) fuzzes the COCO loader as described below. ``--format lvis``,
``voc``, ``panoptic``, ``cityscapes``, ``sem_seg``, ``openmmlab`` (or ``all``) fuzz the other
format loaders with the seeds and mutations of :mod:`tools.fuzz_formats` and the oracles of
:mod:`tools.fuzz_oracles`: each input must give records that pass the format's oracle or a
``CatmapError``, within ``--timeout``. A table prints the outcome counts per format.

COCO:

Each input is a seed file (default: the files under ``../shared/external/coco`` and
``../shared/external/lvis`` that load unmutated) with one random mutation: a value at a random
path replaced by one of another type, a huge, negative or non-finite number, a deep nesting, a
lone surrogate; a key deleted; an element or id duplicated; or the bytes truncated, flipped, or
given invalid UTF-8 or a byte order mark. Every input runs through the loader
(:func:`catalog.formats.coco.load_coco_records`, the one msgspec decoder) and the independent
reference of the policy (:mod:`tools.coco_reference`), in a child process with a per-input
timeout. Counts printed:

* ``typed errors``: the loader raised AnnotationFormatError;
* ``untyped errors``: it raised anything else (or the child process crashed);
* ``accepted-malformed``: the reference says error, or other skip counts, and the loader accepted;
* ``rejected-valid``: the reference accepts, the loader raised AnnotationFormatError;
* ``disagreements``: always 0 now that there is one decoder (kept for the table's shape);
* ``hangs``: an input ran past ``--timeout`` seconds.

Usage:
    python -m tools.fuzz_loaders --n 4000 --seed 0
    python -m tools.fuzz_loaders --n 200 my_instances.json other.json
    python -m tools.fuzz_loaders --format all --n 3000 --seed 1
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import logging
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from tools._bench_common import HelpFormatter
from tools.coco_reference import reference_outcome

__all__ = [
    "FIELDS", "VALUES", "RAW_VALUES", "mutate", "run_paths", "classify", "default_seeds", "main",
]

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EXTERNAL = os.path.join(os.path.dirname(_ROOT), "shared", "external")

#: Replacement values of another type, out of range, or on a boundary.
VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 7, 0.5, -2.5, 1e300, 2**53 + 1, 2**63, 2**64 + 5,
    -(2**63) - 1, 10**30, "", "x", "0", "\x00", "é", [], {}, [1, 2, 3], [1, 2, 3, 4],
    ["1", "2", "3", "4"], [0, 0, 0, 0], [[1, 2, 3, 4, 5, 6]], [[1, 2, 3]], [1, 2, 2, 3, 4, 5],
    [1, 2, 2, 3], {"size": [2, 2], "counts": [4]}, {"size": [2, 2], "counts": [1, 2]},
    {"size": [0, 0], "counts": ""}, {"counts": "abc"}, {"size": [2, 2], "counts": "!!"},
    {"size": [2, 2], "counts": "0o"}, {"a": [1]}, [None], [[]], [[1, 2, True, 4, 5, 6]],
]
#: Replacement values written as raw JSON text (not producible by json.dumps).
RAW_VALUES = [
    "1e400", "-1e400", "NaN", "Infinity", "1" * 5000, "[" * 1100 + "]" * 1100,
    "[" * 1020 + "]" * 1020, "[" * 60 + "]" * 60, '"\\ud800"', '"a\\udc00"',
    "123456789012345678901234567890", "-0.0", "1E2", "1e-400",
]
_BAD_BYTES = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80"]
_EXTRA_KEYS = ("area", "id", "num_keypoints", "ignore", "attributes", "score", "segmentation")


def _paths(node: Any, prefix: tuple = (), limit: int = 400) -> list[tuple]:
    out: list[tuple] = []
    stack = [(node, prefix)]
    while stack and len(out) < limit:
        item, path = stack.pop()
        out.append(path)
        if isinstance(item, dict):
            stack.extend((v, path + (k,)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(item))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


#: The keys the loader reads (and two it copies as extra keys), per section.
FIELDS = {
    "images": ("id", "file_name", "height", "width"),
    "categories": ("id", "name", "keypoints"),
    "annotations": ("id", "image_id", "category_id", "bbox", "area", "iscrowd", "ignore",
                    "segmentation", "keypoints", "num_keypoints", "attributes", "score"),
}


_SECTIONS = ["images", "annotations", "categories"]  # (this order keeps old runs reproducible)


def _pick_path(doc: Any, rng: random.Random, fields: dict[str, tuple[str, ...]]) -> tuple:
    if isinstance(doc, dict):
        sections = [k for k in fields if isinstance(doc.get(k), list) and doc[k]]
        if sections and rng.random() < 0.9:
            section = rng.choice(sections)
            index = rng.randrange(len(doc[section]))
            if rng.random() < 0.5 and isinstance(doc[section][index], dict):
                return (section, index, rng.choice(fields[section]))  # may be a missing key
            return rng.choice(_paths(doc[section][index], (section, index)))
    return rng.choice(_paths(doc))


def mutate(
    seed: bytes,
    rng: random.Random,
    fields: dict[str, tuple[str, ...]] | None = None,
    values: list[Any] | None = None,
) -> tuple[bytes, str]:
    """One random mutation of the JSON document ``seed``: ``(bytes, description)``.

    ``fields`` (section -> keys, default :data:`FIELDS`) says which list sections and keys the
    structural mutations aim at; ``values`` (default :data:`VALUES`) the replacement values.
    """
    fields = FIELDS if fields is None else fields
    values = VALUES if values is None else values
    kind = rng.choice(
        ["replace"] * 6 + ["raw"] * 2 + ["delete"] * 2 + ["duplicate", "add_key", "truncate",
         "flip", "bad_utf8", "bom", "swap_ids"]
    )
    if kind in ("truncate", "flip", "bad_utf8", "bom"):
        data = bytearray(seed)
        pos = rng.randrange(max(len(data), 1))
        if kind == "truncate":
            return bytes(data[:pos]), f"truncate at {pos}"
        if kind == "flip":
            data[pos] = rng.randrange(256)
            return bytes(data), f"byte {pos} := {data[pos]}"
        if kind == "bom":
            return b"\xef\xbb\xbf" + seed, "bom"
        bad = rng.choice(_BAD_BYTES)
        return bytes(data[:pos]) + bad + bytes(data[pos:]), f"insert {bad!r} at {pos}"
    doc = json.loads(seed)
    path = _pick_path(doc, rng, fields)
    if kind == "replace":
        value = copy.deepcopy(rng.choice(values))
        return json.dumps(_set(doc, path, value)).encode(), f"{path} := {value!r:.60}"
    if kind == "raw":
        marker = "@@raw-value@@"
        text = json.dumps(_set(doc, path, marker))
        raw = rng.choice(RAW_VALUES)
        return text.replace(json.dumps(marker), raw).encode(), f"{path} := raw {raw[:30]}"
    if kind == "add_key":
        marker = "@@raw-value@@"
        holder = _get(doc, path[:-1]) if path else doc
        target = path[:-1] if path else path
        if path and isinstance(holder, dict) and isinstance(holder.get(path[-1]), dict):
            holder, target = holder[path[-1]], path
        if not isinstance(holder, dict):
            return json.dumps(doc).encode(), "no dict to add to"
        key = rng.choice(["attributes", "score", "info", "extra"])
        holder[key] = marker
        raw = rng.choice(RAW_VALUES + [json.dumps(v) for v in values])
        text = json.dumps(doc).replace(json.dumps(marker), raw)
        return text.encode(), f"{target}.{key} := raw {raw[:30]}"
    if kind == "delete":
        if not path:
            return b"{}", "delete everything"
        parent = _get(doc, path[:-1])
        if isinstance(parent, dict) and path[-1] not in parent:
            return json.dumps(doc).encode(), f"nothing to delete at {path}"
        del parent[path[-1]]
        return json.dumps(doc).encode(), f"delete {path}"
    if kind in ("duplicate", "swap_ids"):
        if not isinstance(doc, dict):
            return json.dumps(doc).encode(), "not a dict"
        section = rng.choice(_SECTIONS if fields is FIELDS else sorted(fields))
        items = doc.get(section)
        if not isinstance(items, list) or not items:
            return json.dumps(doc).encode(), f"no {section}"
        if kind == "duplicate":
            items.append(copy.deepcopy(rng.choice(items)))
            return json.dumps(doc).encode(), f"duplicate an element of {section}"
        a, b = rng.choice(items), rng.choice(items)
        if isinstance(a, dict) and isinstance(b, dict) and "id" in b:
            a["id"] = b["id"]
        return json.dumps(doc).encode(), f"copy an id in {section}"
    raise AssertionError(kind)


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def run_paths(path: str, extra_keys: tuple[str, ...]) -> dict[str, tuple]:
    """The decoder's outcome: ``("ok", records, categories, counts)``, ``("error", class)``
    for AnnotationFormatError, ``("untyped", class: message)`` for anything else."""
    from catalog._common import AnnotationFormatError
    from catalog.formats.coco import load_coco_records

    try:
        records, cats, counts = load_coco_records(path, "", extra_keys)
        return {"msgspec": ("ok", records, cats, counts.as_tuple())}
    except AnnotationFormatError:
        return {"msgspec": ("error", "AnnotationFormatError")}
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        return {"msgspec": ("untyped", f"{type(exc).__name__}: {str(exc)[:200]}")}


_COUNT_NAMES = ("orphans", "degenerate", "negative_area", "bad_polygons", "no_valid_polygon",
                "ignored", "missing_size")


def _counts_dict(counts_tuple: tuple) -> dict[str, int]:
    from catalog.formats.coco import SkipCounts

    values = dict(zip(SkipCounts.__slots__, counts_tuple, strict=True))
    return {k: values[k] for k in _COUNT_NAMES if values[k]}


def classify(outcomes: dict[str, tuple], reference: tuple) -> list[str]:
    """The problems of one input (empty when every path agrees with each other and with the
    reference): "untyped", "disagreement", "accepted-malformed", "rejected-valid"."""
    problems = []
    if any(o[0] == "untyped" for o in outcomes.values()):
        problems.append("untyped")
    first = next(iter(outcomes.values()))
    if any(o != first for o in outcomes.values()):
        problems.append("disagreement")
    for outcome in outcomes.values():
        if outcome[0] == "ok":
            got = ("ok", _counts_dict(outcome[3]), [len(r["annotations"]) for r in outcome[1]])
            if reference[0] == "error" or got != reference:
                problems.append("accepted-malformed")
                break
        elif outcome[0] == "error" and reference[0] == "ok":
            problems.append("rejected-valid")
            break
    return problems


def _check_one(data: bytes, extra_keys: tuple[str, ...], tmp: str) -> tuple[str, list[str], str]:
    path = os.path.join(tmp, "input.json")
    with open(path, "wb") as f:
        f.write(data)
    outcomes = run_paths(path, extra_keys)
    reference = reference_outcome(data, extra_keys)
    problems = classify(outcomes, reference)
    summary = "typed" if all(o[0] == "error" for o in outcomes.values()) else "ok"
    verdicts = {k: v[0] if v[0] != "untyped" else v for k, v in outcomes.items()}
    detail = f"ref={reference[:2]!r:.120} paths={verdicts}"
    return summary, problems, detail


def _worker(conn: Any, tmp: str) -> None:
    logging.disable(logging.WARNING)
    while True:
        job = conn.recv()
        if job is None:
            return
        started = time.perf_counter()
        if job[0] == "coco":
            result = _check_one(job[1], job[2], tmp)
        else:
            from tools.fuzz_oracles import run_case

            result = run_case(job[0], job[1], tmp)
        conn.send((*result, time.perf_counter() - started))


def default_seeds() -> list[str]:
    """The COCO and LVIS files under ../shared/external (those present)."""
    files = glob.glob(os.path.join(_EXTERNAL, "coco", "**", "*.json"), recursive=True)
    files += glob.glob(os.path.join(_EXTERNAL, "lvis", "*.json"))
    return sorted(files)


def _loadable(path: str) -> bool:
    from catalog.formats.coco import load_coco_records

    try:
        load_coco_records(path, "")
        return True
    except Exception:  # noqa: BLE001
        return False


#: The problem kinds counted; any of them makes the exit status 1.
PROBLEMS = ("untyped", "hang", "accepted-malformed", "rejected-valid", "disagreement")
_COLUMNS = ("seeds", "inputs", "ok", "typed") + PROBLEMS


def _cases(
    fmt: str, args: argparse.Namespace, rng: random.Random, totals: Counter
) -> Iterator[tuple]:
    """``(job, description)`` for ``args.n`` mutated inputs of ``fmt`` (``totals["seeds"]``:
    the number of valid seed inputs)."""
    if fmt == "coco":
        files = [p for p in (args.seeds or default_seeds()) if _loadable(p)]
        contents = []
        for p in files:
            with open(p, "rb") as f:
                contents.append(f.read())
        totals["seeds"] = len(files)
        for _ in range(args.n if files else 0):
            index = rng.randrange(len(files))
            data, what = mutate(contents[index], rng)
            extra = () if rng.random() < 0.5 else tuple(rng.sample(_EXTRA_KEYS, 3))
            yield ("coco", data, extra), f"{os.path.basename(files[index])}: {what}"
        return
    from tools.fuzz_formats import mutate_format, seeds

    contents = seeds(fmt)
    totals["seeds"] = len(contents)
    for _ in range(args.n):
        index = rng.randrange(len(contents))
        data, what = mutate_format(fmt, contents[index], rng)
        yield (fmt, data), f"seed {index}: {what}"


def run_format(fmt: str, args: argparse.Namespace, tmp: str) -> tuple[Counter, list[str]]:
    """Fuzz one format: the counts of :data:`_COLUMNS` (plus ``max_s``) and problem examples.

    Every input runs in a child process; one that does not answer in ``args.timeout`` seconds
    is a hang (the child is killed and replaced), one whose child dies is untyped.
    """
    # COCO draws from the plain seed, as before the other formats were added (same inputs)
    rng = random.Random(args.seed if fmt == "coco" else f"{args.seed}:{fmt}")
    totals: Counter = Counter()
    examples: list[str] = []
    ctx = multiprocessing.get_context("fork")
    child = None
    for job, what in _cases(fmt, args, rng, totals):
        if child is None:
            parent_conn, child_conn = ctx.Pipe()
            child = ctx.Process(target=_worker, args=(child_conn, tmp), daemon=True)
            child.start()
            child_conn.close()  # so that a dead child reads as end of file, not as a hang
        parent_conn.send(job)
        totals["inputs"] += 1
        seconds = args.timeout
        if parent_conn.poll(args.timeout):
            try:
                summary, problems, detail, seconds = parent_conn.recv()
            except (EOFError, OSError):
                summary, problems, detail = "crash", ["untyped"], "child process died"
        else:
            summary, problems, detail = "hang", ["hang"], f"no answer in {args.timeout} s"
        totals["max_ms"] = max(totals["max_ms"], int(seconds * 1000))
        if summary in ("hang", "crash"):
            child.kill()
            child.join()
            child = None
        totals[summary] += summary in ("ok", "typed")
        for problem in problems:
            totals[problem] += 1
        if problems and len(examples) < args.show:
            examples.append(f"{fmt} {problems} {what} | {detail}")
    if child is not None:
        parent_conn.send(None)
        child.join()
    return totals, examples


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; print a table of outcomes per format; exit status 1 on any problem."""
    from tools.fuzz_formats import FORMATS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    parser.add_argument("seeds", nargs="*", help="seed COCO files (default: ../shared/external)")
    parser.add_argument("--format", action="append", choices=("coco", *FORMATS, "all"),
                        help="format to fuzz (repeatable; default coco; 'all' = every one)")
    parser.add_argument("--n", type=int, default=1000, help="mutated inputs per format")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per input")
    parser.add_argument("--show", type=int, default=10, help="problem examples to print")
    args = parser.parse_args(argv)
    formats = args.format or ["coco"]
    if "all" in formats:
        formats = ["coco", *FORMATS]
    logging.disable(logging.WARNING)
    rows: dict[str, Counter] = {}
    examples: list[str] = []
    with tempfile.TemporaryDirectory(prefix="catmap-fuzz-") as tmp:
        for fmt in formats:
            rows[fmt], found = run_format(fmt, args, tmp)
            examples += found
    header = ("format",) + _COLUMNS + ("max_ms",)
    widths = [max(10, len(h)) for h in header]
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for fmt, row in rows.items():
        cells = [fmt] + [str(row[c]) for c in _COLUMNS + ("max_ms",)]
        print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    for line in examples:
        print("  example:", line[:600])
    if any(row["inputs"] == 0 for row in rows.values()):
        print("no loadable seed file")
        return 2
    return 1 if any(row[k] for row in rows.values() for k in PROBLEMS) else 0


if __name__ == "__main__":
    sys.exit(main())
