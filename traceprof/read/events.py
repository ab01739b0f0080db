"""Decode trace events into ``schema.RawEvent`` structs: a typed decoder that reads only the
fields traceprof uses (every other one is skipped unread), and a lenient path for the entries
whose values have unusual types, which coerces each field or drops the entry, counted by reason.
The whole-document decoder (:mod:`traceprof.read.document`) and the decoder of runs
(:mod:`traceprof.read.runs`) both use them, so that both give the same events.
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any

import msgspec

from traceprof.trace import schema

#: an event array, typed (only the fields traceprof reads), and the same array entry by entry.
#: (list[schema.RawEvent], written as the GenericAlias it is: mypy cannot read a struct that
#: msgspec makes at run time as a type)
EVENTS: msgspec.json.Decoder[list[msgspec.Struct]] = msgspec.json.Decoder(
    types.GenericAlias(list, (schema.RawEvent,))
)
ENTRIES = msgspec.json.Decoder(list[msgspec.Raw])

#: reasons an entry of the event array is dropped, as the warning words them
DROP_REASONS = {
    "not_object": "not a JSON object",
    "bad_phase": "with a phase (ph) that is not a string",
    "bad_name": "with a name that is not a string",
    "bad_category": "with a category (cat) that is not a string",
    "no_ts": "without a valid timestamp",
    "far_ts": "with a timestamp out of range",
    "bad_dur": "with a duration out of range",
}

_strict_event: msgspec.json.Decoder[msgspec.Struct] = msgspec.json.Decoder(schema.RawEvent)


def lenient_entries(items: list, dropped: Counter) -> list:
    """The events of the entries of an event array (``msgspec.Raw`` each): an entry the typed
    decoder reads as it is, else with each field coerced, else dropped (counted in ``dropped``
    by reason). The same events whether the array is decoded whole or run by run."""
    events = []
    for raw in items:
        try:
            events.append(_strict_event.decode(raw))
            continue
        except msgspec.ValidationError:
            pass
        ev = _coerce_event(msgspec.json.decode(raw))
        if isinstance(ev, str):
            dropped[ev] += 1
        else:
            events.append(ev)
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


def _text(item: dict, key: str) -> str | None:
    """A string field: "" when absent or null, None when of another type."""
    v = item.get(key)
    return "" if v is None else v if isinstance(v, str) else None


def _coerce_event(item: Any):
    """A RawEvent, or the reason (a DROP_REASONS key) the entry is not one."""
    if not isinstance(item, dict):
        return "not_object"
    ph, name, cat = _text(item, "ph"), _text(item, "name"), _text(item, "cat")
    if ph is None:
        return "bad_phase"
    if name is None:
        return "bad_name"
    if cat is None:
        return "bad_category"
    raw_args = item.get("args")
    args = schema.RawArgs()
    if isinstance(raw_args, dict):
        values: dict[str, Any] = {}
        for attr, spelling in schema.ARG_SPELLINGS.items():
            v = raw_args.get(spelling)
            if attr in ("input_dims", "input_types", "concrete_inputs", *schema.KERNEL_LABEL_ATTRS):
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
        ph=ph,
        cat=cat,
        name=name,
        pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else str(pid),
        tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else str(tid),
        ts=_as_float(item.get("ts"), float("nan")),
        dur=_as_float(item.get("dur"), float("nan")),
        id=_as_flow_id(item.get("id")),
        args=args,
    )
