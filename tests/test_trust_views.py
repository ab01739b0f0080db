"""Views a user must be able to trust: the step timeline covers the GPU work launched in the step
(a device that lags the CPU runs it after the step's end); the tree report counts tied parameters
once and shows the modules no step called; the HTML pages print no stray ``null`` and open a
rank on its largest root, with its timeline."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

import traceprof
from traceprof import render
from traceprof.job.analyze import analyze_job
from traceprof.result.timeline import LaneKind

from . import viewer_checks
from .browser import start_chromium
from .conftest import SHARED_TRACES

LAGGING = SHARED_TRACES / "module_tree" / "mi300_resnet_activation_checkpoint_training.json.gz"
MULTI_RANK = SHARED_TRACES / "multi_rank"
GPU_WORK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


# ---- item: the timeline of a step covers the GPU work launched in it ---------------------------------


def launched_in_first_step(path: Path) -> list[tuple[float, float]]:
    """(start, end) of the GPU work whose launch lies in the trace's first ProfilerStep (up to
    the next step's start), read from the raw JSON."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    starts = sorted(
        {
            e["ts"]
            for e in events
            if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
        }
    )
    t0, t1 = starts[0], starts[1]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    return [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in GPU_WORK_CATEGORIES and t0 <= launch.get(e["args"].get("correlation"), -1) < t1
    ]


def test_the_step_timeline_draws_the_gpu_work_launched_in_the_step_when_the_gpu_lags():
    work = launched_in_first_step(LAGGING)
    assert len(work) == 895
    tl = traceprof.analyze(LAGGING).timeline
    assert tl is not None and tl.step == 15
    last_end = max(end for _, end in work) - tl.start_us
    assert last_end > 30_000  # the device runs the step's work 30-49 ms after the step began
    assert tl.start_us + tl.span_us >= max(end for _, end in work) - 1e-3
    gpu_lanes = [i for i, lane in enumerate(tl.lanes) if lane.kind == LaneKind.GPU]
    on_gpu = np.isin(tl.lane, gpu_lanes)
    before_trace = [i for i, m in enumerate(tl.modules) if m[-1] == "(launched before the trace)"]
    of_step = on_gpu & ~np.isin(tl.module, before_trace)
    assert abs(int(np.asarray(tl.count)[of_step].sum()) - len(work)) <= 5
    # every item launched in the step lies inside a drawn GPU event (merged runs included)
    start, dur = np.asarray(tl.start), np.asarray(tl.dur)
    starts, ends = start[on_gpu], start[on_gpu] + dur[on_gpu]
    for s, e in work:
        s, e = s - tl.start_us, e - tl.start_us
        assert ((starts <= s + 1e-3) & (ends >= e - 1e-3)).any(), (s, e)


# ---- item: tied weights counted once, modules never called shown ------------------------------------


def tied_model():
    import torch
    from torch import nn

    class TiedLM(nn.Module):
        """An embedding, a body, a head whose projection is the embedding's weight, and a layer
        that forward never calls."""

        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.body = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
            self.unused = nn.Linear(16, 8)
            self.head = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 50, bias=False))
            self.head[1].weight = self.emb.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(self.emb(x)))

    torch.manual_seed(0)
    return TiedLM(), torch.randint(0, 50, (2, 4))


