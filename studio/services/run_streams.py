"""A run's live stream as Server-Sent Events: metric rows, new rollouts, its events (stage
changes, warnings, notes) and state changes, resumable from the id of any event.

Every event's id is a cursor: the last state sent and, per table (events, metrics,
rollouts), `after` (every row of the run with an id up to it was sent) plus the ids above
it already sent. A client that reconnects with it (`Last-Event-ID`) gets exactly what it
missed: nothing twice, nothing lost.

Why not simply the last id sent: a row takes its id when it is inserted and becomes
visible when its transaction commits, so with two writers at once (PostgreSQL; SQLite
has one writer at a time) a smaller id can show up after a larger one was sent. An id
therefore moves into `after` only once it has been seen for `settle_seconds`; the
assumption is that a transaction commits within that time of its insert (the trainer
commits one step in milliseconds).

One poller per followed run and process (`RunFeed`) reads the run from its start (the
history in batches, then what is new: one query on the run row, one id query per table,
rows fetched only when there are new ids) and appends it to a log that every client of
the run reads, so a hundred clients cost one poller and no query of their own: a client
that connects or reconnects replays the log, skipping what it has, and follows it. Only
a client of a run whose log has dropped its start (a long run) catches up from the
database from its own cursor first.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy import select

from studio.jobs.lifecycle import FINAL_STATES, RunState
from studio.services.errors import InvalidInput, NotFound
from studio.services.run_history import (
    ROLLOUT_SUMMARY_COLUMNS,
    event_view,
    metric_view,
    rollout_summary,
)
from studio.storage.db import session_scope
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric, utcnow

log = logging.getLogger(__name__)

RETRY_MS = 2000  # how long EventSource waits before it reconnects


# --- the cursor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TableCursor:
    """Rows of one table sent: every id <= `after`, and `seen` (ids above it)."""

    after: int = 0
    seen: frozenset[int] = frozenset()

    def has(self, row_id: int) -> bool:
        return row_id <= self.after or row_id in self.seen

    def add(self, row_id: int) -> TableCursor:
        return self if self.has(row_id) else TableCursor(self.after, self.seen | {row_id})

    def settle(self, upto: int) -> TableCursor:
        """Every row up to `upto` that will ever exist has been sent."""
        if upto <= self.after:
            return self
        return TableCursor(upto, frozenset(i for i in self.seen if i > upto))

    def merge(self, other: TableCursor) -> TableCursor:
        after = max(self.after, other.after)
        return TableCursor(after, frozenset(i for i in self.seen | other.seen if i > after))

    def encode(self) -> str:
        """`after` then the gaps between the seen ids: `340-1-1-3` is 340 and 341, 342, 345."""
        parts, previous = [str(self.after)], self.after
        for row_id in sorted(self.seen):
            parts.append(str(row_id - previous))
            previous = row_id
        return "-".join(parts)

    @classmethod
    def decode(cls, text: str) -> TableCursor:
        numbers = [int(p) for p in text.split("-")]  # ValueError on anything else
        if numbers[0] < 0 or any(gap <= 0 for gap in numbers[1:]):
            raise ValueError(text)
        seen, row_id = [], numbers[0]
        for gap in numbers[1:]:
            row_id += gap
            seen.append(row_id)
        return cls(numbers[0], frozenset(seen))


@dataclass(frozen=True)
class StreamCursor:
    """What one client has been sent; its text is the id of the event that completed it."""

    state: str | None = None
    tables: tuple[TableCursor, ...] = (TableCursor(),) * 3

    def encode(self) -> str:
        return ".".join([self.state or "_", *(t.encode() for t in self.tables)])

    @classmethod
    def decode(cls, text: str) -> StreamCursor:
        parts = text.strip().split(".")
        try:
            if len(parts) != 4 or (parts[0] != "_" and parts[0] not in RunState.__members__):
                raise ValueError(text)
            return cls(None if parts[0] == "_" else parts[0],
                       tuple(TableCursor.decode(p) for p in parts[1:]))
        except ValueError:
            raise InvalidInput(
                f"Last-Event-ID: {text[:80]!r} is not an event id of this stream; reconnect "
                "without it to receive the run from its start") from None

    def has(self, table: int, row_id: int) -> bool:
        return self.tables[table].has(row_id)

    def _with_table(self, table: int, cursor: TableCursor) -> StreamCursor:
        return replace(self, tables=self.tables[:table] + (cursor,) + self.tables[table + 1:])

    def add(self, table: int, row_id: int) -> StreamCursor:
        return self._with_table(table, self.tables[table].add(row_id))

    def settle(self, table: int, upto: int) -> StreamCursor:
        settled = self.tables[table].settle(upto)
        return self if settled is self.tables[table] else self._with_table(table, settled)

    def merge_rows(self, other: StreamCursor) -> StreamCursor:
        """The rows of both; the state stays this cursor's (the last one this client got)."""
        return replace(self, tables=tuple(
            a.merge(b) for a, b in zip(self.tables, other.tables, strict=True)))


