"""A live `studio up` on a temporary data directory, logged in from Chromium, for page tests.

One studio and one page per test module keeps the browser tests' wall time
down; tests then drive the pages in order, as a user would. Screenshots go
to `artifacts/screenshots/` (ignored by git, kept by CI).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.conftest import free_port
from tests.support.browser import chromium, sign_in
from tests.support.processes import start_studio, stop, studio_env, wait_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@dataclass
class StudioUI:
    page: Page
    base: str
    data_dir: Path
    log: Path

    def api(self, **options) -> httpx.Client:
        """A client of the studio's REST API with the admin's token (`studio up` printed it);
        `options` are httpx.Client's."""
        token = re.search(r"API token: (\S+)", self.log.read_text()).group(1)
        return httpx.Client(base_url=f"{self.base}/api/v1",
                            headers={"Authorization": f"Bearer {token}"}, **options)

    def open(self, tab: str) -> None:
        self.page.get_by_role("tab", name=tab, exact=True).click()

    def reload(self) -> None:
        """Reload the page and wait for its tabs: what a page chooses on load (the run it
        shows first) is then chosen from what is stored now, not when the browser opened."""
        self.page.reload()
        self.page.wait_for_selector("button[role=tab]", timeout=30_000)

    def wait_first(self, selector: str, pattern: str, timeout: float = 30) -> str:
        """Wait until the element's visible text matches the JavaScript regular expression
        `pattern` (one of several outcomes: a step reached, or the run ended); return it."""
        seen = self.page.wait_for_function(
            "([s, p]) => { const e = document.querySelector(s); "
            "return e && new RegExp(p).test(e.innerText) ? e.innerText : false; }",
            arg=[selector, pattern], timeout=timeout * 1000)
        return seen.json_value()

    def wait_text(self, selector: str, text: str, timeout: float = 30) -> str:
        """Wait until the element's visible text contains `text`; return the text that did
        (read in the same check: the element may change right after, a run ending, Gradio's
        progress text replacing a message)."""
        seen = self.page.wait_for_function(
            "([s, t]) => { const e = document.querySelector(s); "
            "return e && e.innerText.includes(t) ? e.innerText : false; }", arg=[selector, text],
            timeout=timeout * 1000)
        return seen.json_value()

    def wait_value(self, selector: str, text: str, timeout: float = 30) -> str:
        """Wait until a textbox's value contains `text`; return the value."""
        self.page.wait_for_function(
            "([s, t]) => { const e = document.querySelector(s); "
            "return e && e.value.includes(t); }", arg=[selector, text], timeout=timeout * 1000)
        return self.page.locator(selector).input_value()

    def table_rows(self, selector: str) -> list[list[str]]:
        """The body rows of a gr.Dataframe, each a list of cell texts."""
        return self.page.evaluate(
            "(s) => Array.from(document.querySelectorAll(s + ' [role=row]'))"
            ".map(r => Array.from(r.querySelectorAll('[role=gridcell]'))"
            ".map(c => c.innerText.trim())).filter(cells => cells.length)", selector)

    def choose(self, dropdown: str, option: str) -> None:
        """Pick `option` in the gr.Dropdown with elem_id `dropdown` (a '#id' selector)."""
        field = self.page.locator(f"{dropdown} input").first
        field.click()
        # the option of this dropdown's own list: another list may still be closing
        listbox = self.page.locator(f"#{field.get_attribute('aria-controls')}")
        listbox.get_by_role("option", name=option, exact=True).click()

    def chosen(self, dropdown: str) -> list[str]:
        """A dropdown's chosen labels: a single choice shows in its input, several as tokens."""
        return self.page.evaluate(
            "(s) => [document.querySelector(s + ' input').value,"
            " ...[...document.querySelectorAll(s + ' .token')].map(t => t.innerText)]", dropdown)

    def choose_run(self, dropdown: str, run_name: str, tries: int = 3) -> None:
        """Pick a run by name whatever its state in the label, and see it shown as chosen,
        picking it again (as a user would) when it did not show within 10 s. A tab refreshes
        its run choices when opened, which re-renders the list: on a loaded machine (CI) that
        landed around the click, dropping a pick twice and once closing the list under the
        option being clicked. So a click that cannot land in 5 s opens the list again. An
        option already marked selected is not clicked again (in a multiselect that would
        take it out)."""
        def shown():
            return any(f" {run_name} · " in label for label in self.chosen(dropdown))

        for _ in range(tries):
            self.page.click(f"{dropdown} input")
            option = self.page.get_by_role("option", name=re.compile(f" {re.escape(run_name)} · "))
            try:
                if option.get_attribute("aria-selected", timeout=5_000) != "true":
                    option.click(timeout=5_000)
                wait_for(shown, 10, f"{run_name} to show as chosen")
                return
            except (AssertionError, PlaywrightTimeout):
                self.page.keyboard.press("Escape")
        raise AssertionError(f"{run_name} not chosen after {tries} picks: {dropdown} shows "
                             f"{self.chosen(dropdown)}")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@contextmanager
def studio_in_browser(tmp_path: Path, default_model: str, **settings: str) -> Iterator[StudioUI]:
    """`studio up` (web app + worker) on `tmp_path/data`, and a page logged in as the admin.

    `default_model` is a tiny model's folder: with the packaged SmolLM2 as the default, the
    first page load converts it from GGUF (tens of seconds of CPU, holding up a launch that
    loads a tokenizer meanwhile). `settings` are other STUDIO_* settings for the studio; the
    heartbeat is 1 s unless they say (a lost worker shows within 3 s).
    """
    port, log = free_port(), tmp_path / "up.log"
    env = studio_env(tmp_path / "data",
                     **{"heartbeat_seconds": "1", "default_model": default_model, **settings})
    up = start_studio(["up", "--port", str(port)], env, log)
    try:
        wait_for(lambda: "is serving" in log.read_text() or up.poll() is not None, 120,
                 "studio up to serve")
        assert up.poll() is None, log.read_text()
        password = re.search(r"password:\s+(\S+)", log.read_text()).group(1)
        base = f"http://127.0.0.1:{port}"
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            sign_in(page, base, "admin", password)
            yield StudioUI(page, base, tmp_path / "data", log)
    finally:
        stop(up)
