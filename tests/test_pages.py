"""The HTML pages in one visual language, in headless Chromium (offline; any console error or
request fails): the diff page styled as the report (numbers that do not wrap, right-aligned,
coloured by better or worse, short names with the qualified name on hover), the job heat map on
one log colour scale with numbers in its cells, the ranks' step table and the stragglers, and
the report's icicle zooming the timeline to the module clicked.

Screenshots (docs/images/diff-page.png, job-heatmap.png) are rewritten with ``--update-golden``
or ``TRACEPROF_UPDATE_SCREENSHOTS=1``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import traceprof
from traceprof import render, units
from traceprof.result.names import short_names
from traceprof.testing import generate_job

from . import viewer_checks
from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .test_html_report import browser  # noqa: F401  (the headless Chromium fixture)

BASE = SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"
WIDE = SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"
BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
SLOW_RANK, SLOW_MODULE = 1, "transformer.h.1.mlp.c_fc"


def traceprof_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "traceprof", *map(str, args)], capture_output=True, text=True, timeout=180
    )


def open_page(driver, page: Path, ready: str):
    """Loads ``page``, waits for ``ready`` (a CSS selector); no console error, no request."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(1500, 1000)
    driver.get_log("browser")
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ready))
    assert_clean(driver)


def assert_clean(driver):
    errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
    assert not errors, errors
    fetched = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert fetched == [], "the page loaded something"


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def luminance(css: str) -> float:
    r, g, b = rgb(css)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def style(driver, element, prop: str) -> str:
    return driver.execute_script("return getComputedStyle(arguments[0])[arguments[1]]", element, prop)


def one_line(driver, element) -> bool:
    """The element's text takes one line (no number broken as "+60.80 / ms")."""
    return driver.execute_script(
        "const r = document.createRange(); r.selectNodeContents(arguments[0]);"
        "const tops = new Set([...r.getClientRects()].map((x) => Math.round(x.top)));"
        "return tops.size === 1;",
        element,
    )


# ---- the diff page ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def diff_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("diff") / "diff.html"
    proc = traceprof_cli("diff", BASE, WIDE, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_diff_page_is_styled_as_the_report(diff_page, browser, tmp_path, update_golden):  # noqa: F811
    from selenium.webdriver.common.by import By

    open_page(browser, diff_page, ".tp-diff-table tbody tr")
    # the report's skeleton: toolbar, summary cards, panels with headings
    assert browser.find_element(By.CSS_SELECTOR, ".tp-app > .tp-toolbar .tp-brand").text == "traceprof diff"
    cards = {
        c.find_element(By.CSS_SELECTOR, ".tp-card-key").text: c.find_element(
            By.CSS_SELECTOR, ".tp-card-value"
        )
        for c in browser.find_elements(By.CSS_SELECTOR, ".tp-card")
    }
    assert {"BASE", "NEW", "STEP WALL", "CHANGE"} <= set(cards)
    assert cards["CHANGE"].text.startswith("+")
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, ".tp-panel-head h2")]
    assert heads == ["Module time", "Largest changes"]
    assert style(browser, browser.find_element(By.CSS_SELECTOR, ".tp-app"), "paddingLeft") != "0px"

    rows = browser.find_elements(By.CSS_SELECTOR, ".tp-diff-table tbody tr")
    header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, ".tp-diff-table th")]
    delta = header.index("Δ")
    for row in rows[:20]:  # the numbers: right-aligned, on one line
        for td in row.find_elements(By.CSS_SELECTOR, "td.tp-num"):
            assert style(browser, td, "textAlign") == "right"
            assert one_line(browser, td), td.text
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text == "GPT" and first[delta].text == "+60.80 ms"
    assert luminance(style(browser, first[delta], "color")) < 120  # a colour, not the text's black…
    red, green, _ = rgb(style(browser, first[delta], "color"))
    assert red > 2 * green  # …red: slower is worse
    # short names, the qualified name on hover
    mlp = next(r for r in rows if r.get_attribute("data-key") == "transformer.h.2.mlp (MLP)")
    name = mlp.find_element(By.CSS_SELECTOR, "td.tp-diff-node")
    assert name.text == "h.2.mlp" and name.get_attribute("title") == "transformer.h.2.mlp"
    viewer_checks.screenshot(browser, "traceprof-diff-page", "diff-page.png", tmp_path, update_golden)
    assert_clean(browser)


