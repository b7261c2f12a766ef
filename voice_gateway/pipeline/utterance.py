"""An utterance the turn detector ended (pipeline/session.py): its transcript on its way, and
what the call hears of it once the transcript is there (`heard`): the text and the time STT
took, the STT failure (which the caller is told about), or nothing (speech the barge-in judge
ignored, a cancelled transcript); and the utterance being spoken (`Partials`): its turn id and
its partial transcripts to the client."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from memory.ids import new_id
from voice_gateway.pipeline.reply import UserTurn
from voice_gateway.pipeline.transport import Transport


@dataclass(slots=True)
class Utterance:
    transcript: asyncio.Task[str | Exception]
    turn_id: str  # also on the utterance's transcript.partial events
    speech_end_at: float  # monotonic time the caller stopped speaking
    endpoint_at: float  # when the silence made it a turn
    turn_taking: dict[str, Any]  # for turn.metrics: end_of_turn_ms, the verdict
    judge: asyncio.Task[None] | None = None  # speech over a reply: is it an interruption?
    ignored: bool = False  # a backchannel or echo: no turn

    async def heard(self) -> tuple[str, float] | Exception | None:
        """(the transcript, the ms STT took after the endpoint), STT's failure, or None."""
        waits: list[asyncio.Task[Any]] = [self.transcript]
        await asyncio.wait(waits if self.judge is None else [*waits, self.judge])
        if self.transcript.cancelled() or self.ignored:
            return None
        result = self.transcript.result()
        if isinstance(result, Exception):
            return result
        return result.strip(), (time.monotonic() - self.endpoint_at) * 1000

    def turn(self, text: str, stt_ms: float, notes: list[str]) -> UserTurn:
        """The user turn it becomes."""
        return UserTurn(
            text,
            self.turn_id,
            notes=notes,
            speech_end_at=self.speech_end_at,
            endpointing_ms=(self.endpoint_at - self.speech_end_at) * 1000,
            stt_ms=stt_ms,
            turn_taking=self.turn_taking,
        )


class Partials:
    """The utterance being spoken: its turn id, and its partial transcripts to the client (the
    STT stream's `on_partial`; it refers to the transport only)."""

    __slots__ = ("transport", "turn_id")

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.turn_id = new_id("turn")

    def next(self) -> str:
        """The utterance ended: its turn id; the next one gets a new one."""
        turn_id, self.turn_id = self.turn_id, new_id("turn")
        return turn_id

    async def send(self, text: str) -> None:
        event = {"type": "transcript.partial", "turn_id": self.turn_id, "text": text}
        await self.transport.send_event(event)
