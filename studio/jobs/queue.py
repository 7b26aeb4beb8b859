"""The job queue as the studio sees it: Celery configured from the settings.

The studio only sends tasks by name (`send_task`), so it never imports the
worker package; `worker.celery_app` builds its consumer from the same config.
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from kombu import Connection, Queue

from studio.settings import Settings

TRAINING_QUEUES = ("cpu", "gpu")
"""Runs, evaluations and speed measurements: each holds its worker's slot for a long time."""
SHORT_QUEUE = "short"
"""Index builds and exports: their own lane, served by a light worker of their own, so that a
zip export never waits behind hours of training."""
QUEUES = (*TRAINING_QUEUES, SHORT_QUEUE)
QUEUE_JOBS = {"cpu": "runs, evaluations and speed measurements on the CPU",
              "gpu": "runs and evaluations on GPUs",
              SHORT_QUEUE: "index builds and exports"}
"""What waits in each queue, in words for messages."""
REQUIRED_QUEUES = ("cpu", SHORT_QUEUE)
"""Queues a studio needs a worker on: the default queue of runs, and the short jobs' lane."""


def make_celery(settings: Settings, *, include: tuple[str, ...] = ()) -> Celery:
    celery = Celery("icrl_studio", broker=settings.celery_broker_url,
                    backend=settings.celery_result_backend, include=list(include))
    celery.conf.update(
        task_queues=[Queue(name) for name in QUEUES],
        task_default_queue="cpu",
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        # a job whose worker dies is redelivered rather than lost
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        result_expires=7 * 24 * 3600,
        worker_hijack_root_logger=False,
    )
    return celery


def check_broker(url: str, timeout: float = 3.0) -> None:
    """Raise if the broker cannot be reached (start-up checks and /healthz). The embedded
    broker's tables are made here, once: workers started together on a new data folder each
    made them otherwise, and the one that lost the race logged "table kombu_queue already
    exists"."""
    with Connection(url, connect_timeout=timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)
        if url.startswith("sqla+"):
            conn.default_channel.session  # noqa: B018 (opening it creates the tables)


@lru_cache(maxsize=4)
def _producer(broker_url: str, result_backend: str) -> Celery:
    return make_celery(Settings(broker_url=broker_url, result_backend=result_backend))


def enqueue(settings: Settings, task_name: str, *args: object, queue: str = "cpu") -> str:
    """Send a task by name to a queue; return its id. The worker registers the names."""
    producer = _producer(settings.celery_broker_url, settings.celery_result_backend)
    return producer.send_task(task_name, args=list(args), queue=queue).id
