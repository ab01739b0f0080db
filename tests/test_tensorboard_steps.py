"""Runs of one to a few steps in TensorBoard: TensorBoard's Scalars charts draw a line of two points
with no marker (the Scalars dashboard of tensorboard 2.21 an empty frame), so the traceprof tab
shows the same values as numbers, one row per step; and compiled work without module information
(kind ``compiled``) is styled apart from modules in the tab and the HTML report.

The screenshot docs/images/tensorboard-per-step.png is rewritten with
``TRACEPROF_UPDATE_SCREENSHOTS=1 python -m pytest tests/test_tensorboard_steps.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse

import pytest

from traceprof.tensorboard import layout

from .browser import start_chromium
from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .tbserver import free_port, get, get_json, start_process, stop_process, wait_for
from .test_compiled_regions import compiled_step
from .test_tensorboard import tiny_gpu_trace_with_scopes
from .tracebuilder import TraceBuilder

TWO_STEPS = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"  # ProfilerStep#2 and #3, CPU only
NO_STEPS = SHARED_TRACES / "gpu_attribution/torch_compile_triton.json.gz"  # no ProfilerStep
TWO_RUN, ONE_RUN, COMPILED_RUN, NO_STEPS_RUN = (
    "lenet5_train_cpu",
    "tiny_one_step",
    "compiled_regions",
    "torch_compile_triton",
)
START_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def compiled_trace(tmp_path_factory):
    """A step of a model with a compiled region and no compiled-kernel table (tests/
    test_compiled_regions.py): its work is in nodes of kind compiled under the module Net."""
    return compiled_step(TraceBuilder()).write(
        tmp_path_factory.mktemp("inputs") / f"{COMPILED_RUN}.json.gz", gz=True
    )


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, compiled_trace):
    """A 2-step run, a 1-step run (Net 40 us: fc 30 us, act 10 us of kernels), the compiled
    trace and a trace without ProfilerStep, written by ``traceprof tensorboard``."""
    one_step = tiny_gpu_trace_with_scopes(tmp_path_factory.mktemp("inputs") / f"{ONE_RUN}.json.gz")
    logdir = tmp_path_factory.mktemp("logdir")
    traces = [TWO_STEPS, one_step, compiled_trace, NO_STEPS]
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "tensorboard", *map(str, traces)]
        + ["--logdir", str(logdir), "--tb-profiler", "never"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return logdir


@pytest.fixture(scope="module")
def tensorboard(logdir, tmp_path_factory):
    log = tmp_path_factory.mktemp("tb") / "tensorboard.log"
    port = free_port()
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    proc = start_process([*argv, "--port", str(port)], log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "TensorBoard", lambda: get(f"{url}/data/plugins_listing")[0] == 200, START_TIMEOUT_S, proc, log
        )
        yield url
    finally:
        stop_process(proc)


def tb_points(url: str, run: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a tag as TensorBoard's own scalar route serves it."""
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    return [(p[1], p[2]) for p in get_json(f"{url}/data/plugin/scalars/scalars?{query}")]


def microseconds(text: str) -> float:
    """A duration as the frontend writes it ('40.0 us', '2.61 ms', '1.20 s') in microseconds."""
    number, unit = re.fullmatch(r"(-?[\d.]+) (us|ms|s)", text).groups()
    return float(number) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def test_the_run_index_has_the_scalars_per_step(logdir, tensorboard):
    """run.json's per_step holds each scalar's value at each step, the values TensorBoard serves."""
    index = layout.read_run_index(str(logdir / TWO_RUN))
    table = index["per_step"]
    assert table["steps"] == [2, 3]
    series = {s["tag"]: s for s in table["series"]}
    assert set(series) == set(index["scalars"])
    assert series["cpu_us/step"]["module"] is None and series["cpu_us/step"]["unit"] == "us"
    assert series["cpu_us/LeNet5"]["module"] == "LeNet5"
    assert series["cpu_us/features.0"]["module"] == "features.0"
    # the step's metrics come first, then the modules
    modules = [s["module"] is not None for s in table["series"]]
    assert modules == sorted(modules) and any(modules)

    def scalar_tags():
        tags = get_json(f"{tensorboard}/data/plugin/scalars/tags")
        return tags if TWO_RUN in tags and ONE_RUN in tags else None

    wait_for("the scalars", scalar_tags, 90)
    for tag in ("cpu_us/step", "wall_us/step", "cpu_us/LeNet5", "cpu_us/features.0"):
        assert tb_points(tensorboard, TWO_RUN, tag) == list(zip(table["steps"], series[tag]["values"]))
    one = layout.read_run_index(str(logdir / ONE_RUN))["per_step"]
    assert one["steps"] == [1]
    assert {s["tag"]: s["values"] for s in one["series"]}["gpu_busy_us/fc"] == [pytest.approx(30)]


