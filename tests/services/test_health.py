"""The studio's health in words: which part is down, and a dead worker forgotten at once."""

from __future__ import annotations

import json

from studio.services.health import NO_WORKER, forget_worker, health
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import WorkerHeartbeat


def _beat(settings: Settings, hostname: str, pid: int, queues: str = "cpu") -> None:
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.merge(WorkerHeartbeat(hostname=hostname, queues=queues, pid=pid))


def test_no_live_worker_is_degraded_and_says_what_waits(settings):
    report = health(settings)
    assert (report["status"], report["workers"]) == ("degraded", [])
    assert report["problems"] == [NO_WORKER]
    assert "runs" in NO_WORKER and "studio worker" in NO_WORKER


def test_each_queue_the_studio_needs_has_its_worker_listed_or_its_problem(settings):
    _beat(settings, "cpu@here", pid=4242)
    report = health(settings)
    assert report["status"] == "degraded"
    assert report["queues"] == {"cpu": ["cpu@here"], "short": []}
    assert report["problems"] == [
        "no worker serves queue short, where index builds and exports wait; `studio up` "
        "restarts its worker, or start one with `studio worker --queues short`"]

    _beat(settings, "short@here", pid=4243, queues="short")
    report = health(settings)
    assert report["status"] == "ok" and report["problems"] == []
    assert report["queues"] == {"cpu": ["cpu@here"], "short": ["short@here"]}
    assert sorted(w["pid"] for w in report["workers"]) == [4242, 4243]


def test_forgetting_a_dead_worker_keeps_the_row_of_a_newer_one(settings):
    _beat(settings, "cpu@here", pid=4242)
    forget_worker(settings, "cpu@here", pid=1111)  # an older worker of the same name
    assert [w["pid"] for w in health(settings)["workers"]] == [4242]
    forget_worker(settings, "cpu@here", pid=4242)
    assert health(settings)["workers"] == [] and health(settings)["status"] == "degraded"


def test_an_unreachable_database_is_down_and_named(tmp_path):
    settings = Settings(data_dir=tmp_path, database_url="postgresql+psycopg://postgres@127.0.0.1:1/x")
    report = health(settings)
    assert report["status"] == "down"
    assert [p.split(" cannot")[0] for p in report["problems"]] == [
        "database postgresql+psycopg://postgres@127.0.0.1:1/x"]


def test_the_health_report_hides_every_credential_of_its_urls(tmp_path):
    """A password in the query string (`?password=`, `sslpassword=`) is a credential as much
    as one in the userinfo: /healthz is public and printed it."""
    settings = Settings(
        data_dir=tmp_path,
        database_url="postgresql+psycopg://postgres:userinfo-pw@127.0.0.1:1/x"
                     "?password=query-pw&sslmode=disable&sslpassword=ssl-pw",
        broker_url="redis://:broker-pw@127.0.0.1:1/0?token=broker-token")
    report = json.dumps(health(settings))
    for secret in ("userinfo-pw", "query-pw", "ssl-pw", "broker-pw", "broker-token"):
        assert secret not in report, secret
    assert "postgresql+psycopg://postgres:***@127.0.0.1:1/x?password=***&sslmode=disable" in report
    assert "redis://:***@127.0.0.1:1/0?token=***" in report
