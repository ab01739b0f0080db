"""The traceprof TensorBoard plugin over a hostile log directory: it serves only files inside the
logdir (symlinks leaving it are refused), answers malformed or missing run files with a 4xx and a
one-line message (no traceback in the server log), and its run list names no absolute path.

One real TensorBoard on 127.0.0.1 serves a logdir built here, next to a directory "outside" it
holding a secret; every case is a request over HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.parse
from pathlib import Path

import pytest

from traceprof.tensorboard import layout, write_logdir

from .tbserver import free_port, get, start_process, stop_process, wait_for
from .tracebuilder import TraceBuilder

pytest.importorskip("tensorboard")

SECRET = "TRACEPROF-SECRET-OUTSIDE-THE-LOGDIR"
PASSWD = "/etc/passwd"
START_TIMEOUT_S = 60
GOOD = "good"

# runs whose files are fine, or whose profiles are bad (their run.json is fine: listed)
LISTED = {
    GOOD,
    "inside_link",
    "passwd_link",
    "secret_step",
    "missing_profile",
    "bad_profile",
    "array_profile",
    "utf8_profile",
    "fifo_profile",
    "dir_profile",
}
# runs whose run.json is unusable or leaves the logdir: not listed
NOT_LISTED = {
    "index_link",
    "plugins_link",
    "run_link",
    "bad_json",
    "bad_utf8",
    "array_index",
    "deep_index",
    "no_profiles",
    "wrong_shape",
    "traversal_name",
}


def _plugin_dir(logdir: Path, run: str) -> Path:
    return logdir / run / layout.PLUGIN_DIR


def _copy_run(logdir: Path, run: str, index: dict | None = None, profile: bool = True) -> Path:
    """A run named ``run`` with the good run's run.json (or ``index``) and its profile."""
    plugin = _plugin_dir(logdir, run)
    plugin.mkdir(parents=True)
    good = _plugin_dir(logdir, GOOD)
    text = json.dumps(index) if index is not None else (good / layout.RUN_INDEX).read_text()
    (plugin / layout.RUN_INDEX).write_text(text)
    if profile:
        shutil.copy(good / layout.MEAN_PROFILE, plugin / layout.MEAN_PROFILE)
    return plugin


