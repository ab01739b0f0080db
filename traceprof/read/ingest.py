"""Raw events as columns, decoded run by run, in parallel.

:func:`load_document` reads a trace in blocks. A trace of at most one run of JSON
(``chunk_bytes``) is decoded whole (:func:`traceprof.reader.decode_trace`). A larger one is cut
into runs of whole events by :mod:`traceprof.chunks` as it arrives; a pool of worker processes
(``jobs``) decodes the runs with the typed decoder and turns each into :class:`Columns` (only
the values traceprof reads; the events of a run are freed as soon as its columns exist); the
columns are joined in order. A plain file is read by the workers themselves (only offsets travel
to them); a gzip file is inflated by one reader and its runs are sent to the workers. A trace of
fewer than :data:`POOL_MIN_RUNS` runs is read whole first, then shared between the reading
process and workers forked then, which inherit its text (:func:`decode_shared`). The result is
the same whatever the number of workers or the size of the runs.

Whatever the runs cannot say the same as a whole-document decode (text that is not valid JSON,
values of unexpected types, repeated top-level keys, values nested too deeply, ``B``/``E``
events) sends the trace to the whole-document decoder, which says it (or reads it) as before.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import stat
import sys
from collections import Counter
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import msgspec
import numpy as np

from traceprof.read import chunks, reader
from traceprof.trace import schema
from traceprof.read.limits import MemoryBudget
from traceprof.trace.schema import Kind

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: runs in flight per worker, decoding or queued (bounds the memory of the text in flight)
_QUEUED_PER_WORKER = 4
#: a trace of fewer runs of ``chunk_bytes`` (when its size is known) is not given to a pool as
#: it arrives: it is shared (see :func:`decode_shared`). Below that size, starting a pool's
#: workers and sending them the text cost more than the decoding they share (measured with
#: 8 MB runs and two workers: 70 MB of gzip text broke even)
POOL_MIN_RUNS = 8
#: runs per process in a shared trace: the processes finish within a run of each other; each
#: decodes its runs one after the other and reuses the memory of the last one (fewer page
#: faults than one large run); the text the scanner reads after the last cut is short
SHARED_RUNS_PER_PROCESS = 8
_SHARED_MIN_RUN_BYTES = 1 << 20


def shared_run_bytes(json_bytes: int | None, jobs: int, chunk_bytes: int) -> int | None:
    """The bytes per run when a trace of ``json_bytes`` of JSON (None: not known) is shared
    among ``jobs`` processes; None when it is not shared (a pool decodes a trace of many runs,
    or of unknown size, and one process decodes all the runs when ``jobs`` is 1)."""
    if json_bytes is None or json_bytes >= POOL_MIN_RUNS * chunk_bytes or jobs <= 1:
        return None
    if not hasattr(os, "fork"):  # pragma: no cover - not on Unix
        return None
    share = -(-json_bytes // (SHARED_RUNS_PER_PROCESS * jobs))
    return max(min(share, chunk_bytes), min(_SHARED_MIN_RUN_BYTES, chunk_bytes))


def worker_signals() -> None:
    """In a decoding worker: Ctrl-C (sent to the whole process group) is the reading process's
    to handle, and SIGTERM, which it sends to stop a worker, ends the worker at once, whatever
    handlers the command had set before the fork."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fork_context():
    """The "fork" multiprocessing context of a pool (None where there is none): workers forked
    from the reading process start at once."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None  # pragma: no cover - not on Linux
    return multiprocessing.get_context("fork")


def default_jobs() -> int:
    """Decoding workers by default: the CPUs this process may use; 1 in a worker process of
    its own (a job's ranks are already analyzed in parallel)."""
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: not its worker
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _daemonic() -> bool:
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: not its worker
    return multiprocessing is not None and bool(multiprocessing.current_process().daemon)


# ---------------------------------------------------------------------------------------------
# Columns


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
    utf8_replaced: bool = False
    utf8_grown: int = 0  # bytes the text grew by when invalid UTF-8 was replaced
    dropped: Counter = msgspec.field(default_factory=Counter)  # entries not usable as events
    entries: int = 0  # entries of the event array, events or not
    begin_end: bool = False  # B events (paired with E events across runs by the whole decode)

    def __len__(self) -> int:
        return len(self.kind)


_CODED = ("ph", "cat", "name", "thread", "input_dims", "input_types", "concrete_inputs")
_PLAIN = ("kind", "ts", "dur", "correlation", "external_id", "sequence_number", "fwd_thread_id",
          "stream")


#: the side tables: the column of event indices, and the columns of values beside it
_SIDE_TABLES = (("flow_index", ()), ("python_index", ("python_id", "python_parent_id")),
                ("memory_index", ("memory_bytes", "memory_total", "memory_device_type",
                                  "memory_device_id")))


def _table_of(field_name: str) -> str:
    return {"ph": "phs", "cat": "cats", "name": "names", "thread": "threads"}.get(
        field_name, f"{field_name}_texts")


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
    Trace narrows each joined column further, see :func:`traceprof.trace.narrowed`)."""
    if not len(a) or (_INT32.min <= a.min() and a.max() <= _INT32.max):
        return a.astype(np.int32, copy=False)
    return a


def _ints(values, n: int | None = None) -> np.ndarray:
    if n is not None:
        return int32_if_fits(np.fromiter(values, np.int64, n))
    values = list(values)
    return int32_if_fits(np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64))


def _floats(values, n: int) -> np.ndarray:
    return np.fromiter(values, np.float64, n)


def _texts(raws: list) -> tuple[np.ndarray, list]:
    if raws.count(None) == len(raws):  # no event has it: every code is that of b""
        return np.zeros(len(raws), np.int32), [b""] if raws else []
    return _factorize([b"" if r is None else bytes(r) for r in raws])


_get_args = attrgetter("args")
_EVENT_KEY = attrgetter("ph", "cat", "name", "pid", "tid")


def columns_from_events(evs: list) -> Columns:
    """The columns of a list of schema.RawEvent."""
    n = len(evs)
    # A run has few distinct (ph, cat, name, pid, tid): they are coded in one pass, and each
    # field's codes follow from theirs. The first event with a value is the first event of the
    # first such combination that has it, so the values come out in first-seen order.
    combo, combos = _factorize(list(map(_EVENT_KEY, evs)))
    ph_of, phs = _factorize([c[0] for c in combos])
    cat_of, cats = _factorize([c[1] for c in combos])
    name_of, names = _factorize([c[2] for c in combos])
    thread_of, threads = _factorize([c[3:] for c in combos])
    kind_of = np.array([schema.kind_of(c[0], c[1]) for c in combos], dtype=np.int8)
    ph, cat, name, thread, kind = (codes[combo] for codes in
                                   (ph_of, cat_of, name_of, thread_of, kind_of))
    del combo, combos
    ts = _floats(map(attrgetter("ts"), evs), n)
    dur = _floats(map(attrgetter("dur"), evs), n)
    args = list(map(_get_args, evs))
    correlation = _ints(map(attrgetter("correlation"), args), n)
    external_id = np.fromiter(map(attrgetter("external_id"), args), np.int64, n)
    legacy = np.fromiter(map(attrgetter("external_id_2021"), args), np.int64, n)
    external_id = int32_if_fits(np.where(external_id >= 0, external_id, legacy))
    del legacy
    sequence_number = _ints(map(attrgetter("sequence_number"), args), n)
    fwd_thread_id = _ints(map(attrgetter("fwd_thread_id"), args), n)
    stream = _ints(map(attrgetter("stream"), args), n)
    input_dims, input_dims_texts = _texts(list(map(attrgetter("input_dims"), args)))
    input_types, input_types_texts = _texts(list(map(attrgetter("input_types"), args)))
    concrete_inputs, concrete_texts = _texts(list(map(attrgetter("concrete_inputs"), args)))

    flow_index = np.flatnonzero((kind == Kind.FLOW_START) | (kind == Kind.FLOW_END))
    flow_ids = [evs[i].id for i in flow_index.tolist()]
    python_index = np.flatnonzero(kind == Kind.PYTHON)
    py_args = [args[i] for i in python_index.tolist()]
    python_id = _ints(-1 if a.python_id is None else a.python_id for a in py_args)
    python_parent_id = _ints(-1 if a.python_parent_id is None else a.python_parent_id
                             for a in py_args)
    meta = []
    if schema.METADATA_PHASE in phs:
        for i in np.flatnonzero(ph == phs.index(schema.METADATA_PHASE)).tolist():
            e = evs[i]
            meta.append((i, e.name, e.pid, e.tid, e.args.label, e.args.labels))
    if schema.MEMORY_EVENT_NAME in names:
        code = names.index(schema.MEMORY_EVENT_NAME)
        memory_index = np.flatnonzero((kind == Kind.INSTANT) & (name == code))
    else:
        memory_index = np.zeros(0, np.int64)
    mem = [args[i] for i in memory_index.tolist()]
    return Columns(
        kind=kind, ph=ph, phs=phs, cat=cat, cats=cats, name=name, names=names,
        thread=thread, threads=threads, ts=ts, dur=dur, correlation=correlation,
        external_id=external_id, sequence_number=sequence_number, fwd_thread_id=fwd_thread_id,
        stream=stream, input_dims=input_dims, input_dims_texts=input_dims_texts,
        input_types=input_types, input_types_texts=input_types_texts,
        concrete_inputs=concrete_inputs, concrete_inputs_texts=concrete_texts,
        flow_index=flow_index.astype(np.int64), flow_ids=flow_ids,
        python_index=python_index.astype(np.int64), python_id=python_id,
        python_parent_id=python_parent_id, meta=meta,
        memory_index=memory_index.astype(np.int64),
        memory_bytes=_ints(a.mem_bytes if a.mem_bytes is not None else 0 for a in mem),
        memory_total=_ints(a.total_allocated for a in mem),
        memory_device_type=_ints(a.device_type for a in mem),
        memory_device_id=_ints(a.device_id for a in mem),
    )


def join(parts: list[Columns]) -> Columns:
    """The columns of runs one after the other (``parts`` is emptied as they are joined, so
    that each run's arrays are freed once copied)."""
    if len(parts) <= 1:  # no run: an empty event array
        return parts.pop() if parts else columns_from_events([])
    offsets = np.cumsum([0] + [len(p) for p in parts])
    out: dict[str, Any] = {}
    for f in _CODED:
        table: dict = {}
        codes = []
        for p in parts:
            local = getattr(p, _table_of(f))
            remap = np.array([table.setdefault(v, len(table)) for v in local] or [0], np.int32)
            codes.append(remap[getattr(p, f)])
            setattr(p, f, None)
        out[f] = np.concatenate(codes) if codes else np.zeros(0, np.int32)
        out[_table_of(f)] = list(table)
        del codes
    for f in _PLAIN:
        out[f] = np.concatenate([getattr(p, f) for p in parts])
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


def select(cols: Columns, keep: np.ndarray) -> Columns:
    """The columns of the events where ``keep`` is true, strings coded again in first-seen
    order among them."""
    new_index = np.cumsum(keep) - 1
    out: dict[str, Any] = {}
    for f in _CODED:
        codes = getattr(cols, f)[keep]
        table = getattr(cols, _table_of(f))
        new_codes, old_codes = first_seen_codes(codes)
        out[f] = new_codes if len(codes) else codes
        out[_table_of(f)] = [table[u] for u in old_codes.tolist()]
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
    out["meta"] = [(int(new_index[i]), *rest) for i, *rest in cols.meta if keep[i]]
    out["utf8_replaced"] = cols.utf8_replaced
    out["utf8_grown"] = cols.utf8_grown
    out["dropped"] = cols.dropped
    out["entries"] = cols.entries
    return Columns(**out)


# ---------------------------------------------------------------------------------------------
# Decoding runs


class Fallback(Exception):
    """A run says something only the whole-document decoder says right."""


_WS = b" \t\r\n"


_LEADING_WS = re.compile(rb"[ \t\r\n]*")


def decode_run(text: bytes | bytearray, first: bool) -> Columns:
    """The columns of one run of events (see :class:`traceprof.chunks.Run`). ``text`` may be a
    bytearray with one spare byte at each end (:func:`_read_run`): the brackets of the array go
    there, without copying the run. The cyclic garbage collector is off meanwhile: a run makes
    no cycles, only tuples and lists that its passes would walk again and again (4 ms of the
    115 ms the ResNet-50 trace's runs take)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _decode_run(text, first)
    finally:
        if collecting:
            gc.enable()


def _decode_run(text: bytes | bytearray, first: bool) -> Columns:
    spare = isinstance(text, bytearray)
    lo, hi = (1, len(text) - 1) if spare else (0, len(text))
    i = _LEADING_WS.match(text, lo).end()
    comma = -1
    if i >= hi:  # whitespace between the last event and the "]"
        return columns_from_events([])
    if not first:
        if text[i : i + 1] != b",":
            raise Fallback("no comma between two events")
        comma = i
        i = _LEADING_WS.match(text, i + 1).end()
        if i >= hi:
            raise Fallback("a comma after the last event")
    elif text[i : i + 1] == b",":
        raise Fallback("a comma before the first event")
    if spare:
        body = text
        body[0] = 0x5B  # "["
        if comma >= 0:
            body[comma] = 0x20
        body[-1] = 0x5D  # "]"
    else:
        body = b"[" + text[i:] + b"]"
    del text
    utf8_replaced = False
    dropped: Counter = Counter()
    grown = 0
    entries_count = -1  # decoded in one go: every entry is an event
    while True:
        try:
            evs = reader.EVENTS.decode(body)
            break
        except UnicodeDecodeError:
            if utf8_replaced:  # pragma: no cover - replacement makes this impossible
                raise Fallback("invalid UTF-8") from None
            size = len(body)
            body = bytes(body).decode("utf-8", errors="replace").encode("utf-8")
            utf8_replaced = True
            grown = len(body) - size
        except msgspec.ValidationError:  # values of unusual types: entry by entry
            try:
                entries = reader.ENTRIES.decode(body)
            except (msgspec.DecodeError, RecursionError):
                raise Fallback("not a run of events") from None
            try:
                evs = reader.lenient_entries(entries, dropped)
            except (msgspec.DecodeError, RecursionError):
                raise Fallback("not a run of events") from None
            entries_count = len(entries)
            del entries
            break
        except (msgspec.DecodeError, RecursionError):
            raise Fallback("not a run of events") from None
    del body
    cols = columns_from_events(evs)
    cols.begin_end = "B" in cols.phs
    cols.utf8_replaced = utf8_replaced
    cols.utf8_grown = grown
    cols.dropped = dropped
    cols.entries = len(evs) if entries_count < 0 else entries_count
    return cols


def _read_run(path: str, start: int, end: int) -> bytearray:
    """Bytes ``[start, end)`` of a file, with a spare byte at each end."""
    buf = bytearray(end - start + 2)
    with open(path, "rb") as f:
        f.seek(start)
        got = f.readinto(memoryview(buf)[1:-1])
    if got != end - start:
        raise Fallback("the file changed while it was read")
    return buf


def _decode_file_run(task: tuple[str, int, int, bool]) -> Columns:
    path, start, end, first = task
    return decode_run(_read_run(path, start, end), first)


def _decode_text_run(task: tuple[bytes, bool]) -> Columns:
    return decode_run(*task)


# ---------------------------------------------------------------------------------------------
# Reading


class StreamedDocument(msgspec.Struct):
    """A trace decoded run by run: the top-level values and the events' columns."""

    path: str
    size_bytes: int
    top: dict[str, Any]
    columns: Columns
    warnings: list[str] = msgspec.field(default_factory=list)
    dropped: Counter = msgspec.field(default_factory=Counter)


class _Pool:
    """Runs decoded in order by ``jobs`` worker processes (1: in this process). When every
    worker has its share of runs in flight, the reading process waits for the oldest. It does
    not decode a run itself: with a worker on every core (the default) it would only take a
    core from one of them (measured on 1 GB with two workers on two cores: the load took 7.2 s
    against 7.4 to 7.7 s when the reading process helped)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.executor: ProcessPoolExecutor | None = None
        self.pending: list[Future] = []  # in run order
        self.done: list[Columns] = []

    def submit(self, fn, task) -> None:
        if self.jobs <= 1:
            self.done.append(fn(task))
            return
        if self.executor is None:
            from concurrent.futures import ProcessPoolExecutor

            self.executor = ProcessPoolExecutor(self.jobs, mp_context=_fork_context(),
                                                initializer=worker_signals)
        self._collect(wait=False)
        while len(self.pending) >= self.jobs * _QUEUED_PER_WORKER:
            self._collect_one()
        self.pending.append(self.executor.submit(fn, task))

    def _collect(self, wait: bool) -> None:
        """Move the finished runs at the head of the queue to ``done`` (all when ``wait``)."""
        while self.pending and (wait or self.pending[0].done()):
            self._collect_one()

    def _collect_one(self) -> None:
        head = self.pending.pop(0)
        self.done.append(head.result())

    def results(self) -> list[Columns]:
        self._collect(wait=True)
        return self.done

    def close(self) -> None:
        if self.executor is not None:
            for f in self.pending:
                f.cancel()
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None


class Recut(Exception):
    """A run cut at a likely boundary (:class:`traceprof.chunks.Cutter`) did not decode: the
    text is read again and cut by the scanner, which says the same as a whole-document decode
    (or sends the trace to it)."""


#: how the event array is cut into runs, in the order they are tried
SPLITTERS: tuple[type, ...] = (chunks.Cutter, chunks.Scanner)


class _Blocks:
    """Text kept as the blocks it came in (not copied into one buffer), from ``start`` on."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self.start = 0

    def append(self, block: bytes) -> None:
        self.blocks.append(block)

    def drop_before(self, offset: int) -> None:
        while self.blocks and self.start + len(self.blocks[0]) <= offset:
            self.start += len(self.blocks.pop(0))

    def text(self, start: int, end: int) -> bytearray:
        """Bytes ``[start, end)`` with a spare byte at each end (see :func:`decode_run`)."""
        text = bytearray(end - start + 2)
        view = memoryview(text)
        at = self.start
        for block in self.blocks:
            lo, hi = max(start, at), min(end, at + len(block))
            if lo < hi:
                view[1 + lo - start : 1 + hi - start] = memoryview(block)[lo - at : hi - at]
            at += len(block)
        return text


class _RunQueue:
    """The indices of a shared trace's runs, written into a pipe before the workers are forked.
    A process takes the next run by reading its index: a read of one index is atomic, so every
    run is taken once, by one process; the empty pipe, its writing end closed, says no run is
    left."""

    _INDEX = 4  # bytes per index
    #: the indices fit in the smallest buffer a pipe gets (one page), so they are all written
    #: before any process reads
    MAX_RUNS = 4096 // _INDEX

    def __init__(self, runs: int) -> None:
        self.fd, write = os.pipe()
        try:
            data = b"".join(i.to_bytes(self._INDEX, "little") for i in range(runs))
            os.set_blocking(write, False)
            if os.write(write, data) != len(data):  # pragma: no cover - at most one page
                raise OSError("the run indices did not fit in the pipe")
        except OSError:
            os.close(self.fd)
            raise
        finally:
            os.close(write)

    def take(self) -> int | None:
        index = os.read(self.fd, self._INDEX)
        return int.from_bytes(index, "little") if index else None

    def close(self) -> None:
        os.close(self.fd)


def decode_shared(runs: list[chunks.Run], text: _Blocks, jobs: int) -> list[Columns]:
    """The columns of the runs of a trace whose whole text is read, decoded by this process
    and ``jobs - 1`` workers forked now. The workers inherit the text: nothing is sent to them,
    and they start at once. Each process takes the next run no process has taken
    (:class:`_RunQueue`), until none is left, so they finish within a run of each other: the
    work per byte differs along a trace (the second half of the 35 MB ResNet-50 trace takes
    twice the time of the first), and equal parts would leave one process waiting for the
    other. Each worker sends its columns back once, through a pipe, at the end. (A pool would
    pass each run through threads of this process, which wait for this process's decoding to
    let go of the interpreter; and ``multiprocessing`` alone takes 12 ms to import.)"""
    workers = min(jobs - 1, len(runs) - 1) if hasattr(os, "fork") else 0
    if workers <= 0 or len(runs) > _RunQueue.MAX_RUNS:
        return [decode_run(text.text(run.start, run.end), run.first) for run in runs]
    queue = _RunQueue(len(runs))
    children: list[tuple[int, int]] = []  # (process id, reading end of its pipe)
    received = False
    try:
        for _ in range(workers):
            read, write = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: the ones started share the runs
                os.close(read)
                os.close(write)
                break
            if pid == 0:
                os.close(read)
                _work(queue, runs, text, write)  # does not return
            os.close(write)
            children.append((pid, read))
        parts = dict(_decode_taken(queue, runs, text))
        for _, read in children:
            parts.update(_received(read))
        received = True
    finally:
        queue.close()
        for pid, read in children:
            os.close(read)
            if not received:  # it may still be decoding, or waiting to send
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:  # pragma: no cover - it had just ended
                    pass
            os.waitpid(pid, 0)
    return [parts[i] for i in range(len(runs))]


def _decode_taken(queue: _RunQueue, runs: list[chunks.Run],
                  text: _Blocks) -> list[tuple[int, Columns]]:
    """Take the next run and decode it, until no run is left: (index, columns) of each."""
    out = []
    while (i := queue.take()) is not None:
        run = runs[i]
        out.append((i, decode_run(text.text(run.start, run.end), run.first)))
    return out


def _work(queue: _RunQueue, runs: list[chunks.Run], text: _Blocks, write: int) -> None:
    """A forked worker's part of :func:`decode_shared`: it sends its runs' columns, or its
    error, and ends at once, without flushing standard streams (a thread of the reading
    process, a progress bar's, may have held their lock when it forked)."""
    try:
        worker_signals()
        try:
            outcome: Any = _decode_taken(queue, runs, text)
        except Exception as e:  # Fallback, or a failure the reading process reports
            outcome = e
        import pickle

        view = memoryview(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))
        while view:
            view = view[os.write(write, view):]
    finally:
        os._exit(0)  # the reading process reads a worker that sent nothing as one that failed


