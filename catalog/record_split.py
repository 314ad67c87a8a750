"""Splitting records into skeletons and annotation columns, a chunk of records at a time.

The fast path works on a whole chunk at once: the records whose annotations all have the
chunk's most common keys (in the same order) and value types go through C-level ``map`` /
``chain`` passes and numpy, never a Python loop per annotation. The other records take the
record-by-record path (:meth:`ColumnBuilder._split_one`), which handles any mix of keys and
types, and anything neither can store exactly stays pickled whole. Both paths lay a record's
numbers out the same way (:mod:`catalog.annotation_columns`).
"""

from __future__ import annotations

import pickle
from collections import Counter, deque
from itertools import chain, compress, repeat
from operator import eq, is_, itemgetter
from typing import Any

import numpy as np

from .annotation_columns import (
    _CROWD_VALUES,
    _FLOAT,
    _INT,
    _INT32_MAX,
    _INT32_MIN,
    _MAX_SCHEMAS,
    _MODE_TYPES,
    C_BBOX,
    C_CAT,
    C_CROWD,
    C_KPTS,
    C_LEFT,
    C_MODE,
    C_POLY,
    KIND_FLOAT,
    KIND_INT,
    AnnotationColumns,
    _cat,
    _fixed_point,
    _ints,
    _per_record,
    _place,
)
from .annotation_encode import (
    _STR,
    _by_record,
    _candidates,
    _exact_floats,
    _fast_keypoints,
    _fast_polygons,
    _Flat,
    _int_mask,
    _keypoints,
    _mask,
    _mixed,
    _polygons,
    _str_keys,
)

__all__ = ["ColumnBuilder", "finish_columns"]

_COORD_CODES = (C_BBOX, C_POLY, C_KPTS)
_ANNOTATIONS, _NONE = repeat("annotations"), repeat(None)


#: The column code of each (key, value type) the columns store; any other pair stays in the
#: skeleton (``C_LEFT``).
_CODES: dict[tuple[str, type], int] = {
    ("bbox", list): C_BBOX,
    ("category_id", int): C_CAT,
    ("iscrowd", int): C_CROWD,
    **{("bbox_mode", kind): C_MODE for kind in _MODE_TYPES},
    ("segmentation", list): C_POLY,
    ("keypoints", list): C_KPTS,
}


def _code(key: Any, kind: type) -> int:
    return _CODES.get((key, kind), C_LEFT)  # dict keys are hashable


