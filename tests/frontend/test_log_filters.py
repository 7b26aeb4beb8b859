"""The web app's log filter: Gradio's double stream close becomes one warning line, and
every other exception keeps its traceback."""

from __future__ import annotations

import io
import logging

import gradio.routes
from fastapi import HTTPException

from frontend import log_filters


def _raise_from(filename: str, function: str, exc: BaseException) -> BaseException:
    """An exception whose innermost frame is `function` in `filename` (as Python reports it)."""
    namespace: dict = {}
    exec(compile(f"def {function}(exc):\n    raise exc\n", filename, "exec"), namespace)
    try:
        namespace[function](exc)
    except BaseException as raised:  # noqa: BLE001 - handed back to the test
        return raised
    raise AssertionError("not raised")


def _logged(exc: BaseException) -> str:
    """What uvicorn's error logger prints for `exc`, with the studio's filter installed."""
    stream = io.StringIO()
    logger = logging.getLogger("uvicorn.error")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    log_filters.install()
    try:
        logger.error("Exception in ASGI application\n", exc_info=exc)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_the_gradio_stream_close_race_is_one_warning_line():
    exc = _raise_from(gradio.routes.__file__, "sse_stream", KeyError("1x88tmas9bo"))
    out = _logged(exc)
    assert "Traceback" not in out
    assert out.startswith("WARNING a browser closed a Gradio event stream"), out
    assert out.count("\n") == 1


def test_the_404_of_a_stream_whose_session_is_gone_is_one_warning_line():
    gone = _raise_from(gradio.routes.__file__, "sse_stream", HTTPException(status_code=404))
    try:
        raise RuntimeError("Caught handled exception, but response already started.") from gone
    except RuntimeError as exc:
        out = _logged(exc)
    assert "Traceback" not in out
    assert out.startswith("WARNING a browser closed a Gradio event stream"), out
    assert out.count("\n") == 1


def test_other_errors_keep_their_traceback():
    elsewhere = _raise_from(__file__, "sse_stream", KeyError("x"))  # same name, other file
    other_kind = _raise_from(gradio.routes.__file__, "sse_stream", ValueError("boom"))
    other_function = _raise_from(gradio.routes.__file__, "predict", KeyError("x"))
    caused = []
    for cause in (_raise_from(gradio.routes.__file__, "sse_stream", HTTPException(500)),
                  _raise_from(__file__, "sse_stream", HTTPException(404))):
        try:
            raise RuntimeError("response already started") from cause
        except RuntimeError as exc:
            caused.append(exc)
    for exc in (elsewhere, other_kind, other_function, *caused):
        out = _logged(exc)
        assert out.startswith("ERROR Exception in ASGI application"), out
        assert "Traceback" in out


def test_installing_twice_adds_one_filter():
    log_filters.install()
    log_filters.install()
    filters = logging.getLogger("uvicorn.error").filters
    assert sum(isinstance(f, log_filters.GradioStreamCloseRace) for f in filters) == 1