# --- reading the tables -------------------------------------------------------------------


@dataclass(frozen=True)
class StreamTable:
    model: type
    columns: tuple
    view: Callable[[object], dict]
    event: Callable[[dict], str]  # the SSE event type of a row


# the cursor's table order
TABLES = (
    StreamTable(RunEvent, (RunEvent.id, RunEvent.step, RunEvent.kind, RunEvent.message,
                           RunEvent.data, RunEvent.created_at),
                event_view, lambda row: row["kind"] if row["kind"].isidentifier() else "info"),
    StreamTable(RunMetric, (RunMetric.id, RunMetric.step, RunMetric.stage, RunMetric.exemplars,
                            RunMetric.values, RunMetric.created_at),
                metric_view, lambda _row: "metric"),
    StreamTable(Rollout, ROLLOUT_SUMMARY_COLUMNS, rollout_summary, lambda _row: "rollout"),
)
EVENTS_TABLE, METRICS_TABLE = 0, 1  # their places in TABLES (and in a cursor)


@dataclass
class NewRow:
    table: int
    id: int
    created_at: datetime
    event: str
    data: dict


@dataclass
class Snapshot:
    """The run row and the rows a cursor lacks, each table in id order."""

    run: dict | None  # None: the run does not exist (any more)
    rows: list[list[NewRow]]
    bounds: list[int | None]  # per table: the last id read when more wait, else None

    @property
    def drained(self) -> bool:
        return all(b is None for b in self.bounds)

    def in_time_order(self):
        """All tables interleaved by creation time, each table still in id order."""
        return heapq.merge(*self.rows, key=lambda r: r.created_at)


def _run_view(run) -> dict | None:
    if run is None:
        return None
    return {"state": str(getattr(run.state, "value", run.state)),
            "current_step": run.current_step, "total_steps": run.total_steps,
            "error": run.error, "finished_at": run.finished_at}


def read_new(url: str, run_id: int, cursor: StreamCursor, limit: int) -> Snapshot:
    """The run row first, then per table up to `limit` rows the cursor lacks (ids first:
    an index-only query; the rows only when there are new ids)."""
    with session_scope(url) as session:
        run = session.execute(select(Run.state, Run.current_step, Run.total_steps, Run.error,
                                     Run.finished_at).where(Run.id == run_id)).first()
        rows, bounds = [], []
        for index, table in enumerate(TABLES):
            sent = cursor.tables[index]
            want = limit + len(sent.seen)
            ids = session.execute(select(table.model.id)
                                  .where(table.model.run_id == run_id,
                                         table.model.id > sent.after)
                                  .order_by(table.model.id).limit(want)).scalars().all()
            bounds.append(ids[-1] if len(ids) == want else None)
            new = [i for i in ids if i not in sent.seen]
            found = session.execute(select(*table.columns).where(table.model.id.in_(new))
                                    .order_by(table.model.id)).all() if new else []
            rows.append([_new_row(index, table, r) for r in found])
    return Snapshot(_run_view(run), rows, bounds)


def _new_row(index: int, table: StreamTable, row) -> NewRow:
    data = table.view(row)
    return NewRow(index, row.id, row.created_at, table.event(data), data)


