"""A run's live stream (Server-Sent Events) and its event log as JSON."""

from __future__ import annotations

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from studio.api.deps import Id, JsonBodyRoute, SettingsDep
from studio.services import run_history
from studio.services.run_history import EventView
from studio.services.run_streams import RunStreams

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)


@router.get("/runs/{run_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def events(request: Request, run_id: Id,
                 last_event_id_header: str | None = Header(None, alias="Last-Event-ID"),
                 last_event_id: str | None = Query(
                     None, description="The Last-Event-ID header, for clients that cannot "
                     "set headers")) -> StreamingResponse:
    """Server-Sent Events: `metric`, `rollout`, `stage_change`, `warning`, `info`, `state`
    and a last `end`. Each event's id resumes the stream (the `Last-Event-ID` header, or
    `?last_event_id=`): a reconnecting client gets exactly what it missed."""
    streams: RunStreams = request.app.state.run_streams
    cursor = await streams.check(run_id, last_event_id_header or last_event_id)
    return StreamingResponse(streams.events(run_id, cursor), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/runs/{run_id}/events/history")
def event_history(run_id: Id, settings: SettingsDep,
                  kind: str | None = Query(None, description="e.g. warning")
                  ) -> list[EventView]:
    """The run's event log as a JSON list, in step order."""
    return run_history.run_events(settings, run_id, kind)
