"""Split the text of a trace into the top-level document and runs of whole events, without
decoding it.

A scanner reads the JSON block by block and follows, with numpy over each block, which bytes
lie inside strings (quotes not escaped by an odd run of backslashes) and the nesting depth of
the brackets outside them. It finds the ``traceEvents`` array (or the bare event array) and cuts
it after an event's closing brace about every ``chunk_bytes`` bytes. It never decodes anything:
the runs are decoded later (in parallel) and any text the scanner cannot place (a truncated file,
no event array) is left to the whole-document decoder, which says what is wrong.

Cutting between two values is always safe: if each run of values decodes as a JSON array, the
whole array decodes to the same values, so a run that does not decode sends the trace back to
the whole-document decoder.

A :class:`Cutter` cuts the array without following it: at likely boundaries between events,
which the decoding of the runs confirms (or refutes: the scanner then cuts the text again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import msgspec
import numpy as np

from traceprof.trace import schema

#: bytes of events per run by default (a run is one task of a worker)
DEFAULT_CHUNK_BYTES = 1 << 23

_QUOTE, _BACKSLASH, _OPEN_BRACE, _CLOSE_BRACE, _COMMA = 0x22, 0x5C, 0x7B, 0x7D, 0x2C
_BRACKET = np.zeros(256, np.int8)
_BRACKET[list(b"[{")] = 1
_BRACKET[list(b"]}")] = -1
_WHITESPACE = b" \t\r\n"
_KEY_WINDOW = 4096  # bytes before an array searched for its key (more whitespace: not split)
_HEAD_PIECE = 1 << 16  # bytes of the text before the event array scanned at a time


class Unsplittable(Exception):
    """The text is not a trace the scanner can split; the whole-document decoder reads it."""


class Run(msgspec.Struct, frozen=True):
    """Events ``[start, end)`` (offsets in the JSON text): values separated by commas; every run
    but the first starts with the comma that follows the previous run's last event."""

    start: int
    end: int
    first: bool  # the first run of the array: no comma before its first event


class Outline(msgspec.Struct):
    """What the scanner found: the top-level document with an empty event array in place of
    the events (small: it is decoded like a whole trace), and the size of the JSON text."""

    top: bytes
    size_bytes: int
    bare: bool  # the text is an event array, not a trace object


