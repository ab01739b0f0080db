"""Read and decode one trace file (:func:`load_raw`, which :mod:`traceprof.read.build` calls).
A regular file of more than one run (``chunk_bytes``) of JSON is decoded run by run, in
parallel (:mod:`traceprof.read.parallel`), into a :class:`StreamedDocument`; any other file, and
any trace whose runs cannot say what a whole-document decode says, is read whole
(:mod:`traceprof.read.source`) and decoded whole (:mod:`traceprof.read.document`) into a
:class:`~traceprof.read.document.RawDocument`. No interpretation happens here.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from traceprof.progress import Progress
from traceprof.read import chunks, parallel
from traceprof.read.columns import Columns
from traceprof.read.document import TOP_LEVEL, decode_trace, decoded_top_level, duplicated_members
from traceprof.read.limits import MemoryBudget, resolve_max_memory
from traceprof.read.runs import Fallback
from traceprof.read.source import (
    GZIP_MAGIC,
    SNIFF_BYTES,
    WHITESPACE,
    ContentHash,
    check_start,
    checked,
    file_blocks,
    gzip_claimed_size,
    inflate,
    open_trace,
    read_trace_bytes,
)
from traceprof.trace import schema

#: how the event array is cut into runs, in the order they are tried
SPLITTERS: tuple[type, ...] = (chunks.Cutter, chunks.Scanner)


class StreamedDocument(msgspec.Struct):
    """A trace decoded run by run: the top-level values and the events' columns."""

    path: str
    size_bytes: int
    top: dict[str, Any]
    columns: Columns
    warnings: list[str] = msgspec.field(default_factory=list)
    dropped: Counter = msgspec.field(default_factory=Counter)
    #: as RawDocument.memory_limit
    memory_limit: int | None = None


def load_raw(
    path: str | os.PathLike,
    progress: Progress | None = None,
    max_memory: int | str | None = None,
    memory_scale: float = 1.0,
    *,
    jobs: int | None = 1,
    chunk_bytes: int | None = None,
    content: ContentHash | None = None,
):
    """Read and decode one trace file (``max_memory``, ``memory_scale``: see
    :func:`~traceprof.read.source.read_trace_bytes`): a :class:`~traceprof.read.document.RawDocument`,
    or for a file of more than one run of ``chunk_bytes`` of JSON, a :class:`StreamedDocument`
    decoded run by run by ``jobs`` workers (None: one per CPU); see :mod:`traceprof.read.parallel`.
    ``content``: set to the hash of the bytes decoded (:class:`~traceprof.read.source.ContentHash`)."""
    if progress:
        progress(f"reading {path}")
    try:
        doc = _load_streamed(
            Path(path),
            max_memory,
            memory_scale,
            jobs if jobs is not None else parallel.default_jobs(),
            chunk_bytes or chunks.DEFAULT_CHUNK_BYTES,
            content,
        )
    except Fallback:
        doc = None
    if doc is None:
        data = read_trace_bytes(path, max_memory, memory_scale=memory_scale, content=content)
        if progress:
            progress(f"decoding {len(data) / 1e6:.0f} MB of JSON")
        doc = decode_trace(path, data)
    doc.memory_limit = int(resolve_max_memory(max_memory) / max(memory_scale, 1e-9))
    return doc


def _load_streamed(
    p: Path, max_memory, memory_scale: float, jobs: int, chunk_bytes: int, content: ContentHash | None
):
    """The trace decoded run by run, or None when it is not a regular file of more than one
    run of JSON (the whole-document path reads it, and says what is wrong with it). The runs
    are cut at likely event boundaries first, and by the scanner when one of those cuts was
    not a boundary (see :class:`traceprof.read.chunks.Cutter`)."""
    for splitter in SPLITTERS:
        try:
            read = _stream(p, max_memory, memory_scale, jobs, chunk_bytes, splitter, content)
            break
        except parallel.Recut:
            continue
    else:
        raise Fallback("runs that do not decode")  # the whole document says why
    if read is None:
        return None
    outline, columns = read
    warnings = ["invalid UTF-8 replaced with U+FFFD"] if columns.utf8_replaced else []
    if columns.entries and columns.dropped["not_object"] == columns.entries:
        raise Fallback("no entry is an event object")  # the whole document says so
    top = _streamed_top(outline)
    # the size of the JSON decoded, as a whole-document decode counts it (after replacement)
    size = outline.size_bytes + columns.utf8_grown
    return StreamedDocument(str(p), size, top, columns, warnings, columns.dropped)


def _stream(
    p: Path,
    max_memory,
    memory_scale: float,
    jobs: int,
    chunk_bytes: int,
    splitter: type,
    content: ContentHash | None = None,
):
    """The outline and columns of a regular file of more than one run of JSON, cut into runs
    by ``splitter``; None when it is not one."""
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return None  # a FIFO or a device is opened once, by the whole-document path
        f = open_trace(p, content)
    except OSError:
        return None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        head = f.read(SNIFF_BYTES)
        if not head:
            return None
        budget = MemoryBudget(p, max_memory, memory_scale)
        if head[:2] == GZIP_MAGIC:
            claimed = gzip_claimed_size(f, st.st_size, len(head))
            if claimed is not None and claimed <= chunk_bytes:
                return None
            budget.streamed()
            if claimed is not None:
                budget.expect(claimed)
            blocks = checked(p, inflate(p, head, f), None, gzip=True)
            return parallel.stream_document(
                p, blocks, None, jobs, chunk_bytes, budget, splitter, json_bytes=claimed
            )
        skip = check_start(p, head, final=len(head) < SNIFF_BYTES, gzip=False)
        if st.st_size - skip <= chunk_bytes:
            return None
        budget.streamed()
        budget.expect(st.st_size)
        f.seek(skip)
        return parallel.stream_document(
            p, file_blocks(f), skip, jobs, chunk_bytes, budget, splitter, json_bytes=st.st_size - skip
        )


def _streamed_top(outline) -> dict[str, Any]:
    """The top-level values of a document split into runs (its event array emptied)."""
    if outline.bare:  # the text is the array and whitespace
        if outline.top.strip(WHITESPACE) != b"[]":
            raise Fallback("text after the event array")
        return {}
    try:
        outline.top.decode("utf-8")  # invalid UTF-8 there: replaced by the whole-document path
    except UnicodeDecodeError:
        raise Fallback("top level") from None
    try:
        top_raw = TOP_LEVEL.decode(outline.top)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise Fallback("top level") from None
    if schema.TRACE_EVENTS_KEY not in top_raw or duplicated_members(outline.top, top_raw):
        raise Fallback("top level")
    top_raw.pop(schema.TRACE_EVENTS_KEY)
    top, failed = decoded_top_level(top_raw)
    if failed:
        raise Fallback("top level")
    return top
