"""The traceprof TensorBoard plugin: the module profile of each run, in a tab of its own.

Registered through the ``tensorboard_plugins`` entry point (pyproject.toml). It serves the files
that ``traceprof tensorboard`` wrote (layout.py) and a small self-contained frontend (static/):

- ``/data/plugin/traceprof/runs``: the runs, with their index (``run.json``);
- ``/data/plugin/traceprof/profile?run=NAME[&step=N]``: traceprof's JSON profile of the run
  (render/json_format.py), the mean of the complete steps or one step;
- ``/data/plugin/traceprof/job?run=NAME``: the job the run is a rank of (``job.json``), for
  the rank x module heat map; ``{}`` for a run of no job;
- ``/data/plugin/traceprof/index.js``, ``job.js``, ``style.css``: the frontend (ES modules).

It serves only regular files inside the log directory: every path is resolved (symlinks
followed) and one that leaves the logdir is refused (403). A missing or malformed run file is a
404; each error is a JSON ``{"error": message}`` and one line in the server log.

A file is read and checked once while it stays the same file (:class:`FileCache`, keyed by its
resolved path, device, inode, size and modification time): parallel requests for one profile
wait for the one that reads it, and what is kept is bounded by entries and bytes. A profile
larger than :data:`CACHE_MAX_FILE_BYTES` is checked once and then streamed from disk, never held.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import exceptions, wrappers, wsgi

from traceprof.tensorboard import layout

_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_FILES = {
    "/index.js": "text/javascript; charset=utf-8",
    "/job.js": "text/javascript; charset=utf-8",
    "/style.css": "text/css; charset=utf-8",
}
_JSON = "application/json"
_RUNS_CACHE_S = 2.0

#: files (parsed run indexes, checked profiles) kept in memory: at most this many ...
CACHE_MAX_ENTRIES = 1024
#: ... holding at most this many bytes of files in all ...
CACHE_MAX_BYTES = 256 << 20
#: ... each at most this large; a larger profile is checked once, then streamed from disk
CACHE_MAX_FILE_BYTES = 64 << 20
_STREAM_CHUNK_BYTES = 1 << 20

logger = logging.getLogger(__name__)


class _Refused(Exception):
    """A request answered with an HTTP error: ``message`` goes to the client and, with the
    ``detail`` only the server's owner may see (a resolved path), to one line of the log."""

    def __init__(self, status: int, message: str, detail: str = ""):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def _answers_errors(handler):
    """A route that answers a _Refused as JSON ``{"error": message}`` and logs it in one line."""

    @functools.wraps(handler)
    def route(self, request):
        try:
            return handler(self, request)
        except _Refused as e:
            detail = f" ({e.detail})" if e.detail else ""
            logger.warning(
                "traceprof plugin: HTTP %d for %s: %s%s",
                e.status,
                _one_line(request.full_path),
                e.message,
                detail,
            )
            return _respond_json(json.dumps({"error": e.message}).encode(), status=e.status)

    return wrappers.Request.application(route)


def _one_line(text: str, limit: int = 200) -> str:
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


class _Checked:
    """The cache's value for a file found good but too large to hold: stream it from disk."""


CHECKED = _Checked()


class FileCache:
    """Values made from files (a parsed run index, a checked profile), least recently used first
    out, at most ``max_entries`` of them and ``max_bytes`` of cost in all. A key names one
    version of a file (path, device, inode, size, modification time), so a rewritten file is
    read again. Requests for a key being made wait for it: a file is parsed once, not once per
    parallel request (16 parallel requests for a 200 MB profile took 3.85 GB when each parsed)."""

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._making: dict[Hashable, threading.Event] = {}

    def __len__(self) -> int:
        return len(self._values)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: Hashable, make: Callable[[], tuple[Any, int]]) -> Any:
        """The value of ``key``, made by ``make() -> (value, cost)`` when it is not kept; an
        error of ``make`` reaches its caller, and the next request tries again."""
        while True:
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    return self._values[key][0]
                made = self._making.get(key)
                if made is None:
                    made = self._making[key] = threading.Event()
                    break
            made.wait()  # another request makes it: then look again
        try:
            value, cost = make()
            with self._lock:
                self._keep(key, value, cost)
            return value
        finally:
            with self._lock:
                del self._making[key]
            made.set()

    def _keep(self, key: Hashable, value: Any, cost: int) -> None:
        if cost > self.max_bytes:
            return
        self._values[key] = (value, cost)
        self._bytes += cost
        while len(self._values) > self.max_entries or self._bytes > self.max_bytes:
            _old, (_value, old_cost) = self._values.popitem(last=False)
            self._bytes -= old_cost


