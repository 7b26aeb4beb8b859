"""The worker's Celery application, configured from the settings at import.

`celery -A worker.celery_app` and `studio worker` use `app`; the
configuration itself is shared with the studio's producer (`studio.queue`).
"""

from __future__ import annotations

from studio.queue import make_celery
from studio.settings import get_settings

app = make_celery(get_settings(), include=("worker.tasks",))
