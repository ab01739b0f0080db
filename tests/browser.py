"""The headless Chromium every browser test drives (Debian packages chromium, chromium-driver;
scripts/test.sh installs them)."""

from __future__ import annotations

import shutil

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def start_chromium():
    """A headless Chromium, 1500 x 1000, that keeps its console log (``get_log("browser")``);
    the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1500,1000",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver
