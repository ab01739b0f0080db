"""Build the columnar :class:`~traceprof.trace.columns.Trace` from decoded events: timestamps checked
and repaired, strings coded, threads named, the trace's metadata and module table parsed.
:func:`load_trace` reads a file and builds its Trace in one call."""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import os
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import msgspec
import numpy as np

from traceprof.errors import MemoryLimitError, TraceReadError
from traceprof.read import cache as trace_cache
from traceprof.read.columns import Columns, columns_from_events, first_seen_codes, select
from traceprof.read.document import RawDocument
from traceprof.read.events import DROP_REASONS
from traceprof.read.limits import (
    BYTES_PER_JSON_BYTE,
    BYTES_PER_OBJECT,
    ENV_VAR,
    MAX_SPEC_DEPTH,
    MAX_TREE_DEPTH,
    count_objects,
    describe_size,
)
from traceprof.read.load import Progress, StreamedDocument, load_raw
from traceprof.read.source import ContentHash
from traceprof.trace import schema
from traceprof.trace.columns import (
    EventTable,
    KernelLabels,
    MemoryEvents,
    PythonFrames,
    Trace,
    check_column,
    narrowed,
    release_freed_memory,
    unique,
)
from traceprof.trace.model import (
    CompiledTable,
    DeviceInfo,
    ModuleInfo,
    ModuleTable,
    RawModuleRow,
    RawModuleTable,
    ThreadInfo,
    TraceMetadata,
)
from traceprof.trace.schema import Kind

_P = ParamSpec("_P")
_R = TypeVar("_R")


def load_keyed(
    path: str | os.PathLike,
    progress: Progress | None = None,
    max_memory: int | str | None = None,
    *,
    memory_scale: float = 1.0,
    jobs: int | None = None,
    chunk_bytes: int | None = None,
    cache: bool | None = None,
    content: str | None = None,
) -> tuple[Trace, str | None]:
    """:func:`load_trace`, and the content hash of the bytes the trace is of (decoded, or
    looked up: what the cache keys the analyses of the trace by; None when the cache is off or
    the file is no regular file). ``content``: the hash the look-up uses, when the caller has
    it; the hash of what is decoded may differ (the file was replaced in between)."""
    store = trace_cache.cache_store(cache)
    if store is not None and content is None:
        content = trace_cache.content_hash(path)
    if store is None or content is None:
        return _decoded(path, progress, max_memory, memory_scale, jobs, chunk_bytes, hashed=False)
    if progress:
        progress(f"reading {path} (cache)")
    return trace_cache.cached(
        store,
        content,
        lambda read: trace_cache.entry_name(read, "trace"),
        "trace",
        Trace,
        lambda: _decoded(path, progress, max_memory, memory_scale, jobs, chunk_bytes, hashed=True),
        lambda trace: trace.with_path(str(path)),
        check_trace,
    )


def _arguments_of(model: Callable[_P, object]) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """Decorator: the function takes ``model``'s arguments, for type checkers and as
    ``inspect.signature`` and ``help()`` show it (its own return type kept)."""

    def typed(fn: Callable[..., _R]) -> Callable[_P, _R]:
        returns = inspect.signature(fn).return_annotation
        fn.__signature__ = inspect.signature(model).replace(return_annotation=returns)  # type: ignore[attr-defined]
        return fn

    return typed


@_arguments_of(load_keyed)
def load_trace(*args: Any, **kwargs: Any) -> Trace:
    """Read a trace file (.json or .json.gz) into a :class:`Trace`. ``max_memory``: the memory
    the load may take (bytes or a size such as ``"8G"``; default: the ``TRACEPROF_MAX_MEMORY``
    environment variable, else 80% of the available memory, see :mod:`traceprof.read.limits`);
    ``memory_scale``: times the memory a load usually needs that the caller will use (2 when it
    keeps a second copy of the trace). ``jobs``: processes decoding a large trace (default: one
    per CPU); ``chunk_bytes``: the JSON each of them decodes at a time (see
    :mod:`traceprof.read.parallel`). The Trace is the same whatever ``jobs`` and ``chunk_bytes``.

    ``cache``: read the decoded trace from the cache, or write it there after decoding (default:
    unless ``$TRACEPROF_CACHE`` is ``off``; see :mod:`traceprof.read.cache`); a cached trace's
    columns are memory-mapped. ``content``: the file's content hash, when the caller has it."""
    return load_keyed(*args, **kwargs)[0]


