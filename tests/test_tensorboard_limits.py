"""TensorBoard at scale: the plugin reads a file once however many requests ask for it (bounded
cache, large profiles streamed), the torch-tb-profiler copies a logdir gets are bounded, Ctrl-C
stops ``traceprof tensorboard`` during the long compression of a copy, and the tab's selectors
follow the run shown (a GPU run after a CPU run shows GPU time in the icicle and the tables)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from traceprof.tensorboard import layout, tb_profiler, write_logdir
from traceprof.tensorboard import logdir as logdir_module

from .browser import start_chromium
from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .tbserver import free_port, get, start_process, stop_process, wait_for
from .tracebuilder import TraceBuilder

CPU_TRACE = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
GPU_TRACE = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
CPU_RUN, GPU_RUN = "resnet18_train_cpu", "h100_bert_small_inference"


# ---- helpers -------------------------------------------------------------------------------------


def fake_run(logdir: Path, name: str, profile: bytes) -> Path:
    """A run directory as the plugin reads it: run.json and its mean profile."""
    plugin_dir = logdir / name / layout.PLUGIN_DIR
    plugin_dir.mkdir(parents=True)
    (plugin_dir / layout.MEAN_PROFILE).write_bytes(profile)
    index = {"schema": layout.RUN_SCHEMA, "run": name, "profiles": {"mean": layout.MEAN_PROFILE}}
    (plugin_dir / layout.RUN_INDEX).write_text(json.dumps(index))
    return plugin_dir / layout.MEAN_PROFILE


def big_profile(mb: float) -> bytes:
    nodes = [{"id": i, "name": f"m{i}", "pad": "x" * 200} for i in range(int(mb * 1e6 / 240))]
    return json.dumps({"nodes": nodes}).encode()


def plugin_for(logdir: Path):
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from traceprof.tensorboard.plugin import TraceprofPlugin

    plugin = TraceprofPlugin(base_plugin.TBContext(logdir=str(logdir)))
    apps = plugin.get_plugin_apps()

    def request(route: str, query: str = "") -> tuple[int, bytes]:
        response = Client(apps[route]).get(route, query_string=query)
        return response.status_code, response.get_data()

    return plugin, request


@pytest.fixture
def parses(monkeypatch):
    """Counts the plugin's parses of a JSON file, whichever function does it."""
    counted: list[int] = []
    lock = threading.Lock()
    for fn in ("parse_json_object", "check_json_object"):
        if hasattr(layout, fn):
            original = getattr(layout, fn)

            def counting(data, original=original):
                with lock:
                    counted.append(len(data))
                time.sleep(0.05)  # parallel requests overlap the parse
                return original(data)

            monkeypatch.setattr(layout, fn, counting)
    return counted


def tiny_trace(path: Path) -> Path:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.op("aten::addmm", 30, 50)
    b.launch(40, 200, 30)
    return b.write(path)


# ---- the plugin's cache --------------------------------------------------------------------------


def test_parallel_requests_for_one_profile_parse_it_once(tmp_path, parses):
    profile = big_profile(2)
    fake_run(tmp_path, "big", profile)
    _plugin, request = plugin_for(tmp_path)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: request("/profile", "run=big"), range(16)))
    assert all(a == (200, profile) for a in answers)
    assert [n for n in parses if n == len(profile)] == [len(profile)], "parsed more than once"
    # a rewritten file (another size and modification time) is read again
    fake_run(tmp_path, "other", b"{}")
    newer = big_profile(1)
    (tmp_path / "big" / layout.PLUGIN_DIR / layout.MEAN_PROFILE).write_bytes(newer)
    assert request("/profile", "run=big") == (200, newer)


def test_the_cache_is_bounded_and_large_profiles_are_streamed(tmp_path, parses, monkeypatch):
    from traceprof.tensorboard import plugin as plugin_module

    monkeypatch.setattr(plugin_module, "CACHE_MAX_ENTRIES", 8)
    monkeypatch.setattr(plugin_module, "CACHE_MAX_BYTES", 3_000_000)
    monkeypatch.setattr(plugin_module, "CACHE_MAX_FILE_BYTES", 1_000_000)
    profiles = {f"run{i:02}": big_profile(0.2) for i in range(20)}
    for name, data in profiles.items():
        fake_run(tmp_path, name, data)
    large = big_profile(4)
    fake_run(tmp_path, "large", large)
    plugin, request = plugin_for(tmp_path)
    status, body = request("/runs")
    assert status == 200 and len(json.loads(body)["runs"]) == 21
    for name, data in profiles.items():
        assert request("/profile", f"run={name}") == (200, data)
    assert len(plugin._files) <= 8 and plugin._files.bytes <= 3_000_000
    # the large profile: checked once, then streamed from disk, never held
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: request("/profile", "run=large"), range(8)))
    assert all(a == (200, large) for a in answers)
    assert [n for n in parses if n == len(large)] == [len(large)]
    assert plugin._files.bytes <= 3_000_000
    # a malformed large file is still refused
    (tmp_path / "large" / layout.PLUGIN_DIR / layout.MEAN_PROFILE).write_bytes(large[:-1])
    status, body = request("/profile", "run=large")
    assert status == 404 and "not valid JSON" in json.loads(body)["error"]


