"""Fuzz the COCO loader: mutate seed files and run every decoding path on each mutation.

Each input is a seed file (default: the files under ``../shared/external/coco`` and
``../shared/external/lvis`` that load unmutated) with one random mutation: a value at a random
path replaced by one of another type, a huge, negative or non-finite number, a deep nesting, a
lone surrogate; a key deleted; an element or id duplicated; or the bytes truncated, flipped, or
given invalid UTF-8 or a byte order mark. Every input runs through the msgspec, orjson and
json paths (:func:`catalog.coco.load_coco_records`) and the independent reference of the policy
(:mod:`tools.coco_reference`), in a child process with a per-input timeout. Counts printed:

* ``typed errors``: every path raised AnnotationFormatError;
* ``untyped errors``: a path raised anything else (or the child process crashed);
* ``accepted-malformed``: the reference says error, or other skip counts, and a path accepted;
* ``rejected-valid``: the reference accepts, a path raised AnnotationFormatError;
* ``disagreements``: the paths differ (records, categories, skip counts or error class);
* ``hangs``: an input ran past ``--timeout`` seconds.

Usage:
    python tools/fuzz_loaders.py --n 4000 --seed 0
    python tools/fuzz_loaders.py --n 200 my_instances.json other.json
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
from collections import Counter
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.coco_reference import reference_outcome  # noqa: E402

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


def _pick_path(doc: Any, rng: random.Random) -> tuple:
    if isinstance(doc, dict):
        sections = [k for k in FIELDS if isinstance(doc.get(k), list) and doc[k]]
        if sections and rng.random() < 0.9:
            section = rng.choice(sections)
            index = rng.randrange(len(doc[section]))
            if rng.random() < 0.5 and isinstance(doc[section][index], dict):
                return (section, index, rng.choice(FIELDS[section]))  # may be a missing key
            return rng.choice(_paths(doc[section][index], (section, index)))
    return rng.choice(_paths(doc))


def mutate(seed: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random mutation of the JSON document ``seed``: ``(bytes, description)``."""
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
    path = _pick_path(doc, rng)
    if kind == "replace":
        value = copy.deepcopy(rng.choice(VALUES))
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
        raw = rng.choice(RAW_VALUES + [json.dumps(v) for v in VALUES])
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
        section = rng.choice(["images", "annotations", "categories"])
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
    """Every parser's outcome: ``("ok", records, categories, counts)``, ``("error", class)``
    for AnnotationFormatError, ``("untyped", class: message)`` for anything else."""
    from catalog.coco import COCO_PARSERS, load_coco_records
    from catalog.errors import AnnotationFormatError

    out: dict[str, tuple] = {}
    for parser in COCO_PARSERS[1:]:
        try:
            records, cats, counts = load_coco_records(path, "", extra_keys, parser=parser)
            out[parser] = ("ok", records, cats, counts.as_tuple())
        except AnnotationFormatError:
            out[parser] = ("error", "AnnotationFormatError")
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            out[parser] = ("untyped", f"{type(exc).__name__}: {str(exc)[:200]}")
    return out


_COUNT_NAMES = ("orphans", "degenerate", "negative_area", "bad_polygons", "no_valid_polygon",
                "ignored", "missing_size")


def _counts_dict(counts_tuple: tuple) -> dict[str, int]:
    from catalog.coco_common import SkipCounts

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
        conn.send(_check_one(job[0], job[1], tmp))


def default_seeds() -> list[str]:
    """The COCO and LVIS files under ../shared/external (those present)."""
    files = glob.glob(os.path.join(_EXTERNAL, "coco", "**", "*.json"), recursive=True)
    files += glob.glob(os.path.join(_EXTERNAL, "lvis", "*.json"))
    return sorted(files)


def _loadable(path: str) -> bool:
    from catalog.coco import load_coco_records

    try:
        load_coco_records(path, "")
        return True
    except Exception:  # noqa: BLE001
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; exit status 1 when any problem was found."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", nargs="*", help="seed COCO files (default: ../shared/external)")
    parser.add_argument("--n", type=int, default=1000, help="number of mutated inputs")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per input")
    parser.add_argument("--show", type=int, default=10, help="problem examples to print")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    seeds = [p for p in (args.seeds or default_seeds()) if _loadable(p)]
    if not seeds:
        print("no loadable seed file")
        return 2
    contents = []
    for p in seeds:
        with open(p, "rb") as f:
            contents.append(f.read())
    rng = random.Random(args.seed)
    totals: Counter = Counter()
    examples: list[str] = []
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="catmap-fuzz-") as tmp:
        child = None
        for _ in range(args.n):
            index = rng.randrange(len(seeds))
            data, what = mutate(contents[index], rng)
            extra = () if rng.random() < 0.5 else tuple(rng.sample(_EXTRA_KEYS, 3))
            if child is None:
                parent_conn, child_conn = ctx.Pipe()
                child = ctx.Process(target=_worker, args=(child_conn, tmp), daemon=True)
                child.start()
            parent_conn.send((data, extra))
            totals["inputs"] += 1
            problems: list[str]
            if parent_conn.poll(args.timeout):
                try:
                    summary, problems, detail = parent_conn.recv()
                except EOFError:
                    summary, problems, detail = "crash", ["untyped"], "child process died"
            else:
                summary, problems, detail = "hang", ["hang"], f"no answer in {args.timeout} s"
            if summary in ("hang", "crash"):
                child.kill()
                child.join()
                child = None
            if summary == "typed":
                totals["typed errors"] += 1
            for problem in problems:
                totals[problem] += 1
            if problems and len(examples) < args.show:
                examples.append(f"{problems} {os.path.basename(seeds[index])}: {what} | {detail}")
        if child is not None:
            parent_conn.send(None)
            child.join()
    print(f"seeds: {len(seeds)} loadable files")
    for key in ("inputs", "typed errors", "untyped", "accepted-malformed", "rejected-valid",
                "disagreement", "hang"):
        print(f"  {key}: {totals[key]}")
    for line in examples:
        print("  example:", line[:600])
    kinds = ("untyped", "accepted-malformed", "rejected-valid", "disagreement", "hang")
    bad = sum(totals[k] for k in kinds)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
