"""The browser tests' screenshots are artifacts: a capture Chromium times out is tried again,
and one that keeps failing leaves its error where the picture would be instead of failing the
test (a CI run failed on a screenshot of a page whose checks all passed)."""
from __future__ import annotations

import pytest

from tests.portal import browser as browser_module


class FlakyCapture:
    """Stands in for Selenium's driver (not one of ours): fails its first captures."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def save_screenshot(self, path: str) -> bool:
        from selenium.common.exceptions import TimeoutException

        self.calls += 1
        if self.calls <= self.failures:
            raise TimeoutException("timeout from aborted by navigation")
        with open(path, "wb") as out:
            out.write(b"png")
        return True


@pytest.fixture(autouse=True)
def artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TUBEQ_ARTIFACTS", str(tmp_path))
    return tmp_path


def test_a_capture_that_times_out_is_tried_again():
    capture = FlakyCapture(failures=browser_module.SCREENSHOT_TRIES - 1)
    path = browser_module.save_screenshot(capture, "page")
    assert path.name == "page.png" and path.read_bytes() == b"png"
    assert capture.calls == browser_module.SCREENSHOT_TRIES


def test_a_capture_that_keeps_failing_leaves_its_error_instead():
    capture = FlakyCapture(failures=browser_module.SCREENSHOT_TRIES)
    path = browser_module.save_screenshot(capture, "page")
    assert path.name == "page.failed.txt"
    assert "aborted by navigation" in path.read_text()
    assert not path.with_name("page.png").exists()
