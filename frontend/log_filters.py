"""Keep a known, harmless Gradio race out of the web app's log as a traceback.

Gradio 6.31's event stream (`sse_stream` in gradio/routes.py) deletes its session's
message queue when the browser drops the connection. When a page goes away with two
streams of one session open (a navigation while a timer's event is in flight), the
second deletion raises KeyError, and uvicorn logs it as "Exception in ASGI
application" with a full traceback. Nothing is lost: the first stream already cleaned
the session. The filter turns exactly that record into one warning line; every other
error keeps its traceback.
"""

from __future__ import annotations

import logging
import os
import traceback

_GRADIO_ROUTES = os.path.join("gradio", "routes.py")


def _raised_in_gradio_stream_close(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return (isinstance(exc, KeyError) and bool(frames)
            and frames[-1].filename.endswith(_GRADIO_ROUTES)
            and frames[-1].name == "sse_stream")


class GradioStreamCloseRace(logging.Filter):
    """Rewrites the double-close KeyError of Gradio's event stream as one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and _raised_in_gradio_stream_close(exc):
            record.msg = ("a browser closed a Gradio event stream that was already closed "
                          "(KeyError in gradio's sse_stream on disconnect; harmless)")
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def install() -> None:
    """Attach the filter to uvicorn's error logger once (the app factory may run again)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, GradioStreamCloseRace) for f in logger.filters):
        logger.addFilter(GradioStreamCloseRace())
