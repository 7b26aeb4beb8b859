"""A task round trip through a real worker, on the embedded broker and on Redis."""

from __future__ import annotations

import pytest
from sqlmodel import select

from studio.jobs.queue import make_celery
from studio.services.health import live_workers
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import WorkerHeartbeat
from tests.conftest import REDIS_URL
from tests.support.processes import running_worker, studio_env, wait_for


@pytest.mark.slow
@pytest.mark.parametrize("broker", ["embedded", "redis"])
def test_ping_round_trip_and_heartbeat(broker, tmp_path):
    extra = {"broker_url": REDIS_URL, "heartbeat_seconds": "1"} if broker == "redis" else {
        "heartbeat_seconds": "1"}
    settings = Settings(data_dir=tmp_path / "data", broker_url=extra.get("broker_url"),
                        heartbeat_seconds=1)
    settings.resolved_data_dir.mkdir(parents=True)
    db.upgrade(settings.sqlalchemy_url)
    with running_worker(tmp_path / "data", tmp_path / "worker.log", **extra):
        producer = make_celery(settings)
        result = producer.send_task("worker.ping", args=[f"hello-{broker}"], queue="cpu")
        reply = result.get(timeout=90)
        assert reply["pong"] == f"hello-{broker}"
        beats = wait_for(lambda: live_workers(settings), 30, "a worker heartbeat")
        assert beats[0]["queues"] == ["cpu", "short"]
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert session.exec(select(WorkerHeartbeat)).all() == [], "clean shutdown removes the row"


def test_worker_refuses_an_unknown_queue(tmp_path):
    from tests.support.processes import run_studio

    done = run_studio(["worker", "--queues", "tpu"], studio_env(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "studio: error: --queues: unknown queue ['tpu']; use one or more of cpu, gpu, short"]
