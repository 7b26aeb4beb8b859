"""Benchmark of a run's live stream and its rollout pages, on SQLite and PostgreSQL.

    .venv/bin/python bench/streams.py        # 100 clients join a live run for 60 s; 100k rollouts
    .venv/bin/python bench/streams.py --smoke  # a few seconds, 4 clients, 2k rollouts

* The web app as production runs it (`studio web`, a child process) on a fresh database
  (SQLite in a temporary data directory; a new PostgreSQL database, dropped afterwards).
* Live: the run has a history (H steps written a minute earlier: a metric row per step,
  a rollout every fifth, a stage change every hundredth); then this process writes like the
  trainer, one transaction per step every 1/10 s (10 metric rows and 2 rollouts a second).
  Two seconds in, N SSE clients (plain asyncio connections, in a child process) open the stream at
  once and follow the run from its start; half of them disconnect once at a random moment
  and reconnect 0.5 s later with Last-Event-ID. Opening: time to the response headers,
  to the first byte of the body, to the first event and to the `state` event that follows
  the history (caught up), from each client's request. Delivery latency = when a client
  parsed an event minus when the writer's commit returned, for rows written after that
  client caught up (the clients that never disconnect); lost = rows written (history and
  live) that a client never received; duplicates = rows a client received twice.
* Pages: R rollouts (about 1 KB of segments each) stored in one run; p50/p95 of one GET
  of each kind of page (50 rows and the filtered total) over a keep-alive connection, and
  of the same service call in this process (the database's share: no HTTP, no token
  check); the baseline is GET /runs/{id}, one row behind the same token check. On
  PostgreSQL the bulk insert is followed by VACUUM ANALYZE, as autovacuum would do within
  a minute (before it, without statistics, the planner picks bitmap scans of the heap).

Nothing here asserts timings; it prints markdown tables (docs/streams.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from studio.services import auth, run_history, runs  # noqa: E402
from studio.services.run_history import RolloutFilter  # noqa: E402
from studio.settings import Settings  # noqa: E402
from studio.storage import db  # noqa: E402
from studio.storage.tables import Rollout, RunEvent, RunMetric, RunState, utcnow  # noqa: E402
from tests.support.sse import new_run, parse_events, set_state  # noqa: E402

PG_ADMIN_DSN = os.environ.get("STUDIO_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TABLE_OF_EVENT = {"metric": "metrics", "rollout": "rollouts", "stage_change": "events"}


# --- a studio to measure --------------------------------------------------------------------


@contextmanager
def database(kind: str, data_dir: Path):
    """A fresh, migrated database URL of `kind` (sqlite | postgresql)."""
    if kind == "sqlite":
        url = f"sqlite:///{data_dir / 'studio.db'}"
        db.upgrade(url)
        yield url
        return
    name = f"studio_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_DSN)
    url = (f"postgresql+psycopg://{info.get('user', 'postgres')}@{info['host']}:"
           f"{info.get('port', 5432)}/{name}")
    try:
        db.upgrade(url)
        yield url
    finally:
        db.engine_for(url).dispose()
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def web_app(url: str, data_dir: Path, root: Path = ROOT):
    """`studio web` of the checkout at `root` on a free port: (base URL, auth headers)."""
    with db.session_scope(url) as session:
        token = auth.bootstrap_admin(session).token
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STUDIO_")}
    env.update(STUDIO_DATABASE_URL=url, STUDIO_DATA_DIR=str(data_dir),
               GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH=str(root))
    log = open(data_dir / "web.log", "w")
    web = subprocess.Popen([sys.executable, "-m", "studio.cli", "web", "--host", "127.0.0.1",
                            "--port", str(port), "--data-dir", str(data_dir)],
                           env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if web.poll() is not None or time.monotonic() > deadline:
                log_text = (data_dir / "web.log").read_text()
                raise RuntimeError(f"studio web did not start: {log_text}")
            time.sleep(0.3)
        yield base, {"Authorization": f"Bearer {token}"}
    finally:
        web.terminate()
        web.wait(30)
        log.close()


SEGMENTS = [
    {"source": "prompt", "text": "<think>", "tokens": 0},
    {"source": "model", "text": "I should look this up. </think><search>capital of the "
     "northern province</search>" * 2, "tokens": 60},
    {"source": "env", "text": "<information>Doc 1 (Title: Ondrell) " + "words of a passage "
     * 30 + "</information>", "tokens": 180},
    {"source": "model", "text": "<think>The passage says so.</think><answer>Ondrell</answer>",
     "tokens": 20},
]


def rollout_row(run_id: int, step: int, sample: int, rng: random.Random, stages: int) -> dict:
    stage = min(step * 3 // stages, 2) if stages else 0
    return {"run_id": run_id, "step": step, "group_index": 0, "sample_index": sample,
            "stage": stage, "exemplars": (3, 2, 0)[stage], "question": f"question {step}",
            "golden_answers": ["Ondrell"], "segments": SEGMENTS, "reward": rng.random(),
            "breakdown": {"acc": 1.0, "format": 1.0}, "advantage": rng.gauss(0, 1),
            "created_at": utcnow()}


# --- live: the writer here, the clients in a child process ----------------------------------


def step_rows(run_id: int, step: int, rng: random.Random) -> list[tuple[str, object]]:
    """One step as the trainer writes it: a metric row, a rollout every fifth step, a stage
    change every hundredth."""
    rows = [("metrics", RunMetric(run_id=run_id, step=step, values={"reward_mean": rng.random()}))]
    if step % 5 == 0:
        rows.append(("rollouts", Rollout(**rollout_row(run_id, step, 0, rng, 0))))
    if step % 100 == 0:
        rows.append(("events", RunEvent(run_id=run_id, step=step, kind="stage_change",
                                        message=f"stage at {step}")))
    return rows


def write_history(url: str, run_id: int, steps: int) -> list[tuple[str, int]]:
    """`steps` steps written a minute ago (so the stream has settled them): their keys."""
    rng, when, keys = random.Random(3), utcnow() - timedelta(seconds=60), []
    with db.session_scope(url) as session:
        for step in range(steps):
            rows = step_rows(run_id, step, rng)
            for _, row in rows:
                row.created_at = when
            session.add_all(row for _, row in rows)
            session.flush()
            keys += [(table, row.id) for table, row in rows]
    return keys


def write_live(url: str, run_id: int, first_step: int, seconds: float, written: dict):
    """One step per 1/10 s from `first_step`; `written[(table, id)]` = when its commit
    returned."""
    rng, step, start = random.Random(0), 0, time.monotonic()
    while time.monotonic() - start < seconds:
        with db.session_scope(url) as session:
            rows = step_rows(run_id, first_step + step, rng)
            session.add_all(row for _, row in rows)
            session.flush()
            keys = [(table, row.id) for table, row in rows]
        written.update(dict.fromkeys(keys, time.time()))
        step += 1
        time.sleep(max(0.0, start + step / 10 - time.monotonic()))


async def _open_stream(base: str, path: str, headers: dict):
    """GET `path` over a new HTTP/1.1 connection, plain asyncio (a client light enough that
    the measurement is the server's, as with browsers on other machines): (reader,
    writer) once the response headers were read; the status must be 200 and the body
    chunked, as a StreamingResponse's is."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: text/event-stream",
               *(f"{name}: {value}" for name, value in headers.items()), "", ""]
    writer.write("\r\n".join(request).encode())
    status = (await reader.readline()).decode()
    head = []
    while (line := await reader.readline()) not in (b"\r\n", b""):
        head.append(line.decode().lower())
    if " 200 " not in status or "transfer-encoding: chunked\r\n" not in head:
        writer.close()
        raise RuntimeError(f"the stream answered {status.strip()}")
    return reader, writer