def _open_tab(driver, url: str, run: str):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        driver, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    )
    driver.get(f"{url}/#traceprof")
    driver.switch_to.frame(wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe")))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
    show_run(driver, wait, run)
    return wait


def show_run(driver, wait, run: str) -> None:
    """Choose ``run`` in the tab and wait until its profile is shown: the view names the run as
    soon as it is chosen and draws it when its profile has loaded (a new document, drawn in the
    same task), so waiting on the name alone read the previous run's tables on a busy machine."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    if driver.execute_script("return traceprofView.run.name") == run:
        return
    driver.execute_script("window.tpShownDoc = traceprofView.doc")
    Select(driver.find_element(By.ID, "tp-run")).select_by_value(run)
    wait.until(
        lambda d: d.execute_script(
            "return traceprofView.run.name === arguments[0] && traceprofView.doc !== window.tpShownDoc",
            run,
        )
    )


def per_step_table(driver) -> tuple[list[str], list[str], list[list[str]]]:
    """The per-step panel's header texts, header titles (tags) and rows of cell texts."""
    from selenium.webdriver.common.by import By

    panel = driver.find_element(By.ID, "tp-per-step")
    heads = panel.find_elements(By.CSS_SELECTOR, "th")
    rows = [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in panel.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    return [h.text for h in heads], [h.get_attribute("title") for h in heads], rows


def test_chromium_tab_shows_the_values_of_a_two_and_a_one_step_run(tensorboard, tmp_path):
    """The values of a 2-step run, that TensorBoard's Scalars charts draw as an empty frame or a
    bare segment, are numbers in the traceprof tab, equal to TensorBoard's own points; a click on
    a step shows its profile; a 1-step run has its row too."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from . import viewer_checks

    driver = start_chromium()
    try:
        wait = _open_tab(driver, tensorboard, TWO_RUN)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tp-per-step tbody tr"))
        heads, tags, rows = per_step_table(driver)
        assert heads[:3] == ["Step", "CPU", "Wall"] and tags[1:3] == ["cpu_us/step", "wall_us/step"]
        assert [r[0] for r in rows] == ["ProfilerStep#2", "ProfilerStep#3"]
        # module columns: short names, the tag (qualified name) on hover
        assert "features.0" in heads and tags[heads.index("features.0")] == "cpu_us/features.0"
        for tag in ("cpu_us/step", "wall_us/step", "cpu_us/LeNet5", "cpu_us/features.0"):
            column = tags.index(tag)
            for row, (step, value) in zip(rows, tb_points(tensorboard, TWO_RUN, tag)):
                assert row[0] == f"ProfilerStep#{step}"
                assert microseconds(row[column]) == pytest.approx(value, rel=0.01), (tag, step)
        viewer_checks.screenshot(driver, "tp-per-step", "tensorboard-per-step.png", tmp_path)

        # a click on a step's row shows that step's profile
        driver.find_element(By.CSS_SELECTOR, "#tp-per-step tr[data-step='3']").click()
        wait.until(lambda d: d.execute_script("return traceprofView.doc.steps.numbers") == [3])
        assert Select(driver.find_element(By.ID, "tp-step")).first_selected_option.text == "ProfilerStep#3"
        selected = driver.find_element(By.CSS_SELECTOR, "#tp-per-step tr.tp-selected")
        assert selected.get_attribute("data-step") == "3"

        show_run(driver, wait, ONE_RUN)
        heads, tags, rows = per_step_table(driver)
        assert rows[0][0] == "ProfilerStep#1" and len(rows) == 1
        cells = dict(zip(heads, rows[0]))
        assert cells["GPU busy"] == "40.0 us" and cells["Kernels"] == "2"
        assert cells["fc"] == "30.0 us" and cells["act"] == "10.0 us"

        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()


def compiled_styles(driver) -> dict:
    """Font styles of the tree's name and the icicle's label of the compiled node and of a module."""
    return driver.execute_script(
        """
        const style = (e) => e ? getComputedStyle(e).fontStyle : null;
        const row = (kind) => document.querySelector(`tr.tp-row.tp-kind-${kind} .tp-name`);
        const cell = (kind) => [...document.querySelectorAll('.tp-icicle-svg .tp-cell')].find((g) =>
            traceprofView.byId.get(Number(g.dataset.id)).kind === kind);
        const compiled = cell('compiled'), module = cell('module');
        return {tree: style(row('compiled')), tree_module: style(row('module')),
          tree_text: row('compiled') && row('compiled').textContent,
          icicle: style(compiled && compiled.querySelector('text')),
          icicle_module: style(module && module.querySelector('text')),
          dashed: compiled && getComputedStyle(compiled.querySelector('rect')).strokeDasharray,
          dashed_module: module && getComputedStyle(module.querySelector('rect')).strokeDasharray};
        """
    )


def _check_compiled_styles(styles: dict) -> None:
    assert styles["tree_text"].startswith("[compiled 0/0 ")
    assert styles["tree"] == "italic" and styles["tree_module"] == "normal"
    assert styles["icicle"] == "italic" and styles["icicle_module"] == "normal"
    assert styles["dashed"] not in (None, "", "none") and styles["dashed_module"] in ("", "none")


def test_chromium_styles_compiled_work_apart_from_modules(tensorboard, compiled_trace, tmp_path):
    """Nodes of kind compiled (no module information) are italic in the tree and the icicle, with
    a dashed outline there, in the TensorBoard tab and in the HTML report; modules are not."""
    from selenium.webdriver.common.by import By

    driver = start_chromium()
    try:
        wait = _open_tab(driver, tensorboard, COMPILED_RUN)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row.tp-kind-compiled"))
        _check_compiled_styles(compiled_styles(driver))

        # a trace without steps: its one row is the whole trace
        show_run(driver, wait, NO_STEPS_RUN)
        assert per_step_table(driver)[2] == [per_step_table(driver)[2][0]]
        assert per_step_table(driver)[2][0][0] == "whole trace"

        report = tmp_path / "compiled.html"
        proc = subprocess.run(
            [sys.executable, "-m", "traceprof", "analyze", str(compiled_trace), "-o", str(report)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        driver.switch_to.default_content()
        driver.get(report.as_uri())
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row.tp-kind-compiled"))
        _check_compiled_styles(compiled_styles(driver))
        assert not driver.find_elements(By.ID, "tp-per-step")  # the report has no run index
        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()


def test_per_step_table_of_points():
    from traceprof.tensorboard.events import Scalar, per_step_table

    points = [
        Scalar("cpu_us/step", 2, 10.0, ""),
        Scalar("cpu_us/enc", 2, 4.0, "", module="enc"),
        Scalar("cpu_us/step", 3, 12.0, ""),
        Scalar("kernels/step", 3, 5.0, ""),
    ]
    table = per_step_table(points)
    assert table["steps"] == [2, 3]
    assert json.loads(json.dumps(table))["series"] == [
        {"tag": "cpu_us/step", "module": None, "unit": "us", "values": [10.0, 12.0]},
        {"tag": "kernels/step", "module": None, "unit": "count", "values": [None, 5.0]},
        {"tag": "cpu_us/enc", "module": "enc", "unit": "us", "values": [4.0, None]},
    ]