@pytest.fixture(scope="module")
def tied_trace(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from traceprof import capture

    model, x = tied_model()
    path = tmp_path_factory.mktemp("tied") / "tied.pt.trace.json.gz"
    capture.profile_once(model, x, backward=True, path=path)
    return path


def tree_params(text: str) -> dict[str, tuple[float, str, list[str]]]:
    """The detailed tree of a ``--format tree`` report: label -> (params share in %, the node's
    fields, the labels of its children)."""
    lines = text.split("Detailed Profile per GPU")[1].splitlines()
    out: dict[str, tuple[float, str, list[str]]] = {}
    stack: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^( *)(\S.*?)\((.*)\)$", line) or re.match(r"^( *)(\S.*)\($", line)
        if not m or line.strip().startswith("(not in any module)"):
            i += 1
            continue
        indent, label = len(m.group(1)), m.group(2)
        fields = m.group(3) if m.lastindex == 3 else lines[i + 1].strip()
        share = re.search(r"= ([\d.]+)% Params", fields)
        if share is None:
            i += 1
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            out[stack[-1][1]][2].append(label)
        out[label] = (float(share.group(1)), fields, [])
        stack.append((indent, label))
        i += 1 if m.lastindex == 3 else 2
    return out


def test_the_tree_counts_tied_params_once_and_marks_them(tied_trace):
    profile = traceprof.analyze(tied_trace)
    profile.self_check()
    nodes = tree_params(render.render(profile, "tree"))
    for label, (share, _, children) in nodes.items():
        if children:  # the children's shares add up to their parent's
            assert sum(nodes[c][0] for c in children) == pytest.approx(share, abs=0.1), label
    assert nodes["TiedLM"][0] == 100
    head_proj = nodes["(1): Linear"]  # head.1: its weight is emb's
    assert head_proj[1].startswith("0 = 0% Params (tied)")
    assert "(tied)" in nodes["(head): Sequential"][1]
    assert "(tied)" not in nodes["(emb): Embedding"][1] and "(tied)" not in nodes["TiedLM"][1]


def test_modules_never_called_are_in_the_tree_with_zero_time(tied_trace):
    profile = traceprof.analyze(tied_trace)
    profile.self_check()
    unused = [n for n in profile.nodes if n.qualified_name == "unused"]
    assert len(unused) == 1
    node = unused[0]
    assert node.calls == 0 and node.total.cpu_us == 0 and node.info is not None
    assert profile.nodes[node.parent].qualified_name == ""
    nodes = tree_params(render.render(profile, "tree"))
    share, fields, _ = nodes["(unused): Linear"]
    # its 136 parameters of the model's 1,240 (800 + 272 + 136 + 32: head.1's weight is emb's)
    assert share == pytest.approx(136 / 1240 * 100, abs=0.01)
    assert "0 = 0% latency" in fields and "0 calls" in fields


# ---- item: the HTML pages ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


NULL_TEXT_NODES = """
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const found = [];
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  if (n.textContent.trim() === 'null' && n.parentElement.tagName !== 'SCRIPT') found.push(n.parentElement.outerHTML.slice(0, 120));
}
return found;
"""


def wait_for(driver, css: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))


def test_the_report_prints_no_null_under_the_kernels_table(tmp_path, browser):
    from selenium.webdriver.common.by import By

    trace = sorted(MULTI_RANK.iterdir())[0]
    page = tmp_path / "rank0.html"
    page.write_text(render.render(traceprof.analyze(trace), "html"), encoding="utf-8")
    browser.get(page.as_uri())
    wait_for(browser, "tr.tp-row")
    viewer_checks.click_module_row(browser, "## optimizer ##")  # 6 kernels: no "more rows" line
    wait_for(browser, "table.tp-ops tr.tp-op-row")
    assert browser.find_element(By.CSS_SELECTOR, "#tp-ops h2").text == "Kernels of ## optimizer ##"
    assert browser.execute_script(NULL_TEXT_NODES) == []


def test_the_job_page_opens_a_rank_on_its_largest_root_with_its_timeline(tmp_path, browser):
    from selenium.webdriver.common.by import By

    job = analyze_job(MULTI_RANK, jobs=1)
    profile = job.ranks[3].profile
    largest = max(profile.roots, key=lambda r: profile.nodes[r].total.gpu_busy_us)
    assert profile.roots[0] != largest  # the first root (## zero_grad ##) is an empty one
    page = tmp_path / "job.html"
    page.write_text(render.render_job(job, "html"), encoding="utf-8")
    browser.get(page.as_uri())
    wait_for(browser, "th.tp-heat-rank")
    browser.find_element(By.CSS_SELECTOR, 'th.tp-heat-rank[data-rank="3"]').click()
    wait_for(browser, "tr.tp-row")
    title = browser.find_element(By.CSS_SELECTOR, "#tp-ops h2").text
    assert title == f"Kernels of {profile.nodes[largest].qualified_name}"
    assert "No kernels in this module" not in browser.find_element(By.ID, "tp-ops").text
    timeline = browser.find_element(By.ID, "tp-timeline").text
    assert "older traceprof" not in timeline
    assert browser.find_elements(By.ID, "tp-timeline-canvas")
    assert browser.execute_script(NULL_TEXT_NODES) == []
