"""Hardening of jobs and of the command line: option values, one job per report, sizes claimed
by a trace, the job's memory limit, and what paths name (docs/jobs.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceprof.cli import main
from traceprof.errors import JobError, MemoryLimitError
from traceprof.job.analyze import analyze_job
from traceprof.job.rank import RankOptions, analyze_rank
from traceprof.read.discovery import expand_patterns, find_traces
from traceprof.read.limits import MemoryBudget, parse_size
from traceprof.testing import generate_job

from .tracebuilder import TraceBuilder


def _rank_trace(path: Path, model: str, rank: int | None = None, world_size: int | None = None) -> Path:
    """A tiny CPU trace of one step of ``model`` (its root scope and a Linear inside)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", model, 10, 900)
    b.scope("fc", "Linear", 20, 200)
    b.op("aten::addmm", 30, 100)
    if rank is not None:
        b.top["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world_size}
    return b.write(path)


def _one_line(result, code: int, *texts: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceprof: error: "), result.output
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


# ---- 6, 14: option values and usage errors exit 3, on one line -----------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["diff", "a.json", "b.json", "--fail-if-slower", "nan"], "--fail-if-slower"),
        (["diff", "a.json", "b.json", "--fail-if-slower", "inf"], "--fail-if-slower"),
        (["diff", "a.json", "b.json", "--fail-if-slower", "-0"], "--fail-if-slower"),
        (["diff", "a.json", "b.json", "--max-memory", "lots"], "--max-memory"),
        (["analyze", "a.json", "b.json", "--straggler-threshold", "nan"], "--straggler-threshold"),
        (["analyze", "a.json", "b.json", "--straggler-threshold", "-0"], "--straggler-threshold"),
        (["analyze", "a.json", "--peak-tflops", "nan"], "--peak-tflops"),
        (["analyze", "a.json", "--peak-tflops", "infinity"], "--peak-tflops"),
        (["analyze", "a.json", "--depth", "-0"], "--depth"),
        (["analyze", "a.json", "--depth", "-1"], "--depth"),
        (["analyze", "a.json", "--step", "-2"], "--step"),
        (["analyze", "a.json", "--top", "0"], "--top"),
        (["analyze", "a.json", "--jobs", "0"], "--jobs"),
        (["analyze", "a.json", "--format", "xlsx"], "--format"),
        (["tensorboard", "a.json", "--logdir", "tb", "--peak-tflops", "nan"], "--peak-tflops"),
        (["tensorboard", "a.json", "--logdir", "tb", "--port", "-0"], "--port"),
    ],
)
def test_a_bad_option_value_is_one_line_and_exit_3(tmp_path, monkeypatch, args, option):
    monkeypatch.chdir(tmp_path)  # a.json and b.json do not exist: the value is refused first
    _one_line(CliRunner().invoke(main, args), 3, option)


def test_click_usage_errors_exit_3_on_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _one_line(CliRunner().invoke(main, ["analyze", "a.json", "--no-such-option"]), 3, "--no-such-option")
    _one_line(CliRunner().invoke(main, ["analyze"]), 3, "TRACE")
    _one_line(CliRunner().invoke(main, ["no-such-command"]), 3, "no-such-command")
    # unreadable input keeps exit 2
    _one_line(CliRunner().invoke(main, ["analyze", "a.json"]), 2, "a.json")


def test_fail_if_slower_nan_no_longer_passes_a_slower_run():
    base = "sample_traces/gpt_diff_base_cpu.pt.trace.json.gz"
    new = "sample_traces/gpt_diff_wide_mlp_cpu.pt.trace.json.gz"
    root = Path(__file__).resolve().parents[1]
    r = CliRunner().invoke(main, ["diff", str(root / base), str(root / new), "--fail-if-slower", "nan"])
    _one_line(r, 3, "--fail-if-slower", "'nan' is not a finite number")


# ---- 14: options of a job on one trace, and of one trace on a job, are refused alike --------------


