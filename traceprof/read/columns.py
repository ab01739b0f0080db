"""Decoded events as columns (:class:`Columns`): one array, or coded strings, per value
traceprof reads, built from a list of ``schema.RawEvent``; the columns of runs joined in order,
and those of the events a mask keeps. The Trace is built from them (:mod:`traceprof.read.build`).
"""

from __future__ import annotations

from collections import Counter
from itertools import chain, compress, repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from traceprof.trace import schema
from traceprof.trace.schema import Kind


class Columns(msgspec.Struct):
    """The values traceprof reads of a run of events, one array (or coded strings) per field.

    Coded strings: int32 codes into a list of unique values in first-seen order. Side tables
    (flows, Python frames, metadata, memory instants) hold the event's index in the run."""

    kind: np.ndarray  # int8, schema.Kind
    ph: np.ndarray
    phs: list
    cat: np.ndarray
    cats: list
    name: np.ndarray
    names: list
    thread: np.ndarray
    threads: list  # (pid, tid) as written
    ts: np.ndarray
    dur: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    sequence_number: np.ndarray
    fwd_thread_id: np.ndarray
    stream: np.ndarray
    input_dims: np.ndarray
    input_dims_texts: list  # bytes, b"" for absent
    input_types: np.ndarray
    input_types_texts: list
    concrete_inputs: np.ndarray
    concrete_inputs_texts: list
    flow_index: np.ndarray
    flow_ids: list  # int | str | None, as written
    python_index: np.ndarray
    python_id: np.ndarray
    python_parent_id: np.ndarray
    meta: list  # (index, name, pid, tid, label, labels) of metadata (M) events
    memory_index: np.ndarray
    memory_bytes: np.ndarray  # 0 when not written
    memory_total: np.ndarray
    memory_device_type: np.ndarray
    memory_device_id: np.ndarray
    memory_address: np.ndarray  # -1 when not written (traces before 2022)
    #: the GPU work events with a kernel label (schema.KERNEL_LABEL_ATTRS: only they carry one,
    #: and few traces have any), and each label's raw JSON among them, coded
    label_index: np.ndarray
    label_module_fqn: np.ndarray
    label_module_fqn_texts: list
    label_str: np.ndarray
    label_str_texts: list
    label_annotation: np.ndarray
    label_annotation_texts: list
    label_stack: np.ndarray
    label_stack_texts: list
    utf8_replaced: bool = False
    utf8_grown: int = 0  # bytes the text grew by when invalid UTF-8 was replaced
    dropped: Counter = msgspec.field(default_factory=Counter)  # entries not usable as events
    entries: int = 0  # entries of the event array, events or not
    begin_end: bool = False  # B events (paired with E events across runs by the whole decode)

    def __len__(self) -> int:
        return len(self.kind)


_CODED = ("ph", "cat", "name", "thread", "input_dims", "input_types", "concrete_inputs")
#: coded columns of a side table (the kernel labels), coded and joined as _CODED are
_SIDE_CODED = schema.KERNEL_LABEL_ATTRS
_PLAIN = ("kind", "ts", "dur", "correlation", "external_id", "sequence_number", "fwd_thread_id", "stream")


#: the side tables: the column of event indices, and the columns of values beside it
_SIDE_TABLES = (
    ("flow_index", ()),
    ("python_index", ("python_id", "python_parent_id")),
    (
        "memory_index",
        ("memory_bytes", "memory_total", "memory_device_type", "memory_device_id", "memory_address"),
    ),
    ("label_index", _SIDE_CODED),
)


def _table_of(field_name: str) -> str:
    return {"ph": "phs", "cat": "cats", "name": "names", "thread": "threads"}.get(
        field_name, f"{field_name}_texts"
    )


def _factorize(values: list) -> tuple[np.ndarray, list]:
    """Codes (int32) and the unique values in first-seen order, at C speed."""
    position = dict.fromkeys(values)
    for i, v in enumerate(position):  # the unique values only
        position[v] = i
    return np.fromiter(map(position.__getitem__, values), np.int32, len(values)), list(position)


