"""Which trace files a command's paths name: files, directories, glob patterns; and whether
they ask for a job of several ranks or one trace (kept apart from :mod:`traceprof.job`, so a
single-trace command does not import the job code)."""

from __future__ import annotations

import glob
import os

from traceprof.errors import TraceReadError
from traceprof.trace import schema


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _traces_in(directory: str) -> list[str]:
    """The trace files of a directory (sorted); its subdirectories when it has none itself
    (a TensorBoard log directory: one run per subdirectory)."""

    def traces(names, root):
        return sorted(
            os.path.join(root, n)
            for n in names
            if n.lower().endswith(schema.TRACE_FILE_SUFFIXES)
            and not n.lower().endswith(".expect.json")
            and os.path.isfile(os.path.join(root, n))
        )

    found = traces(os.listdir(directory), directory)
    if not found:
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            found += traces(files, root)
    # PyTorch's own names (*.pt.trace.json[.gz]) when there are any: other JSON files beside
    # them (notes, configs) are not traces
    named = [f for f in found if schema.PROFILER_TRACE_NAME_RE.search(os.path.basename(f))]
    return named or found


def _identity(path: str) -> tuple[int, int] | str:
    """What makes two spellings of a path one file (``job/x``, ``./job/x``, a link to it): its
    device and inode, else its normalized absolute path (a missing file)."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.abspath(path)
    return (st.st_dev, st.st_ino)


def find_traces(paths) -> list[str]:
    """Trace files named by ``paths``: files, directories (their trace files), glob patterns
    (``runs/*.pt.trace.json.gz``; their regular files: a FIFO or device would block the read).
    Each file once, however spelled, in the order given (directories and patterns sorted). A
    directory without traces or a pattern matching no regular file is an error."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    seen: set[tuple[int, int] | str] = set()
    for p in map(os.fspath, paths):
        if os.path.isdir(p):
            found = _traces_in(p)
            if not found:
                raise TraceReadError(p, "no trace files (.json, .json.gz) in the directory")
        elif not os.path.exists(p) and _is_glob(p):
            found = sorted(f for f in glob.glob(p) if os.path.isfile(f))
            if not found:
                raise TraceReadError(p, "no file matches the pattern")
        else:
            found = [p]  # a file (or a missing one: the reader says so)
        for f in found:
            identity = _identity(f)
            if identity not in seen:
                seen.add(identity)
                out.append(f)
    return out


def expand_patterns(paths) -> list[str]:
    """``paths`` with each glob pattern that names no existing file replaced by the files it
    matches (sorted; regular files and directories: a FIFO or device would block the read);
    files and directories as given. A pattern matching nothing is an error."""
    out: list[str] = []
    for p in map(os.fspath, paths):
        if not os.path.exists(p) and _is_glob(p):
            found = sorted(f for f in glob.glob(p) if os.path.isfile(f) or os.path.isdir(f))
            if not found:
                raise TraceReadError(p, "no file matches the pattern")
            out += found
        else:
            out.append(p)
    return out


def one_trace(paths) -> str | None:
    """The trace file ``paths`` names when it names one: a file (existing or not: the reader
    says so), or a directory or a glob pattern that holds a single trace, whose report is the
    single-trace one, not a job of one rank; None when it names several (a job), or a directory
    or pattern with none (the job's discovery says so)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if len(paths) != 1:
        return None
    p = paths[0]
    if not (os.path.isdir(p) or (not os.path.exists(p) and _is_glob(p))):
        return p
    try:
        found = find_traces(p)
    except TraceReadError:
        return None
    return found[0] if len(found) == 1 else None


def is_job(paths) -> bool:
    """Whether ``paths`` asks for a job (several trace files: files, a directory, a glob) rather
    than one trace, whose report stays the single-trace one (:func:`one_trace`)."""
    return one_trace(paths) is None
