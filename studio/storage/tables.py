"""The studio's database tables (SQLModel), shared by the web app and the workers.

Everything a page shows lives here; files (uploads, indexes, checkpoints) live
in the data directory and rows only name them. Timestamps are aware UTC
(SQLModel's UTCDateTime returns them so from SQLite and PostgreSQL alike).
Schema changes go through an Alembic migration in `migrations/versions/`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlmodel import Field, SQLModel

from studio.jobs.lifecycle import CorpusStatus, RunState  # the jobs' states, as stored


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _json(**kw: Any) -> Any:
    return Field(default=None, sa_column=Column(JSON, nullable=True), **kw)


def _text() -> Any:
    return Field(default=None, sa_column=Column(Text, nullable=True))


# A deleted row's id must never come back: a queued job names its row by id (a deleted
# run's message would otherwise train the next run of that id), and the live stream and the
# TensorBoard mirror follow run rows by id. PostgreSQL's sequences never reuse ids; SQLite
# hands out a deleted largest id again unless the table is AUTOINCREMENT. Every table with
# an integer id carries this.
IDS_NEVER_REUSED = {"sqlite_autoincrement": True}


# --- people and credentials -------------------------------------------------


class Role(str, Enum):
    """What a user may do (studio.services.access): a viewer reads; a member also creates
    and changes its own data, runs, evaluations and exports; an admin does everything."""

    admin = "admin"
    member = "member"
    viewer = "viewer"


class User(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    username: str = Field(index=True, unique=True, max_length=64)
    password_hash: str = Field(max_length=255)
    role: Role = Field(default=Role.member, sa_type=String(16))
    created_at: datetime = Field(default_factory=utcnow)
    disabled_at: datetime | None = None  # a disabled user's tokens and sessions stop at once
    # the bytes its exports may hold on disk, set by an admin; None: STUDIO_EXPORT_QUOTA_BYTES
    export_quota_bytes: int | None = Field(default=None, sa_type=BigInteger)


class TokenKind(str, Enum):
    api = "api"  # for scripts: `Authorization: Bearer`, until revoked
    session = "session"  # the browser's cookie after a login, until it expires or logs out


class ApiToken(SQLModel, table=True):
    """An API token or a browser session, stored as a SHA-256 hash; `prefix` lets a user
    tell tokens apart. Either acts with its user's role as it is at each request."""

    __tablename__ = "api_tokens"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    kind: TokenKind = Field(default=TokenKind.api, sa_type=String(16))
    name: str = Field(max_length=128)
    prefix: str = Field(max_length=16)
    token_hash: str = Field(index=True, unique=True, max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


class LoginFailure(SQLModel, table=True):
    """A failed login, kept for the rate limit (studio.services.auth.login_wait)."""

    __tablename__ = "login_failures"
    __table_args__ = (Index("ix_login_failures_username_at", "username", "at"),
                      Index("ix_login_failures_address_at", "address", "at"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    username: str = Field(max_length=64)
    address: str = Field(max_length=64)
    at: datetime = Field(default_factory=utcnow)


def _owner() -> Any:
    """Who created the row; it alone (and admins) may change, delete, cancel or export it."""
    return Field(default=None, foreign_key="users.id", index=True)


# --- data a user brings --------------------------------------------------------


def _live_name_unique(table: str) -> Index:
    """Names are unique among the rows not retired: a retired row (deleted by its user, kept
    for the runs whose plan pins it) frees its name."""
    live = text("retired_at IS NULL")
    return Index(f"uq_{table}_live_name", "name", unique=True, sqlite_where=live,
                 postgresql_where=live)


class Corpus(SQLModel, table=True):
    __tablename__ = "corpora"
    __table_args__ = (_live_name_unique("corpora"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, max_length=128)
    owner_id: int | None = _owner()
    source_filename: str = Field(max_length=255)
    content_hash: str = Field(max_length=64)
    upload_path: str = Field(max_length=1024)  # relative to the data directory
    index_path: str | None = Field(default=None, max_length=1024)
    status: CorpusStatus = Field(default=CorpusStatus.pending, sa_type=String(16))
    error: str | None = _text()
    backend: str = Field(default="bm25s", max_length=32)
    index_params: dict | None = _json()
    num_documents: int = 0
    num_passages: int = 0
    rows_read: int = 0
    passages_indexed: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime | None = None  # its index build's worker, alive
    retired_at: datetime | None = None  # deleted while a run's plan pins it (run_plans)


class QASet(SQLModel, table=True):
    __tablename__ = "qa_sets"
    __table_args__ = (_live_name_unique("qa_sets"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, max_length=128)
    owner_id: int | None = _owner()
    purpose: str = Field(default="train", max_length=16)  # train | eval
    source_filename: str = Field(max_length=255)
    content_hash: str = Field(max_length=64)
    upload_path: str | None = Field(default=None, max_length=1024)  # None for a split's halves
    source_format: str = Field(max_length=32)
    num_rows: int = 0
    report: dict | None = _json()  # duplicates, empty answers, ...
    created_at: datetime = Field(default_factory=utcnow)
    retired_at: datetime | None = None  # deleted while a run's plan pins it (run_plans)


class QAItem(SQLModel, table=True):
    __tablename__ = "qa_items"
    __table_args__ = (UniqueConstraint("qa_set_id", "position"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    qa_set_id: int = Field(foreign_key="qa_sets.id", index=True)
    position: int
    external_id: str | None = Field(default=None, max_length=255)
    question: str = Field(sa_column=Column(Text, nullable=False))
    golden_answers: list | None = _json()
    meta: dict | None = _json()


class ExemplarSet(SQLModel, table=True):
    __tablename__ = "exemplar_sets"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=128)
    owner_id: int | None = _owner()
    source_filename: str | None = Field(default=None, max_length=255)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Exemplar(SQLModel, table=True):
    __tablename__ = "exemplars"
    __table_args__ = (UniqueConstraint("exemplar_set_id", "position"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    exemplar_set_id: int = Field(foreign_key="exemplar_sets.id", index=True)
    position: int
    question: str = Field(sa_column=Column(Text, nullable=False))
    solution: str = Field(sa_column=Column(Text, nullable=False))
    answer: str | None = _text()
    findings: list | None = _json()  # validation results, re-computed on each save


# --- training runs ----------------------------------------------------------------


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, max_length=128)
    config: dict | None = _json()  # the full run config snapshot
    plan: dict | None = _json()  # studio.services.run_plans.RunPlan: the config, data pinned
    backend: str = Field(default="native", max_length=16)
    queue: str = Field(default="cpu", max_length=16)
    state: RunState = Field(default=RunState.queued, sa_type=String(16), index=True)
    task_id: str | None = Field(default=None, max_length=64)
    # how many times the run was queued (1, then +1 per resume); a worker and its training
    # process act on the run only while it is still their attempt
    attempt: int = 1
    # random, set when the run is stored: a queued message names it with the attempt, so a
    # message meant for another run (of an id used before) does nothing
    job_key: str = Field(default_factory=lambda: uuid.uuid4().hex, max_length=32)
    worker_hostname: str | None = Field(default=None, max_length=255)
    pid: int | None = None
    current_step: int = 0
    total_steps: int = 0
    checkpoint_dir: str | None = Field(default=None, max_length=1024)
    error: str | None = _text()
    owner_id: int | None = _owner()
    created_at: datetime = Field(default_factory=utcnow)
    queued_at: datetime | None = Field(default_factory=utcnow)  # the queue's order
    started_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    # what the training process is doing in the step under way (`RunRecorder.phase`):
    # {"step": stored step, "name": "rolling out" | ..., "since": ISO time}; None when idle
    phase: dict | None = _json()
    # the launch's estimate of a first-stage step, in seconds (None: the device was not
    # measured): the Live run page says when the first point comes
    first_step_seconds: float | None = None


class RunMetric(SQLModel, table=True):
    """One row per training step; `values` holds every named metric of that step."""

    __tablename__ = "run_metrics"
    # (run_id, id): the live stream reads a run's rows after a cursor, on PostgreSQL too
    __table_args__ = (UniqueConstraint("run_id", "step"),
                      Index("ix_run_metrics_run_id_id", "run_id", "id"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id")
    step: int
    stage: int = 0
    exemplars: int = 0
    values: dict | None = _json()
    created_at: datetime = Field(default_factory=utcnow)


class RunEvent(SQLModel, table=True):
    """Stage changes, warnings (e.g. premature termination) and notes, drawn on the curves."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run_id_id", "run_id", "id"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id")
    step: int = 0
    kind: str = Field(max_length=32)  # stage_change | warning | info
    message: str = Field(sa_column=Column(Text, nullable=False))
    data: dict | None = _json()
    created_at: datetime = Field(default_factory=utcnow)


class Rollout(SQLModel, table=True):
    """A sampled rollout: its text as segments, each marked model or environment.

    The environment's segments are the spans the loss ignores; their token
    counts match the loss mask.
    """

    __tablename__ = "rollouts"
    # the stream reads after a cursor (run_id, id); pages go newest first (step, id) within
    # a step range, a stage, an exemplar count or a reward range
    __table_args__ = (Index("ix_rollouts_run_id_id", "run_id", "id"),
                      Index("ix_rollouts_run_id_step_id", "run_id", "step", "id"),
                      Index("ix_rollouts_run_id_stage_step_id", "run_id", "stage", "step", "id"),
                      Index("ix_rollouts_run_id_exemplars_step_id", "run_id", "exemplars", "step",
                            "id"),
                      Index("ix_rollouts_run_id_reward_step_id", "run_id", "reward", "step", "id"),
                      IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id")
    step: int
    group_index: int = 0
    sample_index: int = 0
    stage: int = 0
    exemplars: int = 0  # shown in the prompt it was sampled with
    # a rollout sampled with exemplars as a hint and trained on the prompt without them
    # (guidance.mode: mixed): the indices of those exemplars in the run's set; else None
    hint_exemplars: list | None = _json()
    question: str = Field(sa_column=Column(Text, nullable=False))
    golden_answers: list | None = _json()
    segments: list | None = _json()  # [{"source": "model"|"env", "kind", "text", "tokens"}]
    reward: float = 0.0
    breakdown: dict | None = _json()
    advantage: float = 0.0
    # per response token: log-prob, entropy, advantage, loss mask, characters
    # (`studio.method.token_arrays`); None where the engine kept none
    token_arrays: bytes | None = Field(default=None, sa_column=Column(LargeBinary,
                                                                     nullable=True))
    created_at: datetime = Field(default_factory=utcnow)


class Evaluation(SQLModel, table=True):
    __tablename__ = "evaluations"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int | None = _owner()
    run_id: int | None = Field(default=None, foreign_key="runs.id", index=True)
    model_ref: str = Field(max_length=1024)
    qa_set_id: int = Field(foreign_key="qa_sets.id")
    state: RunState = Field(default=RunState.queued, sa_type=String(16))
    params: dict | None = _json()
    metrics: dict | None = _json()  # em, subem, f1, search calls, ...
    error: str | None = _text()
    created_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime | None = None  # its worker, alive
    finished_at: datetime | None = None


class Export(SQLModel, table=True):
    """An export of a run's checkpoint. The Hub token is never stored."""

    __tablename__ = "exports"
    __table_args__ = (IDS_NEVER_REUSED,)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int | None = _owner()
    run_id: int = Field(foreign_key="runs.id", index=True)
    target: str = Field(max_length=16)  # folder | zip | hub
    step: int | None = None  # the checkpoint exported (steps done); None until chosen
    repo_id: str | None = Field(default=None, max_length=255)
    private: bool = True
    state: RunState = Field(default=RunState.queued, sa_type=String(16))
    progress: float = 0.0
    message: str | None = Field(default=None, max_length=512)  # what it is doing now, for the UI
    location: str | None = Field(default=None, max_length=1024)
    error: str | None = _text()
    created_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime | None = None  # its worker, alive
    finished_at: datetime | None = None


# --- workers ---------------------------------------------------------------------------


class WorkerHeartbeat(SQLModel, table=True):
    """A live worker: written every few seconds, so the studio can tell dead from busy."""

    __tablename__ = "worker_heartbeats"
    hostname: str = Field(primary_key=True, max_length=255)
    queues: str = Field(max_length=255)
    pid: int
    started_at: datetime = Field(default_factory=utcnow)
    last_seen: datetime = Field(default_factory=utcnow)
    # per queue, the device its training processes use: {queue: studio.jobs.devices.queue_device()}
    devices: dict | None = _json()


class DeviceCalibration(SQLModel, table=True):
    """How fast one model trains on one kind of device (worker.engines.native.calibrate):
    the figures of the launch check's time estimate, kept until the hardware changes."""

    __tablename__ = "device_calibrations"
    __table_args__ = (Index("ix_device_calibrations_key", "model", "device_key", "threads",
                            "dtype"), IDS_NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int | None = _owner()  # who asked, or whose launch check queued it
    model: str = Field(max_length=1024)  # the run config's `model`, as written there
    queue: str = Field(max_length=16)  # where it was sent
    threads: int = 1
    dtype: str = Field(max_length=16)  # float32 | bfloat16 (engine.dtype resolved)
    state: RunState = Field(default=RunState.queued, sa_type=String(16))
    device_key: str | None = Field(default=None, max_length=512)  # set by the worker
    device: dict | None = _json()  # studio.jobs.devices.queue_device() of the worker that measured
    worker_hostname: str | None = Field(default=None, max_length=255)
    busy_runs: int = 0  # runs training on that worker when it started measuring
    figures: dict | None = _json()  # shape and rates (studio.services.estimates)
    error: str | None = _text()
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
