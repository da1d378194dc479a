"""Debian's headless Chromium driven through its ChromeDriver (selenium), for the console tests."""

from __future__ import annotations

import shutil
from typing import Any

import pytest


def chromium_paths() -> tuple[str, str]:
    """The browser and driver programs (installed by scripts/ensure-system-deps.sh)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail("Chromium and ChromeDriver are needed: run `make install` (system deps)")
    return browser, driver


def start_chromium(*extra_arguments: str) -> Any:
    """A headless Chromium session (the caller quits it), with ``extra_arguments`` if any."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
        *extra_arguments,
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    return driver
