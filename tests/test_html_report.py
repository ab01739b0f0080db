"""The HTML report (``traceprof analyze TRACE -o report.html``): one self-contained page, the
shared frontend of the TensorBoard tab inlined, the JSON document embedded; rendered by a
headless Chromium.

The screenshot in the README is rewritten with
``TRACEPROF_UPDATE_SCREENSHOTS=1 python -m pytest tests/test_html_report.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import traceprof
from traceprof import render
from traceprof.render import html as html_report

from . import viewer_checks
from .browser import start_chromium
from .conftest import REPO, SAMPLE_TRACES, SHARED_TRACES
from .tracebuilder import TraceBuilder

SAMPLE = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
MI300 = SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz"
SCREENSHOT = REPO / "docs/images/html-report.png"
EVIL_SCOPE = "evil</script><b>x<!--"
EVIL_ANNOTATION = "<!--<script>alert(1)</script>"
SVG_NS = "http://www.w3.org/2000/svg"


def evil_trace(path: Path) -> Path:
    """A tiny GPU trace whose module and annotation names would end a <script> element."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.scope(EVIL_SCOPE, "Linear", 20, 100)
    op = b.op("aten::addmm", 30, 50)
    b.launch(40, 200, 30, external_id=op["args"]["External id"])
    b.annotation(EVIL_ANNOTATION, 600, 50)
    op = b.op("aten::mul", 610, 20)
    b.launch(615, 700, 10, external_id=op["args"]["External id"])
    return b.write(path)


class PageParts(HTMLParser):
    """Tags with their attributes, and the text of each <script> and <style> element."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self.styles: list[str] = []
        self._open = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._open = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._open:
            self._open[2].append(data)

    def handle_endtag(self, tag):
        if self._open and tag == self._open[0]:
            kind, attrs, parts = self._open
            if kind == "script":
                self.scripts.append((attrs, "".join(parts)))
            else:
                self.styles.append("".join(parts))
            self._open = None


def parse(page: str) -> PageParts:
    parts = PageParts()
    parts.feed(page)
    parts.close()
    return parts


# ---- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """HTML reports: the sample and BERT through the command line, the others through the API."""
    out = tmp_path_factory.mktemp("reports")
    pages = {}
    for name, trace in (("sample", SAMPLE), ("bert", BERT)):
        target = out / f"{name}.html"
        proc = subprocess.run(
            [sys.executable, "-m", "traceprof", "analyze", str(trace), "-o", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == ""
        pages[name] = target
    evil = traceprof.analyze(evil_trace(out / "evil.json"))
    evil.self_check()
    mi300 = traceprof.analyze(os.path.relpath(MI300))  # as typed in a checkout: ../shared/...
    for name, profile in (("evil", evil), ("mi300", mi300)):
        pages[name] = out / f"{name}.html"
        pages[name].write_text(render.render(profile, "html"), encoding="utf-8")
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    return pages


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium with its console log; always quit afterwards."""
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


