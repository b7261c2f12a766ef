"""JSON events of the browser voice socket (docs/voice_socket.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

MIN_RATE, MAX_RATE = 8000, 48000
MAX_BINARY_FRAME = 64 * 1024


class ProtocolError(ValueError):
    """A client frame we cannot use; becomes a non-fatal `error` event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ClientToolSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    description: str = Field("", max_length=10_000)
    parameters: dict[str, Any] = Field(default_factory=dict)


class AudioFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    encoding: Literal["pcm16"] = "pcm16"
    sample_rate: int = Field(16000, ge=MIN_RATE, le=MAX_RATE)


class SessionStart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["session.start"]
    input_audio: AudioFormat = Field(default_factory=AudioFormat)
    output_audio: AudioFormat = Field(default_factory=AudioFormat)
    conversation_id: str | None = Field(None, max_length=64)
    # the caller (your app's user id): with an API key (or open loopback mode) only; a session
    # token carries its own caller
    caller: str | None = None
    # tools this client runs (Letta's client_tools: name, description, parameters); a call
    # of one is sent as `tool.call` and answered with `tool.result`
    client_tools: list[ClientToolSpec] = Field(default_factory=list, max_length=50)
    # checked by the session (a bad value is an error event; the call goes on with defaults)
    turn_detection: Any = None  # "auto" | "vad" | "smart"
    turn_silence_ms: Any = None  # the call's silence rule (100-2000)
    turn_max_silence_ms: Any = None  # smart's longest wait (200-5000)
    echo_cancellation: Any = None  # true | false
    record: Any = None  # true | false: record the call (voice_gateway/recordings.py)


class InputText(BaseModel):
    type: Literal["input_text"]
    text: str = Field(min_length=1, max_length=8000)


class AudioPlayed(BaseModel):
    type: Literal["audio.played"]
    item_id: str
    played_ms: int = Field(ge=0)


class ResponseCancel(BaseModel):
    type: Literal["response.cancel"]


class SessionEnd(BaseModel):
    type: Literal["session.end"]


class ApprovalResponse(BaseModel):
    type: Literal["approval.response"]
    call_id: str = Field(min_length=1, max_length=128)
    approve: bool
    reason: str | None = Field(None, max_length=2000)


class ToolResultIn(BaseModel):
    type: Literal["tool.result"]
    call_id: str = Field(min_length=1, max_length=128)
    result: str = Field(max_length=100_000)
    status: Literal["success", "error"] = "success"


ClientEvent = Annotated[
    SessionStart
    | InputText
    | AudioPlayed
    | ResponseCancel
    | SessionEnd
    | ApprovalResponse
    | ToolResultIn,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientEvent)
KNOWN_TYPES = (
    "session.start",
    "input_text",
    "audio.played",
    "response.cancel",
    "session.end",
    "approval.response",
    "tool.result",
)


ClientEventT = (
    SessionStart
    | InputText
    | AudioPlayed
    | ResponseCancel
    | SessionEnd
    | ApprovalResponse
    | ToolResultIn
)


def parse_client_event(text: str) -> ClientEventT:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError("invalid_json", f"text frame is not valid JSON: {exc.msg}") from exc
    # found by tests/fuzz: JSON that is valid but that Python will not load, nested beyond the
    # recursion limit ("[[[[...") or with a number of over 4300 digits
    except RecursionError as exc:
        raise ProtocolError("invalid_json", "text frame is JSON nested too deeply") from exc
    except ValueError as exc:
        raise ProtocolError("invalid_json", f"text frame has an unreadable value: {exc}") from exc
    if not isinstance(data, dict) or "type" not in data:
        raise ProtocolError("invalid_event", "a text frame must be a JSON object with a 'type'")
    if data["type"] not in KNOWN_TYPES:
        raise ProtocolError(
            "unknown_type", f"unknown event type {data['type']!r}; known: {', '.join(KNOWN_TYPES)}"
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'event'}: {e['msg']}"
            for e in exc.errors()[:3]
        )
        code = "unsupported_audio_format" if data["type"] == "session.start" else "invalid_event"
        raise ProtocolError(code, f"bad {data['type']}: {detail}") from exc
