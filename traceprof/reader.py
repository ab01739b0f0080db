"""Open a trace file and decode it into raw events. No interpretation happens here.

``.json`` and ``.json.gz`` (recognised by content, not by name) holding either a Chrome trace
object (``{"traceEvents": [...], ...}``) or a bare event array. Every failure becomes a
:class:`~traceprof.errors.TraceReadError` naming the file and the problem in one line.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec

from . import schema
from .errors import TraceReadError

Progress = Callable[[str], None]

_GZIP_MAGIC = b"\x1f\x8b"
_strict_events = msgspec.json.Decoder(list[schema.RawEvent])
_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass(slots=True)
class RawDocument:
    """A decoded trace: the top-level values other than the events, and the raw events."""

    path: str
    size_bytes: int
    top: dict[str, Any]
    events: list  # list[schema.RawEvent]
    warnings: list[str] = field(default_factory=list)


def read_trace_bytes(path: str | os.PathLike) -> bytes:
    """The JSON bytes of a trace file, decompressed when the file is gzip."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TraceReadError(p, "no such file") from None
    except IsADirectoryError:
        raise TraceReadError(p, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceReadError(p, "permission denied") from None
    except MemoryError:
        raise TraceReadError(p, "too large to load into memory") from None
    except OSError as e:
        raise TraceReadError(p, f"cannot read: {e.strerror or e}") from None
    if not data:
        raise TraceReadError(p, "empty file")
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            raise TraceReadError(p, f"corrupt or truncated gzip data ({e})") from None
        except MemoryError:
            raise TraceReadError(p, "too large to decompress into memory") from None
        if not data.strip():
            raise TraceReadError(p, "empty trace (the gzip file holds no data)")
    return data


def decode_trace(path: str | os.PathLike, data: bytes) -> RawDocument:
    """Decode trace JSON bytes into the top-level values and a list of raw events."""
    warnings: list[str] = []
    try:
        return _decode(path, data, warnings)
    except UnicodeDecodeError:
        # Names can hold invalid UTF-8 (seen in python_function names): replace, never fail.
        warnings.append("invalid UTF-8 replaced with U+FFFD")
        fixed = data.decode("utf-8", errors="replace").encode("utf-8")
        try:
            return _decode(path, fixed, warnings)
        except UnicodeDecodeError as e:  # pragma: no cover - replacement makes this impossible
            raise TraceReadError(path, f"invalid UTF-8 ({e.reason})") from None


def load_raw(path: str | os.PathLike, progress: Progress | None = None) -> RawDocument:
    """Read and decode one trace file."""
    if progress:
        progress(f"reading {path}")
    data = read_trace_bytes(path)
    if progress:
        progress(f"decoding {len(data) / 1e6:.0f} MB of JSON")
    return decode_trace(path, data)


def _decode(path, data: bytes, warnings: list[str]) -> RawDocument:
    start = data[:64].lstrip()[:1]
    if start == b"[":
        top: dict[str, Any] = {}
        events_raw: bytes | msgspec.Raw = data
    elif start == b"{":
        try:
            top_raw = _top_level.decode(data)
        except msgspec.ValidationError as e:
            raise TraceReadError(path, f"not a trace: {e}") from None
        except msgspec.DecodeError as e:
            raise TraceReadError(path, _json_problem(e)) from None
        if schema.TRACE_EVENTS_KEY not in top_raw:
            raise TraceReadError(
                path, f'not a Kineto/Chrome trace: no "{schema.TRACE_EVENTS_KEY}" array'
            )
        events_raw = top_raw.pop(schema.TRACE_EVENTS_KEY)
        top = {}
        for key, value in top_raw.items():
            try:
                top[key] = msgspec.json.decode(value)
            except msgspec.DecodeError:  # pragma: no cover - the whole document parsed already
                warnings.append(f"top-level key {key!r} could not be decoded")
    else:
        if not data.strip():
            raise TraceReadError(path, "empty file")
        raise TraceReadError(path, "not JSON (expected a trace object or an event array)")
    try:
        events = _strict_events.decode(events_raw)
    except msgspec.ValidationError:
        events = _lenient_events(path, events_raw, warnings)
    except msgspec.DecodeError as e:
        raise TraceReadError(path, _json_problem(e)) from None
    return RawDocument(str(path), len(data), top, events, warnings)


def _json_problem(e: msgspec.DecodeError) -> str:
    text = str(e)
    if "truncated" in text:
        return "truncated JSON (the file ends in the middle of the trace)"
    return f"not valid JSON ({text})"


def _lenient_events(path, events_raw, warnings: list[str]) -> list:
    """Decode events whose values have unusual types, coercing each field or dropping the event."""
    try:
        items = msgspec.json.decode(events_raw)
    except msgspec.DecodeError as e:
        raise TraceReadError(path, _json_problem(e)) from None
    if not isinstance(items, list):
        raise TraceReadError(path, f'wrong schema: "{schema.TRACE_EVENTS_KEY}" is not an array')
    events = []
    dropped = 0
    for item in items:
        ev = _coerce_event(item)
        if ev is None:
            dropped += 1
        else:
            events.append(ev)
    if items and not events:
        # an array of numbers, strings or nulls is not a trace; reporting an empty profile
        # would hide that
        where = f'"{schema.TRACE_EVENTS_KEY}"' if isinstance(events_raw, msgspec.Raw) else "the array"
        raise TraceReadError(
            path, f"not a trace: none of the {len(items)} entries of {where} is an event object"
        )
    if dropped:
        warnings.append(f"{dropped} malformed events skipped")
    return events


def _as_int(v: Any) -> int | None:
    """An int64 from an int, a float or a numeric string; None when absent or out of range."""
    if v is None or isinstance(v, bool):
        return None
    if not isinstance(v, int):
        try:
            v = int(float(v))
        except (TypeError, ValueError, OverflowError):
            return None
    return v if schema.INT64_MIN <= v <= schema.INT64_MAX else None


def _as_flow_id(v: Any) -> int | str | None:
    """A flow id: an int64, or else a string that is only compared for equality."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if schema.INT64_MIN <= v <= schema.INT64_MAX else str(v)
    return v if isinstance(v, str) else None


def _as_float(v: Any, default: float) -> float:
    if isinstance(v, bool):
        return default
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return f


def _as_raw(v: Any) -> msgspec.Raw | None:
    return None if v is None else msgspec.Raw(msgspec.json.encode(v))


def _coerce_event(item: Any):
    if not isinstance(item, dict):
        return None
    raw_args = item.get("args")
    args = schema.RawArgs()
    if isinstance(raw_args, dict):
        values = {}
        for attr, spelling in schema.ARG_SPELLINGS.items():
            v = raw_args.get(spelling)
            if attr in ("input_dims", "input_types", "concrete_inputs"):
                values[attr] = _as_raw(v)
            elif attr in ("label", "labels"):
                values[attr] = v if isinstance(v, str) else None
            elif attr in schema.OPTIONAL_INT_ARGS:
                values[attr] = _as_int(v)
            else:
                i = _as_int(v)
                values[attr] = -1 if i is None else i
        args = schema.RawArgs(**values)
    pid, tid = item.get("pid", 0), item.get("tid", 0)
    return schema.RawEvent(
        ph=str(item.get("ph", "")),
        cat=str(item.get("cat", "")),
        name=str(item.get("name", "")),
        pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else str(pid),
        tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else str(tid),
        ts=_as_float(item.get("ts"), float("nan")),
        dur=_as_float(item.get("dur"), 0.0),
        id=_as_flow_id(item.get("id")),
        args=args,
    )
