"""Engines under stress (traceprof/engine.py): a worker that dies, a Dask scheduler that is wrong,
away or without workers, Ctrl-C and SIGTERM to the whole process group, more --jobs than traces,
and a plain script without ``if __name__ == "__main__":``. Real process pools and real Dask
LocalClusters, on small inputs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest

from traceprof.engine import DaskEngine, EngineWarning, LocalEngine, WorkerLostError, cpu_count, make_engine
from traceprof.errors import OptionError

from .conftest import SAMPLE_TRACES, SHARED_TRACES

MULTI_RANK = SHARED_TRACES / "multi_rank"


def _die_on(item: str) -> str:
    """A task that kills its own worker (SIGKILL, as the kernel's out-of-memory killer does)
    when its item says so."""
    if item.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return item


def _pid(item: object) -> int:
    return os.getpid()


def test_a_local_worker_that_dies_is_a_one_line_error_naming_its_item():
    with pytest.raises(WorkerLostError) as info:
        LocalEngine(2).map(_die_on, ["a.json", "die.json", "c.json"])
    message = info.value.message
    assert message.startswith("die.json: the worker process analyzing it was killed (SIGKILL)")
    assert "fewer --jobs" in message and info.value.exit_code == 7


def test_dask_workers_that_keep_dying_are_a_one_line_error_naming_the_item():
    import dask
    import distributed  # noqa: F401 - its configuration loaded before it is changed for the test

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with pytest.raises(WorkerLostError) as info:
            DaskEngine(jobs=1).map(_die_on, ["die.json"])
    assert info.value.message.startswith("die.json: every Dask worker that analyzed it died")
    assert "fewer --jobs" in info.value.message


@pytest.mark.parametrize(
    "address, problem",
    [
        ("abc", r"not the address of a Dask scheduler \(expected tcp://HOST:PORT\)"),
        ("http://127.0.0.1:8786", "not the address of a Dask scheduler"),
    ],
)
def test_a_bad_scheduler_address_is_refused_before_connecting(address, problem):
    with pytest.raises(OptionError, match=problem):
        make_engine("dask", scheduler=address)


def _spy(monkeypatch, module, name: str) -> list[dict]:
    """The keyword arguments of every call of ``module.name`` (which still runs): what the
    engine asked Dask for, counted instead of timing what Dask did with it."""
    real, calls = getattr(module, name), []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_an_unreachable_scheduler_is_an_error_after_the_timeout(monkeypatch):
    import distributed

    clients = _spy(monkeypatch, distributed, "Client")
    engine = make_engine("dask", scheduler="tcp://127.0.0.1:1", scheduler_timeout=1)
    with pytest.raises(OptionError, match=r"tcp://127.0.0.1:1: no Dask scheduler answered in 1 s"):
        engine.map(_pid, ["a.json"])
    # asked who it is, within the timeout, before any client (tests/test_dask_scheduler_check.py)
    assert clients == []


def test_a_scheduler_without_workers_is_an_error_after_the_timeout():
    import logging

    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=0, dashboard_address=None, silence_logs=logging.CRITICAL)
    try:
        engine = make_engine("dask", scheduler=cluster.scheduler_address, scheduler_timeout=1)
        with pytest.raises(OptionError, match="no worker joined the scheduler in 1 s"):
            engine.map(_pid, ["a.json"])
    finally:
        cluster.close()


def test_scheduler_timeout_applies_to_dask_only():
    with pytest.raises(OptionError, match="--scheduler-timeout applies to --engine dask"):
        make_engine("local", scheduler_timeout=5)
    with pytest.raises(OptionError, match="more than 0 seconds"):
        make_engine("dask", scheduler_timeout=0)


def test_workers_are_capped_at_the_items_with_a_warning_above_the_cpus():
    items = [str(i) for i in range(cpu_count() + 1)]
    with pytest.warns(EngineWarning, match=rf"--jobs 1000: {len(items)} workers on {cpu_count()} CPUs"):
        pids = LocalEngine(1000).map(_pid, items)
    assert os.getpid() not in pids and len(set(pids)) <= len(items)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LocalEngine(1000).map(_pid, ["a", "b"])  # capped at 2 workers: nothing to say


def test_a_dask_local_cluster_has_no_more_workers_than_items(monkeypatch):
    import distributed

    clusters = _spy(monkeypatch, distributed, "LocalCluster")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EngineWarning)
        pids = DaskEngine(jobs=60).map(_pid, ["a", "b"])
    assert len(set(pids)) <= 2
    assert [c["n_workers"] for c in clusters] == [2]  # 2 worker processes started, not 60


def test_analyze_job_from_a_script_without_a_main_guard(tmp_path):
    """The workers do not run the script again (nor fail on ``python -``'s missing file)."""
    script = tmp_path / "plain.py"
    script.write_text(
        "import traceprof\n"
        "print('body')\n"
        f"job = traceprof.analyze_job({str(MULTI_RANK)!r}, jobs=2)\n"
        "print(len(job.to_dataframe()['rank'].unique()), 'ranks')\n"
    )
    for command, stdin in (
        ([sys.executable, str(script)], None),
        ([sys.executable, "-"], script.read_text()),
    ):
        proc = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n")[:2] == ["body", "8 ranks"], proc.stdout
        assert "Traceback" not in proc.stderr


# ---- Ctrl-C and SIGTERM to the process group --------------------------------------------------


@pytest.fixture(scope="module")
def long_job(tmp_path_factory) -> Path:
    """48 traces (the 8 DLRM ranks, 6 times): long enough to interrupt while workers run."""
    out = tmp_path_factory.mktemp("long_job")
    for copy in range(6):
        for trace in sorted(MULTI_RANK.glob("*.json.gz")):
            shutil.copy(trace, out / f"c{copy}_{trace.name}")
    return out


def _interrupt_while_workers_run(job: Path, engine: str, sig: signal.Signals) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceprof", "analyze", str(job), "--engine", engine, "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 90
    while len(parent.children(recursive=True)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are working
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=90)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("engine", ["dask", "local"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_job_says_one_line(long_job, engine, sig):
    proc = _interrupt_while_workers_run(long_job, engine, sig)
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert proc.returncode == 128 + sig, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [f"traceprof: error: {word}"]


@pytest.fixture(scope="module")
def two_big_traces(tmp_path_factory) -> list[Path]:
    """Two traces of 12 MB: diff analyzes them in two worker processes."""
    from traceprof.testing import generate

    out = tmp_path_factory.mktemp("big")
    for name, seed in (("a.json", 0), ("b.json", 1)):
        generate(str(out / name), target_mb=12, layers=2, seed=seed, quiet=True)
    return [out / "a.json", out / "b.json"]


@pytest.mark.parametrize("after_s", [0.02, 0.1, 0.2])
def test_diff_interrupted_while_its_pool_starts_says_one_line(two_big_traces, after_s):
    """SIGINT to the process group soon after diff's first worker process exists."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceprof", "diff", *map(str, two_big_traces)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while not parent.children(recursive=True) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(after_s)
    assert proc.poll() is None, "diff ended before it was interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    assert "Traceback" not in err and [line for line in err.splitlines() if line.strip()] == [
        "traceprof: error: interrupted"
    ]


def test_ctrl_c_while_the_command_loads_says_one_line():
    """SIGINT once the package has started importing (-X importtime writes a line as each module
    is loaded): one line and 130, no KeyboardInterrupt traceback."""
    import select

    proc = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "traceprof",
            "analyze",
            str(SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen, lines = False, []
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            lines.append(line)
            seen = "traceprof.startup" in line
    assert seen, "".join(lines[-5:])
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    said = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 130, rest[-2000:]
    assert said == ["traceprof: error: interrupted"], said