def test_a_real_tensorboard_answers_parallel_requests_alike(tmp_path):
    profile = big_profile(3)
    fake_run(tmp_path / "logdir", "big", profile)
    port, log = free_port(), tmp_path / "tb.log"
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path / "logdir")]
    proc = start_process([*argv, "--host", "127.0.0.1", "--port", str(port)], log)
    try:
        url = f"http://127.0.0.1:{port}/data/plugin/traceprof"
        wait_for("TensorBoard to answer", lambda: get(f"{url}/runs")[0] == 200, 60, proc, log)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: get(f"{url}/profile?run=big"), range(16)))
        assert all(status == 200 and body == json.loads(profile) for status, body in answers)
    finally:
        stop_process(proc)


# ---- the torch-tb-profiler copies ----------------------------------------------------------------


def test_copies_stop_at_the_bound_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(logdir_module, "MAX_TB_PROFILER_COPIES", 2)
    traces = [tiny_trace(tmp_path / f"t{i}.json") for i in range(3)]
    warnings: list[str] = []
    runs = write_logdir(traces, tmp_path / "logdir", warnings=warnings)
    assert [r.tb_profiler_copy is not None for r in runs] == [True, True, False]
    assert len(list((tmp_path / "logdir").rglob("*.pt.trace.json.gz"))) == 2
    assert warnings and warnings[0].startswith("1 of 3 runs written without a copy")
    assert layout.read_run_index(runs[2].path)["tb_profiler"] is None
    # "always" writes them anyway, "never" none
    runs = write_logdir(traces[:1], tmp_path / "logdir", tb_profiler="always")
    assert runs[0].tb_profiler_copy is not None
    runs = write_logdir(traces[:1], tmp_path / "other", tb_profiler="never")
    assert runs[0].tb_profiler_copy is None and not list((tmp_path / "other").rglob("*.pt.trace.*"))


def test_cli_counts_the_traces_already_in_the_logdir(tmp_path):
    trace = tiny_trace(tmp_path / "tiny.json")
    logdir = tmp_path / "logdir"
    for i in range(logdir_module.MAX_TB_PROFILER_COPIES):  # what torch-tb-profiler would load
        (logdir / f"old{i}").mkdir(parents=True)
        (logdir / f"old{i}" / "w.pt.trace.json.gz").write_bytes(b"")

    def run(*extra: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "traceprof", "tensorboard", str(trace), "--logdir", str(logdir)]
        return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=120)

    done = run()
    assert done.returncode == 0, done.stderr
    assert not list((logdir / "tiny").glob("*.pt.trace.json.gz"))
    warning = [line for line in done.stderr.splitlines() if "without a copy" in line]
    assert len(warning) == 1 and warning[0].startswith("traceprof: warning: 1 of 1 runs"), done.stderr
    done = run("--tb-profiler", "always")
    assert done.returncode == 0, done.stderr
    assert list((logdir / "tiny-2").glob("*.pt.trace.json.gz"))
    assert "without a copy" not in done.stderr


# ---- Ctrl-C during the compression of a copy -----------------------------------------------------

# runs the command line with zlib's entry points marked: a line on stderr when the copy's
# compression starts (gzip of more than 10 MB in one call, or a gzip stream opened), and one per
# chunk a gzip stream compresses: CHUNK, or AFTER once the file named by $SIGNALLED exists
_MARKED_CLI = """
import os, runpy, sys, zlib
def mark(line="COMPRESSING"):
    sys.stderr.write(line + "\\n")
    sys.stderr.flush()
compress, compressobj = zlib.compress, zlib.compressobj
def marked_compress(data, *args, **kwargs):
    if len(data) > 10_000_000:
        mark()
    return compress(data, *args, **kwargs)
class Counted:
    def __init__(self, inner):
        self.inner = inner
    def compress(self, data):
        mark("AFTER" if os.path.exists(os.environ["SIGNALLED"]) else "CHUNK")
        return self.inner.compress(data)
    def __getattr__(self, name):
        return getattr(self.inner, name)
def marked_compressobj(level=-1, method=zlib.DEFLATED, wbits=zlib.MAX_WBITS, *args, **kwargs):
    if wbits == 31:
        mark()
        return Counted(compressobj(level, method, wbits, *args, **kwargs))
    return compressobj(level, method, wbits, *args, **kwargs)
zlib.compress, zlib.compressobj = marked_compress, marked_compressobj
sys.argv = ["traceprof", *sys.argv[1:]]
runpy.run_module("traceprof", run_name="__main__")
"""