class Settler:
    """Moves ids into a cursor's `after` once they were first seen `seconds` ago: nothing
    smaller can still commit then (the module docstring says why)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.first_seen: list[dict[int, float]] = [{} for _ in TABLES]

    def seen(self, table: int, row_id: int, now: float) -> None:
        self.first_seen[table].setdefault(row_id, now)

    def settle(self, cursor: StreamCursor, now: float) -> StreamCursor:
        for index, first_seen in enumerate(self.first_seen):
            settled = [i for i, t in first_seen.items() if now - t >= self.seconds]
            if settled:
                upto = max(settled)
                cursor = cursor.settle(index, upto)
                self.first_seen[index] = {i: t for i, t in first_seen.items() if i > upto}
        return cursor


# --- the log one poller writes and every client reads ---------------------------------------


def _frame(event: str, data_json: str, cursor: StreamCursor) -> str:
    return f"id: {cursor.encode()}\nevent: {event}\ndata: {data_json}\n\n"


@dataclass
class LogItem:
    kind: str  # row | state | end
    event: str
    data_json: str
    cursor: StreamCursor  # the feed's cursor once this item was sent
    table: int = -1
    row_id: int = 0
    state: str | None = None
    frame: str = field(init=False)

    def __post_init__(self) -> None:
        self.frame = _frame(self.event, self.data_json, self.cursor)


def _json(data: dict) -> str:
    return json.dumps(data, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))


@dataclass(frozen=True)
class StreamOptions:
    poll_seconds: float = 0.2  # how often a followed run is read
    settle_seconds: float = 5.0  # a transaction commits within this time of its insert
    keepalive_seconds: float = 10.0  # a comment line when nothing happened
    batch: int = 500  # rows per table per read when a client catches up
    retain: int = 20_000  # at most this many log items kept for clients that fall behind


class RunFeed:
    """Follows one run for every client of this process: reads what is new each tick and
    appends it to a log; the feed's own cursor says what the log holds."""

    def __init__(self, url: str, run_id: int, options: StreamOptions):
        self.url, self.run_id, self.options = url, run_id, options
        self.log: list[LogItem] = []
        self.base = 0  # position of log[0] since the feed started
        self.cursor = StreamCursor()
        self.finished = False  # the poller stopped
        self.ended = False  # ... after appending the end item
        self.clients = 0
        self._changed = asyncio.Event()
        self.settler = Settler(options.settle_seconds)
        self._final_since: float | None = None
        self.task: asyncio.Task | None = None

    @property
    def end(self) -> int:
        return self.base + len(self.log)

    def items_since(self, position: int) -> list[LogItem] | None:
        """The items from `position` on; None when they were dropped (catch up again)."""
        if position < self.base:
            return None
        return self.log[position - self.base:]

    async def wait(self, position: int, timeout: float) -> bool:
        """True once the log holds items from `position` on, False after `timeout`."""
        if self.end > position or self.finished:
            return True
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def follow(self) -> None:
        try:
            await self._follow()
        except Exception:  # clients see the stream close and reconnect to a new feed
            log.exception("run %s: the stream's poller stopped", self.run_id)
        finally:
            self.finished = True
            self._notify()

    async def _follow(self) -> None:
        while not self.finished:
            try:
                snapshot = await asyncio.to_thread(read_new, self.url, self.run_id,
                                                   self.cursor, self.options.batch)
            except Exception:  # the database is away: keep clients waiting, retry
                log.exception("run %s: reading the stream failed; retrying", self.run_id)
                await asyncio.sleep(1.0)
                continue
            self._take(snapshot, time.monotonic())
            if snapshot.drained and not self.finished:
                await asyncio.sleep(self.options.poll_seconds)

    def _take(self, snapshot: Snapshot, now: float) -> None:
        """Append the rows read (the history comes in batches); the state, the settled ids
        and the end once the feed has everything visible."""
        items = []
        old = utcnow().timestamp() - 2 * self.options.settle_seconds
        for row in snapshot.in_time_order():
            if row.created_at.timestamp() <= old:  # nothing smaller can still commit
                self.cursor = self.cursor.settle(row.table, row.id)
            else:
                self.settler.seen(row.table, row.id, now)
                self.cursor = self.cursor.add(row.table, row.id)
            items.append(LogItem("row", row.event, _json(row.data), self.cursor,
                                 table=row.table, row_id=row.id))
        if snapshot.drained:
            run = snapshot.run
            if run is not None and run["state"] != self.cursor.state:
                self.cursor = replace(self.cursor, state=run["state"])
                items.append(LogItem("state", "state", _json(run), self.cursor,
                                     state=run["state"]))
            self.cursor = self.settler.settle(self.cursor, now)
            self._check_end(run, now, items)
        self._append(items)

    def _check_end(self, run: dict | None, now: float, items: list[LogItem]) -> None:
        """The stream ends `settle_seconds` after a final state (rows committing behind it
        still come), or at once when the run is gone."""
        if run is not None and run["state"] not in FINAL_STATES:
            self._final_since = None
            return
        if run is not None and self._final_since is None:
            finished = run["finished_at"]
            age = (utcnow() - finished).total_seconds() if finished else 0.0
            self._final_since = now - max(age, 0.0)
        if run is None or now - self._final_since >= self.options.settle_seconds:
            state = run["state"] if run else None
            items.append(LogItem("end", "end", _json({"state": state}), self.cursor,
                                 state=state))
            self.finished = self.ended = True

    def _append(self, items: list[LogItem]) -> None:
        if not items:
            return
        self.log.extend(items)
        if len(self.log) > self.options.retain:  # drop the older half at once
            dropped = len(self.log) - self.options.retain // 2
            del self.log[:dropped]
            self.base += dropped
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


