"""The worker's Celery application, configured from the settings at import.

`celery -A worker.celery_app` and `studio worker` use `app`; the
configuration itself is shared with the studio's producer (`studio.jobs.queue`).
"""

from __future__ import annotations

import warnings

from celery.exceptions import SecurityWarning

from studio.jobs.queue import make_celery
from studio.settings import get_settings

# Celery warns, at every start, of a worker run as root (containers, one-user machines)
# because a root worker that accepted pickled messages would run whatever a broker sends.
# The studio accepts JSON only (studio.jobs.queue), so the warning says nothing to act on; the
# refusal Celery raises for a root worker that accepts pickle still stands.
warnings.filterwarnings("ignore", message="You're running the worker with superuser",
                        category=SecurityWarning)

app = make_celery(get_settings(), include=("worker.tasks",))
