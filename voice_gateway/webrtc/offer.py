"""An SDP offer as the signalling route receives it: JSON `{"sdp", "type"}` or a WHIP-style
`application/sdp` body, checked before any peer connection is made (each refusal a 400 with a
JSON `detail`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from aiortc.sdp import SessionDescription
from starlette.requests import Request

from voice_gateway.errors import ApiError

MAX_SDP_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Offer:
    sdp: str
    whip: bool  # came as application/sdp: the answer goes back the same way
    events: bool  # the offer opens a data channel (an m=application line)


async def read_offer(request: Request) -> Offer:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if len(raw) > MAX_SDP_BYTES:
        raise ApiError(413, f"an SDP offer is at most {MAX_SDP_BYTES} bytes")
    if ctype == "application/sdp":
        return check_sdp(raw.decode("utf-8", "replace"), whip=True)
    if ctype not in ("application/json", ""):
        raise ApiError(415, "send the offer as application/json {sdp, type} or application/sdp")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, 'body must be JSON: {"type": "offer", "sdp": "v=0..."}') from exc
    if not isinstance(body, dict):
        raise ApiError(400, 'body must be a JSON object: {"type": "offer", "sdp": "..."}')
    if body.get("type") != "offer":
        raise ApiError(400, f"type must be 'offer', got {body.get('type')!r}")
    sdp = body.get("sdp")
    if not isinstance(sdp, str):
        raise ApiError(400, "sdp must be a string (the offer's SDP)")
    return check_sdp(sdp, whip=False)


def check_sdp(sdp: str, *, whip: bool) -> Offer:
    """The checks aiortc would make late or not at all: a session description, an audio
    m-line that offers Opus, ICE credentials and a DTLS fingerprint."""
    if not sdp.lstrip().startswith("v=0"):
        raise ApiError(400, "malformed SDP: an SDP offer starts with 'v=0'")
    try:
        desc = SessionDescription.parse(sdp)
    except Exception as exc:  # aiortc's parser raises whatever a bad line trips over
        raise ApiError(400, f"malformed SDP: {type(exc).__name__} {exc}"[:300]) from exc
    if not desc.media:
        raise ApiError(400, "malformed SDP: no m-line")
    audio = [m for m in desc.media if m.kind == "audio"]
    if not audio:
        raise ApiError(400, "the offer has no audio m-line: add an audio transceiver")
    if not any(c.mimeType.lower() == "audio/opus" for m in audio for c in m.rtp.codecs):
        raise ApiError(400, "the offer's audio does not include Opus (opus/48000/2)")
    for m in desc.media:
        if m.ice is None or not m.ice.usernameFragment or not m.ice.password:
            raise ApiError(400, f"malformed SDP: ICE ufrag/pwd missing on the {m.kind} m-line")
        if m.dtls is None or not m.dtls.fingerprints:
            raise ApiError(400, f"malformed SDP: no DTLS fingerprint on the {m.kind} m-line")
    events = any(m.kind == "application" for m in desc.media)
    return Offer(sdp, whip, events)
