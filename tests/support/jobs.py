"""What a queued training message carries, read back for tests that play the worker."""

from __future__ import annotations

from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import Run


def job_key(settings: Settings, run_id: int) -> str:
    """The run's job key, which its queued messages name (`runs.claim_run` checks it)."""
    with db.session_scope(settings.sqlalchemy_url) as session:
        return session.get(Run, run_id).job_key