async def _body_lines(reader, opening: dict, start: float):
    """The chunked body's lines, noting when its first byte came."""
    pending = b""
    while size := int((await reader.readline()).strip() or b"0", 16):
        pending += await reader.readexactly(size)
        await reader.readexactly(2)
        opening.setdefault("first_byte", time.monotonic() - start)
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode()


async def _client(base: str, path: str, headers: dict, hop_at: float | None, opening: dict,
                  receipts: list) -> None:
    """Follow until `end`, noting when the first response's headers, first byte, first
    event and `state` (caught up) came; when `hop_at` (seconds after the start) comes,
    disconnect once, wait 0.5 s and reconnect with the last event id."""
    last_id, start = None, time.monotonic()
    while True:
        hop = False
        extra = {"Last-Event-ID": last_id} if last_id else {}
        reader, writer = await _open_stream(base, path, {**headers, **extra})
        opening.setdefault("headers", time.monotonic() - start)
        try:
            async for event in _aparse(_body_lines(reader, opening, start)):
                last_id = event["id"]
                opening.setdefault("first_event", time.monotonic() - start)
                if event["event"] == "state":
                    opening.setdefault("caught_up", time.monotonic() - start)
                    opening.setdefault("caught_up_at", time.time())
                table = TABLE_OF_EVENT.get(event["event"])
                if table:
                    receipts.append((table, json.loads(event["data"])["id"], time.time()))
                if event["event"] == "end":
                    return
                if hop_at is not None and time.monotonic() - start > hop_at:
                    hop, hop_at = True, None
                    break
        finally:
            writer.close()
        if hop:
            await asyncio.sleep(0.5)