def first_seen_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``codes`` renumbered in the order their values are first seen (int32), and the old code
    of each new one."""
    old, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return rank[inverse.ravel()], old[order]


_INT32 = np.iinfo(np.int32)


def int32_if_fits(a: np.ndarray) -> np.ndarray:
    """An integer column of a run as int32 when its values fit (an empty one too), else int64:
    joined with np.concatenate, the runs' columns are int64 as soon as one run needs it (the
    Trace narrows each joined column further, see :func:`traceprof.trace.columns.narrowed`)."""
    if not len(a) or (_INT32.min <= a.min() and a.max() <= _INT32.max):
        return a.astype(np.int32, copy=False)
    return a


def _ints(values, n: int | None = None) -> np.ndarray:
    if n is not None:
        return int32_if_fits(np.fromiter(values, np.int64, n))
    values = list(values)
    return int32_if_fits(np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64))


def _texts(raws: list) -> tuple[np.ndarray, list]:
    """Codes and values of raw JSON values (``msgspec.Raw``, None for absent, coded as b""),
    values in first-seen order, as ``_factorize`` of their bytes; the events that have one are
    found, and their values copied to bytes, at C speed (no Python code per event)."""
    n = len(raws)
    absent = raws.count(None)
    if absent == n:  # no event has it: every code is that of b""
        return np.zeros(n, np.int32), [b""] if raws else []
    if not absent:
        return _factorize(list(map(bytes, raws)))
    present = list(map(is_not, raws, repeat(None, n)))
    has = np.array(present, bool)
    codes, values = _factorize(list(map(bytes, compress(raws, present))))
    # b"" is first seen at the first event without a value, after the values seen before it
    first_absent = int(np.argmin(has))
    before = int(codes[:first_absent].max()) + 1 if first_absent else 0
    out = np.full(n, before, np.int32)
    out[has] = codes + (codes >= before)
    return out, values[:before] + [b""] + values[before:]


_get_args = attrgetter("args")
#: the numbers read of every event, and of every event's args
_TIMES = ("ts", "dur")
_INT_ARGS = ("correlation", "external_id", "external_id_2021", "sequence_number", "fwd_thread_id", "stream")


def _fields(structs: list, names: tuple[str, ...], dtype: type) -> list[np.ndarray]:
    """The fields ``names`` (2 or more) of each struct, one array per field (each its own): a
    tuple of them per struct, flattened at C speed, where one pass per field cost a Python call
    per struct and field."""
    width = len(names)
    flat: np.ndarray = np.fromiter(
        chain.from_iterable(map(attrgetter(*names), structs)), dtype, len(structs) * width
    )
    return [flat[k::width].copy() for k in range(width)]


_EVENT_KEY = attrgetter("ph", "cat", "name", "pid", "tid")
_LABELS = attrgetter(*_SIDE_CODED)
_NO_LABEL: tuple[Any, ...] = (None,) * len(_SIDE_CODED)


def _labels(kind: np.ndarray, args: list) -> tuple[np.ndarray, list[tuple[np.ndarray, list]]]:
    """The GPU work events that carry a kernel label, and each label's codes and values (raw
    JSON, b"" for absent) among them. One pass over the GPU work events' args finds that a
    trace has none (most traces)."""
    gpu = np.flatnonzero(np.isin(kind, schema.GPU_WORK_KINDS))
    found: list[tuple[Any, ...]] = list(map(_LABELS, [args[i] for i in gpu.tolist()]))
    if found.count(_NO_LABEL) == len(found):
        return np.zeros(0, np.int64), [_texts([]) for _ in _SIDE_CODED]
    rows = [i for i, f in enumerate(found) if f != _NO_LABEL]
    picked = [found[i] for i in rows]
    return gpu[rows], [_texts([p[k] for p in picked]) for k in range(len(_SIDE_CODED))]


def _event_codes(evs: list) -> dict[str, Any]:
    """The coded columns of what every event has (ph, cat, name, thread) and its kind.

    A run has few distinct (ph, cat, name, pid, tid): they are coded in one pass, and each
    field's codes follow from theirs. The first event with a value is the first event of the
    first such combination that has it, so the values come out in first-seen order."""
    combo, combos = _factorize(list(map(_EVENT_KEY, evs)))
    ph_of, phs = _factorize([c[0] for c in combos])
    cat_of, cats = _factorize([c[1] for c in combos])
    name_of, names = _factorize([c[2] for c in combos])
    thread_of, threads = _factorize([c[3:] for c in combos])
    kind_of = np.array([schema.kind_of(c[0], c[1]) for c in combos], dtype=np.int8)
    return {
        "kind": kind_of[combo],
        "ph": ph_of[combo],
        "phs": phs,
        "cat": cat_of[combo],
        "cats": cats,
        "name": name_of[combo],
        "names": names,
        "thread": thread_of[combo],
        "threads": threads,
    }


def _arg_columns(args: list) -> dict[str, Any]:
    """The numbers (the External id from either spelling) and the coded raw texts read of every
    event's args."""
    correlation, external_id, legacy, sequence_number, fwd_thread_id, stream = _fields(
        args, _INT_ARGS, np.int64
    )
    out: dict[str, Any] = {
        "correlation": int32_if_fits(correlation),
        "external_id": int32_if_fits(np.where(external_id >= 0, external_id, legacy)),
        "sequence_number": int32_if_fits(sequence_number),
        "fwd_thread_id": int32_if_fits(fwd_thread_id),
        "stream": int32_if_fits(stream),
    }
    for f in ("input_dims", "input_types", "concrete_inputs"):
        out[f], out[_table_of(f)] = _texts(list(map(attrgetter(f), args)))
    return out


