"""Keep a known, harmless Gradio race out of the web app's log as a traceback.

Gradio 6.31's event stream (`sse_stream` in gradio/routes.py) deletes its session's
message queue when the browser drops the connection. When a page goes away with two
streams of one session open (a navigation while a timer's event is in flight), the
second deletion raises KeyError, and uvicorn logs it as "Exception in ASGI
application" with a full traceback. Nothing is lost: the first stream already cleaned
the session. The same race can also end in the other stream's check: its session is gone,
it raises a 404 after its response has started, and Starlette logs a RuntimeError caused by
that 404. The filter turns exactly those records into one warning line; every other error
keeps its traceback.
"""

from __future__ import annotations

import logging
import os
import traceback

from starlette.exceptions import HTTPException

_GRADIO_ROUTES = os.path.join("gradio", "routes.py")


def _raised_in_sse_stream(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.endswith(_GRADIO_ROUTES) \
        and frames[-1].name == "sse_stream"


def _raised_in_gradio_stream_close(exc: BaseException) -> bool:
    """The double close's KeyError, or the 404 of a stream whose session the other stream
    closed first (re-raised by Starlette as a RuntimeError: the response had started)."""
    if isinstance(exc, KeyError):
        return _raised_in_sse_stream(exc)
    cause = exc.__cause__
    return isinstance(exc, RuntimeError) and isinstance(cause, HTTPException) \
        and cause.status_code == 404 and _raised_in_sse_stream(cause)


class GradioStreamCloseRace(logging.Filter):
    """Rewrites the double-close KeyError of Gradio's event stream as one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and _raised_in_gradio_stream_close(exc):
            record.msg = ("a browser closed a Gradio event stream that was already closed "
                          f"({type(exc).__name__} in gradio's sse_stream on disconnect; "
                          "harmless)")
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def install() -> None:
    """Attach the filter to uvicorn's error logger once (the app factory may run again)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, GradioStreamCloseRace) for f in logger.filters):
        logger.addFilter(GradioStreamCloseRace())
