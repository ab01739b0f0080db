"""A real distributed job, end to end: ``torchrun`` starts 2 ranks of a tiny DDP model on CPU
(gloo), ``traceprof.capture.profile`` traces every rank (``tests/torchrun_worker.py``), rank 1 does
extra matmuls in one module; the job report (API and command line) finds both ranks, the gloo
all-reduces, and rank 1 as the straggler because of that module. torchrun runs once per module
(about 10 s on 2 cores)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import traceprof
from traceprof.capture.module_table import decode_table
from traceprof.job.modules import is_collective_group

from .torchrun_worker import SLOW_MODULE

WORKER = Path(__file__).with_name("torchrun_worker.py")
SLOW_RANK = 1
TORCHRUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    """The traces of one 2-rank torchrun job (``--standalone``: a free port of its own)."""
    logdir = tmp_path_factory.mktemp("torchrun_job")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(WORKER),
        str(logdir),
        "--slow-rank",
        str(SLOW_RANK),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return logdir


@pytest.fixture(scope="module")
def job(job_dir):
    return traceprof.analyze_job(job_dir, jobs=1)


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def test_every_rank_wrote_one_trace_named_and_marked_with_its_rank(job_dir):
    paths = sorted(job_dir.glob("*.pt.trace.json.gz"), key=lambda p: p.name.split(".")[1])
    assert [re.fullmatch(r".+_\d+\.(rank\dof2)\.\d+\.pt\.trace\.json\.gz", p.name)[1] for p in paths] == [
        "rank0of2",
        "rank1of2",
    ]
    for rank, path in enumerate(paths):
        trace = load(path)
        info = trace["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
        table = decode_table(trace["traceprof"])
        assert (table["rank"], table["world_size"]) == (rank, 2)


def test_the_collectives_are_the_gloo_all_reduces(job_dir, job):
    for path in job_dir.glob("*.pt.trace.json.gz"):
        names = {e["name"] for e in load(path)["traceEvents"] if e.get("ph") == "X"}
        assert {n for n in names if n.startswith("gloo:")} == {"gloo:all_reduce"}
        assert "c10d::allreduce_" in names  # DDP's gradient buckets, issued from the backward
    collectives = [m for m in job.modules if is_collective_group(m)]
    assert [(m.name, sorted(m.nodes)) for m in collectives] == [("gloo:all_reduce", [0, 1])]


def test_job_finds_both_ranks_and_rank1_straggles_in_the_slowed_module(job):
    assert job.rank_numbers == (0, 1) and job.world_size == 2 and job.missing_ranks == ()
    assert job.steps == (2, 3)  # wait 1, warmup 1, active 2
    assert (job.metric, job.step_metric) == ("cpu_us", "cpu_compute_us")
    assert [s.rank for s in job.stragglers] == [SLOW_RANK]
    straggler = job.stragglers[0]
    first, excess = straggler.modules[0]
    assert first.qualified_name == SLOW_MODULE
    assert excess >= 0.5 * straggler.excess_us, "the slowed module makes up most of the difference"
    assert not any(is_collective_group(m) for m, _ in straggler.modules)
    assert job.module(SLOW_MODULE).spread("cpu_us").slowest_rank == SLOW_RANK


def test_command_line_names_the_straggler_and_its_module(job_dir, tmp_path):
    analyze = [sys.executable, "-m", "traceprof", "analyze", str(job_dir)]
    proc = subprocess.run(analyze, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "job:       2 ranks (world size 2, gloo)" in lines
    at = next(i for i, line in enumerate(lines) if line.startswith("Stragglers:"))
    assert lines[at + 1].startswith(f"  rank {SLOW_RANK}: ")
    # the text names it by its short name (the qualified name is in the JSON, below)
    assert lines[at + 2].split(": ", 1)[1].startswith(f"{SLOW_MODULE.rsplit('.', 1)[-1]} +")
    assert lines[at + 3] == ""  # one straggler

    proc = subprocess.run(
        [*analyze, "-o", str(tmp_path / "job.json")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "job.json").read_text())
    assert (doc["ranks_given"], doc["world_size"], doc["step_metric"]) == ([0, 1], 2, "cpu_compute_us")
    [straggler] = doc["stragglers"]
    assert straggler["rank"] == SLOW_RANK and straggler["modules"][0]["module"] == SLOW_MODULE


# ---- a job of two ranks says what it compares with, and why a rank's rows pass its step ----------


def test_two_ranks_are_compared_with_the_faster_one(job, job_dir):
    """With two ranks "the median" is their mean, which hides half of the gap: the straggler is
    compared with the faster rank, and every output says so."""
    [s] = job.stragglers
    times = job.step_times()
    assert (s.reference, s.reference_ranks) == ("faster rank", (0,))
    assert s.reference_us == times[0] and s.excess_us == pytest.approx(times[1] - times[0])
    assert s.excess_fraction == pytest.approx((times[1] - times[0]) / times[0])
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(job_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "is above the faster rank's by more than 5.0%" in proc.stdout
    assert "over the faster rank (rank 0) " in proc.stdout and "over the median" not in proc.stdout
    assert "modules against the faster rank (rank 0) (" in proc.stdout
    from traceprof.job.records import job_document

    [doc] = job_document(job)["stragglers"]
    assert (doc["reference"], doc["reference_ranks"], doc["reference_us"]) == ("faster rank", [0], times[0])


def test_a_rank_whose_rows_pass_its_step_says_why(job, job_dir, tmp_path):
    """gloo's all-reduce threads run beside the main thread: a rank's CPU time per step, the
    sum of its heat-map rows, is above its step's wall time; the text and the page say why."""
    over = [r for r in job.ranks if r.profile.selection.cpu_us > r.profile.selection.wall_us * 1.001]
    assert over, "the gloo threads' CPU time no longer passes the step"
    from traceprof.render import render_job

    text = render_job(job, "tree")
    page = render_job(job, "html")
    for r in job.ranks:
        reason = r.profile.over_wall()
        assert (reason is not None) == (r in over)
        if reason:
            assert reason.startswith("CPU time of several threads running at the same time adds up")
            assert f"rank {r.rank}: its modules and (not in any module) add up to " in text
            assert f'"over_wall":"{reason}"' in page.replace(": ", ":")
    # the page says it under the heat map
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    from .browser import start_chromium

    (tmp_path / "job.html").write_text(page, encoding="utf-8")
    driver = start_chromium()
    try:
        driver.get((tmp_path / "job.html").as_uri())
        notes = [
            e.text for e in driver.find_elements(By.CSS_SELECTOR, "#traceprof-job-map .tp-job-over-wall")
        ]
    finally:
        driver.quit()
    assert [n.split(":", 1)[0] for n in notes] == [f"rank {r.rank}" for r in over]
    assert all("CPU time of several threads running at the same time adds up" in n for n in notes)


def test_a_data_parallel_rank_has_no_model_parallelism(job):
    from traceprof.render.tree import summarize

    s = summarize(job.ranks[0].profile)
    assert (s.dp_size, s.mp_size) == (2, 1)
    text = traceprof.render.render(job.ranks[0].profile, "tree")
    assert re.search(r"^model parallel size:\s+1$", text, re.M)


def test_a_directory_of_one_trace_is_that_traces_report(job_dir, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    trace = sorted(job_dir.glob("*.pt.trace.json.gz"))[0]
    (one / trace.name).write_bytes(trace.read_bytes())
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(one)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("traceprof module profile\ntrace:     ")
    assert "traceprof job profile" not in proc.stdout and "Stragglers" not in proc.stdout