def _decoded(
    path: str | os.PathLike,
    progress: Progress | None,
    max_memory: int | str | None,
    memory_scale: float,
    jobs: int | None,
    chunk_bytes: int | None,
    hashed: bool,
) -> tuple[Trace, str | None]:
    """The trace decoded from ``path``, and, when ``hashed``, the hash of the bytes decoded
    (None: not hashed, or the file could not be hashed as it was read)."""
    content = ContentHash() if hashed else None
    doc = load_raw(
        path, progress, max_memory, memory_scale, jobs=jobs, chunk_bytes=chunk_bytes, content=content
    )
    if progress:
        n = len(doc.events) if isinstance(doc, RawDocument) else len(doc.columns)
        progress(f"indexing {n:,} events")
    trace = build_trace(doc)
    del doc
    release_freed_memory()
    return trace.with_path(str(path)), content.value if content is not None else None


def check_trace(trace: Trace) -> None:
    """The invariants every Trace built here has, checked on one that was not (a cache entry,
    mapped as untrusted input): each column as long as its table, of the type it is built in,
    each code an index into its table, each event index an event. A ValueError naming the
    first column that fails; the analysis never indexes with a value from outside."""
    ev = trace.events
    n = len(ev.kind)
    check_column(ev.kind, "kind", n, "i", (0, max(Kind) + 1))
    for name, table in (("name", ev.names), ("category", ev.categories), ("thread", ev.threads)):
        check_column(getattr(ev, name), name, n, "i", (-1, len(table)))
    for name in ("input_dims", "input_types", "concrete_inputs"):
        check_column(getattr(ev, name), name, n, "i", (-1, len(ev.texts)))
    for name in ("ts", "dur"):
        check_column(getattr(ev, name), name, n, "f")
    for name in ("correlation", "external_id", "sequence_number", "fwd_thread_id", "stream", "flow_id"):
        check_column(getattr(ev, name), name, n, "i")
    frames = len(trace.python.event)
    check_column(trace.python.event, "python.event", frames, "i", (0, n))
    check_column(trace.python.id, "python.id", frames, "i")
    check_column(trace.python.parent_id, "python.parent_id", frames, "i")
    if trace.labels is not None:
        labels = trace.labels
        m = len(labels.event)
        check_column(labels.event, "labels.event", m, "i", (0, n))
        for name in ("module_fqn", "text", "annotation", "stack"):
            check_column(getattr(labels, name), f"labels.{name}", m, "i", (-1, len(ev.texts)))
    if trace.memory is not None:
        memory = trace.memory
        m = len(memory.event)
        check_column(memory.event, "memory.event", m, "i", (0, n))
        check_column(memory.bytes, "memory.bytes", m, "i")
        check_column(memory.total_allocated, "memory.total_allocated", m, "i")
        check_column(memory.address, "memory.address", m, "i")
        check_column(memory.device, "memory.device", m, "i", (0, len(memory.devices)))


def _flow_ids(ids: list) -> np.ndarray | list:
    """Flow ids as numbers: int64 ids as they are (at C speed when all are), a string id's hash."""
    if set(map(type, ids)) <= {int}:
        return np.fromiter(ids, np.int64, len(ids))
    return [fid if isinstance(fid, int) else hash(fid) & 0x7FFFFFFFFFFF for fid in ids]


def _scattered(n: int, index: np.ndarray, values) -> np.ndarray:
    """A column of ``n`` events: ``values`` at ``index``, -1 elsewhere, narrowed (built in
    its final dtype, without an int64 copy of the whole column)."""
    values = narrowed(np.array(values, np.int64))
    out = np.full(n, -1, values.dtype)
    out[index] = values
    return out