def _hostile_logdir(root: Path) -> tuple[Path, Path]:
    """(logdir, outside): a logdir with one real run and a run per hostile case."""
    outside, logdir = root / "outside", root / "logdir"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret.json").write_text(json.dumps({"secret": SECRET}))

    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.scope("fc", "Linear", 20, 100)
    b.op("aten::addmm", 30, 50)
    trace = b.write(outside / "tiny.json")
    write_logdir([trace], logdir, name=GOOD)
    good_index = json.loads((_plugin_dir(logdir, GOOD) / layout.RUN_INDEX).read_text())
    assert good_index["trace"]["path"] == str(trace)  # absolute, outside the logdir

    # symlinks: one that stays inside the logdir is fine, every one that leaves it is refused
    plugin = _copy_run(logdir, "inside_link", profile=False)
    os.symlink(
        os.path.join("..", "..", "..", GOOD, layout.PLUGIN_DIR, layout.MEAN_PROFILE),
        plugin / layout.MEAN_PROFILE,
    )
    plugin = _copy_run(logdir, "passwd_link", profile=False)
    os.symlink(PASSWD, plugin / layout.MEAN_PROFILE)
    plugin = _copy_run(
        logdir, "secret_step", {**good_index, "steps": [{"step": 1, "profile": layout.step_profile_name(1)}]}
    )
    os.symlink(outside / "secret.json", plugin / layout.step_profile_name(1))

    (outside / "index.json").write_text(json.dumps(good_index))
    plugin = _copy_run(logdir, "index_link")
    (plugin / layout.RUN_INDEX).unlink()
    os.symlink(outside / "index.json", plugin / layout.RUN_INDEX)

    elsewhere = outside / "elsewhere" / layout.PLUGIN_DIR
    elsewhere.mkdir(parents=True)
    (elsewhere / layout.RUN_INDEX).write_text(json.dumps(good_index))
    (elsewhere / layout.MEAN_PROFILE).write_text(json.dumps({"secret": SECRET}))
    (logdir / "plugins_link").mkdir()
    os.symlink(outside / "elsewhere" / "plugins", logdir / "plugins_link" / "plugins")
    os.symlink(outside / "elsewhere", logdir / "run_link")

    # malformed run.json
    for run, data in (
        ("bad_json", b"{not json"),
        ("bad_utf8", b'{"schema": "\xff\xfe"}'),
        ("array_index", b"[1, 2]"),
        ("deep_index", b"[" * 100_000),
    ):
        _copy_run(logdir, run)
        (_plugin_dir(logdir, run) / layout.RUN_INDEX).write_bytes(data)
    _copy_run(logdir, "no_profiles", {"schema": layout.RUN_SCHEMA, "run": "no_profiles"})
    _copy_run(logdir, "wrong_shape", {**good_index, "profiles": [], "steps": "x"})
    _copy_run(
        logdir,
        "traversal_name",
        {**good_index, "profiles": {"mean": f"../../../{GOOD}/{layout.PLUGIN_DIR}/profile.json"}},
        profile=False,
    )

    # missing or malformed profiles
    _copy_run(logdir, "missing_profile", profile=False)
    for run, data in (
        ("bad_profile", b"{oops"),
        ("array_profile", b"[]"),
        ("utf8_profile", b'{"a": "\xff"}'),
    ):
        (_copy_run(logdir, run, profile=False) / layout.MEAN_PROFILE).write_bytes(data)
    os.mkfifo(_copy_run(logdir, "fifo_profile", profile=False) / layout.MEAN_PROFILE)
    (_copy_run(logdir, "dir_profile", profile=False) / layout.MEAN_PROFILE).mkdir()
    return logdir, outside


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(plugin URL, logdir, outside, server log) of one TensorBoard over the hostile logdir."""
    root = tmp_path_factory.mktemp("hostile")
    logdir, outside = _hostile_logdir(root)
    log = root / "tensorboard.log"
    port = free_port()
    proc = start_process(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "TensorBoard to answer",
            lambda: get(f"{url}/data/plugins_listing")[0] == 200,
            START_TIMEOUT_S,
            proc,
            log,
        )
        yield f"{url}/data/plugin/traceprof", logdir, outside, log
    finally:
        stop_process(proc)


def _request(url: str):
    """(status, raw body) of a GET that must answer within seconds and never leak a secret."""
    status, body = get(url, timeout=15)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert SECRET.encode() not in raw, f"{url} served the secret outside the logdir"
    assert b"root:x:0:0" not in raw and b"/bin/" not in raw, f"{url} served {PASSWD}"
    if status >= 400 and raw.startswith(b"{"):  # get() decodes only answers that succeed
        body = json.loads(raw)
    return status, body


def _profile(base: str, run: str, step: str | None = None):
    query = {"run": run} if step is None else {"run": run, "step": step}
    return _request(f"{base}/profile?{urllib.parse.urlencode(query)}")


def _error_message(body) -> str:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert body["error"] and "\n" not in body["error"]
    return body["error"]


def test_runs_lists_the_usable_runs_by_relative_name_and_no_absolute_path(server):
    base, logdir, outside, _log = server
    status, body = _request(f"{base}/runs")
    assert status == 200
    names = {r["name"] for r in body["runs"]}
    assert names == LISTED
    assert {r["name"] for r in body["invalid_runs"]} == NOT_LISTED - {"run_link"}
    text = json.dumps(body)
    for path in (logdir, outside, Path(os.path.realpath(logdir))):
        assert str(path) not in text

    def strings(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str):
            yield value

    assert not [s for s in strings(body) if os.path.isabs(s)]
    good = next(r for r in body["runs"] if r["name"] == GOOD)
    assert good["trace"]["path"] == "tiny.json"  # the input trace lies outside the logdir


def test_files_inside_the_logdir_are_served(server):
    base = server[0]
    for run in (GOOD, "inside_link", "secret_step"):
        status, body = _profile(base, run)
        assert status == 200 and body["schema"].startswith("traceprof.profile/"), (run, body)


@pytest.mark.parametrize(
    "run, step",
    [
        ("passwd_link", None),  # profile.json -> /etc/passwd
        ("secret_step", "1"),  # step-1.json -> a JSON file outside
        ("index_link", None),  # run.json -> outside
        ("plugins_link", None),  # plugins/ -> outside
    ],
)
def test_symlinks_leaving_the_logdir_are_refused(server, run, step):
    status, body = _profile(server[0], run, step)
    assert status == 403, body
    assert "outside the log directory" in _error_message(body)


@pytest.mark.parametrize(
    "run",
    sorted(NOT_LISTED - {"index_link", "plugins_link"})
    + ["missing_profile", "bad_profile", "array_profile", "utf8_profile", "fifo_profile", "dir_profile"],
)
def test_malformed_or_missing_run_files_are_a_404_with_a_message(server, run):
    status, body = _profile(server[0], run)
    assert status == 404, body
    message = _error_message(body)
    assert run in message or "no traceprof run" in message


@pytest.mark.parametrize(
    "query",
    [
        "run=nope",
        "run=..",
        "run=../..",
        "run=../../etc/passwd",
        "run=%2Fetc%2Fpasswd",
        "run=%2E%2E%2F%2E%2E%2Fetc",
        f"run={GOOD}%2F..%2F..%2Foutside",
        "run=.",
        f"run={GOOD}&step=..%2F..%2F..%2Foutside%2Fsecret.json",
        f"run={GOOD}&step=%2Fetc%2Fpasswd",
        f"run={GOOD}&step=99",
        "run=run_link",
    ],
)
def test_path_parameters_cannot_escape_the_logdir(server, query):
    status, body = _request(f"{server[0]}/profile?{query}")
    assert status == 404, body
    _error_message(body)


def test_a_missing_run_is_a_bad_request(server):
    status, body = _request(f"{server[0]}/profile")
    assert status == 400
    _error_message(body)


@pytest.mark.parametrize(
    "route",
    [
        "/../../../../etc/passwd",
        "/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
        "/index.js/../../../etc/passwd",
        "/..%2F..%2F..%2Fetc%2Fpasswd",
        "/%2Fetc%2Fpasswd",
        "/static/../../../../etc/passwd",
    ],
)
def test_other_plugin_paths_serve_nothing_outside(server, route):
    status, _body = _request(f"{server[0]}{route}")
    assert status == 404


def test_errors_log_one_line_and_no_traceback(server):
    base, _logdir, _outside, log = server
    for run in ("no_profiles", "passwd_link", "deep_index"):
        _profile(base, run)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert SECRET not in text
    refused = [line for line in text.splitlines() if "passwd_link" in line and "refused" in line]
    assert refused, text[-3000:]