# --- what one client receives ---------------------------------------------------------------


def catch_up(cursor: StreamCursor, snapshot: Snapshot,
             stable: StreamCursor) -> tuple[list[str], StreamCursor]:
    """Frames for the rows (then the state) a client lacks, read straight from the database.

    The client now has every row visible at the read up to `bounds` (all when drained);
    of those, ids up to the feed's settled `after` can move into the client's `after`.
    """
    frames = []
    limits = [s.after if b is None else min(b, s.after)
              for b, s in zip(snapshot.bounds, stable.tables, strict=True)]
    for row in snapshot.in_time_order():
        cursor = cursor.settle(row.table, row.id) if row.id <= limits[row.table] \
            else cursor.add(row.table, row.id)
        frames.append(_frame(row.event, _json(row.data), cursor))
    for index, limit in enumerate(limits):
        cursor = cursor.settle(index, limit)
    run = snapshot.run
    if snapshot.drained and run is not None and run["state"] != cursor.state:
        cursor = replace(cursor, state=run["state"])
        frames.append(_frame("state", _json(run), cursor))
    return frames, cursor


def replay(cursor: StreamCursor, items: list[LogItem],
           previous: StreamCursor | None) -> tuple[list[str], StreamCursor, bool]:
    """Frames for the log items a client lacks; True when the stream ended.

    A client in step with the feed (its cursor is the previous item's) takes each item's
    frame as it is. One that is not (it reconnected, or caught up from the database) first
    passes over the items up to the first row it lacks, taking only the latest state among
    them if it differs from its own; from there it gets each row it lacks and each change
    of state, its cursor merged with the feed's.
    """
    frames: list[str] = []
    if cursor is not previous:
        known = next((i for i, item in enumerate(items)
                      if item.kind == "row" and not cursor.has(item.table, item.row_id)),
                     len(items))
        if known:
            frames, cursor = _pass_known(cursor, items[:known])
            if items[known - 1].kind == "end":
                return [*frames, items[known - 1].frame], cursor, True
            previous, items = items[known - 1].cursor, items[known:]
    for item in items:
        if item.kind == "row":
            send = not cursor.has(item.table, item.row_id)
        else:
            send = item.kind == "end" or item.state != cursor.state
        if cursor is previous:
            cursor = item.cursor
        elif send:
            cursor = _merged(cursor, item.cursor, item.state if item.kind == "state" else None)
        if send:
            frames.append(item.frame if cursor is item.cursor
                          else _frame(item.event, item.data_json, cursor))
        if item.kind == "end":
            return frames, cursor, True
        previous = item.cursor
    return frames, cursor, False


