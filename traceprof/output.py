"""Writing results without destroying anything: :func:`resolve_output` decides how a path is
written, and :func:`write_output` writes it that way.

- ``-`` (:data:`STDOUT`): standard output.
- A new path or an existing regular file: written to a temporary file ``.traceprof-*.tmp`` beside
  it, then renamed into place, so a reader sees the old file or the new one, never a part. A
  symlink to a regular file stays a symlink: the file it names is replaced. The temporary file is
  removed on every exit path Python sees (an error, Ctrl-C, and SIGTERM while the command line
  runs, which turns it into an exception).
- An existing device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a named pipe): opened and
  written in place, never renamed over (as root that would replace the device node).
- Refused with :class:`~traceprof.errors.OutputError`: an input (the same file by device and
  inode, whatever symlinks or hard links lead to it), a directory.
"""

from __future__ import annotations

import enum
import errno
import os
import stat
import sys
from collections.abc import Iterable

import msgspec

from traceprof.errors import OptionError, OutputError

#: the output path that means standard output (``-o -``)
STDOUT = "-"


def check_binary_output(fmt: str, output: str | None) -> None:
    """A binary format (Parquet) is written to a file, or to standard output with ``-o -``
    when that is not a terminal; an OptionError otherwise."""
    if not output:
        raise OptionError(
            f"--format {fmt} is binary: give an output file with -o FILE, or -o - for standard output"
        )
    if output == STDOUT and sys.stdout.isatty():
        raise OptionError(
            f"--format {fmt} is binary: not written to a terminal; redirect standard output or give -o FILE"
        )


class OutputKind(enum.Enum):
    STDOUT = "standard output"
    FILE = "file"  # a new path or a regular file: replaced atomically
    SPECIAL = "special file"  # a device, FIFO or socket: written in place


class OutputTarget(msgspec.Struct, frozen=True):
    path: str  # as the user gave it
    kind: OutputKind
    file: str  # what is opened: the symlink-resolved path of a FILE, else ``path``
    mode: int | None  # permission bits of the regular file replaced (kept); None for a new file


def resolve_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> OutputTarget:
    """How ``path`` is written; an :class:`OutputError` when it is one of ``inputs`` (the same
    file, through symlinks and hard links) or cannot be written at all (a directory, a missing
    parent directory)."""
    path = os.fspath(path)
    if path == STDOUT:
        return OutputTarget(path, OutputKind.STDOUT, path, None)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        file = os.path.realpath(path)  # a dangling symlink: create the file it names
        if not os.path.isdir(os.path.dirname(file)):
            raise OutputError(f"{path}: cannot write there (no such directory)") from None
        return OutputTarget(path, OutputKind.FILE, file, None)
    except OSError as e:
        raise OutputError(f"{path}: cannot write there ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path}: is a directory")
    for source in (os.fspath(p) for p in inputs):
        if _same_file(st, source):
            which = "the input trace" if source == path else f"the input trace {source} (same file)"
            raise OutputError(f"{path}: is {which}; write the result to another file")
    if stat.S_ISREG(st.st_mode):
        return OutputTarget(path, OutputKind.FILE, os.path.realpath(path), stat.S_IMODE(st.st_mode))
    return OutputTarget(path, OutputKind.SPECIAL, path, None)


def write_output(
    path: str | os.PathLike, data: str | bytes, inputs: Iterable[str | os.PathLike] = ()
) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` as :func:`resolve_output` says. The path is
    resolved here again: the file system may have changed while the result was computed."""
    target = resolve_output(path, inputs)
    try:
        if target.kind is OutputKind.STDOUT:
            _write_stdout(data)
        elif target.kind is OutputKind.SPECIAL:
            _write_in_place(target.file, _as_bytes(data))
        else:
            _replace_atomically(target, _as_bytes(data))
    except OSError as e:
        raise OutputError(f"{target.path}: cannot write ({e.strerror or e})") from None


def write_atomic(path: str | os.PathLike, text: str) -> None:
    write_output(path, text)


def write_atomic_bytes(path: str | os.PathLike, data: bytes) -> None:
    write_output(path, data)


def _same_file(st: os.stat_result, other: str | os.PathLike) -> bool:
    try:
        o = os.stat(other)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (o.st_dev, o.st_ino)


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _write_stdout(data: str | bytes) -> None:
    if isinstance(data, str):
        sys.stdout.write(data)
        sys.stdout.flush()
    else:
        sys.stdout.flush()  # text written before goes first
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _write_in_place(file: str, data: bytes) -> None:
    fd = os.open(file, os.O_WRONLY)  # no O_CREAT, no O_TRUNC: the file exists and stays what it is
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _replace_atomically(target: OutputTarget, data: bytes) -> None:
    try:
        fd, tmp = _new_temporary(os.path.dirname(target.file))
    except OSError as e:
        raise OutputError(f"{target.path}: cannot write there ({e.strerror or e})") from None
    replaced = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points to it
        # it was made 0600; a new output is for sharing, a replaced one keeps its permissions
        os.chmod(tmp, target.mode if target.mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target.file)
        replaced = True
    finally:
        if not replaced:  # an error, KeyboardInterrupt or SystemExit: leave nothing behind
            try:
                os.unlink(tmp)
            except OSError:
                pass


#: how a temporary file is opened: created here or not at all, never through a link, and not
#: inherited by a child process
_TEMPORARY_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
) | getattr(os, "O_BINARY", 0)


def _new_temporary(directory: str) -> tuple[int, str]:
    """A new file in ``directory``, open for writing and readable by its owner alone, under a
    random name (``.traceprof-<hex>.tmp``) that no other writer has: tempfile.mkstemp's recipe,
    without importing tempfile (random, hashlib and shutil: 8 ms of a look served by the
    cache)."""
    for _ in range(100):
        path = os.path.join(directory, f".traceprof-{os.urandom(8).hex()}.tmp")
        try:
            return os.open(path, _TEMPORARY_FLAGS, 0o600), path
        except FileExistsError:  # 2**-64 a try
            continue
    raise FileExistsError(errno.EEXIST, "no free name for a temporary file")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