def build_trace(doc: RawDocument | StreamedDocument) -> Trace:
    """The Trace of a decoded document (whole, or run by run)."""
    if isinstance(doc, RawDocument):
        evs = doc.events
        if not isinstance(evs, list):
            raise TraceReadError(doc.path, "wrong schema: the events are not an array")
        if any(ph == "B" for ph in {e.ph for e in evs}):
            evs = _pair_begin_end(evs, doc.warnings)
        cols = columns_from_events(evs)
        del evs
    else:
        cols = doc.columns
    return _build(doc, cols)


def _build(doc: RawDocument | StreamedDocument, cols: Columns) -> Trace:
    phs = cols.phs
    dropped = doc.dropped.copy()
    keep = _plausible_times(cols.ts, cols.dur, cols.ph, phs, dropped)
    if keep is not None:
        cols = select(cols, keep)
        phs = cols.phs
    if dropped:
        doc.warnings.append(_dropped_warning(dropped))
    ph_codes = cols.ph
    n = len(cols)
    if not np.isin(ph_codes, [i for i, p in enumerate(phs) if p in schema.USABLE_PHASES]).any():
        problem = (
            "no usable event (a complete, instant or flow event with a valid timestamp)"
            if n or dropped
            else "no events (the event array is empty)"
        )
        raise TraceReadError(doc.path, problem + (f"; {_dropped_warning(dropped)}" if dropped else ""))
    # The Trace takes the decoded columns over: each is taken out of ``cols`` as its final
    # version is built, so that the two versions of every column are never held at once.
    dur = _repaired_durations(_take(cols, "dur"), ph_codes, phs, doc.warnings)
    kind = cols.kind
    text_index: dict[bytes, int] = {}
    input_dims = _text_codes(_take(cols, "input_dims"), cols.input_dims_texts, text_index)
    input_types = _text_codes(_take(cols, "input_types"), cols.input_types_texts, text_index)
    concrete_inputs = _text_codes(_take(cols, "concrete_inputs"), cols.concrete_inputs_texts, text_index)
    labels = _kernel_labels(cols, text_index)  # its texts join the shared table too

    flow_id = _scattered(n, cols.flow_index, _flow_ids(cols.flow_ids))
    python = PythonFrames(
        narrowed(cols.python_index), narrowed(cols.python_id), narrowed(cols.python_parent_id)
    )

    thread, threads = _threads(cols, kind)
    events = EventTable(
        kind=kind,
        name=cols.name,
        category=cols.cat,
        thread=thread,
        ts=cols.ts,
        dur=dur,
        correlation=narrowed(_take(cols, "correlation")),
        external_id=narrowed(_take(cols, "external_id")),
        sequence_number=narrowed(_take(cols, "sequence_number")),
        fwd_thread_id=narrowed(_take(cols, "fwd_thread_id")),
        stream=narrowed(_take(cols, "stream")),
        flow_id=flow_id,
        input_dims=input_dims,
        input_types=input_types,
        concrete_inputs=concrete_inputs,
        names=tuple(cols.names),
        categories=tuple(cols.cats),
        threads=threads,
        texts=tuple(text_index),
    )
    metadata = _metadata(doc)
    memory = _memory_events(cols)
    return Trace(metadata, events, python, memory, labels)


#: how far (us) an event's timestamp may lie from the trace's median timestamp: traces span
#: seconds to minutes (the longest real one measured: 43 s), so a day is far beyond any of them
MAX_DISTANCE_FROM_MEDIAN_US = 1e11


#: the largest timestamp (us) float64 holds to the microsecond (2**53 us: the year 2255)
MAX_TIMESTAMP_US = float(2**53)


#: the longest duration (us) kept, as long as the span of timestamps allowed
MAX_DURATION_US = MAX_DISTANCE_FROM_MEDIAN_US


def _take(cols: Columns, name: str) -> np.ndarray:
    """The column ``name`` of ``cols``, taken out of it (left None): freed once the caller's
    version of it is built, if nothing else holds it."""
    values = getattr(cols, name)
    setattr(cols, name, None)
    return values


