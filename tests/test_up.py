"""The README's first command: `studio up` says where it serves and the admin's credentials
and little else, serves the UI and the API with a worker for training and one for the short
jobs, restarts a worker that dies, records where it runs for the CLI, and Ctrl-C stops it
all."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from studio.jobs.launcher import RestartBackoff
from tests.conftest import free_port
from tests.support.browser import chromium, sign_in
from tests.support.processes import (
    pid_alive,
    run_studio,
    start_studio,
    stop,
    studio_env,
    wait_for,
)


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


@contextmanager
def _studio_up(tmp_path: Path, port: int, heartbeat_seconds: str):
    """`studio up` on a new data folder and its log, once it serves (or failed to);
    stopped for sure after, and its log free of tracebacks."""
    log = tmp_path / "up.log"
    env = studio_env(tmp_path / "data", heartbeat_seconds=heartbeat_seconds)
    up = start_studio(["up", "--port", str(port)], env, log)
    try:
        wait_for(lambda: "is serving" in log.read_text() or up.poll() is not None, 120,
                 "studio up to serve")
        yield up, log
    finally:
        stop(up)
    assert "Traceback" not in log.read_text()


def _live_workers(base: str, token: str) -> dict:
    """/healthz once both workers beat: {queue: pid}."""
    health = wait_for(lambda: (h := httpx.get(f"{base}/healthz", headers=_bearer(token)).json())
                      ["status"] == "ok" and h, 60, "both workers' heartbeats")
    return {w["queues"][0]: w["pid"] for w in health["workers"]}


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _ctrl_c_stops_everything(up, log: Path, worker_pids: list[int]) -> None:
    processes = _group_pids(up.pid)
    assert len(processes) >= 4, "studio up, the web app and the two workers"
    assert set(worker_pids) <= processes
    os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    assert up.wait(timeout=60) == 0, log.read_text()
    wait_for(lambda: not any(pid_alive(p) for p in processes), 30, "every child to exit")


@pytest.mark.slow
def test_up_serves_api_and_ui_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    with _studio_up(tmp_path, port, heartbeat_seconds="1") as (up, log):
        base = f"http://127.0.0.1:{port}"
        token = re.search(r"API token: (\S+)", log.read_text()).group(1)
        workers = _live_workers(base, token)
        out = log.read_text()
        assert up.poll() is None, out
        password = re.search(r"password:\s+(\S+)", out).group(1)
        assert f"ICRL Studio is serving {base}/" in out
        assert "superuser" not in out and "[tasks]" not in out, "no Celery warning nor banner"
        assert len(out.splitlines()) == 5, out  # the admin's credentials, then the address
        # its output is a file: its processes draw no progress bar there (a model's loading
        # or conversion wrote "Loading weights: 0%|..." redraws into studio.log)
        for pid in _group_pids(up.pid) - {up.pid}:
            environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            assert {b"HF_HUB_DISABLE_PROGRESS_BARS=1", b"TQDM_DISABLE=1"} <= environ, pid

        assert httpx.get(f"{base}/api/v1/me").status_code == 401
        me = httpx.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200 and me.json()["username"] == "admin"
        assert httpx.get(f"{base}/healthz").json()["status"] == "ok"  # and no more without a token
        assert "workers" not in httpx.get(f"{base}/healthz").json()
        health = httpx.get(f"{base}/healthz", headers=_bearer(token)).json()
        assert health["database"]["ok"] and health["broker"]["ok"]
        assert {queue: len(names) for queue, names in health["queues"].items()} == {
            "cpu": 1, "short": 1}

        with chromium() as browser:
            page = browser.new_page()
            sign_in(page, base, "admin", password)
            status = page.locator("#studio-status")
            status.get_by_text("Status: ok").wait_for(timeout=30_000)
            text = status.inner_text()
            for queue, names in health["queues"].items():
                assert f"queue {queue} (" in text and names[0] in text, text
            page.screenshot(path=str(tmp_path / "home.png"))

        # the CLI, run from another folder without --data-dir, finds this studio
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        env = studio_env(tmp_path / "data")
        del env["STUDIO_DATA_DIR"]
        listed = run_studio(["user", "list"], env, cwd=elsewhere)
        assert listed.returncode == 0, listed.stderr
        assert "admin" in listed.stdout and list(elsewhere.iterdir()) == []

        _ctrl_c_stops_everything(up, log, worker_pids=list(workers.values()))


@pytest.mark.slow
def test_a_killed_worker_is_forgotten_at_once_and_restarted_while_the_web_app_serves(tmp_path):
    port = free_port()
    # heartbeats 5 s apart: a dead worker's row would look alive for 10 to 15 s more
    with _studio_up(tmp_path, port, heartbeat_seconds="5") as (up, log):
        assert up.poll() is None, log.read_text()
        token = re.search(r"API token: (\S+)", log.read_text()).group(1)
        base = f"http://127.0.0.1:{port}"
        workers = _live_workers(base, token)
        killed = workers["cpu"]
        assert killed in _group_pids(up.pid)

        os.kill(killed, signal.SIGKILL)
        killed_at = time.monotonic()
        down = wait_for(lambda: (r := httpx.get(f"{base}/healthz", headers=_bearer(token)))
                        .json()["queues"]["cpu"] == []
                        and r, 8, "/healthz to say the cpu worker is down")
        assert time.monotonic() - killed_at < 10, "before three heartbeat periods"
        assert down.status_code == 200, "the web app is up"
        assert down.json()["status"] == "degraded"
        assert [w["pid"] for w in down.json()["workers"]] == [workers["short"]], "it works on"
        assert any("no worker serves queue cpu" in p for p in down.json()["problems"])
        me = httpx.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200
        assert (f"studio: the cpu worker (pid {killed}) was killed by SIGKILL; restarting it in "
                "1 s" in log.read_text())

        restarted = wait_for(lambda: (w := _live_workers(base, token))["cpu"] != killed and w, 90,
                             "a new cpu worker")
        assert restarted["short"] == workers["short"]
        _ctrl_c_stops_everything(up, log, worker_pids=list(restarted.values()))


@pytest.mark.slow
def test_up_exits_1_with_the_web_apps_message_when_it_cannot_serve(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with _studio_up(tmp_path, taken.getsockname()[1], heartbeat_seconds="1") as (up, log):
            assert up.wait(timeout=60) == 1, log.read_text()
    out = log.read_text()
    assert "address already in use" in out.lower(), out
    assert re.search(r"studio: the web app exited with code \d+; stopping the workers", out), out
    assert "is serving" not in out


def test_worker_restart_backoff_doubles_up_to_a_minute_and_resets_after_a_minute_up():
    backoff = RestartBackoff()
    crashing_at_once = [backoff.delay_after_crash(uptime=0.5) for _ in range(9)]
    assert crashing_at_once == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert backoff.delay_after_crash(uptime=60) == 1, "a minute up: a fresh start"
    assert backoff.delay_after_crash(uptime=59) == 2
