"""Scheduled messages on the wire (letta-client 1.12's `agents.schedule`): the create body,
the stored request's shape, and the ScheduledMessage serializer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from memory.schedules import ScheduleData
from voice_gateway.outbound_calls import PlaceCall
from voice_gateway.protocol.letta import _Body
from voice_gateway.protocol.letta_runs import AsyncMessagesRequest

# the SDK's ScheduledMessage names these nine (a tenth would fail its strict validation)
ScheduleMessageType = Literal[
    "system_message",
    "user_message",
    "assistant_message",
    "reasoning_message",
    "hidden_reasoning_message",
    "tool_call_message",
    "tool_return_message",
    "approval_request_message",
    "approval_response_message",
]
CALL_BASE = "call_base_url"  # stored with a call: where Twilio reached the gateway at creation
MAX_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z in Unix milliseconds


class TextPart(_Body):
    text: str = Field(max_length=100_000)
    signature: str | None = Field(None, max_length=10_000)
    type: Literal["text"] = "text"


class ImageSource(_Body):
    data: str = Field(max_length=10_000_000)
    media_type: str = Field(max_length=100)
    detail: str | None = Field(None, max_length=100)
    type: Literal["base64"] = "base64"


class ImagePart(_Body):
    source: ImageSource
    type: Literal["image"]


class ScheduledMessageIn(_Body):
    content: str | list[TextPart | ImagePart] = Field(max_length=100_000)
    role: Literal["user", "assistant", "system"]
    name: str | None = Field(None, max_length=200)
    otid: str | None = Field(None, max_length=64)
    sender_id: str | None = Field(None, max_length=200)
    type: Literal["message"] | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class OneTime(_Body):
    scheduled_at: float = Field(gt=0, le=MAX_MS, allow_inf_nan=False)  # Unix milliseconds
    type: Literal["one-time"] = "one-time"


class Recurring(_Body):
    cron_expression: str = Field(max_length=200)
    type: Literal["recurring"]


def _kind(v: Any) -> str:
    return "recurring" if isinstance(v, dict) and v.get("type") == "recurring" else "one-time"


Schedule = Annotated[
    Annotated[OneTime, Tag("one-time")] | Annotated[Recurring, Tag("recurring")],
    Discriminator(_kind),
]


class ScheduleCreate(_Body):
    """POST /v1/agents/{id}/schedule. With `call` (ours, the body of
    `POST /v1/agents/{id}/calls`) the schedule places that call instead: no `messages` then."""

    messages: list[ScheduledMessageIn] = Field(default_factory=list, max_length=100)
    schedule: Schedule
    call: PlaceCall | None = None  # ours: place this call instead of sending messages
    callback_url: str | None = Field(None, max_length=2000)
    include_return_message_types: list[ScheduleMessageType] | None = None
    max_steps: float | None = Field(None, ge=1, le=50, allow_inf_nan=False)

    @field_validator("max_steps")
    @classmethod
    def _whole(cls, v: float | None) -> float | None:
        if v is not None and v != int(v):
            raise ValueError("must be a whole number of steps")
        return v

    def has_text(self) -> bool:
        """A user or system message with text: what the run takes as its input."""
        users = [m for m in self.messages if m.role in ("user", "system")]
        return bool(users and users[-1].text().strip())

    def stored(self) -> dict[str, Any]:
        """The request as stored, and echoed as the ScheduledMessage's `message`."""
        return {
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in self.messages],
            "callback_url": self.callback_url,
            "include_return_message_types": self.include_return_message_types,
            "max_steps": self.max_steps,
            **({"call": self.call.model_dump(mode="json", by_alias=True)} if self.call else {}),
        }


def run_request(message: dict[str, Any]) -> AsyncMessagesRequest:
    """The stored request as the body of `POST /v1/agents/{id}/messages/async`."""
    steps = message.get("max_steps")
    return AsyncMessagesRequest.model_validate(
        {
            "messages": [
                {"role": m["role"], "content": m["content"], "otid": m.get("otid")}
                for m in message["messages"]
            ],
            "max_steps": None if steps is None else int(steps),
            "include_return_message_types": message.get("include_return_message_types"),
            "callback_url": message.get("callback_url"),
        }
    )


def schedule_json(s: ScheduleData) -> dict[str, Any]:
    """Letta's ScheduledMessage."""
    if s.kind == "recurring":
        schedule: dict[str, Any] = {"type": "recurring", "cron_expression": s.cron_expression}
    else:
        schedule = {"type": "one-time", "scheduled_at": s.scheduled_at}
    return {
        "id": s.id,
        "agent_id": s.agent_id,
        "message": {k: v for k, v in s.message.items() if k != CALL_BASE},
        "next_scheduled_time": s.next_run_at.isoformat(),
        "schedule": schedule,
    }
