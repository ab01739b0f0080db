"""The processes that decode one large trace (issue 33, item 12): a worker that dies ends the
load with one line naming the trace (a BrokenProcessPool traceback before), and ``--jobs``
above the trace's runs starts no more processes than it has runs, with a warning above the
CPUs (``-j 1000`` forked 1,000 decoders before)."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import warnings

import pytest

from traceprof.engine import EngineWarning, WorkerLostError, cpu_count
from traceprof.read import parallel
from traceprof.read.build import load_trace

from .conftest import REPO, SHARED_TRACES

SOURCE = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
CHUNK = 50_000  # bytes of JSON per run: the trace is a pool's (parallel.POOL_MIN_RUNS runs or more)


@pytest.fixture
def plain(tmp_path):
    path = tmp_path / "bert.json"
    path.write_bytes(gzip.decompress(SOURCE.read_bytes()))
    runs = -(-path.stat().st_size // CHUNK)
    assert runs >= parallel.POOL_MIN_RUNS
    return path


def _killed(task):
    """A decoding worker killed as the out-of-memory killer kills it."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_decoding_worker_that_dies_is_one_line_naming_the_trace(plain, monkeypatch):
    monkeypatch.setattr(parallel, "decode_file_run", _killed)
    with pytest.raises(WorkerLostError) as raised:  # before: BrokenProcessPool
        load_trace(plain, jobs=2, chunk_bytes=CHUNK, cache=False)
    assert raised.value.message == (
        f"{plain}: a process decoding it was killed (SIGKILL); if it ran out of memory, use fewer "
        "--jobs (each holds runs of the trace's text) or more memory"
    )
    assert raised.value.exit_code == 7


def test_the_command_says_it_in_one_line(plain):
    code = (
        "import os, signal, sys\n"
        "from traceprof.read import parallel\n"
        "from tests.test_decoder_workers import _killed\n"
        "parallel.decode_file_run = _killed\n"
        "parallel.chunks.DEFAULT_CHUNK_BYTES = 50_000\n"
        "from traceprof.cli import run\n"
        f"sys.argv = ['traceprof', 'analyze', {str(plain)!r}, '-j', '2', '--no-cache']\n"
        "run()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 7, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"traceprof: error: {plain}: a process decoding it was killed (SIGKILL); if it ran out of "
        "memory, use fewer --jobs (each holds runs of the trace's text) or more memory"
    ]


def test_no_more_decoding_processes_than_runs_and_a_warning_above_the_cpus(plain, monkeypatch):
    import concurrent.futures

    real, asked = concurrent.futures.ProcessPoolExecutor, []

    def spy(max_workers=None, *args, **kwargs):
        asked.append(max_workers)
        return real(max_workers, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", spy)
    runs = -(-plain.stat().st_size // CHUNK)
    expected = load_trace(plain, jobs=1, chunk_bytes=CHUNK, cache=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = load_trace(plain, jobs=1000, chunk_bytes=CHUNK, cache=False)
    assert asked == [runs]  # before: 1000
    assert len(got.events) == len(expected.events)
    said = [str(w.message) for w in record if issubclass(w.category, EngineWarning)]
    assert said == [
        f"--jobs 1000: {runs} processes decoding one trace on {cpu_count()} CPUs compete for them "
        f"and each holds runs of its text in memory; --jobs {cpu_count()} or fewer is faster"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", EngineWarning)
        load_trace(plain, jobs=min(2, cpu_count()), chunk_bytes=CHUNK, cache=False)  # no warning