def _plausible_times(ts, dur, ph_codes, phs, dropped) -> np.ndarray | None:
    """Which events to keep (None: all): events other than metadata need a finite timestamp
    within MAX_DISTANCE_FROM_MEDIAN_US of the median and below MAX_TIMESTAMP_US, and a duration
    below MAX_DURATION_US. Counts the others in ``dropped``."""
    finite = np.isfinite(ts)
    lo, hi = (float(ts[finite].min()), float(ts[finite].max())) if finite.any() else (0.0, 0.0)
    bad_dur = dur > MAX_DURATION_US  # NaN (absent) compares False; +inf is out of range
    if (
        finite.all()
        and hi - lo <= MAX_DISTANCE_FROM_MEDIAN_US
        and max(-lo, hi) <= MAX_TIMESTAMP_US
        and not bad_dur.any()
    ):
        return None  # the usual case, found with three reductions
    is_meta = ph_codes == (phs.index(schema.METADATA_PHASE) if schema.METADATA_PHASE in phs else -1)
    no_ts = ~finite & ~is_meta
    far = finite & ~is_meta & (np.abs(ts) > MAX_TIMESTAMP_US)
    timed = finite & ~is_meta & ~far
    if timed.any():
        median = float(np.median(ts[timed]))
        far |= timed & (np.abs(ts - median) > MAX_DISTANCE_FROM_MEDIAN_US)
    bad_dur &= ~no_ts & ~far
    for reason, mask in (("no_ts", no_ts), ("far_ts", far), ("bad_dur", bad_dur)):
        if mask.any():
            dropped[reason] += int(np.count_nonzero(mask))
    drop = no_ts | far | bad_dur
    return ~drop if drop.any() else None


def _dropped_warning(dropped) -> str:
    """``3 events dropped: 2 without a valid timestamp, 1 with a name that is not a string``"""
    total = sum(dropped.values())
    order = list(DROP_REASONS)
    counts = sorted(dropped.items(), key=lambda item: (-item[1], order.index(item[0])))
    parts = [f"{n:,} {DROP_REASONS[r]}" for r, n in counts if n]
    return f"{total:,} event{'s' if total != 1 else ''} dropped: " + ", ".join(parts)


def _repaired_durations(dur, ph_codes, phs, warnings: list[str]) -> np.ndarray:
    """Durations with those absent, invalid or negative set to 0, and said (an absent one only
    on complete events: instants, flows and metadata have none)."""
    valid = np.isfinite(dur)
    missing = ~valid & (ph_codes == (phs.index("X") if "X" in phs else -1))
    negative = valid & (dur < 0)
    if missing.any():
        n = int(np.count_nonzero(missing))
        warnings.append(f"{n:,} complete event{'s' if n != 1 else ''} without a valid duration taken as 0")
    if negative.any():
        from traceprof import units  # warnings are text: numbers formatted in the one place

        n = int(np.count_nonzero(negative))
        warnings.append(
            f"{n:,} event{'s' if n != 1 else ''} with a negative duration set to 0 "
            f"(their total {units.duration(float(dur[negative].sum()))})"
        )
    return np.where(valid & (dur > 0), dur, 0.0)


def _kernel_labels(cols: Columns, text_index: dict[bytes, int]) -> KernelLabels | None:
    """The kernel labels' side table, each label coded into the shared table of raw JSON
    texts; None when no event has one."""
    if not len(cols.label_index):
        return None
    codes = [
        _text_codes(getattr(cols, attr), getattr(cols, f"{attr}_texts"), text_index)
        for attr in schema.KERNEL_LABEL_ATTRS
    ]
    return KernelLabels(narrowed(cols.label_index), *codes)


