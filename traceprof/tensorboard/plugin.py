"""The traceprof TensorBoard plugin: the module profile of each run, in a tab of its own.

Registered through the ``tensorboard_plugins`` entry point (pyproject.toml). It serves the files
that ``traceprof tensorboard`` wrote (layout.py) and a small self-contained frontend (static/):

- ``/data/plugin/traceprof/runs``: the runs, with their index (``run.json``);
- ``/data/plugin/traceprof/profile?run=NAME[&step=N]``: traceprof's JSON profile of the run
  (render/json_format.py), the mean of the complete steps or one step;
- ``/data/plugin/traceprof/index.js``, ``style.css``: the frontend (an ES module).
"""

from __future__ import annotations

import json
import os
import threading
import time

from tensorboard.plugins import base_plugin
from werkzeug import exceptions, wrappers

from . import layout

_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_FILES = {
    "/index.js": "text/javascript; charset=utf-8",
    "/style.css": "text/css; charset=utf-8",
}
_JSON = "application/json"
_RUNS_CACHE_S = 2.0


class TraceprofPlugin(base_plugin.TBPlugin):
    plugin_name = layout.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        super().__init__(context)
        self._logdir = os.path.abspath(context.logdir) if context.logdir else ""
        self._lock = threading.Lock()
        self._runs: dict[str, str] = {}
        self._runs_time = float("-inf")

    # -- TensorBoard interface -----------------------------------------------------------------

    def get_plugin_apps(self):
        apps = {route: self._serve_static for route in _STATIC_FILES}
        apps["/runs"] = self._serve_runs
        apps["/profile"] = self._serve_profile
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
            raise exceptions.BadRequest("missing run")
        run_dir = self._find_runs().get(name)
        if run_dir is None:
            self._runs_time = float("-inf")  # a run written since the last scan
            run_dir = self._find_runs().get(name)
        if run_dir is None:
            raise exceptions.NotFound(f"no traceprof run {name!r}")
        return run_dir

    @wrappers.Request.application
    def _serve_runs(self, request):
        runs = []
        for name, run_dir in self._find_runs().items():
            index = layout.read_run_index(run_dir)
            if index is not None:
                runs.append({**index, "name": name})
        return _respond_json(json.dumps({"logdir": self._logdir, "runs": runs}).encode())

    @wrappers.Request.application
    def _serve_profile(self, request):
        run_dir = self._run_dir(request.args.get("run"))
        index = layout.read_run_index(run_dir)
        if index is None:
            raise exceptions.NotFound("the run has no readable run.json")
        step = request.args.get("step", "mean")
        if step in ("", "mean"):
            file_name = index["profiles"]["mean"]
        else:
            by_step = {str(s["step"]): s["profile"] for s in index.get("steps", [])}
            if step not in by_step:
                raise exceptions.NotFound(f"run has no profile of step {step!r}")
            file_name = by_step[step]
        # names come from run.json; never leave the run's plugin directory
        path = os.path.join(run_dir, layout.PLUGIN_DIR, os.path.basename(file_name))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            raise exceptions.NotFound(f"cannot read {file_name}") from None
        return _respond_json(data)

    @wrappers.Request.application
    def _serve_static(self, request):
        route = "/" + request.path.rsplit("/", 1)[-1]
        if route not in _STATIC_FILES:
            raise exceptions.NotFound()
        with open(os.path.join(_STATIC_DIR, route[1:]), "rb") as f:
            data = f.read()
        return wrappers.Response(data, content_type=_STATIC_FILES[route],
                                 headers=[("X-Content-Type-Options", "nosniff")])


def _respond_json(data: bytes):
    return wrappers.Response(data, content_type=_JSON,
                             headers=[("X-Content-Type-Options", "nosniff"),
                                      ("Cache-Control", "no-cache")])