class TraceprofPlugin(base_plugin.TBPlugin):
    plugin_name = layout.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        super().__init__(context)
        # resolved once: every file served must resolve to a path under it
        self._logdir = os.path.realpath(context.logdir) if context.logdir else ""
        self._lock = threading.Lock()
        self._runs: dict[str, str] = {}
        self._runs_time = float("-inf")
        self._logged: set[str] = set()  # run list problems, logged once each
        self._files = FileCache(CACHE_MAX_ENTRIES, CACHE_MAX_BYTES)

    # -- TensorBoard interface -----------------------------------------------------------------

    def get_plugin_apps(self):
        apps = dict.fromkeys(_STATIC_FILES, self._serve_static)
        apps["/runs"] = self._serve_runs
        apps["/profile"] = self._serve_profile
        apps["/job"] = self._serve_job
        return apps

    def is_active(self) -> bool:
        return bool(self._find_runs())

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="traceprof")

    # -- data ----------------------------------------------------------------------------------

    def _find_runs(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            if now - self._runs_time > _RUNS_CACHE_S:
                self._runs = layout.find_runs(self._logdir)
                self._runs_time = now
            return self._runs

    def _run_dir(self, name: str | None) -> str:
        if not name:
            raise _Refused(400, "missing run")
        run_dir = self._find_runs().get(name)
        if run_dir is None:
            self._runs_time = float("-inf")  # a run written since the last scan
            run_dir = self._find_runs().get(name)
        if run_dir is None:
            raise _Refused(404, f"no traceprof run {_one_line(name, 100)!r}")
        return run_dir

    def _inside_logdir(self, path: str) -> bool:
        root = self._logdir
        return bool(root) and (path == root or path.startswith(root.rstrip(os.sep) + os.sep))

    def _open(self, run_dir: str, file_name: str, what: str) -> tuple[int, tuple]:
        """An open descriptor of a regular file of the run's plugin directory that resolves
        inside the logdir (``what`` names it in messages), and the key of its version for the
        cache; _Refused otherwise. The caller closes the descriptor."""
        real = os.path.realpath(os.path.join(run_dir, layout.PLUGIN_DIR, file_name))
        if not self._inside_logdir(real):
            raise _Refused(403, f"{what} resolves outside the log directory: refused", real)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:  # non-blocking: a FIFO must not hang the request
            fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise _Refused(404, f"{what} is missing") from None
        except OSError as e:
            raise _Refused(404, f"cannot read {what} ({e.strerror or e})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Refused(404, f"{what} is not a regular file")
            # the file opened, should a directory have been swapped for a symlink since
            opened = _fd_path(fd)
            if opened is not None and not self._inside_logdir(opened):
                raise _Refused(403, f"{what} resolves outside the log directory: refused", opened)
        except OSError as e:
            os.close(fd)
            raise _Refused(404, f"cannot read {what} ({e.strerror or e})") from None
        except BaseException:
            os.close(fd)
            raise
        return fd, (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _cached(self, run_dir: str, file_name: str, what: str, make: Callable[[bytes], Any]) -> Any:
        """``make(bytes)`` of the file (see _open), read and made once per version of the file:
        a ValueError of ``make`` is a 404 naming ``what``."""
        fd, key = self._open(run_dir, file_name, what)
        try:
            return self._files.get(key, lambda: self._make(fd, what, make))
        finally:
            os.close(fd)

    def _make(self, fd: int, what: str, make: Callable[[bytes], Any]) -> tuple[Any, int]:
        try:
            with open(fd, "rb", closefd=False) as f:
                data = f.read()
        except OSError as e:
            raise _Refused(404, f"cannot read {what} ({e.strerror or e})") from None
        try:
            value = make(data)
        except ValueError as e:
            raise _Refused(404, f"{what} {e}") from None
        return value, 0 if value is CHECKED else len(data)

    def _run_index(self, name: str, run_dir: str) -> dict:
        what = f"run {name!r}: {layout.RUN_INDEX}"
        return self._cached(run_dir, layout.RUN_INDEX, what, layout.parse_run_index)

    def _public_index(self, index: dict) -> dict:
        """The run index as /runs serves it: the input trace's path relative to the logdir when
        it lies inside, else its file name; no absolute path leaves the server."""
        trace = index.get("trace")
        if isinstance(trace, dict) and isinstance(trace.get("path"), str):
            path = trace["path"]
            real = os.path.realpath(path) if os.path.isabs(path) else ""
            if real and self._inside_logdir(real):
                path = os.path.relpath(real, self._logdir).replace(os.sep, "/")
            else:
                path = os.path.basename(path.replace("\\", "/"))
            index = {**index, "trace": {**trace, "path": path}}
        return index

    @_answers_errors
    def _serve_runs(self, request):
        runs, invalid = [], []
        for name, run_dir in self._find_runs().items():
            try:
                index = self._run_index(name, run_dir)
            except _Refused as e:
                invalid.append({"name": name, "error": e.message})
                line = f"{e.message} ({e.detail})" if e.detail else e.message
                if line not in self._logged:  # the list is asked for often: once each
                    self._logged.add(line)
                    logger.warning("traceprof plugin: run not listed: %s", line)
                continue
            runs.append({**self._public_index(index), "name": name})
        # run names are paths relative to the logdir; the logdir itself is not served
        return _respond_json(json.dumps({"runs": runs, "invalid_runs": invalid}).encode())

    @_answers_errors
    def _serve_profile(self, request):
        name = request.args.get("run")
        run_dir = self._run_dir(name)
        index = self._run_index(name, run_dir)
        step = request.args.get("step", "mean")
        if step in ("", "mean"):
            file_name = index["profiles"]["mean"]
        else:
            by_step = {str(s["step"]): s["profile"] for s in index.get("steps", [])}
            if step not in by_step:
                raise _Refused(404, f"run {name!r} has no profile of step {_one_line(step, 40)!r}")
            file_name = by_step[step]
        return self._json_file(request, run_dir, file_name, f"run {name!r}: {file_name}")

    def _json_file(self, request, run_dir: str, file_name: str, what: str):
        """The response of a JSON object file of the run (a plain file name): checked once per
        version of the file, then served from memory, or streamed from disk when large."""
        fd, key = self._open(run_dir, file_name, what)
        try:
            value = self._files.get(key, lambda: self._make(fd, what, _checked_json))
            if value is not CHECKED:
                return _respond_json(value)
            os.lseek(fd, 0, os.SEEK_SET)
            body = wsgi.wrap_file(request.environ, open(fd, "rb"), _STREAM_CHUNK_BYTES)
            fd = -1  # the response closes it
            response = _respond_json(body)
            response.content_length = key[3]
            return response
        finally:
            if fd >= 0:
                os.close(fd)

    @_answers_errors
    def _serve_job(self, request):
        """The job the run's trace is a rank of (layout.JOB_FILE); ``{}`` for a run of no job."""
        name = request.args.get("run")
        run_dir = self._run_dir(name)
        if not os.path.lexists(os.path.join(run_dir, layout.PLUGIN_DIR, layout.JOB_FILE)):
            return _respond_json(b"{}")
        return self._json_file(request, run_dir, layout.JOB_FILE, f"run {name!r}: {layout.JOB_FILE}")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug wraps methods too; typed for functions
    def _serve_static(self, request):
        route = "/" + request.path.rsplit("/", 1)[-1]
        if route not in _STATIC_FILES:
            raise exceptions.NotFound()
        with open(os.path.join(_STATIC_DIR, route[1:]), "rb") as f:
            data = f.read()
        return wrappers.Response(
            data, content_type=_STATIC_FILES[route], headers=[("X-Content-Type-Options", "nosniff")]
        )


def _checked_json(data: bytes) -> bytes | _Checked:
    """The bytes of a JSON object file, to keep; CHECKED for one too large to keep (streamed);
    ValueError when it is not a JSON object."""
    layout.check_json_object(data)
    return data if len(data) <= CACHE_MAX_FILE_BYTES else CHECKED


def _fd_path(fd: int) -> str | None:
    """The path of an open file as the kernel names it (Linux), or None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _respond_json(data, status: int = 200):
    return wrappers.Response(
        data,
        status=status,
        content_type=_JSON,
        headers=[("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")],
    )
