"""The cache: decoded traces (their columns, memory-mapped on reading) and analyses, so that the
second look at a trace skips its JSON.

An entry is found by a hash of the trace file's whole content as stored (gzip or not: xxh3, 128
bits, about 0.1 s per GB), of traceprof's code (its version and the size and time of each of its
modules, so an edited checkout never reads entries of its former self) and of the options the
entry depends on. A file changed in place, even with its size and time restored, hashes to
another entry; the cache never changes a number.

One file per entry, ``<content hash>-<kind>-<hash of code and options>.tpc``:

- a fixed prefix: magic, format version, header and data lengths, and an xxh3 checksum of
  everything after the prefix;
- a header (msgpack): the entry's key, kind, and the dtype, shape and offset of every array;
- the payload (msgpack): the object itself, each numpy array replaced by its number;
- the arrays, each 64-byte aligned.

Entries are written to a temporary file and renamed into place, so a reader sees a whole entry
or none, and two writers of one entry both succeed. An entry that is truncated, corrupt, of
another format or of another key is ignored with a one-line warning, removed and rebuilt.

Bounded: entries past the size limit (``$TRACEPROF_CACHE_SIZE``, default 4 GB) are removed least
recently used first (a hit touches its entry's time); an entry larger than the limit is not
written. A directory that cannot be created or written (read-only, full) means no cache, with
a warning, never a failure. Where: ``$TRACEPROF_CACHE`` (``off`` turns the cache off), else the
platform's user cache directory (``~/.cache/traceprof`` on Linux).
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import os
import stat
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
import xxhash

from traceprof import units
from traceprof.errors import OptionError
from traceprof.read.limits import parse_size

DIR_ENV = "TRACEPROF_CACHE"
SIZE_ENV = "TRACEPROF_CACHE_SIZE"
#: values of $TRACEPROF_CACHE that turn the cache off
OFF_VALUES = frozenset({"off", "0", "no", "false", "none"})
DEFAULT_SIZE = 4 * 10**9
#: bump when the layout of an entry, or of what it holds, changes
FORMAT_VERSION = 1
SUFFIX = ".tpc"
MAGIC = b"TPCACHE\x00"
# magic, format version, header length, data length (header, payload, arrays), xxh3-128 of the data
_PREFIX = struct.Struct("<8sIIQ16s")
_ALIGN = 64
_HASH_WINDOW = 1 << 26  # a multiple of the page size

T = TypeVar("T")


class CacheWarning(UserWarning):
    """The cache could not be used for a trace (the analysis goes on without it)."""


def warn(message: str) -> None:
    """A one-line warning, shown as ``traceprof cache: CacheWarning: <message>``."""
    warnings.warn_explicit(message, CacheWarning, "traceprof cache", 0, module="traceprof")


def cache_directory() -> Path | None:
    """Where entries live: ``$TRACEPROF_CACHE``, else the user cache directory; None: turned off."""
    value = os.environ.get(DIR_ENV)
    if value is not None:
        if value.strip().lower() in OFF_VALUES or not value.strip():
            return None
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("traceprof", appauthor=False))


def size_limit() -> int:
    """The cache's size limit in bytes: ``$TRACEPROF_CACHE_SIZE`` (8G, 500M...), else 4 GB."""
    value = os.environ.get(SIZE_ENV)
    if value is None or not value.strip():
        return DEFAULT_SIZE
    try:
        return parse_size(value)
    except ValueError as e:
        raise OptionError(f"${SIZE_ENV}: {e}") from None


def enabled(cache: bool | None) -> bool:
    """Whether to use the cache: ``cache`` when given, else whether it is turned on."""
    return bool(cache) if cache is not None else cache_directory() is not None


# ---- keys -----------------------------------------------------------------------------------