def _received(read: int) -> list[tuple[int, Columns]]:
    """What a worker sent: its runs' columns (its error is raised here)."""
    import pickle

    data = b"".join(iter(lambda: os.read(read, 1 << 20), b""))
    try:
        outcome = pickle.loads(data)
    except Exception:  # nothing, or less than it meant to send
        raise Fallback("a decoding worker ended without its runs") from None
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def stream_document(path: Path, blocks: Iterator[bytes], regular_offset: int | None,
                    jobs: int, chunk_bytes: int, budget: MemoryBudget,
                    splitter: type = chunks.Scanner,
                    json_bytes: int | None = None) -> tuple[chunks.Outline, Columns]:
    """Cut the JSON ``blocks`` into runs with ``splitter`` (:class:`traceprof.chunks.Cutter` or
    :class:`~traceprof.chunks.Scanner`) and decode them with ``jobs`` processes, counting each
    block against ``budget``. ``regular_offset``: where the JSON starts in ``path`` when the
    workers may read the runs from the file (else the runs' text is sent to them).
    ``json_bytes``: the size of the JSON when it is known (or claimed by a gzip trailer): a
    trace of fewer than :data:`POOL_MIN_RUNS` runs is decoded by the reading process alone, or
    shared among ``jobs`` processes once it is read (:func:`decode_shared`); a larger one goes
    to a pool as it arrives. Fallback when the scanner's runs cannot say what a whole-document
    decode says; Recut when the cutter's runs do not decode."""
    if _daemonic():
        jobs = 1  # a daemonic process (a multiprocessing pool's worker) may not start processes
    small = json_bytes is not None and json_bytes < POOL_MIN_RUNS * chunk_bytes
    run_bytes = shared_run_bytes(json_bytes, jobs, chunk_bytes)
    cutter = splitter(run_bytes or chunk_bytes)
    pool = _Pool(1 if small else jobs)
    pending = _Blocks()  # the text not yet sent, when it is sent; all of it, when shared
    held: list[chunks.Run] | None = [] if run_bytes else None  # runs of a shared trace

    def submit(runs: list[chunks.Run]) -> None:
        if held is not None:
            held.extend(runs)
            return
        for run in runs:
            if regular_offset is not None:
                pool.submit(_decode_file_run, (str(path), regular_offset + run.start,
                                               regular_offset + run.end, run.first))
            else:
                pool.submit(_decode_text_run, (pending.text(run.start, run.end), run.first))

    try:
        for block in blocks:
            runs = cutter.feed(block)
            budget.add(block, cutter.objects)
            if regular_offset is None or held is not None:
                pending.append(block)
            if held is not None and cutter.offset > 2 * POOL_MIN_RUNS * chunk_bytes:
                # far more text than a gzip trailer claimed (it says the size modulo 4 GiB):
                # not held in memory, but sent to a pool as it arrives
                runs, held = held + runs, None
                pool = _Pool(jobs)
            submit(runs)
            if held is None:
                pending.drop_before(cutter.keep_from)
        if isinstance(cutter, chunks.Cutter):
            submit(cutter.finish())
            outline = cutter.outline
        else:
            outline = cutter.finish()
        parts = pool.results() if held is None else decode_shared(held, pending, jobs)
    except (Fallback, chunks.Unsplittable) as e:
        if isinstance(cutter, chunks.Cutter):
            raise Recut(str(e)) from None
        raise Fallback(str(e)) from None
    finally:
        pool.close()
    if any(p.begin_end for p in parts):
        raise Fallback("B/E events")  # paired across runs: the whole document pairs them
    return outline, join(parts)


def is_regular(f) -> bool:
    return stat.S_ISREG(os.fstat(f.fileno()).st_mode)
