"""The cache: decoded traces (their columns, memory-mapped on reading) and analyses, so that the
second look at a trace skips its JSON.

An entry is found by a hash of the trace file's whole content as stored (gzip or not: xxh3, 128
bits, about 0.1 s per GB), of traceprof's code (its version and the size and time of each of its
modules, so an edited checkout never reads entries of its former self) and of the options the
entry depends on. A file changed in place, even with its size and time restored, hashes to
another entry; the cache never changes a number. An entry is written under the hash of the
bytes it was computed from, taken as they were read (:class:`~traceprof.read.source.ContentHash`):
a file replaced between the look-up and the read is stored as what was read.

One file per entry, ``<content hash>-<kind>-<hash of code and options>.tpc``:

- a fixed prefix: magic, format version, header and data lengths, and an xxh3 checksum of
  everything after the prefix;
- a header (msgpack): the entry's key, kind, and the dtype, shape and offset of every array;
- the payload (msgpack): the object itself, each numpy array replaced by its number;
- the arrays, each 64-byte aligned.

Entries are written to a temporary file and renamed into place, so a reader sees a whole entry
or none, and two writers of one entry both succeed. An entry that is truncated, corrupt, of
another format or of another key is ignored with a one-line warning, removed and rebuilt.

Private and untrusted (docs/security.md): the directory is made 0700 and used only when it is
this user's and closed to others; only this user's regular files with an entry's name and
:data:`MAGIC` are read, counted or removed (``cache clear``, eviction), never a FIFO, a link or
another file; an entry's header (types, shapes, offsets) and the value it decodes to are checked
as untrusted input, and anything wrong is one warning and a fresh analysis. A writer holds a
lock on its temporary file, removes it on an error, Ctrl-C or SIGTERM, and one left by a writer
that was killed is counted and removed by the next write.

Bounded: entries past the size limit (``$TRACEPROF_CACHE_SIZE``, default 4 GB) are removed least
recently used first (a hit touches its entry's time); an entry larger than the limit is not
written. A directory that cannot be created or written (read-only, full) means no cache, with
a warning, never a failure. Where: ``$TRACEPROF_CACHE`` (``off`` turns the cache off), else the
platform's user cache directory (``~/.cache/traceprof`` on Linux).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import mmap
import os
import re
import stat
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import xxhash

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: a dead writer's temporary file stays
    fcntl = None  # type: ignore[assignment]

from traceprof import units
from traceprof.errors import OptionError
from traceprof.read.limits import parse_size

if TYPE_CHECKING:
    import numpy as np

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
    modules = []  # os.walk: a third of the time of Path.rglob, which every cached look paid
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        modules += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    start = len(str(root)) + 1  # the module's path under the package's folder
    for module in sorted(modules):
        with contextlib.suppress(OSError):
            st = os.stat(module)
            h.update(f"{module[start:]}:{st.st_size}:{st.st_mtime_ns};".encode())
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


#: directories warned about (unwritable, not private), once each per process
_WARNED: set[tuple[Path, str]] = set()

#: the file name of an entry (entry_name) and of one being written (Store.put)
_ENTRY_NAME = re.compile(r"[0-9a-f]{32}-[a-z]+-[0-9a-f]{16}" + re.escape(SUFFIX) + r"\Z")
_TEMPORARY_NAME = re.compile(r"\.tmp-[a-z0-9_]{8}" + re.escape(SUFFIX) + r"\Z")  # tempfile.mkstemp's
#: opening an entry: a symlink is not one, and a FIFO must not block the open
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class Store:
    """The entries in ``directory`` (created private when first written), at most ``limit``
    bytes. Only this user's entries are read, counted or removed: a file is one when its name
    is an entry's, it is a regular file of this user's and it starts with :data:`MAGIC`; a
    temporary file of a writer that died is removed once no writer holds its lock."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit

    @classmethod
    def default(cls) -> Store | None:
        directory = cache_directory()
        return cls(directory, size_limit()) if directory is not None else None

    def _warn_once(self, what: str, message: str) -> None:
        if (self.directory, what) not in _WARNED:
            _WARNED.add((self.directory, what))
            warn(message)

    def private(self, create: bool = False) -> bool:
        """Whether the directory is this user's and closed to others (0700), so that no one
        else can plant an entry in it or read one (``create``: made so when missing). One that
        holds nothing but entries (made by an earlier traceprof under another umask) is made
        private; any other is not used, with a warning naming it."""
        if create:  # an error says why it cannot be created (Store.put warns)
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            st = os.stat(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return False  # nothing cached yet
        except OSError as e:
            self._warn_once(
                "unwritable",
                f"{self.directory}: cannot use the cache ({e.strerror or e}); analyzing without it",
            )
            return False
        if not stat.S_ISDIR(st.st_mode):
            self._unwritable(NotADirectoryError(errno.ENOTDIR, "Not a directory"))
            return False
        problem = None
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            problem = "belongs to another user"
        elif st.st_mode & 0o077:
            if not self._only_entries():
                problem = f"is open to other users (mode {stat.S_IMODE(st.st_mode):o}) and holds other files"
            else:
                try:
                    os.chmod(self.directory, 0o700)
                except OSError as e:
                    problem = f"is open to other users and cannot be made private ({e.strerror or e})"
        if problem is not None:
            self._warn_once(
                "not private",
                f"{self.directory}: not used as the cache: it {problem}; the cache needs a directory "
                f"of its own, private to you (${DIR_ENV})",
            )
            return False
        return True

    def _only_entries(self) -> bool:
        try:
            return all(_ENTRY_NAME.match(n) or _TEMPORARY_NAME.match(n) for n in os.listdir(self.directory))
        except OSError:
            return False

    # -- reading

    def get(self, name: str, kind: str, type_: type[T], check: Callable[[T], None] | None = None) -> T | None:
        """The object in entry ``name``, decoded as ``type_`` (its arrays memory-mapped,
        copy-on-write) and passed to ``check`` (which raises ValueError for a value the code
        that built it could not have made); None when there is no such entry, or a warning
        and None when it cannot be used. An entry is untrusted input: whatever it holds gives
        one warning and a fresh analysis, never an error."""
        if not self.private():
            return None
        path = self.directory / name
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None  # no entry
        except OSError as e:
            warn(f"{path}: cannot read the cache entry ({e.strerror or e}); analyzing without it")
            return None
        try:
            st = os.fstat(fd)
            if not _ours(st):
                warn(
                    f"{path}: not a cache entry of yours (not a regular file of your own); analyzing without it"
                )
                return None
            size = st.st_size
            if size < _PREFIX.size:
                raise _Unusable("is truncated")
            data = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
            value = _decode(data, name, kind, type_)
            if check is not None:
                check(value)
        except _Unusable as e:
            self._unusable(path, str(e))
            return None
        except OSError as e:
            self._unusable(path, f"cannot be mapped ({e.strerror or e})")
            return None
        except Exception as e:  # a forged entry: whatever the decoded value makes fail
            self._unusable(path, f"holds what traceprof does not write ({type(e).__name__}: {e})")
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
            if not self.private(create=True):
                return False
            if _taken(self.directory / name):
                return False  # a file of someone else's under the entry's name (Store.get said so)
            self._evict(self.limit - size)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
        except OSError as e:
            self._unwritable(e)
            return False
        try:
            _lock(fd)  # held until the entry is in place: a writer's file is never taken for a dead one's
            with open(fd, "wb", closefd=False) as f:
                for p in parts:
                    f.write(p)
            os.replace(tmp, self.directory / name)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._unwritable(e)
            return False
        except BaseException:  # SIGTERM (raised as an exception by the command), Ctrl-C
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            os.close(fd)
        return True

    def _unwritable(self, error: OSError) -> None:
        """Warn that the directory cannot be written, once per directory and process."""
        self._warn_once(
            "unwritable",
            f"{self.directory}: cannot write to the cache ({error.strerror or error}); analyzing without it",
        )

    def entries(self) -> list[tuple[Path, os.stat_result]]:
        """This user's entries, least recently used first, then the temporary files of writers
        that died (they hold no lock), which go first of all."""
        found, stale = [], []
        with contextlib.suppress(OSError):
            for p in self.directory.iterdir():
                if _ENTRY_NAME.match(p.name):
                    st = _entry_stat(p)
                    if st is not None:
                        found.append((p, st))
                elif _TEMPORARY_NAME.match(p.name):
                    st = _abandoned(p)
                    if st is not None:
                        stale.append((p, st))
        found.sort(key=lambda e: e[1].st_mtime_ns)
        return stale + found

    def _evict(self, room: int) -> None:
        """Remove entries, least recently used first, until they take at most ``room`` bytes;
        temporary files of writers that died first of all."""
        entries = self.entries()
        total = sum(st.st_size for _, st in entries)
        for p, st in entries:
            if total <= room and not p.name.startswith(".tmp-"):
                break
            with contextlib.suppress(OSError):
                p.unlink()
            total -= st.st_size

    def clear(self) -> tuple[int, int, list[tuple[Path, OSError]]]:
        """Remove every entry and the temporary files of writers that died: (entries, bytes)
        removed, and the files that could not be removed, with why (a read-only directory)."""
        n = freed = 0
        failed: list[tuple[Path, OSError]] = []
        if not self.private():
            return n, freed, failed
        for p, st in self.entries():
            try:
                p.unlink()
            except FileNotFoundError:
                continue  # another process removed it
            except OSError as e:
                failed.append((p, e))
                continue
            n, freed = n + (not p.name.startswith(".tmp-")), freed + st.st_size
        return n, freed, failed


def _ours(st: os.stat_result) -> bool:
    """A regular file of this user's (not a FIFO, a device, a link or someone else's file)."""
    return stat.S_ISREG(st.st_mode) and (not hasattr(os, "geteuid") or st.st_uid == os.geteuid())


def _taken(path: Path) -> bool:
    """Whether ``path`` is a file that is not this user's: never replaced."""
    try:
        return not _ours(os.lstat(path))
    except FileNotFoundError:
        return False


def _our_file(path: Path, check: Callable[[int, os.stat_result], bool]) -> os.stat_result | None:
    """The stat of ``path`` when it is a regular file of this user's (opened without following a
    link) for which ``check(fd, stat)`` holds, else None; None too when it cannot be read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return st if _ours(st) and check(fd, st) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _has_magic(fd: int, st: os.stat_result) -> bool:
    return os.pread(fd, len(MAGIC), 0) == MAGIC


def _writer_gone(fd: int, st: os.stat_result) -> bool:
    """Whether no writer holds the lock of a temporary file (then this one takes it)."""
    if fcntl is None or (st.st_size and not _has_magic(fd, st)):
        return False  # a writer writes MAGIC first
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a writer holds it
    return True


def _entry_stat(path: Path) -> os.stat_result | None:
    """The stat of ``path`` when it is an entry of this user's (its first bytes are MAGIC),
    else None: a file that only looks like one by its name is never counted or removed."""
    return _our_file(path, _has_magic)


def _abandoned(path: Path) -> os.stat_result | None:
    """The stat of a temporary file of this user's whose writer is gone (its lock is free),
    else None: a writer at work holds the lock until its entry is in place."""
    return _our_file(path, _writer_gone)


def _lock(fd: int) -> None:
    """Hold a writer's lock on its temporary file (released when it is closed, or dies)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


# ---- encoding -------------------------------------------------------------------------------


class _Unusable(Exception):
    """An entry that cannot be used (the message says why)."""


def _encode(value: Any, name: str, kind: str) -> list[Any]:
    import numpy as np  # what is written was just computed with it

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
    if not 0 <= header.payload <= len(body) - header_len:
        raise _Unusable("is corrupt (its payload lies outside it)")
    base = -(-(_PREFIX.size + start) // _ALIGN) * _ALIGN - _PREFIX.size
    arrays: list[np.ndarray] = []
    ndarray = None
    if header.arrays:  # numpy only for an entry with arrays (a decoded trace): a profile has
        import numpy as np  # none, and a look at one imports no numpy

        arrays, ndarray = _arrays(body, base, header.arrays), np.ndarray
    used = [False] * len(arrays)

    def hook(t: type, obj: Any) -> Any:
        if t is ndarray and type(obj) is int and 0 <= obj < len(arrays) and not used[obj]:
            used[obj] = True
            return arrays[obj]
        raise NotImplementedError(f"an array that is not one of its own, or one of them twice ({obj!r})")

    try:
        value: T = msgspec.msgpack.Decoder(type_, dec_hook=hook).decode(body[header_len:start])
    except (msgspec.DecodeError, NotImplementedError) as e:
        raise _Unusable(f"cannot be decoded ({e})") from None
    if not all(used):
        raise _Unusable("holds arrays that nothing refers to")
    return value


@functools.cache
def _array_types() -> frozenset[str]:
    """The types of the arrays traceprof caches: bools, integers and floats, in this machine's
    order."""
    import numpy as np

    return frozenset(
        np.dtype(t).str
        for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
        + (np.float32, np.float64)
    )


#: dimensions of a cached array (the columns are vectors)
_MAX_DIMENSIONS = 2


def _arrays(
    body: memoryview, base: int, table: list[tuple[str, tuple[int, ...], int, int]]
) -> list[np.ndarray]:
    """The arrays of an entry, mapped, after checking what its header says of them as untrusted
    input: a type traceprof caches, a shape whose size is the bytes given, each one aligned,
    inside the data and apart from the others."""
    import numpy as np

    arrays = []
    end = base
    for dt, shape, offset, nbytes in table:
        if dt not in _array_types():
            raise _Unusable(f"holds an array of a type traceprof does not cache ({dt!r})")
        if not 1 <= len(shape) <= _MAX_DIMENSIONS or min(shape) < 0:
            raise _Unusable(f"holds an array of an impossible shape {tuple(shape)}")
        dtype = np.dtype(dt)
        if math.prod(shape) * dtype.itemsize != nbytes:  # Python integers: no overflow
            raise _Unusable(f"holds an array of shape {tuple(shape)} in {nbytes} bytes")
        if offset % _ALIGN or base + offset < end or base + offset + nbytes > len(body):
            raise _Unusable("holds an array outside its data, or over another")
        end = base + offset + nbytes
        arrays.append(np.frombuffer(body, dtype, count=math.prod(shape), offset=base + offset).reshape(shape))
    return arrays


# ---- use ------------------------------------------------------------------------------------


def cached(
    store: Store | None,
    content: str,
    name: Callable[[str], str],
    kind: str,
    type_: type[T],
    build: Callable[[], tuple[T, str | None]],
    on_hit: Callable[[T], T] = lambda v: v,
    check: Callable[[T], None] | None = None,
) -> tuple[T, str | None]:
    """The entry ``name(content)`` of ``store`` (``on_hit`` applied), else the value ``build()``
    computes with the content hash of the bytes it read, written there as ``name(read)``: an
    entry is keyed by what it was computed from, so a file replaced between the hash that
    looked it up and the read that decoded it is stored under its new content, never under the
    old (not written when the read's is not known). The value and the content it is of.
    ``check``: raises ValueError for a found value the code could not have built (see
    :meth:`Store.get`)."""
    if store is not None:
        found = store.get(name(content), kind, type_, check)
        if found is not None:
            return on_hit(found), content
    value, read = build()
    if store is not None and read is not None:
        store.put(name(read), kind, value)
    return value, read


def summary(store: Store) -> Iterator[tuple[str, str]]:
    """What ``traceprof cache info`` prints: (label, value) lines. The temporary files of
    writers that died count (the next write removes them)."""
    entries = store.entries()
    total = sum(st.st_size for _, st in entries)
    kinds: dict[str, int] = {}
    for p, _ in entries:
        kind = "left by a writer that died" if p.name.startswith(".tmp-") else p.name.split("-")[1]
        kinds[kind] = kinds.get(kind, 0) + 1
    yield "directory", str(store.directory)
    yield "entries", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
    yield "size", f"{units.file_size(total)} of {units.file_size(store.limit)} (${SIZE_ENV})"
