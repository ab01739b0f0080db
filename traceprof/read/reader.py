"""Open a trace file and decode it into raw events. No interpretation happens here.

``.json`` and ``.json.gz`` (recognised by content, not by name) holding either a Chrome trace
object (``{"traceEvents": [...], ...}``) or a bare event array, in UTF-8 (a byte order mark is
skipped). Every failure becomes a :class:`~traceprof.errors.TraceReadError` naming the file and
the problem in one line.

Reading is guarded: gzip data is inflated in chunks, the first bytes must look like JSON, and
every chunk of JSON is counted against the memory limit (:mod:`traceprof.limits`) as it arrives,
so a gzip bomb, ``/dev/zero`` or an endless FIFO stop early with a clean error. Values nested too
deeply for the decoder are skipped when traceprof does not read them, and refused when it does.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import msgspec
import numpy as np

from traceprof.read import chunks
from traceprof.trace import schema
from traceprof.errors import TraceReadError
from traceprof.read.limits import MemoryBudget

try:  # zlib-ng inflates a trace 3 to 5 times as fast as zlib; same interface, same messages
    from zlib_ng import zlib_ng as zlib
except ImportError:  # pragma: no cover - a platform without its wheels
    import zlib  # type: ignore[no-redef]

Progress = Callable[[str], None]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
#: an event array, typed (only the fields traceprof reads), and the same array entry by entry
EVENTS = msgspec.json.Decoder(list[schema.RawEvent])
ENTRIES = msgspec.json.Decoder(list[msgspec.Raw])
_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])

_READ_CHUNK = 1 << 22  # bytes of a compressed or unseekable input read at a time
_JSON_CHUNK = 1 << 24  # bytes of JSON inflated (and checked against the limit) at a time
_SNIFF_BYTES = 1 << 16  # the JSON must start (after whitespace) within these first bytes
#: deflate cannot compress better than about 1032:1; a gzip trailer that claims more is not one
_MAX_DEFLATE_RATIO = 1032


class RawDocument(msgspec.Struct):
    """A decoded trace: the top-level values other than the events, and the raw events.

    ``top`` holds decoded values for the keys traceprof reads (schema.TOP_LEVEL_KEYS_READ) and
    ``msgspec.Raw`` (undecoded JSON) for the others. ``dropped`` counts the entries of the event
    array that are not usable events, by reason (see :data:`DROP_REASONS`)."""

    path: str
    size_bytes: int
    top: dict[str, Any]
    events: list  # list[schema.RawEvent]
    warnings: list[str] = msgspec.field(default_factory=list)
    dropped: Counter = msgspec.field(default_factory=Counter)


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


def read_trace_bytes(path: str | os.PathLike, max_memory: int | str | None = None, *,
                     memory_scale: float = 1.0) -> bytes:
    """The JSON bytes of a trace file, decompressed when the file is gzip, without a UTF-8 byte
    order mark. ``max_memory``: the memory limit of the load (bytes or a size such as ``"8G"``;
    default: :func:`traceprof.limits.resolve_max_memory`); the JSON is counted against it as it
    arrives. ``memory_scale``: how many times the usual memory per byte of JSON the caller needs
    (a caller that keeps two copies of the trace: 2)."""
    p = Path(path)
    budget = MemoryBudget(p, max_memory, memory_scale)
    try:
        f = open(p, "rb")
    except FileNotFoundError:
        raise TraceReadError(p, "no such file") from None
    except IsADirectoryError:
        raise TraceReadError(p, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceReadError(p, "permission denied") from None
    except OSError as e:
        raise TraceReadError(p, f"cannot read: {e.strerror or e}") from None
    try:
        with f:
            return _read(p, f, budget)
    except IsADirectoryError:
        raise TraceReadError(p, "is a directory, not a trace file") from None
    except MemoryError:
        raise TraceReadError(p, "too large to load into memory") from None
    except OSError as e:
        raise TraceReadError(p, f"cannot read: {e.strerror or e}") from None


def _read(p: Path, f: BinaryIO, budget: MemoryBudget) -> bytes:
    regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
    head = f.read(_SNIFF_BYTES)
    if not head:
        raise TraceReadError(p, "empty file")
    if head[:2] == _GZIP_MAGIC:
        if regular:
            _expect_gzip_size(f, budget, len(head))
        return _collect(p, _inflate(p, head, f), budget, gzip=True)
    if not regular:  # a FIFO, a device: read until it ends or the limit stops it
        return _collect(p, _chunks(head, f), budget, gzip=False)
    # a plain regular file: its size is known before it is read
    budget.expect(os.fstat(f.fileno()).st_size)
    skip = _check_start(p, head, final=len(head) < _SNIFF_BYTES, gzip=False)
    f.seek(skip)
    data = f.read()
    budget.add(data)
    return data


def _expect_gzip_size(f: BinaryIO, budget: MemoryBudget, position: int) -> None:
    """Stop before inflating anything when the gzip trailer says the JSON cannot fit (its size
    field holds the last member's size modulo 4 GiB: never more than the whole)."""
    size = os.fstat(f.fileno()).st_size
    if size >= 18:
        f.seek(size - 4)
        inflated = int.from_bytes(f.read(4), "little")
        f.seek(position)  # where the caller's first read ended
        if inflated <= size * _MAX_DEFLATE_RATIO:
            budget.expect(inflated)


def _chunks(head: bytes, f: BinaryIO) -> Iterator[bytes]:
    yield head
    while chunk := f.read(_READ_CHUNK):
        yield chunk


def _inflate(p: Path, head: bytes, f: BinaryIO) -> Iterator[bytes]:
    """The inflated content of gzip data (every member), at most _JSON_CHUNK bytes at a time."""
    d: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""  # input between two members
    try:
        for data in _chunks(head, f):
            while data:
                if d is None:  # between members: zero padding, then another member or the end
                    data = (pending + data).lstrip(b"\0")
                    pending = b""
                    if len(data) < 2:
                        pending = data
                        break
                    if data[:2] != _GZIP_MAGIC:
                        raise TraceReadError(p, "corrupt gzip data (trailing bytes after the "
                                                "end of the compressed data)")
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out = d.decompress(data, _JSON_CHUNK)
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof:
                    data = d.unused_data
                    d = None
                elif not data and len(out) == _JSON_CHUNK:
                    data = b""  # more output may be pending without more input
                    while len(out) == _JSON_CHUNK and not d.eof:
                        out = d.decompress(b"", _JSON_CHUNK)
                        if out:
                            yield out
                    if d.eof:
                        data = d.unused_data
                        d = None
    except zlib.error as e:
        raise TraceReadError(p, f"corrupt or truncated gzip data ({e})") from None
    if d is not None or pending:
        raise TraceReadError(p, "corrupt or truncated gzip data (compressed file ended before the "
                                "end-of-stream marker was reached)")


def _collect(p: Path, chunks: Iterator[bytes], budget: MemoryBudget, gzip: bool) -> bytes:
    """Join the JSON chunks, checking the start, NUL bytes and the memory limit as they come."""
    parts = list(_checked(p, chunks, budget, gzip))
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    del parts
    return data


def _checked(p: Path, chunks: Iterator[bytes], budget: MemoryBudget | None,
             gzip: bool) -> Iterator[bytes]:
    """The JSON chunks without a byte order mark, checking the start, NUL bytes and the memory
    limit (unless ``budget`` is None: the caller counts) as they come."""
    head = b""
    started = False
    for chunk in chunks:
        if not started:
            head += chunk
            if len(head) < _SNIFF_BYTES:
                continue
            chunk, head = head[_check_start(p, head, final=False, gzip=gzip):], b""
            started = True
        if b"\0" in chunk:  # never in JSON text; a stream of zeros is refused at once
            raise TraceReadError(p, _not_json("it holds NUL bytes"))
        if budget is not None:
            budget.add(chunk)
        yield chunk
    if not started:
        chunk = head[_check_start(p, head, final=True, gzip=gzip):]
        if b"\0" in chunk:
            raise TraceReadError(p, _not_json("it holds NUL bytes"))
        if budget is not None:
            budget.add(chunk)
        yield chunk


def _not_json(why: str) -> str:
    return f"not JSON ({why}; expected a trace object or an event array)"


_UTF16_HINT = "traceprof reads UTF-8 JSON (convert with iconv -f {0} -t UTF-8)"


def _check_start(p: Path, head: bytes, final: bool, gzip: bool) -> int:
    """Check that ``head`` (the first bytes of the JSON, or all of it when ``final``) starts
    like a JSON trace; the number of bytes to skip (a UTF-8 byte order mark)."""
    if head[:4] in (b"\xff\xfe\0\0", b"\0\0\xfe\xff"):
        raise TraceReadError(p, "is UTF-32 text; " + _UTF16_HINT.format("UTF-32"))
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or _nul_interleaved(head[:64]):
        raise TraceReadError(p, "is UTF-16 text; " + _UTF16_HINT.format("UTF-16"))
    skip = 3 if head[:3] == _UTF8_BOM else 0
    text = head[skip:]
    if b"\0" in text:
        raise TraceReadError(p, _not_json("binary data: it holds NUL bytes"))
    stripped = text.lstrip(_WHITESPACE)
    if not stripped:
        if not final:
            raise TraceReadError(p, _not_json(f"only whitespace in its first {len(text):,} bytes"))
        raise TraceReadError(p, "empty trace (the gzip file holds no data)" if gzip
                             else "empty file")
    if stripped[:1] not in (b"{", b"["):
        raise TraceReadError(p, "not JSON (expected a trace object or an event array)")
    return skip


def _nul_interleaved(b: bytes) -> bool:
    """UTF-16 without a byte order mark: ASCII with a NUL byte after (or before) every byte."""
    if len(b) < 4:
        return False
    even, odd = b[0::2], b[1::2]
    if not even.strip(b"\0"):
        even, odd = odd, even
    return not odd.strip(b"\0") and even.isascii() and b"\0" not in even[:1]


def decode_trace(path: str | os.PathLike, data: bytes) -> RawDocument:
    """Decode trace JSON bytes into the top-level values and a list of raw events."""
    warnings: list[str] = []
    if data[:3] == _UTF8_BOM:
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
                raise TraceReadError(
                    path, f"JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
            data = without_deep_values(path, data)
            cut_deep = True


def load_raw(path: str | os.PathLike, progress: Progress | None = None,
             max_memory: int | str | None = None, memory_scale: float = 1.0, *,
             jobs: int | None = 1, chunk_bytes: int | None = None):
    """Read and decode one trace file (``max_memory``, ``memory_scale``: see
    :func:`read_trace_bytes`): a :class:`RawDocument`, or for a file of more than one run of
    ```chunk_bytes`` of JSON, an :class:`~traceprof.ingest.StreamedDocument` decoded run by run
    by ``jobs`` workers (None: one per CPU); see :mod:`traceprof.ingest`."""
    if progress:
        progress(f"reading {path}")
    from traceprof.read import ingest

    try:
        doc = _load_streamed(Path(path), max_memory, memory_scale,
                             jobs if jobs is not None else ingest.default_jobs(),
                             chunk_bytes or chunks.DEFAULT_CHUNK_BYTES)
    except ingest.Fallback:
        doc = None
    if doc is not None:
        return doc
    data = read_trace_bytes(path, max_memory, memory_scale=memory_scale)
    if progress:
        progress(f"decoding {len(data) / 1e6:.0f} MB of JSON")
    return decode_trace(path, data)


def _load_streamed(p: Path, max_memory, memory_scale: float, jobs: int, chunk_bytes: int):
    """The trace decoded run by run, or None when it is not a regular file of more than one
    run of JSON (the whole-document path reads it, and says what is wrong with it). The runs
    are cut at likely event boundaries first, and by the scanner when one of those cuts was
    not a boundary (see :class:`traceprof.chunks.Cutter`)."""
    from traceprof.read import ingest

    for splitter in ingest.SPLITTERS:
        try:
            read = _stream(p, max_memory, memory_scale, jobs, chunk_bytes, splitter)
            break
        except ingest.Recut:
            continue
    else:
        raise ingest.Fallback("runs that do not decode")  # the whole document says why
    if read is None:
        return None
    outline, columns = read
    warnings = ["invalid UTF-8 replaced with U+FFFD"] if columns.utf8_replaced else []
    if columns.entries and columns.dropped["not_object"] == columns.entries:
        raise ingest.Fallback("no entry is an event object")  # the whole document says so
    top = _streamed_top(outline)
    # the size of the JSON decoded, as a whole-document decode counts it (after replacement)
    size = outline.size_bytes + columns.utf8_grown
    return ingest.StreamedDocument(str(p), size, top, columns, warnings, columns.dropped)


def _stream(p: Path, max_memory, memory_scale: float, jobs: int, chunk_bytes: int,
            splitter: type):
    """The outline and columns of a regular file of more than one run of JSON, cut into runs
    by ``splitter``; None when it is not one."""
    from traceprof.read import ingest

    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return None  # a FIFO or a device is opened once, by the whole-document path
        f = open(p, "rb")
    except OSError:
        return None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        head = f.read(_SNIFF_BYTES)
        if not head:
            return None
        budget = MemoryBudget(p, max_memory, memory_scale)
        if head[:2] == _GZIP_MAGIC:
            claimed = _gzip_claimed_size(f, st.st_size, len(head))
            if claimed is not None and claimed <= chunk_bytes:
                return None
            budget.streamed()
            if claimed is not None:
                budget.expect(claimed)
            blocks = _checked(p, _inflate(p, head, f), None, gzip=True)
            return ingest.stream_document(p, blocks, None, jobs, chunk_bytes, budget, splitter,
                                          json_bytes=claimed)
        skip = _check_start(p, head, final=len(head) < _SNIFF_BYTES, gzip=False)
        if st.st_size - skip <= chunk_bytes:
            return None
        budget.streamed()
        budget.expect(st.st_size)
        f.seek(skip)
        return ingest.stream_document(p, _blocks(f), skip, jobs, chunk_bytes, budget, splitter,
                                      json_bytes=st.st_size - skip)


def _gzip_claimed_size(f: BinaryIO, size: int, position: int) -> int | None:
    """The size of the JSON a gzip trailer claims (None when it cannot be right)."""
    if size < 18:
        return None
    f.seek(size - 4)
    inflated = int.from_bytes(f.read(4), "little")
    f.seek(position)
    return inflated if inflated <= size * _MAX_DEFLATE_RATIO else None


def _blocks(f: BinaryIO) -> Iterator[bytes]:
    while block := f.read(_READ_CHUNK):
        yield block


def _streamed_top(outline) -> dict[str, Any]:
    """The top-level values of a document split into runs (its event array emptied)."""
    from traceprof.read.ingest import Fallback

    if outline.bare:  # the text is the array and whitespace
        if outline.top.strip(_WHITESPACE) != b"[]":
            raise Fallback("text after the event array")
        return {}
    try:
        outline.top.decode("utf-8")  # invalid UTF-8 there: replaced by the whole-document path
    except UnicodeDecodeError:
        raise Fallback("top level") from None
    try:
        top_raw = _top_level.decode(outline.top)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise Fallback("top level") from None
    if schema.TRACE_EVENTS_KEY not in top_raw or _duplicated_members(outline.top, top_raw):
        raise Fallback("top level")
    top_raw.pop(schema.TRACE_EVENTS_KEY)
    top, failed = _decoded_top_level(top_raw)
    if failed:
        raise Fallback("top level")
    return top


def _decoded_top_level(top_raw: dict[str, msgspec.Raw]) -> tuple[dict[str, Any], list[str]]:
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
            top_raw = _top_level.decode(data)
        except msgspec.ValidationError as e:
            raise TraceReadError(path, f"not a trace: {e}") from None
        except msgspec.DecodeError as e:
            raise TraceReadError(path, _json_problem(e)) from None
        members = _duplicated_members(data, top_raw)
        if members is not None:
            _resolve_duplicates(path, top_raw, members, warnings)
        if schema.TRACE_EVENTS_KEY not in top_raw:
            raise TraceReadError(
                path, f'not a Kineto/Chrome trace: no "{schema.TRACE_EVENTS_KEY}" array'
            )
        events_raw = top_raw.pop(schema.TRACE_EVENTS_KEY)
        top, failed = _decoded_top_level(top_raw)
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


def _duplicated_members(data: bytes, members: dict[str, msgspec.Raw]):
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
    for offset, key, raw in spans:
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
            key_start = _key_span(data, offset)[0]  # type: ignore[index]
            gap = data[pos:key_start].strip(_WHITESPACE).strip(b",")
            lost = b"{" + gap + b"}"
            inner = _top_level.decode(lost)
            base = _address(lost)
            inner_spans = sorted(((_address(r) - base, k, r) for k, r in inner.items()),
                                 key=lambda s: s[0])
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
                path, f'the top-level key "{key}" appears {counts[key]} times, '
                f"{len(with_events)} of them with events: which one is the trace is ambiguous")
        if with_events:
            top_raw[key] = with_events[0]
        warnings.append(f'the top-level key "{key}" appears {counts[key]} times; '
                        f"{'the one with events is used' if with_events else 'all are empty'}")
    repeated = sorted(k for k, n in counts.items() if n > 1 and k in schema.TOP_LEVEL_KEYS_READ)
    if repeated:
        listed = ", ".join(f'"{k}" ({counts[k]} times)' for k in repeated)
        warnings.append(f"top-level keys that appear more than once (the last value is used): "
                        f"{listed}")


def _is_empty_array(raw: msgspec.Raw) -> bool:
    return len(raw) < 256 and re.fullmatch(rb"\[\s*\]", bytes(raw)) is not None


# -- values nested too deeply for the decoder --------------------------------------------------

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


def _key_span(data: bytes, value: int) -> tuple[int, int] | None:
    """Where the key (with its quotes) of the object member whose value starts at ``value``
    lies; None if that value is not an object member."""
    i = value - 1
    while i >= 0 and data[i] in _WHITESPACE:
        i -= 1
    if i < 0 or data[i] != 0x3A:  # ":"
        return None
    i -= 1
    while i >= 0 and data[i] in _WHITESPACE:
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
    span = _key_span(data, value)
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
        raise TraceReadError(path, f"{what} of the event at byte {at:,} is JSON nested more than "
                                   f"{MAX_DEPTH} levels deep")

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
                    raise TraceReadError(path, f'the top-level "{key}" is JSON nested more than '
                                               f"{MAX_DEPTH} levels deep")
                cuts.append(cut(i, 2))
            elif data[top] != 0x5B:
                cuts.append(cut(i, 2))
        if bare or key == schema.TRACE_EVENTS_KEY and data[top] == 0x5B:
            event = pos[ancestor(i, level["event"])]
            if data[event] != 0x7B:  # an array among the events: not an event
                cuts.append(cut(i, level["event"]))
            else:
                value = pos[ancestor(i, level["field"])]
                name = _key_before(data, int(value))
                if name == schema.ARGS_KEY and data[value] == 0x7B:
                    arg = _key_before(data, int(pos[ancestor(i, level["arg"])]))
                    if arg in schema.ARG_NAMES_READ:
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


def _json_problem(e: msgspec.DecodeError) -> str:
    text = str(e)
    if "truncated" in text:
        return "truncated JSON (the file ends in the middle of the trace)"
    return f"not valid JSON ({text})"


_strict_event = msgspec.json.Decoder(schema.RawEvent)


def _lenient_events(path, events_raw, dropped: Counter) -> list:
    """Decode events whose values have unusual types, coercing each field or dropping the event
    (counted in ``dropped`` by reason)."""
    try:
        items = ENTRIES.decode(events_raw)
    except msgspec.ValidationError:
        raise TraceReadError(path, f'wrong schema: "{schema.TRACE_EVENTS_KEY}" is not an array'
                             ) from None
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