# ---- the job page ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def job_page(tmp_path_factory):
    traces = tmp_path_factory.mktemp("job")
    generate_job(traces, ranks=4, slow_rank=SLOW_RANK, slow_module=SLOW_MODULE, steps=2, layers=2, quiet=True)
    out = traces.parent / "job.html"
    proc = traceprof_cli("analyze", traces, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out, traceprof.analyze_job(traces, jobs=1)


def test_the_job_heat_map_has_one_colour_scale_and_numbers(job_page, browser, tmp_path, update_golden):  # noqa: F811
    from selenium.webdriver.common.by import By

    page, job = job_page
    open_page(browser, page, "#traceprof-heatmap td.tp-heat-cell")
    times = {m.qualified_name or m.name: m.times(job.metric) for m in job.modules}
    ids = {m.qualified_name or m.name: m for m in job.modules}
    positive = {k: v for k, v in times.items() if max(v.values(), default=0) > 0}
    hot = max(positive, key=lambda k: max(positive[k].values()))
    cold = min(positive, key=lambda k: max(positive[k].values()))
    assert max(positive[hot].values()) > 100 * max(positive[cold].values())

    def cell(name: str, rank: int):
        from traceprof.job.records import module_id

        return browser.find_element(
            By.CSS_SELECTOR, f'td.tp-heat-cell[data-rank="{rank}"][data-module="{module_id(ids[name])}"]'
        )

    def hottest_rank(name: str) -> int:
        return max(times[name], key=times[name].get)

    # one scale for the whole map: the largest cell of a tiny row is far lighter than a large one
    hot_cell, cold_cell = cell(hot, hottest_rank(hot)), cell(cold, hottest_rank(cold))
    assert luminance(style(browser, hot_cell, "backgroundColor")) + 60 < luminance(
        style(browser, cold_cell, "backgroundColor")
    )
    # the number in the cell, shown
    value = hot_cell.find_element(By.CSS_SELECTOR, ".tp-heat-value")
    assert value.is_displayed() and re.fullmatch(r"\d+\.\d+ (us|ms|s)", value.text)
    assert hot_cell.get_attribute("title").endswith(value.text)
    # rows sorted, the largest first
    order = [
        r.find_element(By.CSS_SELECTOR, "td.tp-heat-module").get_attribute("title")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.tp-heat-row")
    ]
    peaks = [max(times[q].values(), default=0) for q in order]
    assert peaks == sorted(peaks, reverse=True) and order[0] == hot
    # the legend shows the scale's ends
    ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#traceprof-heat-legend .tp-heat-tick")]
    every = [v for t in times.values() for v in t.values() if v > 0]
    assert len(ticks) == 5
    assert (ticks[0], ticks[-1]) == (units.duration(min(every)), units.duration(max(every)))
    # the map uses the page's width
    table = browser.find_element(By.ID, "traceprof-heatmap")
    panel = browser.find_element(By.ID, "traceprof-job-map")
    assert table.size["width"] > 0.9 * panel.size["width"]
    # the ranks' step table and the stragglers, short names with the qualified name on hover
    steps = browser.find_elements(By.CSS_SELECTOR, "#traceprof-job-steps tr.tp-job-rank")
    assert [s.get_attribute("data-rank") for s in steps] == ["0", "1", "2", "3"]
    assert steps[SLOW_RANK].find_element(By.CSS_SELECTOR, ".tp-job-flag").text == "straggler"
    stat = [
        r.find_element(By.TAG_NAME, "td").text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.tp-job-stat")
    ]
    assert stat == ["median", "max", "slowest"]
    straggler = browser.find_element(By.CSS_SELECTOR, ".tp-job-straggler").text
    assert straggler.startswith(f"straggler: rank {SLOW_RANK},") and "over the median" in straggler
    first = browser.find_element(By.CSS_SELECTOR, ".tp-job-excess .tp-name")
    assert first.get_attribute("title") == SLOW_MODULE
    names = list(times)
    shorts = short_names([tuple(q.split(".")) for q in names])
    assert first.text == dict(zip(names, shorts))[SLOW_MODULE] != SLOW_MODULE
    browser.set_window_size(1500, 1700)
    try:
        viewer_checks.screenshot(browser, "traceprof-job-map", "job-heatmap.png", tmp_path, update_golden)
    finally:
        browser.set_window_size(1500, 1000)
    assert_clean(browser)


# ---- short names: one label per node, told apart among every node -----------------------------------

DLRM = SHARED_TRACES / "multi_rank"


def row_labels(driver, selector: str) -> dict[str, set[str]]:
    """{visible label: the titles (full names) of the rows that show it}."""
    from selenium.webdriver.common.by import By

    seen: dict[str, set[str]] = {}
    for cell in driver.find_elements(By.CSS_SELECTOR, selector):
        seen.setdefault(cell.text, set()).add(cell.get_attribute("title"))
    return seen


def test_diff_rows_at_top_1_are_named_among_the_whole_diff(browser, tmp_path):  # noqa: F811
    page = tmp_path / "diff.html"
    proc = traceprof_cli("diff", BASE, WIDE, "--top", "1", "-o", page)
    assert proc.returncode == 0, proc.stderr
    open_page(browser, page, ".tp-diff-table tbody tr")
    labels = row_labels(browser, ".tp-diff-table td.tp-diff-node")
    assert {k: v for k, v in labels.items() if len(v) > 1} == {}  # the (k more) rows too
    # h.0.mlp.c_fc exists though --top 1 shows only block 2's
    assert labels["h.2.mlp.c_fc"] == {"transformer.h.2.mlp.c_fc"}
    assert "c_fc" not in labels and "mlp" not in labels
    assert_clean(browser)


@pytest.mark.skipif(not DLRM.is_dir(), reason="the shared DLRM traces are not here")
def test_job_rows_of_different_nodes_have_different_labels(browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By

    page = tmp_path / "job.html"
    proc = traceprof_cli("analyze", DLRM, "-j", "1", "--format", "html", "-o", page)
    assert proc.returncode == 0, proc.stderr
    open_page(browser, page, "#traceprof-heatmap td.tp-heat-cell")
    labels = row_labels(browser, "#traceprof-heatmap td.tp-heat-module")
    assert {k: v for k, v in labels.items() if len(v) > 1} == {}
    # a name with dots is one part: never cut inside it
    assert "step" not in labels and "zero_grad" not in labels and "__next__" not in labels
    assert labels["Optimizer.step#Adagrad.step"] == {"## optimizer ##.Optimizer.step#Adagrad.step"}
    excess = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".tp-job-excess .tp-name")]
    assert "forward.DistributedDataParallel.forward" not in excess and excess
    assert_clean(browser)


