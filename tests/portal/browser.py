"""Headless Chromium for the portal's browser tests: Debian's ``chromium`` driven through its
``chromedriver`` by Selenium's WebDriver client (no browser download at test time: this
machine reaches package registries only). ``make test`` installs both when missing; elsewhere
the tests skip with the reason, except under CI, where a missing browser fails."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--window-size=1280,1000", "--lang=en-US")


def find_browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths; skip (or, under CI, fail) when either is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = ("headless Chromium is not installed (Debian: apt-get install chromium "
              "chromium-driver; `make test` does it when run as root)")
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def start_browser(user_data_dir: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data_dir}")
    service = Service(executable_path=driver, log_output=str(user_data_dir.parent /
                                                             "chromedriver.log"))
    browser = webdriver.Chrome(service=service, options=options)
    browser.set_page_load_timeout(30)
    return browser


def stop_browser(browser) -> None:
    """quit() ends Chromium; then the driver process is stopped by its own PID."""
    process = browser.service.process
    try:
        browser.quit()
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)


def screenshots_dir() -> Path:
    """Where every page's screenshot goes (an artifact of the run): $TUBEQ_ARTIFACTS, or
    .artifacts/ in the checkout."""
    base = Path(os.environ.get("TUBEQ_ARTIFACTS") or ROOT / ".artifacts")
    path = base / "portal-screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


SCREENSHOT_TRIES = 3


def save_screenshot(browser, name: str) -> Path:
    """Save the page as an artifact, best effort: Chromium on a busy machine can time out a
    capture that races its own compositor ("timeout from aborted by navigation"), and a missing
    picture must not fail a test whose checks are its assertions. Tries a few times, then
    writes the error next to where the picture would be."""
    from selenium.common.exceptions import WebDriverException

    path = screenshots_dir() / f"{name}.png"
    error: WebDriverException | None = None
    for _ in range(SCREENSHOT_TRIES):
        try:
            browser.save_screenshot(str(path))
            return path
        except WebDriverException as exc:
            error = exc
    failed = path.with_suffix(".failed.txt")
    failed.write_text(f"{SCREENSHOT_TRIES} tries failed; the last: {error}\n")
    return failed