@pytest.mark.parametrize(
    "option",
    [
        ["--engine", "local"],
        ["--scheduler", "tcp://127.0.0.1:8786"],
        ["--ranks", "all"],
        ["--straggler-threshold", "0.1"],
    ],
)
def test_a_job_option_on_one_trace_is_refused(tmp_path, option):
    trace = _rank_trace(tmp_path / "one.json", "Net")
    _one_line(CliRunner().invoke(main, ["analyze", str(trace), *option]), 3, f"{option[0]} applies to a job")


def test_a_single_trace_option_on_a_job_is_refused_even_with_its_default_value(tmp_path):
    a = _rank_trace(tmp_path / "net_rank0.json", "Net", 0, 2)
    b = _rank_trace(tmp_path / "net_rank1.json", "Net", 1, 2)
    from traceprof.render.table import DEFAULT_COLUMNS

    # the table's documented default columns, spelled out
    r = CliRunner().invoke(main, ["analyze", str(a), str(b), "--columns", ",".join(DEFAULT_COLUMNS)])
    _one_line(r, 3, "--columns applies to one trace")
    _one_line(CliRunner().invoke(main, ["analyze", str(a), str(b), "--ops", "fc"]), 3, "--ops")


# ---- 14, 11: what paths name --------------------------------------------------------------------