class Scanner:
    """Follows strings and nesting across blocks of JSON text; cuts the event array into runs.

    Feed blocks in order with :meth:`feed` (each returns the runs completed so far), then call
    :meth:`finish` for the outline of the document. Before the event array every bracket counts;
    inside it only braces do (an event is an object: it ends where the object depth falls back
    to the array's), which keeps the scan to two comparisons per byte."""

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.offset = 0  # offset of the next block in the text
        self.in_string = False
        self.backslashes = 0  # backslashes that end the text so far
        self.depth = 0  # before the array: bracket depth; inside it: object depth
        self.state = 0  # 0: before the event array, 1: inside it, 2: after it
        self.events_depth = 0  # bracket depth inside the event array (2, or 1 when bare)
        self.level = 0  # object depth between two events
        self.head: list[bytes] = []  # the text before the event array (with its "[")
        self.tail: list[bytes] = []  # the text from the event array's "]" on
        self.run_start = 0
        self.events_start = -1  # offset just after the event array's "["
        self.gap_open = True  # the text inside the array ends after an event and whitespace
        self.objects = 0  # JSON objects (outside strings) of the last block, for the memory limit
        self.opening = b""  # the text's first byte other than whitespace

    @classmethod
    def inside_events(
        cls, offset: int, events_start: int, events_depth: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> Scanner:
        """A scanner for text that starts at ``offset`` between two events of an event array
        (or just after its "[", ``events_start``), outside any string. Its outline's ``top`` is
        the text from the array's "]" on."""
        scanner = cls(chunk_bytes)
        scanner.offset = scanner.run_start = offset
        scanner.state = 1
        scanner.events_depth = events_depth
        scanner.level = scanner.depth = events_depth - 1
        scanner.events_start = events_start
        return scanner

    def feed(self, block: bytes) -> list[Run]:
        runs: list[Run] = []
        if not block:
            return runs
        if self.state == 0:
            start = self.feed_head(block)
            if start is None:
                return runs
            block = block[start:]
        elif self.state == 2:
            self.offset += len(block)
            self.objects = 0
            self.tail.append(block)
            return runs
        else:
            self.objects = 0
        base = self.offset
        self.offset += len(block)
        runs.extend(self._cut(block, base))
        return runs

    def feed_head(self, block: bytes) -> int | None:
        """Follow a block of the text before the event array: the offset in ``block`` just
        after the array's "[" (the rest of the block is not read), or None when the array does
        not start in it."""
        base = self.offset
        self.offset += len(block)
        self.objects = 0
        start = self._find_events(block, base)
        if start is None:
            self.head.append(block)
            return None
        self.head.append(block[:start])
        self.offset = base + start
        return start

    @property
    def keep_from(self) -> int:
        """The offset from which the text read so far may still belong to a run."""
        return self.run_start if self.state == 1 else self.offset

    def finish(self) -> Outline:
        """The outline of the document; Unsplittable when the text has no complete event
        array (the top level is checked when it is decoded)."""
        if self.state != 2:
            raise Unsplittable("no complete event array")
        top = b"".join(self.head) + b"".join(self.tail)
        return Outline(top, self.offset, self.events_depth == 1)

    # -- internals --------------------------------------------------------------------------

    def _quotes(self, block: bytes, a: np.ndarray) -> np.ndarray:
        """Positions of the quotes in the block that open or close a string; updates the
        string state and the backslashes that end the text."""
        q = np.flatnonzero(a == _QUOTE)
        n = len(a)
        if len(q) and (self.backslashes or b"\\" in block):
            prev = a[np.maximum(q - 1, 0)] == _BACKSLASH
            prev[q == 0] = self.backslashes > 0
            if prev.any():
                escaped = np.zeros(len(q), bool)
                for k in np.flatnonzero(prev).tolist():
                    j = int(q[k]) - 1
                    run = 0
                    while j >= 0 and a[j] == _BACKSLASH:
                        run += 1
                        j -= 1
                    if j < 0:
                        run += self.backslashes
                    escaped[k] = run & 1
                q = q[~escaped]
        tail = 0
        while tail < n and block[n - 1 - tail] == _BACKSLASH:
            tail += 1
        self.backslashes = self.backslashes + tail if tail == n else tail
        return q

    def _outside(self, q: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Which positions lie outside strings (an even number of quotes before them, odd when
        the block starts inside a string); then the string state after the block."""
        outside = ((np.searchsorted(q, positions) + self.in_string) & 1) == 0
        self.in_string = bool((len(q) + self.in_string) & 1)
        return outside

    def _find_events(self, block: bytes, base: int) -> int | None:
        """Follow every bracket up to the event array; the offset in ``block`` just after its
        "[" (None when it is not in this block)."""
        if base == 0:
            self.opening = block.lstrip(_WHITESPACE)[:1]
            if self.opening not in (b"{", b"["):
                raise Unsplittable("not a JSON object or array")
        a = np.frombuffer(block, np.uint8)
        q = self._quotes(block, a)
        brackets = np.flatnonzero(_BRACKET[a])
        brackets = brackets[self._outside(q, brackets)]
        delta = _BRACKET[a[brackets]].astype(np.int64)
        depth = self.depth + np.cumsum(delta)
        self.depth = int(depth[-1]) if len(depth) else self.depth
        self.objects += int(np.count_nonzero(a[brackets] == _OPEN_BRACE))
        for k in np.flatnonzero((delta > 0) & (depth <= 2)).tolist():
            pos = int(brackets[k])
            d = int(depth[k])
            if block[pos] != 0x5B:  # "{"
                continue
            if d == 1:  # a bare event array, or an array after the trace object: not JSON
                if self.opening != b"[":
                    raise Unsplittable("a value after the top-level object")
                self.events_depth = 1
            elif d == 2 and self._key_before(block, pos) == schema.TRACE_EVENTS_KEY:
                self.events_depth = 2
            else:
                continue
            self.state = 1
            self.in_string = False
            self.backslashes = 0
            self.level = self.depth = self.events_depth - 1
            self.run_start = self.events_start = base + pos + 1
            return pos + 1
        return None

    def _key_before(self, block: bytes, pos: int) -> str | None:
        """The key of the object member whose value starts at ``pos`` of ``block``."""
        text = block[max(pos - _KEY_WINDOW, 0) : pos]
        if pos < _KEY_WINDOW and self.head:
            text = b"".join(self.head)[-_KEY_WINDOW:] + text
        end = len(text.rstrip(_WHITESPACE))
        if not end or text[end - 1] != 0x3A:  # ":"
            return None
        stripped = text[: end - 1].rstrip(_WHITESPACE)
        quoted = b'"' + schema.TRACE_EVENTS_KEY.encode() + b'"'
        before = stripped[: -len(quoted)]
        escapes = len(before) - len(before.rstrip(b"\\"))
        if stripped.endswith(quoted) and escapes % 2 == 0:
            return schema.TRACE_EVENTS_KEY
        return None

    def _array_end(self, block: bytes, a: np.ndarray, ends: np.ndarray) -> int:
        """Where the event array's "]" is in ``block`` (-1: not in it): the first byte other
        than whitespace after an event (or after the "[") that is not a comma."""
        n = len(block)
        if self.gap_open:  # the text so far ends after an event (or the "[") and whitespace
            rest = block.lstrip(_WHITESPACE)
            if not rest:
                return -1
            self.gap_open = False
            if rest[:1] == b"]":
                return n - len(rest)
        if not len(ends):
            return -1
        after = ends + 1
        last_open = int(after[-1]) >= n
        inside = after[after < n]
        odd = inside[a[inside] != _COMMA]
        for c in odd.tolist():
            j = c
            while j < n and block[j] in _WHITESPACE:
                j += 1
            if j == n:
                self.gap_open = True
                return -1
            if block[j] == 0x5D:  # "]"
                return j
        self.gap_open = last_open
        return -1

    def _cut(self, block: bytes, base: int) -> Iterator[Run]:
        """Runs of the events in ``block`` (inside the array), and the array's end."""
        a = np.frombuffer(block, np.uint8)
        start_depth = self.depth
        q = self._quotes(block, a)
        braces = np.flatnonzero((a == _OPEN_BRACE) | (a == _CLOSE_BRACE))
        braces = braces[self._outside(q, braces)]
        delta = np.where(a[braces] == _OPEN_BRACE, 1, -1)
        self.objects += int(np.count_nonzero(delta > 0))
        depth = start_depth + np.cumsum(delta)
        self.depth = int(depth[-1]) if len(depth) else start_depth
        ends = braces[(delta < 0) & (depth == self.level)]  # an event's "}"
        stop = self._array_end(block, a, ends)
        if stop >= 0:
            ends = ends[ends < stop]
        cut_at = ends.astype(np.int64) + base + 1  # after an event's "}"
        k = 0
        while k < len(cut_at):
            target = self.run_start + self.chunk_bytes
            k = int(np.searchsorted(cut_at, target, side="left"))
            if k >= len(cut_at):
                break
            end = int(cut_at[k])
            yield Run(self.run_start, end, self.run_start == self.events_start)
            self.run_start = end
            k += 1
        if stop >= 0:
            end = base + stop
            if end > self.run_start:
                yield Run(self.run_start, end, self.run_start == self.events_start)
            self.run_start = end
            self.state = 2
            self.tail.append(block[stop:])


#: a likely boundary between two events: the "}" that closes one, a comma, the "{" that opens
#: the next (whitespace between). It may be text inside a string: see :class:`Cutter`.
_LIKELY_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
#: the likely end of the event array: the "}" of its last event, then its "]". Text after the
#: array can hold likely boundaries too (Kineto writes deviceProperties, one object per GPU,
#: after the events in some versions): a cut there would not decode, and cost a second read.
_LIKELY_END = re.compile(rb"\}[ \t\r\n]*\]")
_LAST_BOUNDARY_WINDOW = 1 << 16


def _last_likely_boundary(text: bytes) -> int:
    """The offset just after the "}" of the last likely boundary before the likely end of the
    array in ``text`` (0 when there is none): the scanner reads only the text after it. Found
    by searching windows of growing size back from that end."""
    end = _LIKELY_END.search(text)
    stop = end.start() if end is not None else len(text)
    window = _LAST_BOUNDARY_WINDOW
    while True:
        start = max(0, stop - window)
        last = None
        for last in _LIKELY_BOUNDARY.finditer(text, start, stop + 1):  # noqa: B007 - the last one is kept
            pass
        if last is not None:
            return last.start() + 1
        if start == 0:
            return 0
        window *= 8


class Cutter:
    """Cuts the event array into runs at likely event boundaries, without following strings.

    The text before the event array is followed by a :class:`Scanner`, and so is the text from
    the last cut on (where the array ends). In between, a run ends at the first ``},{`` (with
    any whitespace) at least ``chunk_bytes`` after its start: no byte but those of the search
    is looked at, so cutting costs next to nothing. Such a cut can lie inside a string; the
    runs' decoding finds it out. Each run is decoded as a JSON array, and the first starts just
    after the array's "[": if every run decodes, each one ended after a whole value of the
    array (JSON is read the same way from the same state), so each cut was a real boundary
    and the runs hold the events a scan would have cut. If a run does not decode, the caller
    reads the text again with a :class:`Scanner`. Feed blocks with :meth:`feed`, then
    :meth:`finish` gives the last runs and the :attr:`outline`."""

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.head = Scanner(chunk_bytes)  # the text up to the event array
        self.blocks: list[bytes] = []  # the text from (about) run_start on, as it came
        self.blocks_start = 0  # offset of the first of them
        self.offset = 0  # offset of the next block
        self.run_start = 0
        self.search_from = 0  # no likely boundary before this offset
        self.outline: Outline | None = None
        self.objects = None  # not counted here: the memory budget counts the blocks itself

    @property
    def keep_from(self) -> int:
        return self.offset if self.head.state == 0 else self.run_start

    def feed(self, block: bytes) -> list[Run]:
        self.offset += len(block)
        if self.head.state == 0:
            # in pieces: the scanner reads no further than the array's "[" (or a piece past it)
            for at in range(0, len(block), _HEAD_PIECE):
                start = self.head.feed_head(block[at : at + _HEAD_PIECE])
                if start is not None:
                    block = block[at + start :]
                    break
            else:
                return []
            self.run_start = self.blocks_start = self.search_from = self.head.events_start
        self.blocks.append(block)
        runs = []
        while (end := self._likely_boundary()) is not None:
            runs.append(Run(self.run_start, end, self.run_start == self.head.events_start))
            self.run_start = end
            while self.blocks and self.blocks_start + len(self.blocks[0]) <= end:  # before the cut
                self.blocks_start += len(self.blocks.pop(0))
        return runs

    def _likely_boundary(self) -> int | None:
        """The offset just after the "}" of the first likely boundary whose "}" is at least
        ``chunk_bytes`` after the run's start, if the text so far has one. A boundary that
        straddles two blocks is not seen: the run ends at the next one."""
        pos = max(self.run_start + self.chunk_bytes - 1, self.search_from)
        block_start = self.blocks_start
        for block in self.blocks:
            if pos < block_start + len(block):
                m = _LIKELY_BOUNDARY.search(block, max(pos - block_start, 0))
                if m is not None:
                    return block_start + m.start() + 1
            block_start += len(block)
        self.search_from = max(pos, block_start)
        return None

    def finish(self) -> list[Run]:
        """The runs from the last cut on: up to the last likely boundary before the likely end
        of the array (the first "}" then "]"), like the other runs, and from there on found by
        a :class:`Scanner`, which also finds the end of the array. Unsplittable when there is
        no complete event array."""
        if self.head.state == 0:
            raise Unsplittable("no complete event array")
        if self.blocks:
            skip = self.run_start - self.blocks_start
            text = b"".join([memoryview(self.blocks[0])[skip:], *self.blocks[1:]])
        else:
            text = b""
        self.blocks = []
        runs = []
        cut = _last_likely_boundary(text)
        if cut:
            runs.append(Run(self.run_start, self.run_start + cut, self.run_start == self.head.events_start))
            self.run_start += cut
            text = text[cut:]
        tail = Scanner.inside_events(
            self.run_start, self.head.events_start, self.head.events_depth, len(text) + 1
        )
        runs += tail.feed(text)
        outline = tail.finish()
        self.outline = Outline(
            b"".join(self.head.head) + outline.top, outline.size_bytes, self.head.events_depth == 1
        )
        return runs


def scan(blocks: Iterable[bytes], chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """Every run of a text given as blocks, then (last) its :class:`Outline`."""
    scanner = Scanner(chunk_bytes)
    for block in blocks:
        yield from scanner.feed(block)
    yield scanner.finish()
