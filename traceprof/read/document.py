"""Decode a whole trace document, a Chrome trace object (``{"traceEvents": [...], ...}``) or a
bare event array, into its top-level values and its raw events (:class:`RawDocument`). No
interpretation happens here. Invalid UTF-8 is replaced, values nested too deeply are skipped or
refused (:mod:`traceprof.read.nesting`), repeated top-level keys are resolved, and every failure
becomes a one-line :class:`~traceprof.errors.TraceReadError`. Whatever the streamed path cannot
say the same way is left to this decoder.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import msgspec
import numpy as np

from traceprof.errors import TraceReadError
from traceprof.read.events import ENTRIES, EVENTS, lenient_entries
from traceprof.read.nesting import MAX_DEPTH, key_span, without_deep_values
from traceprof.read.source import UTF8_BOM, WHITESPACE
from traceprof.trace import schema

#: the top-level object of a trace, its values left undecoded
TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


class RawDocument(msgspec.Struct):
    """A decoded trace: the top-level values other than the events, and the raw events.

    ``top`` holds decoded values for the keys traceprof reads (schema.TOP_LEVEL_KEYS_READ) and
    ``msgspec.Raw`` (undecoded JSON) for the others. ``dropped`` counts the entries of the event
    array that are not usable events, by reason (see :data:`traceprof.read.events.DROP_REASONS`)."""

    path: str
    size_bytes: int
    top: dict[str, Any]
    events: list  # list[schema.RawEvent]
    warnings: list[str] = msgspec.field(default_factory=list)
    dropped: Counter = msgspec.field(default_factory=Counter)
    #: the load's memory limit (bytes, over the estimate's scale), which the embedded tables,
    #: decoded when the Trace is built, count against; None: not checked
    memory_limit: int | None = None


def decode_trace(path: str | os.PathLike, data: bytes) -> RawDocument:
    """Decode trace JSON bytes into the top-level values and a list of raw events."""
    warnings: list[str] = []
    if data[:3] == UTF8_BOM:
        data = data[3:]
    fixed_utf8 = cut_deep = False
    while True:
        try:
            return _decode(path, data, warnings)
        except UnicodeDecodeError as e:
            if fixed_utf8:  # pragma: no cover - replacement makes this impossible
                raise TraceReadError(path, f"invalid UTF-8 ({e.reason})") from None
            # Names can hold invalid UTF-8 (seen in python_function names): replace, never fail.
            warnings.append("invalid UTF-8 replaced with U+FFFD")
            data = data.decode("utf-8", errors="replace").encode("utf-8")
            fixed_utf8 = True
        except RecursionError:
            if cut_deep:
                raise TraceReadError(path, f"JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
            data = without_deep_values(path, data)
            cut_deep = True


def decoded_top_level(top_raw: dict[str, msgspec.Raw]) -> tuple[dict[str, Any], list[str]]:
    """The top-level values, decoded where traceprof reads them (the others stay raw, never
    decoded), and the keys whose value did not decode."""
    top: dict[str, Any] = {}
    failed = []
    for key, value in top_raw.items():
        if key not in schema.TOP_LEVEL_KEYS_READ:
            top[key] = value
            continue
        try:
            top[key] = msgspec.json.decode(value)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            failed.append(key)
    return top, failed


def _decode(path, data: bytes, warnings: list[str]) -> RawDocument:
    start = data[:64].lstrip()[:1]
    if start == b"[":
        top: dict[str, Any] = {}
        events_raw: bytes | msgspec.Raw = data
    elif start == b"{":
        try:
            top_raw = TOP_LEVEL.decode(data)
        except msgspec.ValidationError as e:
            raise TraceReadError(path, f"not a trace: {e}") from None
        except msgspec.DecodeError as e:
            raise TraceReadError(path, _json_problem(e)) from None
        members = duplicated_members(data, top_raw)
        if members is not None:
            _resolve_duplicates(path, top_raw, members, warnings)
        if schema.TRACE_EVENTS_KEY not in top_raw:
            raise TraceReadError(path, f'not a Kineto/Chrome trace: no "{schema.TRACE_EVENTS_KEY}" array')
        events_raw = top_raw.pop(schema.TRACE_EVENTS_KEY)
        top, failed = decoded_top_level(top_raw)
        # (none: the whole document parsed already)
        warnings += [f"top-level key {key!r} could not be decoded" for key in failed]
    else:
        if not data.strip():
            raise TraceReadError(path, "empty file")
        raise TraceReadError(path, "not JSON (expected a trace object or an event array)")
    dropped: Counter = Counter()
    try:
        events = EVENTS.decode(events_raw)
    except msgspec.ValidationError:
        events = _lenient_events(path, events_raw, dropped)
    except msgspec.DecodeError as e:
        raise TraceReadError(path, _json_problem(e)) from None
    return RawDocument(str(path), len(data), top, events, warnings, dropped)


# -- duplicate top-level keys ------------------------------------------------------------------
# A JSON object decoded into a dict keeps the last value of a repeated key. The values it kept
# are slices of the input; anything between two of them other than one key is a value it lost.

_MEMBER_GAP = re.compile(rb'\s*,?\s*"(?:[^"\\]|\\.)*"\s*:\s*\Z', re.S)


def _address(buffer) -> int:
    return np.frombuffer(buffer, np.uint8).ctypes.data


def duplicated_members(data: bytes, members: dict[str, msgspec.Raw]):
    """Every (key, value) of the top-level object in order when some key is repeated, else
    None (the usual case, found with one regex match per top-level key)."""
    base = _address(data)
    spans = []
    for key, raw in members.items():
        offset = _address(raw) - base
        if not 0 <= offset <= len(data) - len(raw):  # pragma: no cover - Raw is a view of data
            return None
        spans.append((offset, key, raw))
    spans.sort(key=lambda s: s[0])
    pos = data.index(b"{") + 1
    found = []
    for offset, _key, raw in spans:
        if not _MEMBER_GAP.match(data, pos, offset):
            found.append((pos, offset))
        pos = offset + len(raw)
    if not found:
        return None
    return _all_members(data, spans)


def _all_members(data: bytes, spans) -> list[tuple[str, msgspec.Raw]]:
    out: list[tuple[str, msgspec.Raw]] = []
    pos = data.index(b"{") + 1
    for offset, key, raw in spans:
        if not _MEMBER_GAP.match(data, pos, offset):
            # the members lost before this one's key: an object of their own
            span = key_span(data, offset)
            assert span is not None  # the decoder kept this member: a key comes before its value
            key_start = span[0]
            gap = data[pos:key_start].strip(WHITESPACE).strip(b",")
            lost = b"{" + gap + b"}"
            inner = TOP_LEVEL.decode(lost)
            base = _address(lost)
            inner_spans = sorted(((_address(r) - base, k, r) for k, r in inner.items()), key=lambda s: s[0])
            out.extend(_all_members(lost, inner_spans))
        out.append((key, raw))
        pos = offset + len(raw)
    return out


def _resolve_duplicates(path, top_raw: dict, members, warnings: list[str]) -> None:
    """Repeated top-level keys: the events are taken from the only ``traceEvents`` array that
    is not empty (an error when several are); a repeated key traceprof reads keeps its last
    value, with a warning."""
    counts = Counter(key for key, _ in members)
    key = schema.TRACE_EVENTS_KEY
    if counts[key] > 1:
        values = [raw for k, raw in members if k == key]
        with_events = [raw for raw in values if not _is_empty_array(raw)]
        if len(with_events) > 1:
            raise TraceReadError(
                path,
                f'the top-level key "{key}" appears {counts[key]} times, '
                f"{len(with_events)} of them with events: which one is the trace is ambiguous",
            )
        if with_events:
            top_raw[key] = with_events[0]
        warnings.append(
            f'the top-level key "{key}" appears {counts[key]} times; '
            f"{'the one with events is used' if with_events else 'all are empty'}"
        )
    repeated = sorted(k for k, n in counts.items() if n > 1 and k in schema.TOP_LEVEL_KEYS_READ)
    if repeated:
        listed = ", ".join(f'"{k}" ({counts[k]} times)' for k in repeated)
        warnings.append(f"top-level keys that appear more than once (the last value is used): {listed}")


def _is_empty_array(raw: msgspec.Raw) -> bool:
    return len(raw) < 256 and re.fullmatch(rb"\[\s*\]", bytes(raw)) is not None


def _json_problem(e: msgspec.DecodeError) -> str:
    text = str(e)
    if "truncated" in text:
        return "truncated JSON (the file ends in the middle of the trace)"
    return f"not valid JSON ({text})"


def _lenient_events(path, events_raw, dropped: Counter) -> list:
    """Decode events whose values have unusual types, coercing each field or dropping the event
    (counted in ``dropped`` by reason)."""
    try:
        items = ENTRIES.decode(events_raw)
    except msgspec.ValidationError:
        raise TraceReadError(path, f'wrong schema: "{schema.TRACE_EVENTS_KEY}" is not an array') from None
    except msgspec.DecodeError as e:
        raise TraceReadError(path, _json_problem(e)) from None
    events = lenient_entries(items, dropped)
    if items and dropped["not_object"] == len(items):
        # an array of numbers, strings or nulls is not a trace; reporting an empty profile
        # would hide that
        where = f'"{schema.TRACE_EVENTS_KEY}"' if isinstance(events_raw, msgspec.Raw) else "the array"
        raise TraceReadError(
            path, f"not a trace: none of the {len(items)} entries of {where} is an event object"
        )
    return events