async def _aparse(lines):
    """parse_events over an async line iterator, one event at a time."""
    buffer: list[str] = []
    async for line in lines:
        buffer.append(line)
        if line == "":
            for event in parse_events(buffer):
                yield event
            buffer = []


async def _clients(base: str, headers: dict, run_id: int, clients: int, seconds: float):
    path = f"/api/v1/runs/{run_id}/events"
    rng = random.Random(1)
    openings = [{} for _ in range(clients)]
    receipts = [[] for _ in range(clients)]
    await asyncio.gather(*(_client(
        base, path, headers, rng.uniform(0.2, 0.8) * seconds if i % 2 else None,
        openings[i], receipts[i]) for i in range(clients)))
    return openings, receipts


def clients_main(args: list[str]) -> int:
    """The child process: say `ready`, wait for a line on stdin, then follow the run with N
    clients and print what they got."""
    base, headers, run_id, clients, seconds = json.loads(args[0])
    print("ready", flush=True)
    sys.stdin.readline()
    openings, receipts = asyncio.run(_clients(base, headers, run_id, clients, seconds))
    print(json.dumps({"openings": openings, "receipts": receipts}), flush=True)
    return 0


def measure_live(url: str, base: str, headers: dict, clients: int, seconds: float,
                 history_steps: int) -> dict:
    run_id = new_run(url, "live", RunState.running)
    history = write_history(url, run_id, history_steps)
    proc = subprocess.Popen(
        [sys.executable, __file__, "_clients", json.dumps([base, headers, run_id, clients,
                                                           seconds - 2])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the SSE clients' process did not start")
    written: dict = {}
    writer = threading.Thread(target=write_live,
                              args=(url, run_id, history_steps, seconds, written))
    writer.start()
    time.sleep(2)  # the clients join a run that is writing
    proc.stdin.write("go\n")
    proc.stdin.flush()
    writer.join()
    set_state(url, run_id, RunState.succeeded)
    got = json.loads(proc.stdout.readline())
    proc.wait(60)
    expected = set(history) | set(written)
    latencies, lost, duplicates = [], 0, 0
    for i, (opening, receipts) in enumerate(zip(got["openings"], got["receipts"], strict=True)):
        keys = [(table, row_id) for table, row_id, _ in receipts]
        lost += len(expected - set(keys))
        duplicates += len(keys) - len(set(keys))
        if i % 2 == 0:  # the clients that never disconnect
            latencies += [t - written[(table, row_id)] for table, row_id, t in receipts
                          if written.get((table, row_id), 0) > opening["caught_up_at"]]
    latencies.sort()
    opened = {key: sorted(o[key] for o in got["openings"])
              for key in ("headers", "first_byte", "first_event", "caught_up")}
    return {"clients": clients, "seconds": seconds, "history": len(history),
            "rows": len(written), "events": sum(len(r) for r in got["receipts"]),
            "p50": _pct(latencies, 50), "p95": _pct(latencies, 95), "p99": _pct(latencies, 99),
            "max": latencies[-1] if latencies else float("nan"),
            "lost": lost, "duplicates": duplicates,
            "opening": {key: (statistics.median(v), _pct(v, 95), v[-1])
                        for key, v in opened.items()}}


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(pct / 100 * (len(values) - 1)))]


# --- pages -------------------------------------------------------------------------------------


