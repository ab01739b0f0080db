"""The JSON text of a trace file: opened, inflated when it is gzip, checked and counted against
the memory limit. Nothing is decoded here.

``.json`` and ``.json.gz`` are recognised by content, not by name; the text is UTF-8 (a byte
order mark is skipped). Every failure becomes a :class:`~traceprof.errors.TraceReadError` naming
the file and the problem in one line.

Reading is guarded: gzip data is inflated in chunks, the first bytes must look like JSON, and
every chunk of JSON is counted against the memory limit (:mod:`traceprof.read.limits`) as it
arrives, so a gzip bomb, ``/dev/zero`` or an endless FIFO stop early with a clean error. The
streamed path (:mod:`traceprof.read.load`) reads its blocks with the same checks.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import xxhash

from traceprof.errors import TraceReadError
from traceprof.read.limits import MemoryBudget

try:  # zlib-ng inflates a trace 3 to 5 times as fast as zlib; same interface, same messages
    from zlib_ng import zlib_ng as zlib
except ImportError:  # pragma: no cover - a platform without its wheels
    import zlib  # type: ignore[no-redef]

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
WHITESPACE = b" \t\r\n"

_READ_CHUNK = 1 << 22  # bytes of a compressed or unseekable input read at a time
_JSON_CHUNK = 1 << 24  # bytes of JSON inflated (and checked against the limit) at a time
SNIFF_BYTES = 1 << 16  # the JSON must start (after whitespace) within these first bytes
#: deflate cannot compress better than about 1032:1; a gzip trailer that claims more is not one
_MAX_DEFLATE_RATIO = 1032


class ContentHash:
    """The xxh3-128 of the bytes of a file as a reader read them, in order from its first byte to
    its end: the cache keys what is decoded by it (:mod:`traceprof.read.cache`), so that a file
    replaced or rewritten between the cache's look-up and the read is stored as what was read.
    ``value`` is None until a reading of the file reached its end without a gap; each opening
    (:func:`open_trace`) starts it again."""

    def __init__(self) -> None:
        self.value: str | None = None


class _HashedFile(io.FileIO):
    """A file whose bytes are hashed as they are read (a read that skips ahead, as the gzip
    trailer's, is not hashed; the hash is complete when the reads in order reach the end)."""

    def __init__(self, path: Path, content: ContentHash) -> None:
        super().__init__(path, "rb")
        self._content = content
        self._hash = xxhash.xxh3_128()
        self._hashed = 0  # bytes hashed from the start
        content.value = None

    def readinto(self, buffer: Any) -> int | None:
        position = self.tell()
        n = super().readinto(buffer)
        if n is not None:  # None: a non-blocking file, never opened here
            self._feed(position, memoryview(buffer).cast("B")[:n])
        return n

    def readall(self) -> bytes:
        position = self.tell()
        data = super().readall()
        self._feed(position, memoryview(data))
        self._feed(position + len(data), memoryview(b""))  # readall stops at the end
        return data

    def _feed(self, position: int, data: memoryview) -> None:
        if position <= self._hashed < position + len(data):
            self._hash.update(data[self._hashed - position :])
            self._hashed = position + len(data)
        elif not data and position == self._hashed:  # the end, every byte before it hashed
            self._content.value = self._hash.hexdigest()


def open_trace(path: Path, content: ContentHash | None = None) -> BinaryIO:
    """``path`` opened to be read (buffered), its bytes hashed into ``content`` as they are read
    when it is given."""
    if content is None:
        return open(path, "rb")
    return io.BufferedReader(_HashedFile(path, content), _READ_CHUNK)


def read_trace_bytes(
    path: str | os.PathLike,
    max_memory: int | str | None = None,
    *,
    memory_scale: float = 1.0,
    content: ContentHash | None = None,
) -> bytes:
    """The JSON bytes of a trace file, decompressed when the file is gzip, without a UTF-8 byte
    order mark. ``max_memory``: the memory limit of the load (bytes or a size such as ``"8G"``;
    default: :func:`traceprof.read.limits.resolve_max_memory`); the JSON is counted against it as it
    arrives. ``memory_scale``: how many times the usual memory per byte of JSON the caller needs
    (a caller that keeps two copies of the trace: 2). ``content``: hashes the bytes read."""
    p = Path(path)
    budget = MemoryBudget(p, max_memory, memory_scale)
    with _file_errors(p):
        f = open_trace(p, content)
    with _file_errors(p), f:
        return _read(p, f, budget)


@contextlib.contextmanager
def _file_errors(p: Path) -> Iterator[None]:
    """What opening or reading the trace file ``p`` fails with, as a :class:`TraceReadError`."""
    try:
        yield
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


def _read(p: Path, f: BinaryIO, budget: MemoryBudget) -> bytes:
    regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
    head = f.read(SNIFF_BYTES)
    if not head:
        raise TraceReadError(p, "empty file")
    if head[:2] == GZIP_MAGIC:
        if regular:
            _expect_gzip_size(f, budget, len(head))
        return _collect(p, inflate(p, head, f), budget, gzip=True)
    if not regular:  # a FIFO, a device: read until it ends or the limit stops it
        return _collect(p, _chunks(head, f), budget, gzip=False)
    # a plain regular file: its size is known before it is read
    budget.expect(os.fstat(f.fileno()).st_size)
    skip = check_start(p, head, final=len(head) < SNIFF_BYTES, gzip=False)
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


def inflate(p: Path, head: bytes, f: BinaryIO) -> Iterator[bytes]:
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
                    if data[:2] != GZIP_MAGIC:
                        raise TraceReadError(
                            p, "corrupt gzip data (trailing bytes after the end of the compressed data)"
                        )
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
    except zlib.error as e:  # type: ignore[misc]  # zlib_ng.pyi: an Exception, not its class
        raise TraceReadError(p, f"corrupt or truncated gzip data ({e})") from None
    if d is not None or pending:
        raise TraceReadError(
            p,
            "corrupt or truncated gzip data (compressed file ended before the "
            "end-of-stream marker was reached)",
        )


def _collect(p: Path, chunks: Iterator[bytes], budget: MemoryBudget, gzip: bool) -> bytes:
    """Join the JSON chunks, checking the start, NUL bytes and the memory limit as they come."""
    parts = list(checked(p, chunks, budget, gzip))
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    del parts
    return data


def checked(p: Path, chunks: Iterator[bytes], budget: MemoryBudget | None, gzip: bool) -> Iterator[bytes]:
    """The JSON chunks without a byte order mark, checking the start, NUL bytes and the memory
    limit (unless ``budget`` is None: the caller counts) as they come."""
    head = b""
    started = False
    for chunk in chunks:
        if not started:
            head += chunk
            if len(head) < SNIFF_BYTES:
                continue
            chunk, head = head[check_start(p, head, final=False, gzip=gzip) :], b""
            started = True
        if b"\0" in chunk:  # never in JSON text; a stream of zeros is refused at once
            raise TraceReadError(p, _not_json("it holds NUL bytes"))
        if budget is not None:
            budget.add(chunk)
        yield chunk
    if not started:
        chunk = head[check_start(p, head, final=True, gzip=gzip) :]
        if b"\0" in chunk:
            raise TraceReadError(p, _not_json("it holds NUL bytes"))
        if budget is not None:
            budget.add(chunk)
        yield chunk


def _not_json(why: str) -> str:
    return f"not JSON ({why}; expected a trace object or an event array)"


_UTF16_HINT = "traceprof reads UTF-8 JSON (convert with iconv -f {0} -t UTF-8)"


def check_start(p: Path, head: bytes, final: bool, gzip: bool) -> int:
    """Check that ``head`` (the first bytes of the JSON, or all of it when ``final``) starts
    like a JSON trace; the number of bytes to skip (a UTF-8 byte order mark)."""
    if head[:4] in (b"\xff\xfe\0\0", b"\0\0\xfe\xff"):
        raise TraceReadError(p, "is UTF-32 text; " + _UTF16_HINT.format("UTF-32"))
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or _nul_interleaved(head[:64]):
        raise TraceReadError(p, "is UTF-16 text; " + _UTF16_HINT.format("UTF-16"))
    skip = 3 if head[:3] == UTF8_BOM else 0
    text = head[skip:]
    if b"\0" in text:
        raise TraceReadError(p, _not_json("binary data: it holds NUL bytes"))
    stripped = text.lstrip(WHITESPACE)
    if not stripped:
        if not final:
            raise TraceReadError(p, _not_json(f"only whitespace in its first {len(text):,} bytes"))
        raise TraceReadError(p, "empty trace (the gzip file holds no data)" if gzip else "empty file")
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


def gzip_claimed_size(f: BinaryIO, size: int, position: int) -> int | None:
    """The size of the JSON a gzip trailer claims (None when it cannot be right)."""
    if size < 18:
        return None
    f.seek(size - 4)
    inflated = int.from_bytes(f.read(4), "little")
    f.seek(position)
    return inflated if inflated <= size * _MAX_DEFLATE_RATIO else None


def file_blocks(f: BinaryIO) -> Iterator[bytes]:
    """The rest of a file, in blocks of :data:`_READ_CHUNK` bytes."""
    while block := f.read(_READ_CHUNK):
        yield block
