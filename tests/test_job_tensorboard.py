"""A job in TensorBoard: `traceprof tensorboard` of a job's ranks writes the job's document into
every rank's run, the plugin serves it, and the traceprof tab shows the rank x module heat map
above the run's tree; a click on a cell selects that rank's run."""

from __future__ import annotations

import sys

import pytest

from traceprof.tensorboard import layout
from traceprof.tensorboard.logdir import write_logdir
from traceprof.testing import generate_job

from .browser import start_chromium
from .tbserver import free_port, get, get_json, start_process, stop_process, wait_for

SLOW_RANK, SLOW_MODULE = 1, "transformer.h.1.mlp.c_fc"


@pytest.fixture(scope="module")
def job_logdir(tmp_path_factory):
    traces = tmp_path_factory.mktemp("job3")
    generate_job(traces, ranks=3, slow_rank=SLOW_RANK, slow_module=SLOW_MODULE, steps=2, layers=2, quiet=True)
    logdir = tmp_path_factory.mktemp("tb")
    runs = write_logdir([traces], logdir)
    alone = write_logdir([sorted(traces.iterdir())[0]], logdir, name="alone")
    return logdir, runs, alone[0]


def test_every_rank_run_holds_the_job(job_logdir):
    import json

    logdir, runs, alone = job_logdir
    assert len(runs) == 3
    docs = [json.loads((logdir / r.name / layout.PLUGIN_DIR / layout.JOB_FILE).read_text()) for r in runs]
    assert all(d == docs[0] for d in docs)
    assert docs[0]["schema"] == "traceprof.job/2"
    assert docs[0]["runs"] == {str(i): runs[i].name for i in range(3)}
    assert docs[0]["stragglers"][0]["rank"] == SLOW_RANK
    assert docs[0]["stragglers"][0]["modules"][0]["qualified_name"] == SLOW_MODULE
    assert not (logdir / alone.name / layout.PLUGIN_DIR / layout.JOB_FILE).exists()


def test_tab_shows_the_heat_map_and_a_click_selects_the_ranks_run(job_logdir, tmp_path):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    logdir, runs, alone = job_logdir
    port = free_port()
    proc = start_process(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        tmp_path / "tb.log",
    )
    driver = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "TensorBoard to answer",
            lambda: get(f"{url}/data/plugins_listing")[0] == 200,
            60,
            proc,
            tmp_path / "tb.log",
        )
        base = f"{url}/data/plugin/traceprof"
        job = get_json(f"{base}/job?run={runs[0].name}")
        assert job["runs"]["2"] == runs[2].name
        assert get_json(f"{base}/job?run={alone.name}") == {}
        assert get(f"{base}/job?run=nope")[0] == 404

        driver = start_chromium()
        driver.get(f"{url}/#traceprof")
        wait = WebDriverWait(
            driver, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        )
        driver.switch_to.frame(wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(runs[0].name)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#traceprof-heatmap td.tp-heat-cell"))
        assert driver.find_element(By.CSS_SELECTOR, ".tp-job-straggler").text.startswith(
            f"straggler: rank {SLOW_RANK},"
        )
        # the run selector stays at the top, above the heat map and within the first screen
        run_y = driver.find_element(By.ID, "tp-run").location["y"]
        assert run_y < driver.find_element(By.ID, "traceprof-heatmap").location["y"]
        assert run_y < driver.execute_script("return window.innerHeight")
        cell = driver.find_element(
            By.CSS_SELECTOR, f'td.tp-heat-cell[data-rank="2"][data-module="{SLOW_MODULE}"]'
        )
        cell.click()
        wait.until(
            lambda d: (
                Select(d.find_element(By.ID, "tp-run")).first_selected_option.get_attribute("value")
                == runs[2].name
            )
        )
        wait.until(lambda d: f"run {runs[2].name} below" in d.find_element(By.ID, "traceprof-job-open").text)
        # a run of no job: no heat map
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(alone.name)
        wait.until(lambda d: not d.find_elements(By.ID, "traceprof-heatmap"))
        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        if driver is not None:
            driver.quit()
        stop_process(proc)