def test_signed_numbers_on_the_pages_are_signed_as_in_the_terminal(browser):  # noqa: F811
    """index.js's one signed-number helper (the diff and job pages use it) writes what
    traceprof.units writes: no sign on zero, a tiny change keeps its sign."""
    from selenium.webdriver.support.ui import WebDriverWait

    source = (Path(traceprof.__file__).parent / "tensorboard" / "static" / "index.js").read_text()
    browser.get("about:blank")
    browser.execute_script(
        "const s = document.createElement('script'); s.type = 'module';"
        "s.textContent = arguments[0] + '\\nwindow.tp = {signed, duration, percent};';"
        "document.head.append(s);",
        source,
    )
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return Boolean(window.tp)"))
    times, fractions = [0.0, 1500.0, -3.0, 2.5e6, -0.04], [0.0, -0.0005, 0.0005, 0.25, -0.1]
    got = browser.execute_script(
        "return [arguments[0].map((v) => tp.signed(v, tp.duration)), arguments[1].map((f) => tp.signed(f, tp.percent))]",
        times,
        fractions,
    )
    assert got == [[units.signed_duration(v) for v in times], [units.signed_percent(f) for f in fractions]]
    assert got[1][:3] == ["0%", "-<0.1%", "+<0.1%"]


# ---- the report: the icicle zooms the timeline -------------------------------------------------------


@pytest.fixture(scope="module")
def bert_page(tmp_path_factory):
    profile = traceprof.analyze(BERT)
    page = tmp_path_factory.mktemp("bert") / "bert.html"
    page.write_text(render.render(profile, "html"), encoding="utf-8")
    return page, profile


def module_span(profile, qualified_name: str, phase: int) -> tuple[float, float]:
    """The first start and the last end of the timeline's events of a module's subtree in a pass."""
    tl = profile.timeline.document()
    path = list(profile.find(qualified_name).path)
    e = tl["events"]
    inside = [m[: len(path)] == path for m in tl["modules"]]
    picked = [
        i
        for i in range(len(e["start"]))
        if e["module"][i] >= 0 and inside[e["module"][i]] and e["phase"][i] == phase
    ]
    return min(e["start"][i] for i in picked), max(e["start"][i] + e["dur"][i] for i in picked)


def test_a_click_on_the_icicle_zooms_the_timeline_to_the_module(bert_page, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    page, profile = bert_page
    open_page(browser, page, "tr.tp-row")
    encoder = "BertLMHeadModel_0.BertModel_0.BertEncoder_0"
    span = browser.execute_script("const v = traceprofView.timelineView; return [v.v0, v.v1]")
    assert span == [0, pytest.approx(profile.timeline.span_us, abs=1e-3)]
    target = next(
        c
        for c in browser.find_elements(By.CSS_SELECTOR, ".tp-pass-forward svg .tp-cell")
        if c.find_element(By.TAG_NAME, "title").get_attribute("textContent").startswith(encoder + " ")
    )
    browser.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", target
    )  # the SVG group: a click through the driver lands on its text
    start, end = module_span(profile, encoder, 0)
    assert 0 < end - start < 0.9 * profile.timeline.span_us  # a span of its own, not the whole step
    shown = browser.execute_script("const v = traceprofView.timelineView; return [v.v0, v.v1]")
    assert shown == [pytest.approx(start, abs=1e-3), pytest.approx(end, abs=1e-3)]
    # its top bar zooms out: the timeline to the parent's span
    top = browser.find_elements(By.CSS_SELECTOR, ".tp-pass-forward svg .tp-cell")[0]
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", top)
    parent = encoder.rsplit(".", 1)[0]
    start, end = module_span(profile, parent, 0)
    shown = browser.execute_script("const v = traceprofView.timelineView; return [v.v0, v.v1]")
    assert shown == [pytest.approx(start, abs=1e-3), pytest.approx(end, abs=1e-3)]
    assert_clean(browser)
