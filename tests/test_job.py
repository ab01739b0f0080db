"""Jobs: the traces of a distributed job's ranks analyzed together (traceprof/job.py).

Real traces: the 8 ranks of a DLRM job in ../shared/traces/multi_rank/. Generated traces: a job of
16 small ranks written by traceprof.testing's generate_job, one rank slower in one
module. The Dask test starts a real LocalCluster (2 worker processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import traceprof
from traceprof import render
from traceprof.analysis.job_timeline import step_timelines, union_length
from traceprof.engine import LocalEngine
from traceprof.job.analyze import analyze_job
from traceprof.job.modules import spread_of
from traceprof.read.build import load_trace
from traceprof.read.discovery import find_traces, is_job
from traceprof.testing import generate, generate_job

from .browser import start_chromium
from .conftest import SHARED_TRACES
from .tracebuilder import TraceBuilder

MULTI_RANK = SHARED_TRACES / "multi_rank"
SLOW_RANK, SLOW_MODULE = 11, "transformer.h.1.mlp.c_fc"


def traceprof_cli(*args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "traceprof", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def multi_rank_job():
    return analyze_job(MULTI_RANK, jobs=2)


@pytest.fixture(scope="module")
def straggler_job_dir(tmp_path_factory):
    """16 ranks of a small GPT job (2 steps, 2 blocks); rank 11 runs the kernels of
    transformer.h.1.mlp.c_fc 3 times longer."""
    out = tmp_path_factory.mktemp("job16")
    generate_job(
        out,
        ranks=16,
        slow_rank=SLOW_RANK,
        slow_module=SLOW_MODULE,
        slow_factor=3.0,
        steps=2,
        layers=2,
        quiet=True,
    )
    return out


# ---- the 8-rank DLRM job -----------------------------------------------------------------------


def test_analyze_directory_prints_one_job_report_for_8_ranks():
    proc = traceprof_cli("analyze", MULTI_RANK)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("traceprof job profile\n")
    assert out.count("traceprof job profile") == 1
    assert "job:       8 ranks (world size 8, nccl), Tesla V100-SXM2-32GB" in out
    assert "steps:     mean of 1 step (10) on every rank" in out
    ranks_table = out.split("Per rank, per step")[1].split("Stragglers")[0].splitlines()
    assert [line.split()[0] for line in ranks_table[2:10]] == [str(r) for r in range(8)]
    assert "Modules: GPU busy time per step across the ranks" in out


def test_per_rank_numbers_equal_single_trace_analyses(multi_rank_job):
    job = multi_rank_job
    assert job.rank_numbers == tuple(range(8))
    assert job.world_size == 8 and job.missing_ranks == () and job.steps == (10,)
    for jr in job.ranks:
        single = traceprof.analyze(jr.path)
        single.self_check()
        jr.profile.self_check()
        assert f"worker{jr.rank}_" in jr.path
        assert render.render(jr.profile, "json") == render.render(single, "json")
        assert jr.timeline == step_timelines(load_trace(jr.path))
        # the tidy rows of a rank are the single profile's nodes, per pass
        for m in job.modules:
            if jr.rank in m.nodes:
                node = m.nodes[jr.rank]
                assert node.forward.total.gpu_busy_us == single.nodes[node.id].forward.total.gpu_busy_us


def test_cross_rank_statistics_are_pinned(multi_rank_job):
    job = multi_rank_job
    assert job.metric == "gpu_busy_us" and job.step_metric == "compute_us"
    forward = job.module("## forward ##")
    s = forward.spread("gpu_busy_us")
    assert (s.min, s.median, s.max, s.spread, s.slowest_rank) == (704.0, 4086.25, 8260.5, 7556.5, 1)
    assert s.imbalance == pytest.approx(2.0215356, rel=1e-6)
    fwd = forward.spread("gpu_busy_us", "forward")
    assert (fwd.min, fwd.median, fwd.max, fwd.slowest_rank) == (299.0, 3678.0, 7895.0, 1)
    allreduce = job.module("nccl:all_reduce").spread("gpu_busy_us")
    assert (allreduce.min, allreduce.median, allreduce.max) == (193.0, 1629.25, 1748.5)
    compute = {r.rank: r.selected.compute_us for r in job.ranks}
    assert compute == {0: 1053.0, 1: 1265.0, 2: 1087.0, 3: 1268.0, 4: 1152.0, 5: 1060.0, 6: 1070.0, 7: 1079.0}
    r1 = job.rank(1).selected
    assert (r1.gpu_busy_us, r1.collective_us, r1.collective_exposed_us, r1.idle_us) == (
        12321.0,
        11336.0,
        11056.0,
        7580.0,
    )
    assert r1.collective_kernels == 8
    # stragglers: compute time above the median (1083 us) by more than 5%, largest first
    assert [(st.rank, st.step_us, st.reference_us) for st in job.stragglers] == [
        (3, 1268.0, 1083.0),
        (1, 1265.0, 1083.0),
        (4, 1152.0, 1083.0),
    ]
    assert len(job.modules) == 46
    frame = job.to_dataframe()
    assert frame.shape[0] == sum(len(m.nodes) for m in job.modules) * 3
    pivot = frame[frame["pass"] == "forward"].pivot_table(
        index="module", columns="rank", values="gpu_busy_us"
    )
    assert pivot.loc["## forward ##", 1] == 7895.0


def test_spread_and_union_helpers():
    s = spread_of({3: 2.0, 1: 4.0, 0: 1.0, 2: 4.0})
    assert (s.min, s.median, s.max, s.spread, s.slowest_rank, s.imbalance) == (
        1.0,
        3.0,
        4.0,
        3.0,
        1,
        4.0 / 3.0,
    )
    assert spread_of({0: 0.0}).imbalance is None
    import numpy as np

    assert union_length(np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0])) == 4.0
    assert union_length(np.array([]), np.array([])) == 0.0


def test_job_json_csv_parquet_rows(tmp_path, multi_rank_job):
    doc = json.loads(render.render_job(multi_rank_job, "json"))
    assert doc["schema"] == "traceprof.job/2"
    assert doc["ranks_given"] == list(range(8))
    assert [s["rank"] for s in doc["stragglers"]] == [3, 1, 4]
    assert len(doc["rows"]) == multi_rank_job.to_dataframe().shape[0]
    assert {r["pass"] for r in doc["rows"]} == {"forward", "backward", "other"}
    proc = traceprof_cli("analyze", MULTI_RANK, "-o", tmp_path / "job.csv")
    assert proc.returncode == 0, proc.stderr
    header = (tmp_path / "job.csv").read_text().splitlines()[0]
    assert header.startswith("module,qualified_name,name,class_name,kind,depth,rank,pass,")
    proc = traceprof_cli("analyze", MULTI_RANK, "-o", tmp_path / "job.parquet")
    assert proc.returncode == 0, proc.stderr
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "job.parquet")
    assert frame.equals(multi_rank_job.to_dataframe())


def test_ranks_all_adds_one_column_per_rank(multi_rank_job):
    text = render.render_job(multi_rank_job, "table", render.RenderOptions(ranks="all", depth=0))
    header = next(line for line in text.splitlines() if line.split()[:2] == ["module", "median"])
    assert header.split()[-8:] == [f"r{r}" for r in range(8)]
    assert "median" in header and "slowest" in header and "imbalance" in header


# ---- the generated job with a straggler -----------------------------------------------------------


def test_straggler_rank_and_module_are_named_first(straggler_job_dir):
    job = analyze_job(straggler_job_dir, jobs=2)
    assert job.rank_numbers == tuple(range(16)) and job.world_size == 16
    assert job.stragglers, "the slow rank is found"
    first = job.stragglers[0]
    assert first.rank == SLOW_RANK
    assert first.modules[0][0].qualified_name == SLOW_MODULE
    assert job.module(SLOW_MODULE).spread("gpu_work_us").slowest_rank == SLOW_RANK
    proc = traceprof_cli("analyze", straggler_job_dir, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("Stragglers:")[1].splitlines()
    assert lines[1].startswith(f"  rank {SLOW_RANK}: ")
    # by its short name (the qualified one is in JSON and CSV): the tail that tells it apart
    assert lines[2].split(": ", 1)[1].startswith("h.1.mlp.c_fc +")
    # told apart from every module, also those a --depth leaves out (h.0.mlp.c_fc): not "c_fc"
    shallow = traceprof_cli("analyze", straggler_job_dir, "--jobs", "2", "--depth", "1")
    assert shallow.returncode == 0, shallow.stderr
    line = shallow.stdout.split("Stragglers:")[1].splitlines()[2]
    assert line.split(": ", 1)[1].startswith("h.1.mlp.c_fc +"), line


def test_glob_and_several_files_make_the_same_job(straggler_job_dir):
    files = sorted(str(p) for p in straggler_job_dir.glob("*.json"))
    assert find_traces([str(straggler_job_dir / "*rank1[0-5]*.json")]) == sorted(
        f for f in files if "_rank1" in f and "_rank1." not in f
    )
    assert is_job(files[:2]) and is_job([str(straggler_job_dir)]) and not is_job(files[0])
    a = analyze_job(files[::-1], jobs=1)
    b = analyze_job(str(straggler_job_dir / "*.pt.trace.json"), jobs=2)
    assert render.render_job(a, "json") == render.render_job(b, "json")


# ---- engines ---------------------------------------------------------------------------------------


def _square(x):
    return x * x


def test_local_engine_keeps_item_order_and_reports_progress():
    seen = []
    out = LocalEngine(2).map(_square, list(range(7)), lambda done, total, item: seen.append((done, total)))
    assert out == [x * x for x in range(7)]
    assert [d for d, _ in seen] == list(range(1, 8)) and {t for _, t in seen} == {7}


def test_dask_local_cluster_gives_the_local_engines_result(multi_rank_job):
    """A real Dask LocalCluster of 2 worker processes: the same job, bit for bit."""
    dask_job = analyze_job(MULTI_RANK, engine="dask", jobs=2)
    assert dask_job.engine == "dask"
    local = json.loads(render.render_job(multi_rank_job, "json"))
    remote = json.loads(render.render_job(dask_job, "json"))
    local.pop("engine"), remote.pop("engine")
    assert local == remote
    assert render.render_job(dask_job, "csv") == render.render_job(multi_rank_job, "csv")
    assert dask_job.to_dataframe().equals(multi_rank_job.to_dataframe())


# ---- errors and partial jobs -------------------------------------------------------------------------


def _one_line_error(proc, code, text):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceprof: error: "), proc.stderr
    assert text in lines[0], lines[0]
    assert proc.stdout == ""


def test_ranks_of_different_jobs_mixed_is_an_error(tmp_path):
    a = generate_job(tmp_path / "a", ranks=2, steps=1, layers=1, quiet=True, name="gpt")
    b = generate_job(tmp_path / "b", ranks=4, steps=1, layers=1, quiet=True, name="gpt")
    _one_line_error(traceprof_cli("analyze", *a, *b), 2, "jobs mixed (world sizes differ): ")
    c = generate_job(tmp_path / "c", ranks=2, steps=1, layers=1, quiet=True, name="bert")
    _one_line_error(traceprof_cli("analyze", *a, *c), 2, "jobs mixed (file names differ): ")
    again = tmp_path / "again"
    again.mkdir()
    copy = again / "gpt_rank0.1767225699999.pt.trace.json"
    copy.write_bytes(Path(a[0]).read_bytes())
    _one_line_error(traceprof_cli("analyze", *a, copy), 2, "rank 0 given twice")


def test_missing_rank_is_a_partial_job_with_a_warning(tmp_path, straggler_job_dir):
    files = sorted(straggler_job_dir.glob("*.json"))
    given = [f for f in files if "_rank3." not in f.name and "_rank7." not in f.name]
    proc = traceprof_cli("analyze", *given, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    warning = "partial job: 2 of 16 ranks have no trace (ranks 3, 7); statistics are over the ranks given"
    assert f"traceprof: warning: {warning}" in proc.stderr
    assert f"warning:   {warning}" in proc.stdout
    assert "missing:   ranks 3, 7 (no trace)" in proc.stdout
    assert "job:       14 ranks (world size 16, nccl)" in proc.stdout


def test_trace_without_rank_among_several_is_an_error(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.launch(10, 20, 30)
    one = b.write(tmp_path / "first.json")
    two = b.write(tmp_path / "second.json")
    _one_line_error(
        traceprof_cli("analyze", one, two), 2, "first.json: no rank: the trace has no distributedInfo"
    )


def test_mismatched_steps_is_an_error(tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    for rank, first_step in ((0, 5), (1, 9)):
        generate(
            str(out / f"gpt_rank{rank}.pt.trace.json"),
            steps=2,
            layers=1,
            quiet=True,
            rank=rank,
            world_size=2,
            first_step=first_step,
        )
    proc = traceprof_cli("analyze", out)
    _one_line_error(
        proc,
        2,
        "mismatched steps: the ranks' traces hold different steps "
        "(rank 0: steps 5, 6; rank 1: steps 9, 10); no step is in every trace",
    )


def test_bad_job_inputs_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(traceprof_cli("analyze", empty), 2, "no trace files (.json, .json.gz)")
    _one_line_error(
        traceprof_cli("analyze", str(tmp_path / "nothing*.json.gz")), 2, "no file matches the pattern"
    )
    _one_line_error(
        traceprof_cli("analyze", MULTI_RANK, "--columns", "gpu"),
        3,
        "--columns applies to one trace, not to a job",
    )
    _one_line_error(
        traceprof_cli("analyze", MULTI_RANK, "--scheduler", "tcp://x:1"),
        3,
        "--scheduler applies to --engine dask",
    )


# ---- the HTML heat map ---------------------------------------------------------------------------------


def test_html_heat_map_opens_a_ranks_tree_on_click(tmp_path, multi_rank_job):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = tmp_path / "job.html"
    proc = traceprof_cli("analyze", MULTI_RANK, "-o", page)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text(encoding="utf-8")
    assert "https://" not in html.split('<script type="module">')[0]
    driver = _start_browser()
    try:
        driver.get_log("browser")
        driver.get(page.as_uri())
        WebDriverWait(driver, 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#traceprof-heatmap td.tp-heat-cell")
        )
        cells = driver.find_elements(By.CSS_SELECTOR, "td.tp-heat-cell")
        assert len(cells) == len(multi_rank_job.modules) * 8  # absent ranks get an empty cell
        stragglers = driver.find_elements(By.CSS_SELECTOR, ".tp-job-straggler")
        assert stragglers[0].text.startswith("straggler: rank 3,")
        cell = driver.find_element(
            By.CSS_SELECTOR, 'td.tp-heat-cell[data-rank="3"][data-module="## forward ##"]'
        )
        cell.click()
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
        assert "rank 3" in driver.find_element(By.ID, "traceprof").text
        assert "rank 3 · ## forward ##" in driver.find_element(By.ID, "traceprof-job-open").text
        # another rank replaces the tree
        driver.find_element(By.CSS_SELECTOR, 'th.tp-heat-rank[data-rank="5"]').click()
        WebDriverWait(driver, 30).until(
            lambda d: "rank 5" in d.find_element(By.ID, "traceprof-job-open").text
        )
        assert len(driver.find_elements(By.ID, "traceprof")) == 1
        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        assert fetched == [], "the report loaded something"
    finally:
        driver.quit()


def _start_browser():
    return start_chromium()


def test_single_file_keeps_the_single_trace_report():
    one = sorted(MULTI_RANK.iterdir())[0]
    proc = traceprof_cli("analyze", one, "--depth", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("traceprof module profile\n")
    assert proc.stdout == render.render(traceprof.analyze(one, depth=0), "tree")


def test_generator_writes_ranks_with_distributed_info(straggler_job_dir):
    files = sorted(straggler_job_dir.glob("*.json"))
    assert len(files) == 16
    head = open(files[0], encoding="utf-8").read(4000)
    assert '"distributedInfo"' in head and '"world_size":16' in head.replace(" ", "")


def test_a_rank_that_cannot_be_read_is_a_one_line_error_from_the_workers(tmp_path, straggler_job_dir):
    import pickle

    from traceprof.errors import MemoryLimitError, TraceReadError

    error = pickle.loads(pickle.dumps(TraceReadError("a.json", "truncated JSON")))
    assert type(error) is TraceReadError and error.message == "a.json: truncated JSON"
    assert error.path == "a.json" and error.exit_code == 2
    assert pickle.loads(pickle.dumps(MemoryLimitError("b", "too big"))).exit_code == 5
    job = tmp_path / "job"
    job.mkdir()
    files = sorted(straggler_job_dir.glob("*.json"))[:3]
    for f in files[:2]:
        (job / f.name).write_bytes(f.read_bytes())
    (job / files[2].name).write_bytes(files[2].read_bytes()[:5000])
    for engine in ("local", "dask"):
        _one_line_error(
            traceprof_cli("analyze", job, "--jobs", "2", "--engine", engine),
            2,
            f"{files[2].name}: truncated JSON",
        )


def test_dask_scheduler_option_uses_an_existing_cluster(tmp_path, multi_rank_job):
    """--engine dask --scheduler tcp://HOST:PORT: the tasks go to the cluster already running."""
    import logging

    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    try:
        out = tmp_path / "job.csv"
        proc = traceprof_cli(
            "analyze", MULTI_RANK, "--engine", "dask", "--scheduler", cluster.scheduler_address, "-o", out
        )
        assert proc.returncode == 0, proc.stderr
        assert out.read_text() == render.render_job(multi_rank_job, "csv")
    finally:
        cluster.close()
