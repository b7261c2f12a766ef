"""An outbound call answered by a machine (docs/call_control.md, Voicemail). The call's own
detector (voice_gateway/voicemail.py) hears every 20 ms frame (`frame`, the input path's tap)
and the first transcript (`heard`); Twilio's AnsweredBy (`vendor`, the async AMD callback)
counts too. The first verdict stands, but for a beep early in a call whose first words
sounded like a person's (a misheard greeting).

A machine: nothing more is answered (the call is `closing`, a reply under way is cut); once
the greeting is over (the beep, Twilio's machine_end_*, or a silence) the agent's
`voicemail_message` is played, then the call ends (end reason `voicemail`; no message: it
just ends). The verdict goes on the call record's metadata (`voicemail`). Inbound calls get
no `Voicemail`: they are never taken for a machine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from memory.calls import CallStore
from voice_gateway.voicemail import FRAME_MS, Verdict, VoicemailDetector

if TYPE_CHECKING:
    from voice_gateway.pipeline.call_control import SessionCallControl
    from voice_gateway.pipeline.playout import Playout
    from voice_gateway.pipeline.transport import Transport

log = logging.getLogger(__name__)
VOICEMAIL = "voicemail"  # the call's end reason
GREETING_SILENCE_MS = 2500  # a machine's greeting is over after this long without sound
BEEP_MAX_S = 5.0  # a beep that never stops: the message is left over it
GREETING_MAX_S = 30.0  # a greeting that never ends: the message is left anyway
# Twilio's AnsweredBy values that mean a machine, and those of them sent once its greeting ended
TWILIO_MACHINE = ("machine_start", "machine_end_beep", "machine_end_silence")
TWILIO_MACHINE_END = ("machine_end_beep", "machine_end_silence", "machine_end_other", "fax")


class VoicemailCall(Protocol):
    """The call as voicemail acts on it (VoiceSession)."""

    transport: Transport
    control: SessionCallControl
    closing: bool

    def interrupt(self, reason: str) -> None: ...

    async def speak_phrase(self, text: str) -> Playout | None: ...


class Voicemail:
    def __init__(self, store: CallStore, record_id: str, message: str | None) -> None:
        self.store, self.record_id, self.message = store, record_id, message
        self.detector = VoicemailDetector()
        self.verdict: Verdict | None = None
        self.decided = asyncio.Event()
        self.greeting_over = asyncio.Event()
        self.beep_over = asyncio.Event()  # the beep that ended the greeting has stopped
        self.greeting_end = "timeout"  # what told the greeting was over: beep, twilio, silence
        self.call: VoicemailCall | None = None
        self.quiet_ms = 0  # without sound since the machine was found

    def bind(self, call: VoicemailCall) -> None:
        self.call = call

    @property
    def machine(self) -> bool:
        return self.verdict is not None and self.verdict.answered_by == "machine"

    def frame(self, pcm: bytes) -> None:
        """A 20 ms frame of the caller's audio (16 kHz PCM16)."""
        if self.verdict is not None and not self.machine and not self.detector.overruled():
            return  # a person, for good: nothing more to listen for
        found = self.detector.frame(pcm)
        if found is not None:
            if self.verdict is not None and self.verdict.answered_by == "human":
                self.verdict = None  # an early beep overrules first words (the detector's call)
            self._decide(found)
            if found.detected_by == "beep":
                self._over("beep")
        if self.greeting_end == "beep" and not self.detector.beep.sounding:
            self.beep_over.set()
        if self.machine:  # silence counts from the verdict on
            self.quiet_ms = self.quiet_ms + FRAME_MS if self.detector.quiet_ms else 0
            if self.quiet_ms >= GREETING_SILENCE_MS:
                self._over("silence")

    def _over(self, why: str) -> None:
        if not self.greeting_over.is_set():
            self.greeting_end = why
            self.greeting_over.set()

    def heard(self, text: str) -> bool:
        """A final transcript: True if it is not to be answered (a machine's)."""
        self._decide(self.detector.transcript(text))
        return self.machine

    def vendor(self, answered_by: str) -> None:
        """Twilio's AnsweredBy (async AMD)."""
        if answered_by == "human":
            self._decide(Verdict("human", "twilio", answered_by))
        elif answered_by in TWILIO_MACHINE + TWILIO_MACHINE_END:
            self._decide(Verdict("machine", "twilio", answered_by))
            if answered_by in TWILIO_MACHINE_END and self.machine:
                self._over("twilio")

    def _decide(self, verdict: Verdict) -> None:
        if self.verdict is not None:
            return
        self.verdict = self.detector.verdict = verdict
        self.decided.set()
        log.info("call answered by a %s (%s)", verdict.answered_by, verdict.detected_by)
        if verdict.answered_by == "machine" and self.call is not None:
            self.call.closing = True  # nothing more is answered
            self.call.interrupt(VOICEMAIL)

    async def run(self) -> None:
        """The call's watcher: the verdict on the record; for a machine, the message left
        after its greeting, then the call ended. It lets go of the call when done or
        cancelled (no reference cycle keeps the call alive)."""
        try:
            await self._run()
        finally:
            self.call = None

    async def _run(self) -> None:
        while not self.machine:
            await self.decided.wait()
            self.decided.clear()
            assert self.verdict is not None
            await self._note(self.verdict.as_dict())
        assert self.verdict is not None
        if self.call is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GREETING_MAX_S):
                await self.greeting_over.wait()
        if self.greeting_end == "beep":  # the message begins once the beep has stopped
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BEEP_MAX_S):
                    await self.beep_over.wait()
        left = False
        if self.message:
            playout = await self.call.speak_phrase(self.message)
            if playout is not None:
                await playout.wait()
                left = True
        done = {"greeting_end": self.greeting_end, "message_left": left}
        await self._note({**self.verdict.as_dict(), **done})
        self.call.control.ending = VOICEMAIL
        await self.call.transport.end(VOICEMAIL)

    async def _note(self, found: Mapping[str, object]) -> None:
        try:
            await self.store.update(self.record_id, metadata={VOICEMAIL: dict(found)})
        except Exception as exc:  # bookkeeping: never the reason a call fails
            log.warning("call %s: voicemail verdict not stored: %r", self.record_id, exc)
