"""Decode one run of the event array (whole events, see :class:`traceprof.read.chunks.Run`) into
:class:`~traceprof.read.columns.Columns`, from its text or from a file at offsets. A run that
cannot say what a whole-document decode would say raises :class:`Fallback`.
"""

from __future__ import annotations

import gc
import re
from collections import Counter

import msgspec

from traceprof.read import events
from traceprof.read.columns import Columns, columns_from_events


class Fallback(Exception):
    """A run says something only the whole-document decoder says right."""


_LEADING_WS = re.compile(rb"[ \t\r\n]*")


def decode_run(text: bytes | bytearray, first: bool) -> Columns:
    """The columns of one run of events (see :class:`traceprof.read.chunks.Run`). ``text`` may be a
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
    i = _whitespace_end(text, lo)
    comma = -1
    if i >= hi:  # whitespace between the last event and the "]"
        return columns_from_events([])
    if not first:
        if text[i : i + 1] != b",":
            raise Fallback("no comma between two events")
        comma = i
        i = _whitespace_end(text, i + 1)
        if i >= hi:
            raise Fallback("a comma after the last event")
    elif text[i : i + 1] == b",":
        raise Fallback("a comma before the first event")
    body: bytes | bytearray
    if isinstance(text, bytearray):  # spare: the brackets go in its spare bytes
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
            evs = events.EVENTS.decode(body)
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
                entries = events.ENTRIES.decode(body)
            except (msgspec.DecodeError, RecursionError):
                raise Fallback("not a run of events") from None
            try:
                evs = events.lenient_entries(entries, dropped)
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


def _whitespace_end(text: bytes | bytearray, i: int) -> int:
    """Where the whitespace from ``i`` on ends."""
    match = _LEADING_WS.match(text, i)
    assert match is not None  # the pattern matches the empty string too
    return match.end()


def _read_run(path: str, start: int, end: int) -> bytearray:
    """Bytes ``[start, end)`` of a file, with a spare byte at each end."""
    buf = bytearray(end - start + 2)
    with open(path, "rb") as f:
        f.seek(start)
        got = f.readinto(memoryview(buf)[1:-1])
    if got != end - start:
        raise Fallback("the file changed while it was read")
    return buf


def decode_file_run(task: tuple[str, int, int, bool]) -> Columns:
    """A pool's task: the columns of the run at ``[start, end)`` of a file, which the worker
    reads itself."""
    path, start, end, first = task
    return decode_run(_read_run(path, start, end), first)


def decode_text_run(task: tuple[bytes, bool]) -> Columns:
    """A pool's task: the columns of a run whose text is sent to the worker."""
    return decode_run(*task)
