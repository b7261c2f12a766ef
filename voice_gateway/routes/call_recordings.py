"""A call's recording: `GET /v1/calls/{call_id}/recording` serves its 2-channel WAV (channel 1
the caller, channel 2 what was played to them; voice_gateway/recording.py) to the owner of the
call's agent. Another user's call, a call without a recording (not recorded, still going, or
deleted by retention or erasure) is a 404 with a JSON `detail`."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import BaseRoute, Route

from memory.calls import CallStore
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of


async def get_recording(request: Request) -> FileResponse:
    """Download a call's recording (audio/wav)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    call_id = request.path_params["call_id"]
    call = await CallStore(gw.memory.db).get(call_id, user_id=p.user_id, scoped=p.scoped)
    path = Path(call.recording_path) if call.recording_path else None
    if path is None or not path.is_file():
        raise ApiError(404, f"call {call_id} has no recording")
    return FileResponse(path, media_type="audio/wav", filename=f"{call.id}.wav")


def routes() -> list[BaseRoute]:
    return [Route("/v1/calls/{call_id}/recording", get_recording, methods=["GET"])]
