"""Views that say what they show: module names, not raw scope spellings, on the timeline; a
compiled graph's run under one stable label in op views and diffs, not its cache key; the diff
page's "where" card whole; one-or-many words counted right; a node's one-line repr and notebook
view. (The tied marker and the Lightning root: tests/test_shared_weights.py,
tests/test_integrations_lightning.py.)"""

from __future__ import annotations

import os

import pytest

import traceprof
from traceprof import units
from traceprof.trace import schema

from .conftest import SAMPLE_TRACES
from .test_job_hardening import _rank_trace
from .tracebuilder import TraceBuilder

GPT = SAMPLE_TRACES / "gpt_train_cpu.pt.trace.json.gz"


def test_the_timeline_names_modules_not_their_scope_spelling():
    p = traceprof.analyze(GPT)
    names = p.timeline.names
    assert not [n for n in names if n.startswith("[traceprof:")]
    assert {"GPT", "transformer.h.0", "transformer.h.0.attn"} <= set(names)  # the model by its class


def _compiled_run(key: str, wrapper_us: float) -> TraceBuilder:
    """A module whose compiled graph runs once: Inductor's scope (named after the graph's cache
    key) with ``wrapper_us`` of its own CPU time around a matmul."""
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 1800)
    b.scope("block", "Block", 20, 1700)
    b.annotation(f"## Call CompiledFxGraph {key} ##", 30, 100 + wrapper_us)
    b.op("aten::mm", 40, 50)
    return b


def test_a_compiled_graphs_run_has_one_label_whatever_its_cache_key(tmp_path):
    base = _compiled_run("f7nve3b6qmkbxvq2", 0).write(tmp_path / "base.json")
    new = _compiled_run("c4mzk2y7qa1ee9p0", 500).write(tmp_path / "new.json")
    d = traceprof.diff(str(base), str(new))
    inside = {i.name: i for i in d.find("block").inside}
    assert not [n for n in inside if "CompiledFxGraph" in n]
    run = inside[schema.COMPILED_CALL_LABEL]
    assert run.status.value == "matched" and run.delta_us == pytest.approx(500)  # the same graph's runs
    ops = {o.name for o in traceprof.analyze(new).find("block").ops}
    assert schema.COMPILED_CALL_LABEL in ops and not [n for n in ops if "CompiledFxGraph" in n]


def test_the_diff_pages_where_card_is_whole(tmp_path):
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    from .browser import start_chromium

    d = traceprof.diff(
        str(SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"),
        str(SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"),
    )
    from traceprof.render.diff import render_diff

    page = tmp_path / "diff.html"
    page.write_text(render_diff(d, "html"), encoding="utf-8")
    driver = start_chromium()
    try:
        driver.set_window_size(1200, 900)
        driver.get(page.as_uri())
        cards = driver.find_elements(By.CSS_SELECTOR, ".tp-card")
        where = next(
            c for c in cards if c.find_element(By.CSS_SELECTOR, ".tp-card-key").text.lower() == "where"
        )
        value = where.find_element(By.CSS_SELECTOR, ".tp-card-value")
        shown, needed = driver.execute_script(
            "return [arguments[0].clientWidth, arguments[0].scrollWidth]", value
        )
        text = value.text
    finally:
        driver.quit()
    assert needed <= shown, f"the where card is cut off: {needed} px of text in {shown} px"
    for part, us in d.where():
        assert f"{part} {units.signed_duration(us)}" in text


def test_one_is_singular():
    assert units.counted(1, "run") == "1 run" and units.counted(2, "run") == "2 runs"
    assert units.counted(1, "child", "children") == "1 child"


def test_a_directory_of_many_runs_counts_the_ones_left_out(tmp_path):
    """Five capture windows: the newest analyzed, three named and "1 more run"."""
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    for window in range(5):
        for rank in (0, 1):
            path = logdir / f"host_{window}{rank}.rank{rank}of2.17000000{window}0000.pt.trace.json"
            _rank_trace(path, "Net", rank, 2)
            os.utime(path, (1_700_000_000 + 1000 * window, 1_700_000_000 + 1000 * window))
    job = traceprof.analyze_job(logdir, jobs=1)
    note = next(w for w in job.warnings if "runs in the directory" in w)
    assert "; and 1 more run (" in note and "1 more runs" not in note


def test_a_node_has_a_short_repr_and_a_notebook_view():
    p = traceprof.analyze(SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz")
    conv = p.find("layer1.0.conv1")
    line = repr(conv)
    assert line.startswith("<ModuleNode layer1.0.conv1 (Conv2d): 1 call, CPU fwd ") and len(line) < 120
    assert repr(p.find("")).endswith("10 children>")
    page = conv._repr_html_()
    assert "<script" not in page and "layer1.0.conv1" in page
    assert "aten::" in page and "forward" in page and "backward" in page  # its ops and its passes