def _pass_known(cursor: StreamCursor, known: list[LogItem]) -> tuple[list[str], StreamCursor]:
    """A client that has every row of `known`: the latest state among them if it is not the
    client's, and its cursor merged with the feed's after them."""
    latest = next((item for item in reversed(known) if item.kind == "state"), None)
    if latest is None or latest.state == cursor.state:
        return [], _merged(cursor, known[-1].cursor)
    cursor = _merged(cursor, known[-1].cursor, latest.state)
    return [_frame("state", latest.data_json, cursor)], cursor


def _merged(cursor: StreamCursor, feed: StreamCursor, state: str | None = None
            ) -> StreamCursor:
    """The client's rows with the feed's (and `state` when it was just sent); the feed's
    own cursor when they agree, so the client is in step again."""
    merged = cursor.merge_rows(feed)
    if state is not None:
        merged = replace(merged, state=state)
    return feed if merged == feed else merged


class RunStreams:
    """The feeds of this process, one per followed run, started with its first client and
    stopped with its last."""

    def __init__(self, url: str, options: StreamOptions | None = None):
        self.url, self.options = url, options or StreamOptions()
        self.feeds: dict[int, RunFeed] = {}

    async def check(self, run_id: int, last_event_id: str | None) -> StreamCursor:
        """The client's cursor; a 404 for a missing run, a 422 for an id not of this stream.
        Call it before the response starts. A run a feed follows exists (the feed ends
        the stream when it goes): only the first clients of a run wait for a query."""
        cursor = StreamCursor.decode(last_event_id) if last_event_id else StreamCursor()
        feed = self.feeds.get(run_id)
        if feed is None or feed.finished or feed.cursor.state is None:
            await asyncio.to_thread(self._check_exists, run_id)
        return cursor

    def _check_exists(self, run_id: int) -> None:
        with session_scope(self.url) as session:
            if session.execute(select(Run.id).where(Run.id == run_id)).first() is None:
                raise NotFound(f"run {run_id} does not exist")

    def _join(self, run_id: int) -> RunFeed:
        feed = self.feeds.get(run_id)
        if feed is None or feed.finished:
            feed = self.feeds[run_id] = RunFeed(self.url, run_id, self.options)
            feed.task = asyncio.create_task(feed.follow())
        feed.clients += 1
        return feed

    def _leave(self, feed: RunFeed) -> None:
        feed.clients -= 1
        if feed.clients == 0:
            if feed.task is not None and not feed.task.done():
                feed.task.cancel()
            if self.feeds.get(feed.run_id) is feed:
                del self.feeds[feed.run_id]

    async def events(self, run_id: int, cursor: StreamCursor) -> AsyncIterator[str]:
        """The SSE text for one client, from `cursor` until the run's stream ends."""
        feed = self._join(run_id)
        try:
            yield f"retry: {RETRY_MS}\n\n"
            position = 0
            while True:
                if feed.base > 0:  # the log lost the run's start: this client's rows are read
                    position, stable = feed.end, feed.cursor
                    snapshot = await asyncio.to_thread(read_new, self.url, run_id, cursor,
                                                       self.options.batch)
                    frames, cursor = catch_up(cursor, snapshot, stable)
                    if frames:
                        yield "".join(frames)
                    if snapshot.run is None:
                        yield _frame("end", _json({"state": None}), cursor)
                        return
                    if not snapshot.drained:
                        continue
                previous = None
                while (items := feed.items_since(position)) is not None:
                    frames, cursor, ended = replay(cursor, items, previous)
                    if frames:
                        yield "".join(frames)
                    if ended:
                        return
                    if items:
                        position, previous = position + len(items), items[-1].cursor
                    if feed.finished and feed.end == position:
                        if feed.ended:  # it ended before this client caught up
                            yield _frame("end", _json({"state": cursor.state}), cursor)
                        return  # else the poller stopped (an error): the client reconnects
                    if not await feed.wait(position, self.options.keepalive_seconds):
                        yield ": keep-alive\n\n"
        finally:
            self._leave(feed)