def _python_table(kind: np.ndarray, args: list) -> dict[str, Any]:
    """The side table of the Python function events: their indices, ids and parents' ids."""
    python_index = np.flatnonzero(kind == Kind.PYTHON)
    py_args = [args[i] for i in python_index.tolist()]
    return {
        "python_index": python_index.astype(np.int64),
        "python_id": _ints(-1 if a.python_id is None else a.python_id for a in py_args),
        "python_parent_id": _ints(-1 if a.python_parent_id is None else a.python_parent_id for a in py_args),
    }


def _meta(evs: list, ph: np.ndarray, phs: list) -> list:
    """(index, name, pid, tid, label, labels) of the metadata events."""
    if schema.METADATA_PHASE not in phs:
        return []
    meta = []
    for i in np.flatnonzero(ph == phs.index(schema.METADATA_PHASE)).tolist():
        e = evs[i]
        meta.append((i, e.name, e.pid, e.tid, e.args.label, e.args.labels))
    return meta


def _memory_table(kind: np.ndarray, name: np.ndarray, names: list, args: list) -> dict[str, Any]:
    """The side table of the memory instants: their indices and what each allocated or freed."""
    if schema.MEMORY_EVENT_NAME in names:
        code = names.index(schema.MEMORY_EVENT_NAME)
        memory_index = np.flatnonzero((kind == Kind.INSTANT) & (name == code))
    else:
        memory_index = np.zeros(0, np.int64)
    mem = [args[i] for i in memory_index.tolist()]
    return {
        "memory_index": memory_index.astype(np.int64),
        "memory_bytes": _ints(a.mem_bytes if a.mem_bytes is not None else 0 for a in mem),
        "memory_total": _ints(a.total_allocated for a in mem),
        "memory_device_type": _ints(a.device_type for a in mem),
        "memory_device_id": _ints(a.device_id for a in mem),
        "memory_address": _ints(a.mem_address for a in mem),
    }


def _label_table(kind: np.ndarray, args: list) -> dict[str, Any]:
    """The side table of the kernel labels: the GPU work events with one, and each label coded."""
    label_index, label_columns = _labels(kind, args)
    out: dict[str, Any] = {"label_index": label_index.astype(np.int64)}
    for f, (codes, texts) in zip(_SIDE_CODED, label_columns):
        out[f], out[_table_of(f)] = codes, texts
    return out


def columns_from_events(evs: list) -> Columns:
    """The columns of a list of schema.RawEvent."""
    coded = _event_codes(evs)
    kind = coded["kind"]
    ts, dur = _fields(evs, _TIMES, np.float64)
    args = list(map(_get_args, evs))
    flow_index = np.flatnonzero((kind == Kind.FLOW_START) | (kind == Kind.FLOW_END))
    return Columns(
        **coded,
        ts=ts,
        dur=dur,
        **_arg_columns(args),
        flow_index=flow_index.astype(np.int64),
        flow_ids=[evs[i].id for i in flow_index.tolist()],
        **_python_table(kind, args),
        meta=_meta(evs, coded["ph"], coded["phs"]),
        **_memory_table(kind, coded["name"], coded["names"], args),
        **_label_table(kind, args),
    )


