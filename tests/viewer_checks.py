"""Checks of the viewer's module views in headless Chromium, shared by the HTML report's tests
and the TensorBoard tab's: inside a module (its top kernels), the timeline of a step (a kernel
of a known module found and clicked) and the memory curve (its peak labelled)."""

from __future__ import annotations

import os
from pathlib import Path

from .conftest import REPO

UPDATE = os.environ.get("TRACEPROF_UPDATE_SCREENSHOTS") == "1"


def node_id(driver, qualified_name: str) -> int:
    return driver.execute_script(
        "return traceprofView.doc.nodes.find((n) => n.qualified_name === arguments[0]).id", qualified_name
    )


def click_module_row(driver, qualified_name: str):
    """Expands the tree and clicks the row of ``qualified_name``."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, "//button[text()='Expand all']").click()
    row = next(
        r
        for r in driver.find_elements(By.CSS_SELECTOR, "tr.tp-row")
        if r.find_element(By.CSS_SELECTOR, ".tp-name").get_attribute("title") == qualified_name
    )
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.click()


def top_kernels(driver) -> tuple[str, list[str]]:
    """The title of the ops panel and the kernel names it lists."""
    from selenium.webdriver.common.by import By

    panel = driver.find_element(By.ID, "tp-ops")
    title = panel.find_element(By.TAG_NAME, "h2").text
    names = [td.get_attribute("title") for td in panel.find_elements(By.CSS_SELECTOR, "td.tp-op-name")]
    return title, names


def click_kernel_of(driver, qualified_name: str) -> dict:
    """Zooms the timeline to a kernel launched by ``qualified_name`` (or a module under it),
    clicks it on the canvas, and returns what the timeline then says and selects."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    canvas = driver.find_element(By.ID, "tp-timeline-canvas")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    spot = driver.execute_script(
        "return traceprofView.timelineView.locateEventOf(arguments[0])", node_id(driver, qualified_name)
    )
    assert spot is not None, f"no kernel of {qualified_name} in the timeline"
    size = canvas.size
    ActionChains(driver).move_to_element_with_offset(
        canvas, int(spot["x"] - size["width"] / 2), int(spot["y"] - size["height"] / 2)
    ).click().perform()
    info = driver.find_element(By.ID, "tp-timeline-info")
    selected = driver.find_element(By.CSS_SELECTOR, "tr.tp-row.tp-selected")
    return {
        "info": info.text,
        "module": info.get_attribute("data-module"),
        "selected": selected.find_element(By.CSS_SELECTOR, ".tp-name").get_attribute("title"),
    }


def memory_peak(driver) -> tuple[str, str]:
    """The peak's label above the memory curve and on it."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "tp-zoom-reset").click()
    head = driver.find_element(By.ID, "tp-memory-peak").text
    on_curve = driver.find_element(By.CSS_SELECTOR, "svg.tp-memory-svg .tp-mem-peak")
    assert driver.find_elements(By.CSS_SELECTOR, "svg.tp-memory-svg .tp-memory-line")
    return head, on_curve.get_attribute("textContent")


def screenshot(driver, element_id: str, image: str, tmp_path: Path, update: bool = False):
    """A screenshot of one panel: docs/images/<image> with the update flag
    (TRACEPROF_UPDATE_SCREENSHOTS=1, or ``update``: a test's ``--update-golden``), else a
    temporary file."""
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.ID, element_id)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", element)
    target = REPO / "docs/images" / image if UPDATE or update else tmp_path / image
    target.parent.mkdir(parents=True, exist_ok=True)
    assert element.screenshot(str(target))
    assert target.stat().st_size > 5_000
