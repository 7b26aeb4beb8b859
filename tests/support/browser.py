"""Debian's Chromium driven by Playwright (Playwright's own browser download fails here)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page: Page, base: str, username: str, password: str) -> None:
    """Open the studio and sign in on its login page; wait for the UI."""
    page.goto(f"{base}/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("text=ICRL Studio", timeout=30_000)
    page.wait_for_selector("button[role=tab]", timeout=30_000)