class ColumnBuilder:
    """Collects the annotation columns of records added chunk by chunk (:meth:`add_chunk`)."""

    def __init__(self) -> None:
        self._plan_ids: dict[tuple[Any, ...], int] = {}
        self._plans: list[Any] = [None]
        self._parts: list[tuple[np.ndarray, ...]] = []
        #: After :meth:`add_chunk`: ``(annotation counts, category ids, crowd flags)`` of the
        #: chunk's records, as ``record_build`` reads them (``dict.get`` with defaults -1 and
        #: 0), when every record is a dict with a list of dict annotations and the split read
        #: those values of every annotation anyway; else None.
        self.chunk_numbers: tuple[list[int], list[Any], list[Any]] | None = None
        self._shared: tuple[list[Any], list[Any]] | None = None

    def _plan(self, keys: tuple[Any, ...], codes: tuple[int, ...], mode: Any) -> int | None:
        signature = (keys, codes, type(mode), mode)
        plan = self._plan_ids.get(signature)
        if plan is None:
            if len(self._plans) > _MAX_SCHEMAS:
                return None
            plan = self._plan_ids[signature] = len(self._plans)
            self._plans.append((keys, codes, mode))
        return plan

    # ------------------------------------------------------------------ one chunk
    def add_pickled(self, count: int) -> list[Any]:
        """Note ``count`` records kept pickled whole (``[None] * count``)."""
        zeros8, zeros = np.zeros(count, dtype=np.uint8), np.zeros(count, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        self._parts.append((zeros8, zeros8, zeros, empty, zeros, empty))
        return [None] * count

    def add_chunk(self, records: list[Any]) -> list[Any]:
        """Split a chunk of records: for each, the skeleton to pickle, or None to pickle the
        record whole."""
        count = len(records)
        skeletons: list[Any] = [None] * count
        kinds = np.zeros(count, dtype=np.uint8)
        schema = np.zeros(count, dtype=np.uint8)
        vcounts = np.zeros(count, dtype=np.int64)
        scounts = np.zeros(count, dtype=np.int64)
        candidates, alists, all_counts = _candidates(records)
        self.chunk_numbers = self._shared = None
        value_parts: list[tuple[np.ndarray, np.ndarray]] = []
        shape_parts: list[tuple[np.ndarray, np.ndarray]] = []
        rest = candidates
        if candidates:
            fast = self._fast(list(map(records.__getitem__, candidates)), alists)
            if fast is not None:
                taken, kind, plan, skel, vc, values, sc, shapes = fast
                where = np.asarray(candidates, dtype=np.int64)[taken]
                if len(skel) == count:
                    skeletons = skel
                else:
                    deque(map(skeletons.__setitem__, where.tolist(), skel), maxlen=0)
                kinds[where], schema[where], vcounts[where], scounts[where] = kind, plan, vc, sc
                value_parts.append((where, values))
                shape_parts.append((where, shapes))
                rest = np.asarray(candidates, dtype=np.int64)[~taken].tolist()
        if all_counts is not None:
            if not candidates:
                self.chunk_numbers = (all_counts, [], [])
            elif self._shared is not None:
                self.chunk_numbers = (all_counts, *self._shared)
        if rest:
            self._slow(records, rest, skeletons, kinds, schema, vcounts, scounts,
                       value_parts, shape_parts)  # fmt: skip
        # int32 as stored (every number was checked to fit), while the chunk is in cache
        values = _place(vcounts, value_parts).astype(np.int32)
        shapes = _place(scounts, shape_parts).astype(np.int32)
        self._parts.append((kinds, schema, vcounts, values, scounts, shapes))
        return skeletons

    def _slow(self, records: list[Any], rest: list[int], skeletons: list[Any], kinds: np.ndarray,
              schema: np.ndarray, vcounts: np.ndarray, scounts: np.ndarray,
              value_parts: list[Any], shape_parts: list[Any]) -> None:  # fmt: skip
        split = [self._split_one(records[i]) for i in rest]
        ok = [i for i, s in zip(rest, split, strict=True) if s is not None]
        split = [s for s in split if s is not None]
        if not split:
            return
        # the common case (every coordinate a float, no keypoints): one numpy pass for all
        ncoords = np.fromiter((len(x[1]) for x in split), dtype=np.int64, count=len(split))
        floats = None
        if not any(x[2] for x in split):
            floats = _exact_floats(list(chain.from_iterable(x[1] for x in split)))
        if floats is not None:
            enc_all, good_all = _fixed_point(floats)
            ends = np.cumsum(ncoords).tolist()
            good_rec = (~_per_record(~good_all, ncoords)).tolist()
        values, vs, shapes, ss = [], [], [], []
        for r, (j, (plan, coords, vis, shape, skeleton)) in enumerate(zip(ok, split, strict=True)):
            if floats is not None:
                if not good_rec[r]:
                    continue
                enc, good = enc_all[ends[r] - len(coords) : ends[r]], good_all[:0]
                kind = KIND_FLOAT
            else:
                types = set(map(type, coords))
                if types <= _FLOAT:
                    enc, good = _fixed_point(coords)
                    kind = KIND_FLOAT
                elif types <= _INT:
                    enc, good = _ints(coords)
                    kind = KIND_INT
                else:
                    continue
            venc, vgood = _ints(vis) if vis else (np.zeros(0, np.int64), np.ones(0, bool))
            if not (good.all() and vgood.all()):
                continue
            skeletons[j] = skeleton
            kinds[j], schema[j] = kind, plan
            values.append(np.concatenate([enc, venc]))
            shapes.append(np.asarray(shape, dtype=np.int64))
            vcounts[j], scounts[j] = len(values[-1]), len(shape)
            vs.append(j)
            ss.append(j)
        if vs:
            value_parts.append((np.asarray(vs, np.int64), _cat(values, np.int64)))
            shape_parts.append((np.asarray(ss, np.int64), _cat(shapes, np.int64)))

    # ------------------------------------------------------------------ one record
    def _split_one(self, record: dict) -> tuple[int, list, list, list, dict] | None:
        """``(plan, coordinates, visibilities, shapes, skeleton)`` of one record, or None."""
        annos = record["annotations"]
        if set(map(type, annos)) != {dict} or not set(map(type, chain.from_iterable(annos))) <= _STR:
            return None
        keysets = set(map(tuple, annos))
        if len(keysets) != 1:
            return None
        keys = keysets.pop()
        codes: list[int] = []
        mode: Any = None
        left: list[list[Any]] = []
        coords: list[Any] = []
        vis: list[Any] = []
        shapes: list[int] = []
        for key in keys:
            vals = list(map(itemgetter(key), annos))
            types = set(map(type, vals))
            code = _code(key, types.pop()) if len(types) == 1 else C_LEFT
            if code == C_BBOX and set(map(len, vals)) == {4}:
                coords.extend(chain.from_iterable(vals))
            elif code == C_CAT and _int_mask(vals).all():
                pass
            elif code == C_CROWD and set(vals) <= _CROWD_VALUES:
                pass
            elif code == C_MODE and len(set(vals)) == 1:
                mode = vals[0]
            elif code == C_POLY and _polygons(vals, coords, shapes):
                pass
            elif code == C_KPTS and _keypoints(vals, coords, vis, shapes):
                pass
            else:
                code = C_LEFT
                left.append(vals)
            codes.append(code)
        plan = self._plan(keys, tuple(codes), mode)
        if plan is None:
            return None
        skeleton = record.copy()
        skeleton["annotations"] = left or None
        return plan, coords, vis, shapes, skeleton

    # ------------------------------------------------------------------ the fast path
    def _fast(self, recs: list[dict], alists: list[list[Any]]) -> tuple[Any, ...] | None:
        """Split ``recs`` (dicts whose annotations ``alists`` are non-empty lists) at once."""
        n = np.fromiter(map(len, alists), dtype=np.int64, count=len(recs))
        annos = list(chain.from_iterable(alists))
        taken = np.ones(len(recs), dtype=bool)

        flat_values: list[Any] | None = None
        restricted = False

        def restrict(good: np.ndarray) -> None:
            nonlocal annos, n, flat_values, restricted
            flat_values = None
            restricted = True
            rec_good = ~_per_record(~good, n)
            annos = list(compress(annos, np.repeat(rec_good, n).tolist()))
            taken[np.flatnonzero(taken)[~rec_good]] = False
            n = n[rec_good]

        if set(map(type, annos)) != {dict}:
            restrict(_mask(map(is_, map(type, annos), repeat(dict)), len(annos)))
            if not annos:
                return None
        if not set(map(type, chain.from_iterable(annos))) <= _STR:  # keys equal to a str key
            restrict(_mask(map(_str_keys, annos), len(annos)))  # (1 and True...) would merge
            if not annos:
                return None

        def keep_most_common(values: list[Any], same: Any) -> Any:
            """The most common of ``values`` (one per annotation); keeps the records whose
            annotations all have it."""
            common = Counter(values).most_common(1)[0][0]
            restrict(_mask(map(same, values, repeat(common)), len(values)))
            return common

        keysets = set(map(tuple, annos))
        keys = keysets.pop() if len(keysets) == 1 else keep_most_common(list(map(tuple, annos)), eq)
        # every annotation now has exactly ``keys`` (all str: == and hash agree) in this order,
        # so the j-th value of every annotation is the one under keys[j]

        def column(j: int) -> list[Any]:
            nonlocal flat_values
            if flat_values is None:
                flat_values = list(chain.from_iterable(map(dict.values, annos)))
            return flat_values[j :: len(keys)]

        codes = []
        taken_before = len(annos)
        columns: list[list[Any]] = []
        for j, key in enumerate(keys):  # pass 1: one type per key
            if not annos:
                return None
            vals = column(j)
            kinds = set(map(type, vals))
            kind = kinds.pop() if len(kinds) == 1 else keep_most_common(list(map(type, vals)), is_)
            codes.append(_code(key, kind))
            columns.append(vals)
        if not restricted:  # every annotation's category id and crowd flag
            shared = dict(zip(keys, columns, strict=True))
            self._shared = (
                shared.get("category_id") or [-1] * len(annos),
                shared.get("iscrowd") or [0] * len(annos),
            )
        m = len(annos)
        if not m:
            return None
        bad = np.zeros(m, dtype=bool)  # annotations the fast path cannot store
        streams: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (values, per-anno counts)
        shape_streams: list[tuple[np.ndarray, np.ndarray]] = []
        lefts: list[list[Any]] = []
        vis: Any = None
        mode = None
        stale = len(annos) != taken_before
        for j, (code, vals) in enumerate(zip(codes, columns, strict=True)):  # pass 2: values
            if stale:
                vals = column(j)
            if code == C_BBOX:
                width = 4 if set(map(len, vals)) == {4} else None
                if width:
                    lens = np.full(m, 4, dtype=np.int64)
                else:
                    lens = np.fromiter(map(len, vals), dtype=np.int64, count=m)
                    bad |= lens != 4
                streams.append((_Flat(vals, width), lens))
            elif code == C_CAT:
                if not (_INT32_MIN <= min(vals) and max(vals) <= _INT32_MAX):
                    bad |= ~_int_mask(vals)
            elif code == C_CROWD:
                if not set(vals) <= _CROWD_VALUES:
                    bad |= ~_int_mask(vals, _CROWD_VALUES)
            elif code == C_MODE:
                values = set(vals)
                mode = values.pop() if len(values) == 1 else Counter(vals).most_common(1)[0][0]
                if values:
                    bad |= ~_mask(map(eq, vals, repeat(mode)), m)
            elif code == C_POLY:
                per_anno, shape, shape_counts, flat, width = _fast_polygons(vals, m, bad)
                streams.append((_Flat(flat, width), per_anno))
                shape_streams.append((shape, shape_counts))
            elif code == C_KPTS:
                triplets, flat_xy, vis = _fast_keypoints(vals, m, bad)
                streams.append((_Flat([flat_xy]), 2 * triplets))
                shape_streams.append((triplets, np.ones(m, dtype=np.int64)))
            else:
                lefts.append(vals)
        plan = self._plan(keys, tuple(codes), mode)
        if plan is None:
            return None
        # encode the coordinates: one kind for the chunk, else those records go the slow way
        arrays = [values.floats() for values, _ in streams]
        encoded = []
        if all(arr is not None for arr in arrays):
            kind = KIND_FLOAT
            for arr, (_, per_anno) in zip(arrays, streams, strict=True):
                enc, ok = _fixed_point(arr)
                if not ok.all():
                    bad |= _per_record(~ok, per_anno)
                encoded.append((enc, per_anno))
        else:
            flats = [list(values.iter()) for values, _ in streams]
            types = set().union(*(set(map(type, flat)) for flat in flats))
            kind = KIND_INT if types and types <= _INT else KIND_FLOAT
            for flat, (_, per_anno) in zip(flats, streams, strict=True):
                if kind == KIND_INT:
                    enc, ok = _ints(flat)
                else:
                    enc, ok = _fixed_point(flat) if types <= _FLOAT else _mixed(flat)
                bad |= _per_record(~ok, per_anno)
                encoded.append((enc, per_anno))
            del flats
        del arrays
        if vis is not None:  # keypoint visibilities, after the coordinates
            vis_values, triplets = vis
            if set(map(type, vis_values)) <= _INT:
                enc, ok = _ints(vis_values)
            else:
                enc, ok = _mixed(vis_values, int)
            bad |= _per_record(~ok, triplets)
            encoded.append((enc, triplets))
        rec_bad = _per_record(bad, n)
        # every record's numbers stream after stream, then its shapes
        values, vcounts = _by_record(encoded, n)
        shapes, scounts = _by_record(shape_streams, n)
        keep = ~rec_bad
        everyone = not rec_bad.any()
        if not everyone:
            values = values[np.repeat(keep, vcounts)]
            shapes = shapes[np.repeat(keep, scounts)]
        kept = recs if taken.all() else compress(recs, taken.tolist())
        if not everyone:
            kept = compress(kept, keep.tolist())
        skeletons = list(map(dict.copy, kept))
        if lefts:  # each kept record's slice of every left-over column
            ends = np.cumsum(n)[keep].tolist()
            slices = list(map(slice, (np.cumsum(n) - n)[keep].tolist(), ends))
            left_rows = zip(*[list(map(vals.__getitem__, slices)) for vals in lefts], strict=True)
            deque(map(dict.__setitem__, skeletons, _ANNOTATIONS, map(list, left_rows)), maxlen=0)
        else:
            deque(map(dict.__setitem__, skeletons, _ANNOTATIONS, _NONE), maxlen=0)
        taken[np.flatnonzero(taken)[rec_bad]] = False
        if not everyone:
            vcounts, scounts = vcounts[keep], scounts[keep]
        return (taken, kind, plan, skeletons, vcounts, values, scounts, shapes)


def finish_columns(builder: ColumnBuilder) -> AnnotationColumns:
    """The columns of every chunk added to ``builder``."""
    parts = builder._parts
    kinds = _cat([p[0] for p in parts], np.uint8)
    value_counts = _cat([p[2] for p in parts], np.int64)
    shape_counts = _cat([p[4] for p in parts], np.int64)
    value_offsets = np.zeros(len(kinds) + 1, dtype=np.int64)
    np.cumsum(value_counts, out=value_offsets[1:])
    shape_offsets = np.zeros(len(kinds) + 1, dtype=np.int64)
    np.cumsum(shape_counts, out=shape_offsets[1:])
    blob = np.frombuffer(pickle.dumps(builder._plans, protocol=4), dtype=np.uint8)
    return AnnotationColumns(
        kinds,
        _cat([p[1] for p in parts], np.uint8),
        value_offsets,
        _cat([p[3] for p in parts], np.int32),
        shape_offsets,
        _cat([p[5] for p in parts], np.int32),
        blob,
    )