def content_hash(path: str | os.PathLike) -> str | None:
    """xxh3-128 of the file's bytes as stored, mapped a window at a time (never held whole,
    never copied); None when ``path`` is not a regular file (a pipe, a device: nothing to key
    it by) or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h = xxhash.xxh3_128()
        for offset in range(0, size, _HASH_WINDOW):
            with mmap.mmap(fd, min(_HASH_WINDOW, size - offset), access=mmap.ACCESS_READ, offset=offset) as m:
                h.update(m)
        return h.hexdigest()
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


#: an entry read is marked used (its mtime, the LRU order) unless it was in the last minute:
#: a job's second look reads 64 entries, and the order needs no finer grain
_TOUCH_AFTER_NS = 60 * 10**9

#: threads hashing several files at once (the hash runs without the GIL)
_HASH_THREADS = 4


def content_hashes(paths: list[str]) -> Iterator[str | None]:
    """:func:`content_hash` of each path, in order, computed a few files ahead in threads (the
    hash runs without the GIL) while the caller uses the ones before: a job's second look
    decodes a rank's entry while the next ranks' files are hashed."""
    if len(paths) < 2:
        yield from map(content_hash, paths)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(_HASH_THREADS, os.cpu_count() or 1, len(paths))) as pool:
        yield from pool.map(content_hash, paths)


def cache_store(cache: bool | None) -> Store | None:
    """The cache to use (None: none), as ``cache`` asks (None: unless turned off)."""
    if cache is False:
        return None
    return Store.default()


@functools.cache
def code_fingerprint() -> str:
    """traceprof's version and the size and modification time of each of its modules: an entry
    written by other code is another entry."""
    from traceprof.version import __version__

    root = Path(__file__).resolve().parent.parent
    h = xxhash.xxh3_64(f"{__version__}/{FORMAT_VERSION}".encode())
    for module in sorted(root.rglob("*.py")):
        with contextlib.suppress(OSError):
            st = module.stat()
            h.update(f"{module.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def entry_name(content: str, kind: str, options: Any = None) -> str:
    """The file name of an entry: the content hash, the kind, and a hash of the code and the
    options it depends on (any msgpack-encodable value)."""
    detail = xxhash.xxh3_64(code_fingerprint().encode() + msgspec.msgpack.encode(options)).hexdigest()
    return f"{content}-{kind}-{detail}{SUFFIX}"


# ---- entries --------------------------------------------------------------------------------


class _Header(msgspec.Struct):
    name: str
    kind: str
    payload: int  # bytes of the msgpack payload, after the header
    arrays: list[tuple[str, tuple[int, ...], int, int]]  # dtype, shape, offset in the data, bytes


#: directories found unwritable (warned about once)
_UNWRITABLE: set[Path] = set()


class Store:
    """The entries in ``directory`` (created when first written), at most ``limit`` bytes."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit

    @classmethod
    def default(cls) -> Store | None:
        directory = cache_directory()
        return cls(directory, size_limit()) if directory is not None else None

    # -- reading

    def get(self, name: str, kind: str, type_: type[T]) -> T | None:
        """The object in entry ``name``, decoded as ``type_`` (its arrays memory-mapped,
        copy-on-write); None when there is no such entry, or a warning and None when it cannot
        be used."""
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None  # no entry (or no cache directory: writing it says why)
        except OSError as e:
            warn(f"{path}: cannot read the cache entry ({e.strerror}); analyzing without it")
            return None
        try:
            st = os.fstat(fd)
            size = st.st_size
            if size < _PREFIX.size:
                raise _Unusable("is truncated")
            data = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
            value = _decode(data, name, kind, type_)
        except (OSError, ValueError) as e:
            self._unusable(path, f"cannot be mapped ({e})")
            return None
        except _Unusable as e:
            self._unusable(path, str(e))
            return None
        finally:
            os.close(fd)
        if time.time_ns() - st.st_mtime_ns > _TOUCH_AFTER_NS:  # a minute's precision is enough
            with contextlib.suppress(OSError):
                os.utime(path)  # the least recently used entries go first
        return value

    def _unusable(self, path: Path, problem: str) -> None:
        warn(f"{path}: the cache entry {problem}; ignored and rebuilt")
        with contextlib.suppress(OSError):
            path.unlink()
        return None

    # -- writing

    def put(self, name: str, kind: str, value: Any) -> bool:
        """Write ``value`` as entry ``name`` (atomically), then evict down to the limit. False,
        with a warning, when it cannot be written or would not fit."""
        try:
            parts = _encode(value, name, kind)
        except (OverflowError, NotImplementedError, TypeError, ValueError) as e:
            warn(f"{name}: not cached: {e}")  # e.g. an integer of the trace beyond 64 bits
            return False
        size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
        if size > self.limit:
            warn(
                f"{name}: not cached: the entry ({units.file_size(size)}) is larger than the cache's "
                f"limit ({units.file_size(self.limit)}, ${SIZE_ENV})"
            )
            return False
        import tempfile  # only to write: a hit needs none of it

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._evict(self.limit - size)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
        except OSError as e:
            self._unwritable(e)
            return False
        try:
            with open(fd, "wb") as f:
                for p in parts:
                    f.write(p)
            os.replace(tmp, self.directory / name)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._unwritable(e)
            return False
        return True

    def _unwritable(self, error: OSError) -> None:
        """Warn that the directory cannot be written, once per directory and process."""
        if self.directory not in _UNWRITABLE:
            _UNWRITABLE.add(self.directory)
            warn(
                f"{self.directory}: cannot write to the cache ({error.strerror or error}); analyzing without it"
            )

    def entries(self) -> list[tuple[Path, os.stat_result]]:
        """The entries, least recently used first."""
        found = []
        with contextlib.suppress(OSError):
            for p in self.directory.iterdir():
                if p.suffix == SUFFIX and not p.name.startswith(".tmp-"):
                    with contextlib.suppress(OSError):
                        found.append((p, p.stat()))
        found.sort(key=lambda e: e[1].st_mtime_ns)
        return found

    def _evict(self, room: int) -> None:
        """Remove entries, least recently used first, until they take at most ``room`` bytes."""
        entries = self.entries()
        total = sum(st.st_size for _, st in entries)
        for p, st in entries:
            if total <= room:
                break
            with contextlib.suppress(OSError):
                p.unlink()
            total -= st.st_size

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and leftover temporary files): (entries, bytes) removed."""
        n = freed = 0
        with contextlib.suppress(OSError):
            for p in self.directory.iterdir():
                if p.suffix == SUFFIX:
                    with contextlib.suppress(OSError):
                        size = p.stat().st_size
                        p.unlink()
                        n, freed = n + (not p.name.startswith(".tmp-")), freed + size
        return n, freed


# ---- encoding -------------------------------------------------------------------------------


class _Unusable(Exception):
    """An entry that cannot be used (the message says why)."""


def _encode(value: Any, name: str, kind: str) -> list[Any]:
    arrays: list[np.ndarray] = []

    def hook(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            arrays.append(np.ascontiguousarray(obj))
            return len(arrays) - 1
        if isinstance(obj, np.generic):
            return obj.item()
        raise NotImplementedError(f"cannot cache a {type(obj).__name__}")

    payload = msgspec.msgpack.Encoder(enc_hook=hook).encode(value)
    table, offset = [], 0
    for a in arrays:
        offset = -(-offset // _ALIGN) * _ALIGN
        table.append((a.dtype.str, a.shape, offset, a.nbytes))
        offset += a.nbytes
    header = msgspec.msgpack.encode(_Header(name, kind, len(payload), table))
    body: list[Any] = [header, payload]
    start = len(header) + len(payload)
    # the arrays' offsets count from the first aligned byte after the payload
    base = -(-(_PREFIX.size + start) // _ALIGN) * _ALIGN - _PREFIX.size
    position = base
    body.append(b"\0" * (base - start))
    for a, (_, _, off, nbytes) in zip(arrays, table):
        body.append(b"\0" * (base + off - position))
        body.append(a.reshape(-1).view(np.uint8))
        position = base + off + nbytes
    h = xxhash.xxh3_128()
    for part in body:
        h.update(part)
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), position, h.digest())
    return [prefix, *body]


def _decode(data: mmap.mmap, name: str, kind: str, type_: type[T]) -> T:
    magic, version, header_len, data_len, digest = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise _Unusable("is not a traceprof cache entry")
    if version != FORMAT_VERSION:
        raise _Unusable(f"is of another cache format ({version}, this traceprof writes {FORMAT_VERSION})")
    if _PREFIX.size + data_len != len(data):
        raise _Unusable("is truncated" if _PREFIX.size + data_len > len(data) else "has trailing bytes")
    body = memoryview(data)[_PREFIX.size :]
    if xxhash.xxh3_128_digest(body) != digest:
        raise _Unusable("is corrupt (checksum mismatch)")
    try:
        header = msgspec.msgpack.decode(body[:header_len], type=_Header)
    except msgspec.DecodeError as e:
        raise _Unusable(f"is corrupt ({e})") from None
    if header.name != name or header.kind != kind:
        raise _Unusable(f"holds another entry ({header.name})")
    start = header_len + header.payload
    base = -(-(_PREFIX.size + start) // _ALIGN) * _ALIGN - _PREFIX.size
    arrays = [
        np.frombuffer(body, np.dtype(dt), count=math.prod(shape), offset=base + off).reshape(shape)
        for dt, shape, off, _ in header.arrays
    ]

    def hook(t: type, obj: Any) -> Any:
        if t is np.ndarray and isinstance(obj, int) and 0 <= obj < len(arrays):
            return arrays[obj]
        raise NotImplementedError(f"unexpected {t!r} in a cache entry")

    try:
        return msgspec.msgpack.Decoder(type_, dec_hook=hook).decode(body[header_len:start])
    except (msgspec.DecodeError, NotImplementedError) as e:
        raise _Unusable(f"cannot be decoded ({e})") from None


# ---- use ------------------------------------------------------------------------------------


def cached(
    store: Store | None,
    content: str,
    name: Callable[[str], str],
    kind: str,
    type_: type[T],
    build: Callable[[], tuple[T, str | None]],
    on_hit: Callable[[T], T] = lambda v: v,
) -> tuple[T, str | None]:
    """The entry ``name(content)`` of ``store`` (``on_hit`` applied), else the value ``build()``
    computes with the content hash of the bytes it read, written there as ``name(read)``: an
    entry is keyed by what it was computed from, so a file replaced between the hash that
    looked it up and the read that decoded it is stored under its new content, never under the
    old (not written when the read's is not known). The value and the content it is of."""
    if store is not None:
        found = store.get(name(content), kind, type_)
        if found is not None:
            return on_hit(found), content
    value, read = build()
    if store is not None and read is not None:
        store.put(name(read), kind, value)
    return value, read


def summary(store: Store) -> Iterator[tuple[str, str]]:
    """What ``traceprof cache info`` prints: (label, value) lines."""
    entries = store.entries()
    total = sum(st.st_size for _, st in entries)
    kinds: dict[str, int] = {}
    for p, _ in entries:
        parts = p.stem.split("-")
        kind = parts[1] if len(parts) == 3 else "other"
        kinds[kind] = kinds.get(kind, 0) + 1
    yield "directory", str(store.directory)
    yield "entries", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
    yield "size", f"{units.file_size(total)} of {units.file_size(store.limit)} (${SIZE_ENV})"
