"""The README's first command: `studio up` serves the UI and the API, and Ctrl-C stops it all."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.support.browser import chromium, sign_in
from tests.support.processes import pid_alive, start_studio, stop, studio_env, wait_for


def _group_pids(pgid: int) -> set[int]:
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.add(int(stat.parent.name))
    return pids


@pytest.mark.slow
def test_up_serves_api_and_ui_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    log = tmp_path / "up.log"
    env = studio_env(tmp_path / "data", heartbeat_seconds="1")
    up = start_studio(["up", "--port", str(port)], env, log)
    try:
        wait_for(lambda: "is serving" in log.read_text() or up.poll() is not None, 120,
                 "studio up to serve")
        out = log.read_text()
        assert up.poll() is None, out
        token = re.search(r"API token: (\S+)", out).group(1)
        password = re.search(r"password:\s+(\S+)", out).group(1)
        base = f"http://127.0.0.1:{port}"

        assert httpx.get(f"{base}/api/v1/me").status_code == 401
        me = httpx.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200 and me.json()["username"] == "admin"
        health = wait_for(lambda: (h := httpx.get(f"{base}/healthz").json())["workers"] and h,
                          60, "the worker's heartbeat")
        assert health["status"] == "ok" and health["database"]["ok"] and health["broker"]["ok"]

        with chromium() as browser:
            page = browser.new_page()
            sign_in(page, base, "admin", password)
            status = page.locator("#studio-status")
            status.get_by_text("Status: ok").wait_for(timeout=30_000)
            assert "worker" in status.inner_text()
            page.screenshot(path=str(tmp_path / "home.png"))

        processes = _group_pids(up.pid)
        assert len(processes) >= 3, "studio up, the web app and the worker"
        assert health["workers"][0]["pid"] in processes
        os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert up.wait(timeout=60) == 0, log.read_text()
        wait_for(lambda: not any(pid_alive(p) for p in processes), 30, "every child to exit")
    finally:
        stop(up)
    assert "Traceback" not in log.read_text()