def _memory_events(cols: Columns) -> MemoryEvents:
    """Columns of the ``[memory]`` instants."""
    # each (device type, device id) pair coded once, in first-seen order, then named
    types, type_code = np.unique(cols.memory_device_type, return_inverse=True)
    ids, id_code = np.unique(cols.memory_device_id, return_inverse=True)
    pair, first = first_seen_codes(type_code.ravel().astype(np.int64) * len(ids) + id_code.ravel())
    labels = [_device_label(int(types[p // len(ids)]), int(ids[p % len(ids)])) for p in first.tolist()]
    label_code, devices = _factorize(labels)  # pairs with one name (the CPU's) share it
    return MemoryEvents(
        narrowed(cols.memory_index),
        narrowed(cols.memory_bytes),
        narrowed(cols.memory_total),
        label_code[pair],
        tuple(devices),
        narrowed(cols.memory_address),
    )


def _device_label(device_type: int, device_id: int) -> str:
    name = schema.DEVICE_TYPE_NAMES.get(device_type, f"device{device_type}")
    return f"{name}:{device_id}" if device_id >= 0 and device_type != 0 else name


def _factorize(values: list) -> tuple[np.ndarray, list]:
    """Codes (int32) and the unique values in first-seen order, at C speed."""
    uniques = list(dict.fromkeys(values))
    position = {v: i for i, v in enumerate(uniques)}
    return np.fromiter(map(position.__getitem__, values), np.int32, len(values)), uniques


def _text_codes(codes: np.ndarray, uniques: list, index: dict[bytes, int]) -> np.ndarray:
    """Codes into a shared table of raw JSON texts (-1 for absent), in first-seen order."""
    table = np.array(
        [-1 if u == b"" else index.setdefault(u, len(index)) for u in uniques] or [-1], dtype=np.int32
    )
    return table[codes] if len(codes) else codes.astype(np.int32)


def _threads(cols: Columns, kind: np.ndarray):
    """Merge (pid, tid) spellings that differ only by type ("25738" vs 25738) and name them."""
    raw_thread = _take(cols, "thread")
    keys = [(str(p), str(t)) for p, t in cols.threads]
    uniq = list(dict.fromkeys(keys))
    pos = {k: i for i, k in enumerate(uniq)}
    remap = np.array([pos[k] for k in keys] or [0], dtype=np.int32)
    thread = remap[raw_thread] if len(raw_thread) else raw_thread
    thread_names: dict[tuple[str, str], str] = {}
    process_labels: dict[str, str] = {}
    for _, name, pid, tid, label, labels in cols.meta:
        if name == schema.META_THREAD_NAME and label:
            thread_names[(str(pid), str(tid))] = label
        elif name == schema.META_PROCESS_LABELS and labels:
            process_labels[str(pid)] = labels
    gpu_kinds = np.isin(kind, [*schema.GPU_WORK_KINDS, Kind.GPU_ANNOTATION])
    gpu_threads = set(unique(thread[gpu_kinds]).tolist()) if len(thread) else set()
    infos = []
    for i, (pid, tid) in enumerate(uniq):
        name = thread_names.get((pid, tid)) or process_labels.get(pid, "")
        infos.append(ThreadInfo(pid, tid, name, i in gpu_threads))
    return thread, tuple(infos)


def _pair_begin_end(evs: list, warnings: list[str]) -> list:
    """Turn Chrome ``B``/``E`` pairs into complete (``X``) events, matched per thread."""
    out = []
    stacks: dict[tuple, list] = {}
    unmatched = 0
    for e in evs:
        if e.ph == "B":
            stacks.setdefault((e.pid, e.tid), []).append(e)
        elif e.ph == "E":
            stack = stacks.get((e.pid, e.tid))
            if not stack:
                unmatched += 1
                continue
            b = stack.pop()
            out.append(
                schema.RawEvent(
                    ph="X",
                    cat=b.cat,
                    name=b.name,
                    pid=b.pid,
                    tid=b.tid,
                    ts=b.ts,
                    dur=max(e.ts - b.ts, 0.0),
                    id=b.id,
                    args=b.args,
                )
            )
        else:
            out.append(e)
    unmatched += sum(len(s) for s in stacks.values())
    if unmatched:
        warnings.append(f"{unmatched} unmatched B/E events ignored")
    return out


def _metadata(doc: RawDocument | StreamedDocument) -> TraceMetadata:
    top = doc.top
    devices = []
    props = top.get(schema.DEVICE_PROPERTIES_KEY)
    if isinstance(props, list):
        for i, d in enumerate(props):
            if not isinstance(d, dict):
                continue
            major, minor = d.get(schema.DEVICE_CC_MAJOR), d.get(schema.DEVICE_CC_MINOR)
            devices.append(
                DeviceInfo(
                    index=_int(d.get("id"), i),
                    name=str(d.get(schema.DEVICE_NAME) or ""),
                    memory_bytes=_int(d.get(schema.DEVICE_MEMORY), None),
                    sm_count=_int(d.get(schema.DEVICE_SMS), None),
                    compute_capability=f"{major}.{minor}" if major is not None else None,
                )
            )
    dist = top.get(schema.DISTRIBUTED_INFO_KEY)
    dist = dist if isinstance(dist, dict) else {}
    check = _table_budget(doc)
    table = _module_table(top.get(schema.MODULE_TABLE_KEY), doc.warnings, check)
    compiled = _compiled_table(top.get(schema.COMPILED_TABLE_KEY), doc.warnings, check)
    rank = _int(dist.get(schema.DIST_RANK), None)
    world = _int(dist.get(schema.DIST_WORLD_SIZE), None)
    if table is not None:
        rank = table.rank if rank is None else rank
        world = table.world_size if world is None else world
    return TraceMetadata(
        path=doc.path,
        size_bytes=doc.size_bytes,
        schema_version=_int(top.get(schema.SCHEMA_VERSION_KEY), None),
        devices=tuple(devices),
        rank=rank,
        world_size=world,
        distributed_backend=dist.get(schema.DIST_BACKEND) if dist else None,
        base_time_ns=_int(top.get(schema.BASE_TIME_NS_KEY), None),
        flags={k: bool(top[k]) for k in schema.FLAG_KEYS if k in top},
        module_table=table,
        warnings=tuple(doc.warnings),
        compiled_table=compiled,
    )


def _int(v: Any, default):
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return default


def _param_counts(v: Any) -> dict[str, int] | None:
    if not isinstance(v, dict):
        return None
    out = {str(k): _int(n, None) for k, n in v.items()}
    return None if any(n is None for n in out.values()) else out


def _shape(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, list):
        return None
    dims = tuple(_int(d, None) for d in v)
    return None if any(d is None for d in dims) else dims


def _spec(value: Any, depth: int = 0) -> Any:
    """A module table's description of an input or output, its parts deeper than
    :data:`MAX_SPEC_DEPTH` levels read as unknown (None): every walk of a description is bounded
    by it, whatever the trace holds."""
    if depth >= MAX_SPEC_DEPTH:
        return None
    if isinstance(value, list):
        return [_spec(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _spec(v, depth + 1) for k, v in value.items()}
    return value


def _table_budget(doc: RawDocument | StreamedDocument) -> Callable[[bytes, str], bytes]:
    """A check of an embedded table's decoded JSON against the load's memory limit: the
    base64 text hides the objects the budget counts as the JSON arrives (its ``{``), and a
    table decodes into Python objects, hundreds of bytes each. Past the limit:
    :class:`MemoryLimitError`, as for events."""

    def check(raw: bytes, what: str) -> bytes:
        if doc.memory_limit is None:
            return raw
        need = max(len(raw) * BYTES_PER_JSON_BYTE, count_objects(raw) * BYTES_PER_OBJECT)
        if need > doc.memory_limit:
            raise MemoryLimitError(
                doc.path,
                f"its {what} ({describe_size(len(raw))} of JSON) needs more than the memory "
                f"limit of {describe_size(doc.memory_limit)}; raise it with --max-memory or {ENV_VAR}",
            )
        return raw

    return check


_Table = TypeVar("_Table", RawModuleTable, CompiledTable)

#: what an embedded table that cannot be read raises while it is decoded
_UNREADABLE = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    OverflowError,
    binascii.Error,
    RecursionError,
    msgspec.ValidationError,
)


def _embedded_table(
    payload: Any,
    what: str,
    table_format: str,
    table_type: type[_Table],
    warnings: list[str],
    check: Callable[[bytes, str], bytes] | None,
    *,
    strict_base64: bool,
) -> _Table | None:
    """An embedded table (base64 of UTF-8 JSON, or the JSON object itself) decoded as
    ``table_type``, or None with a warning when it cannot be read: a load never fails on it
    (but for the memory limit, ``check``). ``strict_base64``: characters outside the base64
    alphabet make it unreadable (else they are skipped)."""
    if payload is None:
        return None
    try:
        if isinstance(payload, dict):
            doc = payload
        else:
            raw = base64.b64decode(payload, validate=strict_base64)
            doc = json.loads(check(raw, what) if check else raw)
        if not isinstance(doc, dict) or doc.get(schema.TABLE_FORMAT_KEY) != table_format:
            raise ValueError("unknown format")
        return msgspec.convert(doc, table_type)
    except _UNREADABLE as e:
        warnings.append(f"{what} unreadable ({e.__class__.__name__}); ignored")
        return None


def _module_table(
    payload: Any, warnings: list[str], check: Callable[[bytes, str], bytes] | None = None
) -> ModuleTable | None:
    """The module table (docs/trace-conventions.md "Module table"), its rows read leniently
    (a value of an unexpected type is unknown), or None with a warning when it cannot be read."""
    what = "module table"
    raw = _embedded_table(
        payload, what, schema.MODULE_TABLE_FORMAT, RawModuleTable, warnings, check, strict_base64=False
    )
    if raw is None:
        return None
    try:
        modules = {}
        for row in raw.modules:
            name = str(row.name)
            if name.count(".") >= MAX_TREE_DEPTH:
                warnings.append(
                    f"{what} unreadable (a module name of more than {MAX_TREE_DEPTH} parts); ignored"
                )
                return None
            modules[name] = _module_info(name, row)
        return ModuleTable(
            version=int(raw.version),
            modules=modules,
            torch_version=raw.torch_version,
            rank=_int(raw.rank, None),
            world_size=_int(raw.world_size, None),
        )
    except _UNREADABLE as e:
        warnings.append(f"{what} unreadable ({e.__class__.__name__}); ignored")
        return None


def _module_info(name: str, row: RawModuleRow) -> ModuleInfo:
    """A row of the module table read: a value of an unexpected type is unknown (None)."""
    return ModuleInfo(
        name=name,
        class_name=str(row.class_name),
        params=_int(row.params, None),
        params_total=_int(row.params_total, None),
        trainable_total=_int(row.trainable_total, None),
        frozen_total=_int(row.frozen_total, None),
        buffers_total=_int(row.buffers_total, None),
        extra_repr=str(row.extra_repr or ""),
        inputs=None if row.inputs is msgspec.UNSET else _spec(row.inputs),  # UNSET: never called
        outputs=None if row.outputs is msgspec.UNSET else _spec(row.outputs),
        param_bytes=_int(row.param_bytes, None),
        param_bytes_total=_int(row.param_bytes_total, None),
        param_counts=_param_counts(row.param_counts),
        leaf=row.leaf if isinstance(row.leaf, bool) else None,
        weight_shape=_shape(row.weight_shape),
        kernel_size=_spec(row.kernel_size),
        tied={str(k): str(v) for k, v in row.tied.items()} if isinstance(row.tied, dict) else None,
    )


def _compiled_table(
    payload: Any, warnings: list[str], check: Callable[[bytes, str], bytes] | None = None
) -> CompiledTable | None:
    """The compiled-kernel table (base64 JSON, as the module table; docs/attribution.md
    "Compiled models"), or None with a warning when it cannot be read."""
    table = _embedded_table(
        payload,
        "compiled-kernel table",
        schema.COMPILED_TABLE_FORMAT,
        CompiledTable,
        warnings,
        check,
        strict_base64=True,
    )
    if table is None:
        return None
    if table.version > schema.COMPILED_TABLE_VERSION:
        warnings.append(
            f"compiled-kernel table of version {table.version} is newer than this traceprof reads "
            f"({schema.COMPILED_TABLE_VERSION}); modules of compiled kernels may be wrong"
        )
    return table
