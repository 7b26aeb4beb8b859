"""A run's live stream over a real HTTP server, on SQLite and PostgreSQL: a writer inserts
metrics, rollouts, events and state changes while clients read, disconnect and reconnect
with Last-Event-ID; together they receive everything written, exactly once, in order."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from sqlalchemy import event as sqlalchemy_event
from sqlalchemy import text
from sqlmodel import delete

from studio.api.app import create_api
from studio.services import auth
from studio.services.errors import InvalidInput
from studio.services.run_streams import RunStreams, StreamCursor, StreamOptions, TableCursor
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric, RunState, utcnow
from tests.support.sse import new_run, parse_events, serving, set_state

FAST = StreamOptions(poll_seconds=0.05, settle_seconds=1.5, keepalive_seconds=0.5, batch=7)
TABLE_OF = {"metric": RunMetric, "rollout": Rollout, "stage_change": RunEvent,
            "warning": RunEvent, "info": RunEvent}


def _served(url: str, tmp_path):
    """(settings, base URL, auth headers) of an API served over HTTP on the migrated
    database."""
    settings = Settings(data_dir=tmp_path / "data", database_url=url)
    settings.resolved_data_dir.mkdir(parents=True)
    with db.session_scope(url) as session:
        token = auth.bootstrap_admin(session).token
    app = create_api(settings)
    app.state.run_streams = RunStreams(url, FAST)
    with serving(app) as base:
        yield settings, base, {"Authorization": f"Bearer {token}"}


@pytest.fixture
def studio(migrated_db_url, tmp_path):
    yield from _served(migrated_db_url, tmp_path)


def write_step(url: str, run_id: int, step: int) -> None:
    """One step as the trainer writes it: a metric row and, every other step, two rollouts;
    a stage change every tenth step and a warning now and then."""
    with db.session_scope(url) as session:
        session.add(RunMetric(run_id=run_id, step=step, values={"reward_mean": step / 10}))
        if step % 2 == 0:
            session.add_all(Rollout(run_id=run_id, step=step, sample_index=i, question=f"q{step}",
                                    segments=[{"source": "model", "text": "x", "tokens": 1}],
                                    reward=i / 2) for i in range(2))
        session.get(Run, run_id).current_step = step + 1
    if step % 10 == 0:
        with db.session_scope(url) as session:
            session.add(RunEvent(run_id=run_id, step=step, kind="stage_change",
                                 message=f"stage at {step}"))
    if step % 7 == 3:
        with db.session_scope(url) as session:
            session.add(RunEvent(run_id=run_id, step=step, kind="warning", message="careful"))


def written(url: str, run_id: int) -> dict[str, list[int]]:
    with db.session_scope(url) as session:
        return {t.__tablename__: list(session.exec(
            text(f"SELECT id FROM {t.__tablename__} WHERE run_id = {run_id} ORDER BY id")
        ).scalars()) for t in (RunMetric, Rollout, RunEvent)}


def follow(base, headers, run_id, received: list, *, stop_after: int | None = None,
           last_event_id: str | None = None, by_query: bool = False) -> str | None:
    """Read the stream into `received` until it ends (or `stop_after` events); the last id."""
    params, hdrs = {}, dict(headers)
    if last_event_id and by_query:
        params["last_event_id"] = last_event_id
    elif last_event_id:
        hdrs["Last-Event-ID"] = last_event_id
    last = last_event_id
    with httpx.stream("GET", f"{base}/api/v1/runs/{run_id}/events", headers=hdrs,
                      params=params, timeout=30) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in parse_events(response.iter_lines()):
            received.append((event["event"], json.loads(event["data"])))
            last = event["id"]
            if event["event"] == "end" or (stop_after and len(received) >= stop_after):
                break
    return last


def ids_by_table(received) -> dict[str, list[int]]:
    out = {"run_metrics": [], "rollouts": [], "run_events": []}
    for kind, data in received:
        if kind in TABLE_OF:
            out[TABLE_OF[kind].__tablename__].append(data["id"])
    return out


def test_reconnecting_clients_get_everything_exactly_once_in_order(studio):
    settings, base, headers = studio
    url = settings.sqlalchemy_url
    run_id = new_run(url)

    def writer():
        time.sleep(0.3)
        set_state(url, run_id, RunState.running)
        for step in range(40):
            write_step(url, run_id, step)
            time.sleep(0.02)
        set_state(url, run_id, RunState.succeeded)

    thread = threading.Thread(target=writer)
    thread.start()
    steady, hopping = [], []
    follower = threading.Thread(target=follow, args=(base, headers, run_id, steady))
    follower.start()
    last = follow(base, headers, run_id, hopping, stop_after=15)  # disconnects mid-stream
    time.sleep(0.2)
    last = follow(base, headers, run_id, hopping, stop_after=40, last_event_id=last)
    time.sleep(0.2)
    last = follow(base, headers, run_id, hopping, last_event_id=last, by_query=True)
    thread.join()
    follower.join(30)

    expected = written(url, run_id)
    assert len(expected["run_metrics"]) == 40 and len(expected["rollouts"]) == 40
    for received in (steady, hopping):
        assert ids_by_table(received) == expected, "every row once, in id order"
        states = [data["state"] for kind, data in received if kind == "state"]
        assert states[0] in ("queued", "running") and states[-1] == "succeeded"
        assert len(states) == len(set(states)), "each state change once"
        assert [kind for kind, _ in received[-2:]] == ["state", "end"], "the final state last"
        metric = next(data for kind, data in received if kind == "metric" and data["step"] == 5)
        assert metric["reward_mean"] == 0.5 and "segments" not in next(
            data for kind, data in received if kind == "rollout")

    # a client that comes back after the end gets the end again, and nothing else
    again = []
    follow(base, headers, run_id, again, last_event_id=last)
    assert [kind for kind, _ in again] == ["end"]


def test_steps_a_resumed_run_writes_again_reach_a_client_that_saw_the_first_ones(studio):
    """A resumed attempt deletes the rows after its checkpoint and writes those steps again:
    the new rows have new ids (SQLite included, migration 0005), so a client resuming from
    its cursor gets them."""
    settings, base, headers = studio
    url = settings.sqlalchemy_url
    run_id = new_run(url)
    set_state(url, run_id, RunState.running)
    for step in range(6):
        write_step(url, run_id, step)
    first = []
    last = follow(base, headers, run_id, first, stop_after=1 + 6 + 6 + 2)  # state, rows
    assert sorted(d["step"] for k, d in first if k == "metric") == list(range(6))
    with db.session_scope(url) as session:
        for table in (RunMetric, Rollout, RunEvent):
            session.exec(delete(table).where(table.run_id == run_id, table.step >= 3))
    for step in range(3, 6):
        write_step(url, run_id, step)
    set_state(url, run_id, RunState.succeeded)
    again = []
    follow(base, headers, run_id, again, last_event_id=last)
    assert [d["step"] for k, d in again if k == "metric"] == [3, 4, 5]
    assert [d["step"] for k, d in again if k == "rollout"] == [4, 4]


@pytest.mark.parametrize("migrated_db_url", ["postgresql"], indirect=True)
def test_a_row_committed_after_a_larger_id_was_sent_still_arrives(studio):
    """Two writers at once, the smaller id committing last: PostgreSQL lets this happen
    (SQLite has one writer at a time, so its ids commit in order)."""
    settings, base, headers = studio
    url = settings.sqlalchemy_url
    run_id = new_run(url)
    set_state(url, run_id, RunState.running)
    engine = db.engine_for(url)
    slow = engine.connect()
    slow_tx = slow.begin()
    slow.execute(RunEvent.__table__.insert().values(run_id=run_id, step=1, kind="info",
                                                    message="slow", created_at=utcnow()))
    with db.session_scope(url) as session:
        session.add(RunEvent(run_id=run_id, step=2, kind="info", message="fast"))

    steady = []
    follower = threading.Thread(target=follow, args=(base, headers, run_id, steady))
    follower.start()
    first = []
    last = follow(base, headers, run_id, first, stop_after=2)  # the fast one and the state
    assert [d["message"] for k, d in first if k == "info"] == ["fast"]
    slow_tx.commit()
    slow.close()
    later = []
    time.sleep(0.3)
    set_state(url, run_id, RunState.cancelled)
    follow(base, headers, run_id, later, last_event_id=last)
    follower.join(30)
    assert [d["message"] for k, d in later if k == "info"] == ["slow"]
    assert sorted(d["message"] for k, d in steady if k == "info") == ["fast", "slow"]


def test_bad_requests_answer_before_the_stream_starts(studio):
    settings, base, headers = studio
    run_id = new_run(settings.sqlalchemy_url)
    with httpx.Client(base_url=f"{base}/api/v1", headers=headers, timeout=10) as client:
        assert client.get("/runs/999/events").status_code == 404
        bad = client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "nonsense"})
        assert bad.status_code == 422 and "Last-Event-ID" in bad.json()["detail"]
        assert client.get(f"/runs/{run_id}/events",
                          headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(f"/runs/{run_id}/events/history").json() == []


def test_cursor_text_round_trips_and_rejects_what_is_not_one():
    cursor = StreamCursor("running", (TableCursor(12), TableCursor(340, frozenset({341, 342, 345})),
                                      TableCursor()))
    assert cursor.encode() == "running.12.340-1-1-3.0"
    assert StreamCursor.decode(cursor.encode()) == cursor
    assert TableCursor(5, frozenset({7, 9})).merge(TableCursor(8, frozenset({10}))) == \
        TableCursor(8, frozenset({9, 10}))
    assert TableCursor(5, frozenset({7, 9})).settle(7) == TableCursor(7, frozenset({9}))
    for bad in ("", "running.1.2", "flying.1.2.3", "running.1.2-0.3", "running.a.2.3",
                "running.-1.2.3"):
        with pytest.raises(InvalidInput):
            StreamCursor.decode(bad)


def test_a_client_that_falls_out_of_the_log_catches_up_from_the_database(migrated_db_url, tmp_path):
    """The feed keeps few items (retain=8); a client that stops reading while 30 steps are
    written resumes from the database and still gets each row once."""
    run_id = new_run(migrated_db_url)
    set_state(migrated_db_url, run_id, RunState.running)
    options = StreamOptions(poll_seconds=0.02, settle_seconds=0.5, keepalive_seconds=0.2,
                            batch=5, retain=8)

    async def scenario() -> list:
        streams = RunStreams(migrated_db_url, options)
        stream = streams.events(run_id, StreamCursor())
        frames = [await anext(stream), await anext(stream)]  # retry:, then the state
        feed = streams.feeds[run_id]
        for step in range(30):
            await asyncio.to_thread(write_step, migrated_db_url, run_id, step)
        while feed.base == 0:  # the feed dropped items this client never read
            await asyncio.sleep(0.02)
        await asyncio.to_thread(set_state, migrated_db_url, run_id, RunState.failed)
        async for text_ in stream:
            frames.append(text_)
        assert run_id not in streams.feeds, "the feed stops with its last client"
        return frames

    received = [(e["event"], json.loads(e["data"])) for e in parse_events(
        "".join(asyncio.run(scenario())).split("\n"))]
    assert ids_by_table(received) == written(migrated_db_url, run_id)
    assert [k for k, _ in received[-2:]] == ["state", "end"]


def test_a_client_joining_a_followed_run_replays_the_feed_without_a_query(migrated_db_url):
    """Opening a stream does not wait behind other clients' reads: once a feed follows the
    run, a new client's check and its whole history come from the feed, with no query of
    its own (the poller sleeps meanwhile)."""
    run_id = new_run(migrated_db_url)
    set_state(migrated_db_url, run_id, RunState.running)
    for step in range(20):
        write_step(migrated_db_url, run_id, step)
    options = StreamOptions(poll_seconds=60, settle_seconds=0.5, keepalive_seconds=0.2, batch=7)

    async def until_state(stream) -> str:
        text_ = ""
        while "event: state" not in text_:
            text_ += await anext(stream)
        return text_

    async def scenario() -> tuple[str, list[str]]:
        streams = RunStreams(migrated_db_url, options)
        first = streams.events(run_id, await streams.check(run_id, None))
        await until_state(first)
        queries: list[str] = []

        def note(_conn, _cursor, statement, *_args) -> None:
            queries.append(statement)

        engine = db.engine_for(migrated_db_url)
        sqlalchemy_event.listen(engine, "before_cursor_execute", note)
        try:
            second = streams.events(run_id, await streams.check(run_id, None))
            received = await until_state(second)
        finally:
            sqlalchemy_event.remove(engine, "before_cursor_execute", note)
        await second.aclose()
        await first.aclose()
        return received, queries

    received, queries = asyncio.run(scenario())
    assert queries == []
    events = [(e["event"], json.loads(e["data"])) for e in parse_events(received.split("\n"))]
    assert ids_by_table(events) == written(migrated_db_url, run_id)
    assert [kind for kind, _ in events].count("state") == 1