def open_report(driver, page: Path):
    """Loads a report and waits for its table; fails on console errors and on any request."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # forget the previous page's messages
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
    errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
    assert not errors, errors
    fetched = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert fetched == [], "the report loaded something"


def rows(driver):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "tr.tp-row")


def row_names(driver) -> list[str]:
    """The qualified name of each table row (the name's tooltip; the class name for a root)."""
    from selenium.webdriver.common.by import By

    return [r.find_element(By.CSS_SELECTOR, ".tp-name").get_attribute("title") for r in rows(driver)]


def cells(driver, phase: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, f".tp-pass-{phase} svg .tp-cell")


def cell_titles(elements) -> list[str]:
    from selenium.webdriver.common.by import By

    return [c.find_element(By.TAG_NAME, "title").get_attribute("textContent") for c in elements]


def set_filter(driver, text: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, "tp-filter")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    if text:
        box.send_keys(text)


# ---- the file ------------------------------------------------------------------------------------


def test_format_html_by_option_and_by_extension(reports, tmp_path):
    assert render.for_path("out/report.html").name == "html"
    assert render.for_path("REPORT.HTM").name == "html"
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(SAMPLE), "--format", "html"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == reports["sample"].read_text(encoding="utf-8")  # same page on stdout
    assert proc.stdout.startswith("<!DOCTYPE html>") and proc.stdout.endswith("</html>\n")


@pytest.mark.parametrize("name,trace", [("sample", SAMPLE), ("bert", BERT)])
def test_the_page_embeds_the_json_document_and_loads_nothing(reports, name, trace):
    page = reports[name].read_text(encoding="utf-8")
    parts = parse(page)

    # the embedded document is the JSON output, field for field
    data = {attrs.get("id"): text for attrs, text in parts.scripts if attrs.get("type") == "application/json"}
    expected = json.loads(render.render(traceprof.analyze(trace), "json"))
    assert json.loads(data["traceprof-profile"]) == expected
    assert json.loads(data["traceprof-report"])["title"] == trace.name

    # one script, inline, the shared frontend; styles inline; no element that loads anything
    modules = [(attrs, text) for attrs, text in parts.scripts if attrs.get("type") == "module"]
    assert len(modules) == 1 and len(parts.scripts) == 4
    timeline = json.loads(data["traceprof-timeline"])
    assert timeline["schema"] == "traceprof.timeline/1" and timeline["lanes"]
    script = modules[0][1]
    assert html_report.static_text("index.js") in script and "renderReport(" in script
    assert html_report.static_text("style.css") in parts.styles[0]
    for tag, attrs in parts.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "base"), tag
        assert not {"src", "href", "srcset", "action", "poster", "data"} & set(attrs), (tag, attrs)
    assert not re.search(r"@import|url\(", "".join(parts.styles))
    # the only URL in the page is the SVG namespace name, which is never fetched
    assert set(re.findall(r"https?://[^\s'\"<>)`]+", page)) == {SVG_NS}
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)

    # the Content-Security-Policy allows that one script (by its hash) and nothing remote
    csp = next(
        a["content"]
        for t, a in parts.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and csp.startswith("default-src 'none';")


def test_names_that_would_end_a_script_element_are_escaped(reports):
    page = reports["evil"].read_text(encoding="utf-8")
    assert len(re.findall(r"</script", page, re.I)) == 4  # the four elements' own end tags
    assert "<!--" not in page and "<b>x" not in page
    parts = parse(page)
    doc = json.loads(next(t for a, t in parts.scripts if a.get("id") == "traceprof-profile"))
    names = {n["qualified_name"] for n in doc["nodes"]} | {n["name"] for n in doc["nodes"]}
    assert {EVIL_SCOPE, EVIL_ANNOTATION} <= names

    escaped = html_report.script_json({"s": "</script><!--&\u2028"}).decode()
    assert not set("<>&\u2028") & set(escaped)
    assert json.loads(escaped) == {"s": "</script><!--&\u2028"}


def test_a_frontend_that_cannot_be_inlined_is_refused(monkeypatch):
    monkeypatch.setattr(html_report, "static_text", lambda name: "const s = '</SCRIPT>';")
    with pytest.raises(RuntimeError, match="cannot be inlined"):
        html_report.report_script()


# ---- headless Chromium ---------------------------------------------------------------------------


def test_chromium_renders_the_sample_report(reports, browser):
    """A CPU-only training trace: forward, backward and other (optimizer step, time between ops)
    icicles side by side (CPU time), the table with qualified names, the filter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_report(browser, reports["sample"])
    assert browser.title == f"traceprof · {SAMPLE.name}"
    assert not browser.find_elements(By.ID, "tp-run") and not browser.find_elements(By.ID, "tp-step")
    assert Select(browser.find_element(By.ID, "tp-metric")).first_selected_option.text == "CPU time"
    assert (
        Select(browser.find_element(By.ID, "tp-phase")).first_selected_option.get_attribute("value")
        == "split"
    )
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, ".tp-pass-head")]
    assert [h.split()[0] for h in heads] == ["Forward", "Backward", "Other"]
    forward, backward = cells(browser, "forward"), cells(browser, "backward")
    assert len(forward) > 30 and len(backward) > 30
    assert cell_titles(forward)[0].startswith("ResNet18") and cell_titles(backward)[0].startswith("ResNet18")
    # one scale: each pass as wide as its share of the time
    widths = [p.size["width"] for p in browser.find_elements(By.CSS_SELECTOR, ".tp-pass")]
    shares = [float(re.search(r"· ([\d.]+)% of all passes$", h)[1]) for h in heads]
    assert sum(shares) == pytest.approx(100, abs=0.2)
    assert widths[1] / sum(widths) == pytest.approx(shares[1] / 100, abs=0.02)
    other = cell_titles(cells(browser, "other"))
    assert other[0].startswith("(not in any module)")
    assert any(t.startswith("(not in any module)/Optimizer.step#AdamW.step") for t in other)

    header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, ".tp-tree th")]
    assert header[:5] == ["Module", "Forward", "Backward", "Other", "Share of step"]
    assert header[-2:] == ["Params", "Input → output shapes"]  # from the module table
    browser.find_element(By.XPATH, "//button[text()='Expand all']").click()
    names = row_names(browser)
    assert len(names) > 60 and names[0] == "ResNet18"
    assert {"conv1", "layer1.0.conv1", "layer4.1.bn2", "fc"} <= set(names)

    set_filter(browser, "layer1.0.conv")
    assert row_names(browser) == ["ResNet18", "layer1", "layer1.0", "layer1.0.conv1", "layer1.0.conv2"]
    for phase in ("forward", "backward"):  # the icicles dim what the filter does not match
        lit = [c for c in cells(browser, phase) if "tp-cell-dim" not in c.get_attribute("class")]
        assert sorted(t.split(" ")[0] for t in cell_titles(lit)) == ["layer1.0.conv1", "layer1.0.conv2"]
    set_filter(browser, "")
    assert len(rows(browser)) == len(names)
    assert not browser.find_elements(By.CSS_SELECTOR, ".tp-cell-dim")


def test_chromium_renders_a_gpu_inference_report(reports, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_report(browser, reports["bert"])
    metric = Select(browser.find_element(By.ID, "tp-metric"))
    assert metric.first_selected_option.text == "GPU busy time"
    forward = cells(browser, "forward")
    assert len(forward) > 50 and cell_titles(forward)[0].startswith("BertLMHeadModel_0")
    assert not cells(browser, "backward")  # inference: no backward pass, and it says so
    note = browser.find_element(By.CSS_SELECTOR, ".tp-pass-missing.tp-pass-backward").text
    assert note == "Backward: no GPU busy time in this selection."
    root = [c.text for c in rows(browser)[0].find_elements(By.TAG_NAME, "td")]
    assert root[0].endswith("BertLMHeadModel_0") and root[1] == "309.4 us"
    assert "BertLMHeadModel_0.BertModel_0" in row_names(browser)
    header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, ".tp-tree th")]
    assert "Kernels" in header and "Params" not in header  # no module table in this trace
    set_filter(browser, "attention_2")  # BertAttention_2, its ancestors and its modules
    names = row_names(browser)
    assert names[3] == "BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_2"
    assert names[4] == names[3] + ".BertAttention_2"
    assert len(names) > 5 and all(n.startswith(names[4] + ".") for n in names[5:])


def test_chromium_shows_the_escaped_names_as_text(reports, browser):
    from selenium.webdriver.common.by import By

    open_report(browser, reports["evil"])
    browser.find_element(By.XPATH, "//button[text()='Expand all']").click()
    assert {EVIL_SCOPE, f"(not in any module)/{EVIL_ANNOTATION}"} <= set(row_names(browser))
    shown = [r.find_element(By.CSS_SELECTOR, ".tp-name").text for r in rows(browser)]
    assert EVIL_SCOPE in shown and EVIL_ANNOTATION in shown
    assert not browser.find_elements(By.TAG_NAME, "b")
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 4


def test_chromium_runs_no_script_but_the_reports_own(reports, browser, tmp_path):
    """The Content-Security-Policy is in force: a page whose script differs from the one it was
    written with (by a space) shows nothing."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = reports["evil"].read_text(encoding="utf-8")
    tampered = tmp_path / "tampered.html"
    tampered.write_text(page.replace("renderReport(doc,", "renderReport( doc,"), encoding="utf-8")
    browser.get_log("browser")
    browser.get(tampered.as_uri())
    blocked = WebDriverWait(browser, 20).until(
        lambda d: [m for m in d.get_log("browser") if "Content Security Policy" in m["message"]]
    )
    assert blocked and not browser.find_elements(By.CSS_SELECTOR, "tr.tp-row")


def test_chromium_renders_a_gpu_training_report_and_zooms(reports, browser, tmp_path):
    """ResNet training with activation checkpointing on an MI300X: click ResNet_0 in the forward
    icicle and both icicles zoom to it (the screenshot in the README)."""
    from selenium.webdriver.common.by import By

    open_report(browser, reports["mi300"])
    target = next(
        c
        for c in cells(browser, "forward")
        if cell_titles([c])[0].startswith("DistributedDataParallel_0.ResNet_0 ")
    )
    target.click()
    crumbs = browser.find_element(By.CSS_SELECTOR, ".tp-crumbs").text
    assert crumbs == "all modules›DistributedDataParallel_0›ResNet_0"
    for phase in ("forward", "backward"):
        titles = cell_titles(cells(browser, phase))
        assert titles[0].startswith("DistributedDataParallel_0.ResNet_0 ")
        assert any(".CheckpointWrapper_3" in t for t in titles)
    selected = browser.find_element(By.CSS_SELECTOR, "tr.tp-row.tp-selected")
    assert selected.find_element(By.CSS_SELECTOR, ".tp-name").text == "ResNet_0"

    browser.execute_script("window.scrollTo(0, 0)")
    update = os.environ.get("TRACEPROF_UPDATE_SCREENSHOTS") == "1"
    shot = SCREENSHOT if update else tmp_path / SCREENSHOT.name
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_chromium_shows_a_modules_kernels_the_timeline_and_the_memory_peak(reports, browser, tmp_path):
    """BERT inference on an H100: click a module and see its top kernels (those of the JSON's
    ops section, largest first); find a kernel of a known module on the timeline of the step and
    click it: the module is selected in the tree; the memory curve labels its peak with the
    module whose allocation reached it."""
    open_report(browser, reports["bert"])
    profile = traceprof.analyze(BERT)
    encoder = "BertLMHeadModel_0.BertModel_0.BertEncoder_0"
    viewer_checks.click_module_row(browser, encoder)
    title, names = viewer_checks.top_kernels(browser)
    assert title == f"Kernels of {encoder}"
    from traceprof.result.records import op_records

    expected = sorted(
        (r for r in op_records(profile, profile.find(encoder)) if r["kind"] == "kernel"),
        key=lambda r: -r["gpu_busy_us"],
    )
    assert len(names) == min(25, len(expected)) and names[0] == expected[0]["name"]
    viewer_checks.screenshot(browser, "tp-ops", "viewer-ops.png", tmp_path)

    head = "BertLMHeadModel_0.BertOnlyMLMHead_0"
    clicked = viewer_checks.click_kernel_of(browser, head)
    assert clicked["module"].startswith(head) and clicked["selected"].startswith(head)
    assert clicked["info"].startswith("Selected: ") and "GPU 0 · stream 7" in clicked["info"]
    label, on_curve = viewer_checks.memory_peak(browser)  # zoomed out again
    viewer_checks.screenshot(browser, "tp-timeline", "viewer-timeline.png", tmp_path)
    viewer_checks.screenshot(browser, "tp-memory", "viewer-memory.png", tmp_path)
    peak = profile.timeline.memory
    assert label.startswith("peak 101.31 MB · ") and "(forward)" in label
    assert ".".join(profile.timeline.modules[peak.peak_module]) in label
    assert on_curve == label
    errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert not errors, errors


MEMORY_SAMPLE = SAMPLE_TRACES / "gpt_train_memory_cpu.pt.trace.json.gz"


def test_chromium_stacks_the_memory_curve_by_category_and_by_module(browser, tmp_path, update_golden):
    """A GPT training step recorded with memory: the curve's layers (the blocks alive at each
    event, by category, then by module at a depth, over what was allocated before the trace)
    add up to the allocator's total at every point, and at the peak hold what the profile's
    memory summary says; the table under the curve lists the peak and the end of the forward."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    profile = traceprof.analyze(MEMORY_SAMPLE)
    summary = profile.memory_summary
    assert summary.peak.step == profile.timeline.step  # the peak is in the step drawn
    page = tmp_path / "memory.html"
    page.write_text(render.render(profile, "html"), encoding="utf-8")
    open_report(browser, page)
    stack = Select(browser.find_element(By.ID, "tp-memory-stack"))
    assert stack.first_selected_option.get_attribute("value") == "category"
    layers = browser.execute_script(
        "return traceprofView.timelineView.memoryLayers().map((l) => [l.name, Array.from(l.values)])"
    )
    curve = profile.timeline.memory
    for k, total in enumerate(curve.allocated_bytes):
        assert sum(values[k] for _, values in layers) == pytest.approx(total, rel=1e-9, abs=1)
    at_peak = {name: values[curve.time_us.index(curve.peak_time_us)] for name, values in layers}
    assert at_peak["activations"] == pytest.approx(summary.peak.activations_bytes)
    assert at_peak["temporaries"] == pytest.approx(summary.peak.temporaries_bytes)
    assert at_peak.get("gradients", 0) == pytest.approx(summary.peak.gradients_bytes)
    legend = browser.find_element(By.ID, "tp-memory-legend").text
    assert "activations" in legend and "temporaries" in legend
    holders = browser.find_element(By.ID, "tp-memory-holders").text
    assert "at the peak" in holders and "end of forward" in holders
    viewer_checks.screenshot(browser, "tp-memory-panel", "viewer-memory-stacked.png", tmp_path, update_golden)

    stack.select_by_value("module:3")
    layers = browser.execute_script(
        "return traceprofView.timelineView.memoryLayers().map((l) => [l.name, Array.from(l.values)])"
    )
    names = [name for name, _ in layers]
    assert {"h.0", "h.1", "lm_head"} <= set(names)
    for k, total in enumerate(curve.allocated_bytes):
        assert sum(values[k] for _, values in layers) == pytest.approx(total, rel=1e-9, abs=1)
    errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert not errors, errors