class Joiner:
    """Runs' columns joined one after the other as they arrive: each run's strings are coded
    against the joined tables when it is added (a streamed trace's runs are added while the
    later ones decode), so that :meth:`joined` is left with copying."""

    def __init__(self) -> None:
        self.tables: dict[str, dict] = {f: {} for f in _CODED + _SIDE_CODED}
        self.parts: list[Columns] = []

    def add(self, part: Columns) -> None:
        for f in _CODED + _SIDE_CODED:
            table = self.tables[f]
            local = getattr(part, _table_of(f))
            remap = np.array([table.setdefault(v, len(table)) for v in local] or [0], np.int32)
            setattr(part, f, remap[getattr(part, f)])
            setattr(part, _table_of(f), None)
        self.parts.append(part)

    @property
    def begin_end(self) -> bool:
        return any(p.begin_end for p in self.parts)

    def joined(self) -> Columns:
        """The joined columns (the runs added are emptied as they are copied)."""
        parts = self.parts
        if not parts:
            return columns_from_events([])
        offsets = np.cumsum([0] + [len(p) for p in parts])
        out: dict[str, Any] = {_table_of(f): list(table) for f, table in self.tables.items()}
        for f in _CODED + _PLAIN:
            out[f] = (
                np.concatenate([getattr(p, f) for p in parts]) if len(parts) > 1 else getattr(parts[0], f)
            )
            for p in parts:
                setattr(p, f, None)
        for index, fields in _SIDE_TABLES:
            out[index] = np.concatenate([getattr(p, index) + off for p, off in zip(parts, offsets)])
            for f in fields:
                out[f] = np.concatenate([getattr(p, f) for p in parts])
        out["flow_ids"] = [fid for p in parts for fid in p.flow_ids]
        out["meta"] = [(i + int(off), *rest) for p, off in zip(parts, offsets) for i, *rest in p.meta]
        out["utf8_replaced"] = any(p.utf8_replaced for p in parts)
        out["utf8_grown"] = sum(p.utf8_grown for p in parts)
        out["dropped"] = sum((p.dropped for p in parts), Counter())
        out["entries"] = sum(p.entries for p in parts)
        parts.clear()
        return Columns(**out)


def _recoded(codes: np.ndarray, table: list) -> tuple[np.ndarray, list]:
    """Codes into ``table`` coded again in first-seen order among themselves, and their values."""
    new_codes, old_codes = first_seen_codes(codes)
    return new_codes if len(codes) else codes, [table[u] for u in old_codes.tolist()]


def select(cols: Columns, keep: np.ndarray) -> Columns:
    """The columns of the events where ``keep`` is true, strings coded again in first-seen
    order among them."""
    new_index = np.cumsum(keep) - 1
    out: dict[str, Any] = {}
    for f in _CODED:
        out[f], out[_table_of(f)] = _recoded(getattr(cols, f)[keep], getattr(cols, _table_of(f)))
    for f in _PLAIN:
        out[f] = getattr(cols, f)[keep]
    for index, fields in _SIDE_TABLES:
        idx = getattr(cols, index)
        kept = keep[idx]
        out[index] = new_index[idx[kept]]
        for f in fields:
            out[f] = getattr(cols, f)[kept]
        if index == "flow_index":
            out["flow_ids"] = [fid for fid, k in zip(cols.flow_ids, kept.tolist()) if k]
    for f in _SIDE_CODED:  # coded again in first-seen order among the events kept
        out[f], out[_table_of(f)] = _recoded(out[f], getattr(cols, _table_of(f)))
    out["meta"] = [(int(new_index[i]), *rest) for i, *rest in cols.meta if keep[i]]
    out["utf8_replaced"] = cols.utf8_replaced
    out["utf8_grown"] = cols.utf8_grown
    out["dropped"] = cols.dropped
    out["entries"] = cols.entries
    return Columns(**out)
