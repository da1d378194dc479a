"""After the demo's story: a screenshot of the web console's timeline page (headless
Chromium), and with ``--keep`` the broker kept up, its console and metrics URLs printed.

The screenshot is taken when Chromium, its ChromeDriver and selenium are installed (``make install`` puts them
there); otherwise the demo says so and goes on: the picture is a souvenir, not a check.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from pathlib import Path
from typing import Any

TABLE = "accounts"


def operate(console: Any, broker: Any, *, screenshot: bool, keep: bool, workdir: Path) -> None:
    """Save ``console-timeline.png`` in the demo's work directory (a run never changes the
    checkout); with ``keep``, wait for Ctrl-C."""
    if screenshot:
        shot = workdir / "console-timeline.png"
        console.print("  " + screenshot_timeline(broker.console.url, TABLE, shot))
    if keep:
        metrics = broker.observer.metrics_url if broker.observer is not None else "off"
        console.print(
            f"web console on {broker.console.url}, metrics on {metrics}: the broker stays up "
            "until Ctrl-C"
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


def screenshot_timeline(console_url: str, table: str, path: Path) -> str:
    """Save the timeline page of ``table`` to ``path``; returns what happened, in a sentence."""
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return "no screenshot of the console (selenium is not installed: pip install '.[dev]')"
    if browser is None or driver_path is None:
        return "no screenshot of the console (chromium and chromium-driver are not installed)"
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,1100"):  # fmt: skip
        options.add_argument(argument)
    from selenium.common.exceptions import WebDriverException

    try:  # a picture is a bonus: a browser that fails must not fail a demo whose checks passed
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        try:
            driver.get(console_url.rstrip("/") + f"/tables/{table}")
            path.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(path))
        finally:
            driver.quit()
    except WebDriverException as error:
        return f"no screenshot of the console ({str(error).strip().splitlines()[0]})"
    return f"console timeline screenshot written to {path}"
