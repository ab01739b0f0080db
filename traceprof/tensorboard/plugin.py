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
"""

from __future__ import annotations

import functools
import json
import logging
import os
import stat
import threading
import time

from tensorboard.plugins import base_plugin
from werkzeug import exceptions, wrappers

from traceprof.tensorboard import layout

_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_FILES = {
    "/index.js": "text/javascript; charset=utf-8",
    "/job.js": "text/javascript; charset=utf-8",
    "/style.css": "text/css; charset=utf-8",
}
_JSON = "application/json"
_RUNS_CACHE_S = 2.0

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

    def _read(self, run_dir: str, file_name: str, what: str) -> bytes:
        """The bytes of a regular file of the run's plugin directory that resolves inside the
        logdir (``what`` names it in messages); _Refused otherwise."""
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
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _Refused(404, f"{what} is not a regular file")
            # the file opened, should a directory have been swapped for a symlink since
            opened = _fd_path(fd)
            if opened is not None and not self._inside_logdir(opened):
                raise _Refused(403, f"{what} resolves outside the log directory: refused", opened)
            with open(fd, "rb", closefd=False) as f:
                return f.read()
        except OSError as e:
            raise _Refused(404, f"cannot read {what} ({e.strerror or e})") from None
        finally:
            os.close(fd)

    def _run_index(self, name: str, run_dir: str) -> dict:
        what = f"run {name!r}: {layout.RUN_INDEX}"
        data = self._read(run_dir, layout.RUN_INDEX, what)
        try:
            return layout.parse_run_index(data)
        except ValueError as e:
            raise _Refused(404, f"{what} {e}") from None

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
        what = f"run {name!r}: {file_name}"
        data = self._read(run_dir, file_name, what)  # a plain file name (parse_run_index)
        try:
            layout.parse_json_object(data)
        except ValueError as e:
            raise _Refused(404, f"{what} {e}") from None
        return _respond_json(data)

    @_answers_errors
    def _serve_job(self, request):
        """The job the run's trace is a rank of (layout.JOB_FILE); ``{}`` for a run of no job."""
        name = request.args.get("run")
        run_dir = self._run_dir(name)
        if not os.path.lexists(os.path.join(run_dir, layout.PLUGIN_DIR, layout.JOB_FILE)):
            return _respond_json(b"{}")
        what = f"run {name!r}: {layout.JOB_FILE}"
        data = self._read(run_dir, layout.JOB_FILE, what)
        try:
            layout.parse_json_object(data)
        except ValueError as e:
            raise _Refused(404, f"{what} {e}") from None
        return _respond_json(data)

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


def _fd_path(fd: int) -> str | None:
    """The path of an open file as the kernel names it (Linux), or None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _respond_json(data: bytes, status: int = 200):
    return wrappers.Response(
        data,
        status=status,
        content_type=_JSON,
        headers=[("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")],
    )
