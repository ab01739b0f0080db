"""Values nested too deeply for the decoder (it stops near the interpreter's recursion limit):
the brackets outside strings are found with numpy, and every such value that traceprof does not
read (a top-level key, an event field or an argument it skips) is replaced by ``null``; one
that it reads is a clean error, except a kernel label (``schema.KERNEL_LABEL_ARGS``), which is
optional: it is cut as well. The TensorBoard plugin's copy of a trace is cut the same way.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.errors import TraceReadError
from traceprof.read.source import WHITESPACE
from traceprof.trace import schema

#: nesting that traceprof refuses in a value it reads, and skips in one it does not (the decoder
#: itself stops near the interpreter's recursion limit, about 1,000 levels)
MAX_DEPTH = 64
_BRACKET = np.zeros(256, np.int8)
_BRACKET[list(b"[{")] = 1
_BRACKET[list(b"]}")] = -1
_SCAN_BLOCK = 1 << 22


def _brackets(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the brackets outside strings, whether each opens, and the nesting depth
    after each."""
    a = np.frombuffer(data, np.uint8)
    positions, deltas = [], []
    quotes = 0  # unescaped quotes before the block
    backslashes = 0  # backslashes that end the previous block
    for start in range(0, len(a), _SCAN_BLOCK):
        block = a[start : start + _SCAN_BLOCK]
        q = np.flatnonzero(block == 0x22)
        if len(q):
            # a quote after an odd run of backslashes is escaped
            before = np.where(q > 0, block[np.maximum(q - 1, 0)] == 0x5C, backslashes > 0)
            if before.any():
                index = np.arange(len(block))
                last_other = np.maximum.accumulate(np.where(block != 0x5C, index, -1))
                prev = last_other[np.maximum(q - 1, 0)]
                run = np.where(q > 0, q - 1 - prev, 0)
                run = np.where((q == 0) | (prev < 0), run + backslashes, run)
                q = q[(run & 1) == 0]
        delta = _BRACKET[block]
        b = np.flatnonzero(delta)
        outside = ((np.searchsorted(q, b) + quotes) & 1) == 0
        positions.append(b[outside] + start)
        deltas.append(delta[b[outside]])
        quotes += len(q)
        tail = len(block) - len(block.tobytes().rstrip(b"\\"))
        backslashes = backslashes + tail if tail == len(block) else tail
    pos = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    delta = np.concatenate(deltas) if deltas else np.zeros(0, np.int8)
    return pos, delta > 0, np.cumsum(delta, dtype=np.int64)


def key_span(data: bytes, value: int) -> tuple[int, int] | None:
    """Where the key (with its quotes) of the object member whose value starts at ``value``
    lies; None if that value is not an object member."""
    i = value - 1
    while i >= 0 and data[i] in WHITESPACE:
        i -= 1
    if i < 0 or data[i] != 0x3A:  # ":"
        return None
    i -= 1
    while i >= 0 and data[i] in WHITESPACE:
        i -= 1
    if i < 0 or data[i] != 0x22:
        return None
    j = i - 1
    while j >= 0:
        if data[j] == 0x22:
            k = j - 1
            while k >= 0 and data[k] == 0x5C:
                k -= 1
            if (j - 1 - k) % 2 == 0:
                return j, i + 1
        j -= 1
    return None


def _key_before(data: bytes, value: int) -> str | None:
    """The key of the object member whose value starts at ``value``; None if it is not one."""
    span = key_span(data, value)
    if span is None:
        return None
    try:
        return msgspec.json.decode(data[span[0] : span[1]], type=str)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def without_deep_values(path, data: bytes) -> bytes:
    """``data`` with every value nested more than :data:`MAX_DEPTH` levels deep that traceprof
    does not read replaced by ``null`` (top-level keys, event fields and arguments it does not
    read; entries of the event array that are arrays); TraceReadError when such a value is one
    that it reads."""
    too_deep = TraceReadError(path, f"JSON nested too deeply (more than {MAX_DEPTH} levels)")
    pos, opens, depth = _brackets(data)
    deep = np.flatnonzero(opens & (depth == MAX_DEPTH + 1))
    if not len(deep):
        raise too_deep
    bare = data[pos[0]] == 0x5B  # "[": an event array, not a trace object
    level = {"event": 2 if bare else 3}
    level["field"] = level["event"] + 1
    level["arg"] = level["field"] + 1

    def ancestor(i: int, d: int) -> int:
        """Index (into pos) of the opener at depth ``d`` that encloses bracket ``i``."""
        candidates = openers[d]
        k = int(np.searchsorted(candidates, i)) - 1
        if k < 0:  # pragma: no cover - unbalanced brackets; the decoder says where
            raise too_deep
        return int(candidates[k])

    openers = {d: np.flatnonzero(opens & (depth == d)) for d in range(1, level["arg"] + 1)}
    closers = {d: np.flatnonzero(~opens & (depth == d - 1)) for d in range(1, level["arg"] + 1)}

    def cut(i: int, d: int) -> tuple[int, int]:
        a = ancestor(i, d)
        c = closers[d]
        k = np.searchsorted(c, a)
        end = int(pos[c[k]]) + 1 if k < len(c) else len(data)
        return int(pos[a]), end

    def refuse(what: str, i: int):
        at = int(pos[ancestor(i, level["event"])])
        raise TraceReadError(
            path, f"{what} of the event at byte {at:,} is JSON nested more than {MAX_DEPTH} levels deep"
        )

    cuts = []
    end_of_last = -1
    for i in deep.tolist():
        if pos[i] < end_of_last:
            continue  # inside a value already cut
        if not bare:
            top = pos[ancestor(i, 2)]
            key = _key_before(data, int(top))
            if key != schema.TRACE_EVENTS_KEY:
                if key in schema.TOP_LEVEL_KEYS_READ:
                    raise TraceReadError(
                        path, f'the top-level "{key}" is JSON nested more than {MAX_DEPTH} levels deep'
                    )
                cuts.append(cut(i, 2))
            elif data[top] != 0x5B:
                cuts.append(cut(i, 2))
        if bare or (key == schema.TRACE_EVENTS_KEY and data[top] == 0x5B):
            event = pos[ancestor(i, level["event"])]
            if data[event] != 0x7B:  # an array among the events: not an event
                cuts.append(cut(i, level["event"]))
            else:
                value = pos[ancestor(i, level["field"])]
                name = _key_before(data, int(value))
                if name == schema.ARGS_KEY and data[value] == 0x7B:
                    arg = _key_before(data, int(pos[ancestor(i, level["arg"])]))
                    if arg in schema.ARG_NAMES_READ and arg not in schema.KERNEL_LABEL_ARGS:
                        refuse(f'"{arg}"', i)
                    cuts.append(cut(i, level["arg"]))
                elif name in schema.EVENT_FIELD_SPELLINGS:
                    refuse(f'"{name}"', i)
                else:
                    cuts.append(cut(i, level["field"]))
        end_of_last = cuts[-1][1]
    parts = []
    last = 0
    for start, end in cuts:
        parts += [data[last:start], b"null"]
        last = end
    parts.append(data[last:])
    return b"".join(parts)