def test_one_file_under_two_spellings_is_one_rank(tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    _rank_trace(job / "net_rank0.json", "Net", 0, 1)
    monkeypatch.chdir(tmp_path)
    assert find_traces(["job/net_rank0.json", "./job/net_rank0.json", str(job / "net_rank0.json")]) == [
        "job/net_rank0.json"
    ]
    assert find_traces(["job", "./job/net_rank0.json"]) == [os.path.join("job", "net_rank0.json")]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_glob_skips_fifos_as_a_directory_does(tmp_path):
    trace = _rank_trace(tmp_path / "a_rank0.json", "Net", 0, 1)
    os.mkfifo(tmp_path / "b_rank1.json")  # reading it would block until a writer comes
    pattern = str(tmp_path / "*.json")
    assert find_traces([pattern]) == [str(trace)] == find_traces([str(tmp_path)])
    assert expand_patterns([pattern]) == [str(trace)]


# ---- 7, issue 24 item 11: one job per report; a directory of several runs -------------------------


def test_disjoint_ranks_of_two_jobs_are_not_merged(tmp_path):
    gpt = [_rank_trace(tmp_path / f"gpt_rank{r}.json", "GPT", r, 4) for r in (0, 1)]
    bert = [_rank_trace(tmp_path / f"bert_rank{r}.json", "BERT", r, 4) for r in (2, 3)]
    with pytest.raises(JobError) as e:
        analyze_job([*gpt, *bert], jobs=1)
    message = e.value.message
    assert message.startswith("ranks of different jobs mixed (models and file names differ): "), message
    assert (
        "ranks 0, 1, world size 4, model GPT" in message and "ranks 2, 3, world size 4, model BERT" in message
    )
    assert "give the traces of one job" in message


def test_a_directory_of_two_captures_analyzes_the_newest_and_names_the_other(tmp_path):
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    old = [
        _rank_trace(logdir / f"host_1{r}.rank{r}of2.1700000000000.pt.trace.json", "Net", r, 2) for r in (0, 1)
    ]
    new = [
        _rank_trace(logdir / f"host_2{r}.rank{r}of2.1700000900000.pt.trace.json", "Net", r, 2) for r in (0, 1)
    ]
    for i, p in enumerate(old + new):
        os.utime(p, (1_700_000_000 + 1000 * (i // 2), 1_700_000_000 + 1000 * (i // 2)))
    job = analyze_job(logdir, jobs=1)
    assert [r.path for r in job.ranks] == [str(p) for p in new]
    note = next(w for w in job.warnings if "runs in the directory" in w)
    assert note.startswith("2 runs in the directory: analyzed the newest, host_20.rank0of2")
    assert "left out: host_10.rank0of2.1700000000000.pt.trace.json" in note
    # named one by one, the two runs are an error that says how to pick one
    with pytest.raises(
        JobError, match=r"ranks of different jobs mixed \(file names differ\).*one run's files"
    ):
        analyze_job([*old, *new], jobs=1)


def test_a_directory_of_unrelated_traces_analyzes_the_newest(tmp_path):
    for i, model in enumerate(("LeNet", "ResNet", "GPT")):
        p = _rank_trace(tmp_path / f"{model.lower()}.pt.trace.json", model)
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
    r = CliRunner().invoke(main, ["analyze", str(tmp_path), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert "traceprof: warning: 3 runs in the directory: analyzed the newest, gpt.pt.trace.json" in r.output


# ---- 8: sizes a trace claims are checked ----------------------------------------------------------


def test_a_huge_world_size_is_refused_without_building_anything_of_its_size(tmp_path):
    for r in (0, 1):
        _rank_trace(tmp_path / f"net_rank{r}.json", "Net", r, 10**15)
    limit = 3 * 2**30  # before: a set of 10**15 ranks, memory exhausted
    code = (
        "import resource, sys; from traceprof.cli import run; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
        f"sys.argv = ['traceprof', 'analyze', {str(tmp_path)!r}, '--jobs', '1']; run()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"traceprof: error: {tmp_path / 'net_rank0.json'}: world size 1000000000000000 in the trace "
        "is not that of a job (1 to 1048576); the trace's distributedInfo is damaged"
    ]


# ---- 10: the memory limit covers the whole job ------------------------------------------------------


class _RecordingEngine:
    """Runs the tasks in this process, as a pool of ``jobs`` workers would be told to."""

    name = "recording"

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.options: list[RankOptions] = []

    def map(self, fn, items, progress=None):
        self.options += [options for _, options in items]
        return [fn(item) for item in items]


def test_the_job_memory_limit_is_divided_among_the_traces_loaded_at_once(tmp_path):
    paths = generate_job(tmp_path / "job", ranks=4, steps=1, layers=1, quiet=True)
    engine = _RecordingEngine(jobs=3)
    analyze_job(paths, engine=engine, max_memory="100M")
    assert {o.max_memory for o in engine.options} == {parse_size("100M") // 3}
    assert {o.sharing for o in engine.options} == {3}
    engine = _RecordingEngine(jobs=8)  # never more at once than traces
    analyze_job(paths[:2], engine=engine, max_memory="100M")
    assert {o.max_memory for o in engine.options} == {parse_size("100M") // 2}


def test_a_trace_over_its_share_says_to_lower_jobs(tmp_path):
    paths = generate_job(tmp_path / "job", ranks=2, steps=1, layers=1, quiet=True)
    budget = MemoryBudget(paths[0], max_memory=10**12)
    budget.add(Path(paths[0]).read_bytes())
    limit = int(budget.estimate() * 1.5)  # one trace fits the job's limit, not half of it
    assert len(analyze_job(paths, jobs=1, max_memory=limit).ranks) == 2
    with pytest.raises(MemoryLimitError, match=r"divided among the 2 traces"):
        analyze_job(paths, engine=_RecordingEngine(jobs=2), max_memory=limit)
    with pytest.raises(MemoryLimitError) as error:
        analyze_rank((paths[0], RankOptions(max_memory=limit // 2, sharing=2)))
    assert "lower --jobs" in error.value.message


def test_the_default_limit_is_resolved_once_for_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEPROF_MAX_MEMORY", "90M")
    paths = generate_job(tmp_path / "job", ranks=2, steps=1, layers=1, quiet=True)
    engine = _RecordingEngine(jobs=2)
    analyze_job(paths, engine=engine)
    assert {o.max_memory for o in engine.options} == {parse_size("90M") // 2}


def test_a_rank_known_from_its_file_name_alone_joins_the_job_of_its_world_size(tmp_path):
    a = _rank_trace(tmp_path / "net_rank0.json", "Net", 0, 2)
    b = _rank_trace(tmp_path / "net_rank1.json", "Net")  # no distributedInfo: rank 1 from the name
    job = analyze_job([a, b], jobs=1)
    assert job.rank_numbers == (0, 1) and job.world_size == 2
