"""The diff's HTML page (``traceprof diff BASE NEW -o diff.html``): self-contained (index.js's
helpers and diff.js inlined, the diff's JSON embedded), rendered by a headless Chromium that
fails on any network request or console error."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import SAMPLE_TRACES
from .test_html_report import browser  # noqa: F401  (the headless Chromium fixture)

BASE = SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"
WIDE = SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("diff") / "diff.html"
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "diff", str(BASE), str(WIDE), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_page_loads_nothing_from_the_network(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?:""", text)
    assert "default-src &#x27;none&#x27;" in text
    assert 'id="traceprof-diff"' in text and "renderDiff(" in text


def test_chromium_draws_two_icicles_on_one_scale_and_a_change_icicle(page, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")
    browser.get(page.as_uri())
    WebDriverWait(browser, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".tp-diff-delta .tp-diff-cell")
    )
    errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert not errors, errors
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert fetched == [], "the page loaded something"

    def root_width(cls):
        cells = browser.find_elements(By.CSS_SELECTOR, f".{cls} .tp-diff-cell")
        return max(c.size["width"] for c in cells)

    base, new = root_width("tp-diff-base"), root_width("tp-diff-new")
    assert new > base * 1.1  # the new run is slower: its root is wider on the shared scale
    mlp = browser.find_element(
        By.CSS_SELECTOR, '.tp-diff-delta .tp-diff-cell[data-key="transformer.h.2.mlp (MLP)"]'
    )
    assert "transformer.h.2.mlp" in mlp.get_attribute("title")
    assert "hsl(0" in mlp.get_attribute("style") or "rgb(" in mlp.get_attribute("style")
    first = browser.find_element(By.CSS_SELECTOR, ".tp-diff-table tbody tr td").text
    assert first == "GPT"
    step = browser.find_element(By.ID, "tp-diff-step").text  # the step wall's change
    assert re.fullmatch(r"\+\d+\.\d+ ms \(\+\d+\.\d%\)", step)


def test_a_click_zooms_all_three_icicles_to_a_module_and_back(page, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(page.as_uri())
    key = "transformer.h.2.mlp (MLP)"
    WebDriverWait(browser, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'.tp-diff-delta .tp-diff-cell[data-key="{key}"]')
    )
    browser.find_element(By.CSS_SELECTOR, f'.tp-diff-delta .tp-diff-cell[data-key="{key}"]').click()
    for cls in ("tp-diff-base", "tp-diff-new", "tp-diff-delta"):
        first = browser.find_elements(By.CSS_SELECTOR, f".{cls} .tp-diff-cell")[0]
        assert first.get_attribute("data-key") == key
    base = browser.find_elements(By.CSS_SELECTOR, ".tp-diff-base .tp-diff-cell")[0].size["width"]
    new = browser.find_elements(By.CSS_SELECTOR, ".tp-diff-new .tp-diff-cell")[0].size["width"]
    assert new > 3 * base  # one scale: the 4x wider MLP takes over 3x the width
    browser.find_element(By.ID, "tp-diff-reset").click()
    first = browser.find_elements(By.CSS_SELECTOR, ".tp-diff-base .tp-diff-cell")[0]
    assert first.get_attribute("data-key") == "(GPT)"
    assert not [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