def store_rollouts(url: str, count: int) -> tuple[int, float]:
    """`count` rollouts (4 per step, three stages) in one run; (run id, seconds it took)."""
    run_id, rng, start = new_run(url, "stored", RunState.succeeded), random.Random(2), time.time()
    steps = count // 4
    batch = []
    for i in range(count):
        batch.append(rollout_row(run_id, i // 4, i % 4, rng, steps))
        if len(batch) == 5000 or i == count - 1:
            with db.session_scope(url) as session:
                session.execute(insert(Rollout), batch)
            batch = []
    return run_id, time.time() - start


def measure_pages(url: str, data_dir: Path, base: str, headers: dict, count: int,
                  repeats: int) -> list[dict]:
    run_id, took = store_rollouts(url, count)
    if url.startswith("postgresql"):  # what autovacuum does within a minute of a bulk insert
        with db.engine_for(url).connect().execution_options(
                isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE rollouts")
    steps = count // 4
    with db.session_scope(url) as session:
        middle = session.execute(select(Rollout.id, Rollout.step).where(Rollout.run_id == run_id)
                                 .order_by(Rollout.id).offset(count // 2).limit(1)).one()
    cursor, detail = f"{middle.step}.{middle.id}", middle.id
    settings = Settings(data_dir=data_dir, database_url=url)
    path = f"/api/v1/runs/{run_id}/rollouts"

    def page(**kw):
        filters = RolloutFilter(**{k: v for k, v in kw.items() if k not in ("cursor", "offset")})
        return lambda: run_history.rollout_page(settings, run_id, filters, cursor=kw.get(
            "cursor"), offset=kw.get("offset", 0))

    kinds = [
        ("newest 50", path, {}),
        ("50 after a cursor half-way", path, {"cursor": cursor}),
        (f"50 at offset {count // 2:,}", path, {"offset": count // 2}),
        ("step range (10 steps)", path, {"step_min": steps // 3, "step_max": steps // 3 + 9}),
        ("stage = 0 (the oldest)", path, {"stage": 0}),
        ("exemplars = 2", path, {"exemplars": 2}),
        ("reward 0.9-1.0", path, {"reward_min": 0.9, "reward_max": 1.0}),
    ]
    calls = [(name, where, params, page(**params)) for name, where, params in kinds]
    calls += [("one rollout's segments", f"{path}/{detail}", {},
               lambda: run_history.rollout_detail(settings, run_id, detail)),
              ("baseline: the run itself", f"/api/v1/runs/{run_id}", {},
               lambda: runs.get_run(settings, run_id))]
    rows = []
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for name, where, params, call in calls:
            http.get(where, params=params).raise_for_status()  # warm
            over_http, in_process = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                http.get(where, params=params).raise_for_status()
                t1 = time.perf_counter()
                call()
                over_http.append((t1 - t0) * 1000)
                in_process.append((time.perf_counter() - t1) * 1000)
            rows.append({"page": name, "http": _summary(over_http),
                         "service": _summary(in_process), "insert_s": took})
    return rows


def _summary(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), _pct(times, 95)


# --- the tables --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_clients":
        return clients_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--history", type=int, default=1000,
                        help="steps the run has written before the clients join")
    parser.add_argument("--baseline", type=Path, help="another checkout of the studio (a git "
                        "worktree of an older commit): its web app's live stream is measured "
                        "too, side by side, on the same databases")
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--smoke", action="store_true",
                        help="4 clients for 4 s, 50 steps of history, 2,000 rollouts, 3 repeats")
    args = parser.parse_args(argv)
    if args.smoke:
        args.clients, args.seconds, args.history, args.stored, args.repeats = 4, 4, 50, 2000, 3
    live, pages = [], []
    apps = [("", ROOT)] + ([(" (baseline)", args.baseline.resolve())] if args.baseline else [])
    for kind in args.databases.split(","):
        for label, root in apps:
            with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp, \
                    database(kind, Path(tmp)) as url, \
                    web_app(url, Path(tmp), root) as (base, headers):
                live.append({"database": kind + label, **measure_live(
                    url, base, headers, args.clients, args.seconds, args.history)})
                if not label:
                    pages += [{"database": kind, **row} for row in measure_pages(
                        url, Path(tmp), base, headers, args.stored, args.repeats)]
    print(f"\n## Live stream: {args.clients} SSE clients join a run with {args.history:,} "
          f"steps of history, 10 metric rows + 2 rollouts a second for {args.seconds:g} s "
          "(half reconnect once)\n")
    print("| database | history rows | rows written | events received | latency p50 ms | "
          "p95 ms | p99 ms | max ms | lost | duplicates |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in live:
        print(f"| {r['database']} | {r['history']:,} | {r['rows']:,} | {r['events']:,} | "
              f"{r['p50'] * 1000:.0f} | {r['p95'] * 1000:.0f} | {r['p99'] * 1000:.0f} | "
              f"{r['max'] * 1000:.0f} | {r['lost']} | {r['duplicates']} |")
    print(f"\n## Opening the stream: {args.clients} clients at once, from the request\n")
    print("| database | to | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    names = {"headers": "response headers", "first_byte": "first byte (time to first byte)",
             "first_event": "first event", "caught_up": "caught up (the state after the "
             "history)"}
    for r in live:
        for key, name in names.items():
            p50, p95, most = r["opening"][key]
            print(f"| {r['database']} | {name} | {p50 * 1000:.0f} | {p95 * 1000:.0f} | "
                  f"{most * 1000:.0f} |")
    print(f"\n## Rollout pages: {args.stored:,} stored, 50 per page with the filtered total, "
          f"{args.repeats} requests each\n")
    print("| database | page | HTTP p50 ms | HTTP p95 ms | service p50 ms | service p95 ms |")
    print("|---|---|---|---|---|---|")
    for r in pages:
        print(f"| {r['database']} | {r['page']} | {r['http'][0]:.1f} | {r['http'][1]:.1f} | "
              f"{r['service'][0]:.1f} | {r['service'][1]:.1f} |")
    for kind in dict.fromkeys(r["database"] for r in pages):
        took = next(r["insert_s"] for r in pages if r["database"] == kind)
        print(f"\n({kind}: storing {args.stored:,} rollouts took {took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