def poorly_compressible_trace(path: Path, mb: int) -> Path:
    """A tiny trace carrying ``mb`` MB of random text in op args: its copy takes seconds to
    compress (a generated trace of that size compresses ten times faster)."""
    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.scope("", "Net", 10, 9_000)
    for i in range(mb):
        b.op("aten::copy_", 20 + i * 40, 30, blob=base64.b64encode(os.urandom(750_000)).decode())
    return b.write(path)


def test_ctrl_c_during_the_compression_stops_at_once_and_leaves_nothing(tmp_path):
    trace = poorly_compressible_trace(tmp_path / "big.json", 200)
    logdir = tmp_path / "logdir"
    signalled = tmp_path / "signalled"
    proc = subprocess.Popen(
        [sys.executable, "-c", _MARKED_CLI, "tensorboard", str(trace), "--logdir", str(logdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SIGNALLED": str(signalled)},
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # bounded by the timeout below
            lines.append(line)
            if line.strip() == "COMPRESSING":
                break
        assert lines and lines[-1].strip() == "COMPRESSING", "".join(lines)
        time.sleep(0.3)  # well inside the compression (hundreds of chunks)
        proc.send_signal(signal.SIGINT)
        signalled.touch()  # after the signal: a chunk begun later would be compressed after it
        proc.wait(timeout=60)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    assert "traceprof: error: interrupted" in rest and "Traceback" not in rest, rest
    # stopped at once, counted in chunks instead of seconds: no chunk begun after the signal
    # was sent, and the copy (more than one chunk of 1 MB per MB of the trace) not finished
    marks = rest.split()
    assert "AFTER" not in marks, rest
    assert marks.count("CHUNK") < trace.stat().st_size // tb_profiler.COMPRESS_CHUNK_BYTES
    left = [p for p in logdir.rglob("*") if p.is_file()] if logdir.exists() else []
    assert not left, left


# ---- the tab's selectors across runs -------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_and_gpu_tensorboard(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logdir")
    write_logdir([CPU_TRACE, GPU_TRACE], logdir, tb_profiler="never")
    log = tmp_path_factory.mktemp("tb") / "tensorboard.log"
    port = free_port()
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    proc = start_process([*argv, "--host", "127.0.0.1", "--port", str(port)], log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "the traceprof runs", lambda: get(f"{url}/data/plugin/traceprof/runs")[0] == 200, 60, proc, log
        )
        yield url
    finally:
        stop_process(proc)


def test_a_gpu_run_after_a_cpu_run_shows_gpu_time_everywhere(cpu_and_gpu_tensorboard):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def shown(d) -> dict:
        """The metric the selector, the icicle and the ops table show."""
        icicle_head = "//div[@class='tp-icicle']/preceding-sibling::div[@class='tp-panel-head']"
        hint = d.find_element(By.XPATH, f"{icicle_head}/span[@class='tp-hint']").text
        return {
            "metric": Select(d.find_element(By.ID, "tp-metric")).first_selected_option.text,
            "icicle": hint.split(" per step")[0],
            "ops": d.find_element(By.CSS_SELECTOR, ".tp-ops thead th:nth-child(4)").text,  # the time
            "ops_kind": Select(d.find_element(By.ID, "tp-ops-kind")).first_selected_option.text,
        }

    driver = start_chromium()
    try:
        driver.get(f"{cpu_and_gpu_tensorboard}/#traceprof")
        wait = WebDriverWait(
            driver, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        )
        driver.switch_to.frame(wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(CPU_RUN)
        wait.until(lambda d: "ResNet" in d.find_element(By.CSS_SELECTOR, "tr.tp-row").text)
        on_cpu = shown(driver)
        assert on_cpu["metric"] == on_cpu["icicle"] == "CPU time" and on_cpu["ops_kind"] == "Ops"

        Select(driver.find_element(By.ID, "tp-run")).select_by_value(GPU_RUN)
        wait.until(lambda d: "BertLMHeadModel_0" in d.find_element(By.CSS_SELECTOR, "tr.tp-row").text)
        on_gpu = shown(driver)
        assert on_gpu["metric"] == on_gpu["icicle"] == on_gpu["ops"] == "GPU busy time", on_gpu
        assert on_gpu["ops_kind"] == "Kernels"  # the default of a run with kernels

        # CPU time chosen on the GPU run: the icicle and the ops table show it
        Select(driver.find_element(By.ID, "tp-metric")).select_by_value("cpu_us")
        wait.until(lambda d: shown(d)["icicle"] == "CPU time")
        chosen = shown(driver)
        assert chosen["ops"] == "CPU time" and chosen["ops_kind"] == "Ops", chosen
    finally:
        driver.quit()
