"""Speech during a reply: a real interruption, a backchannel ("mm-hmm", "yeah") or the reply's
own echo. Speech over a playing reply is transcribed after `barge_in_check_ms` of it (or when
it ends, if sooner); a backchannel or an echo leaves the reply alone (`speech.ignored`),
anything else cancels it, and speech that goes on past `barge_in_max_ms` always does.

`BargeIn` is built from its rules (`BargeInRules`), the input clock (`VoicedClock`: the turn
detector), the STT stream's partial transcripts (`Speculator`) and the call's task group; the
call tells it which reply is being spoken (`Spoken`: the reply's handle, which it interrupts)
and reports what `judge_final` says to ignore."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from voice_gateway.echo.base import EchoCanceller, NoCanceller

log = logging.getLogger(__name__)
_WORDS = re.compile(r"[a-z']+")
IgnoreReason = Literal["backchannel", "echo"]


def words(text: str) -> list[str]:
    return _WORDS.findall(text.lower().replace("-", " "))


def phrase_set(csv: str) -> frozenset[str]:
    return frozenset(" ".join(words(p)) for p in csv.split(",") if words(p))


def is_backchannel(text: str, phrases: frozenset[str]) -> bool:
    """The text is only backchannel phrases ("mm-hmm", "yeah, okay"); "" counts as one."""
    ws = words(text)
    i = 0
    while i < len(ws):
        for n in (3, 2, 1):
            if " ".join(ws[i : i + n]) in phrases:
                i += n
                break
        else:
            return False
    return True


def may_be_backchannel(text: str, phrases: frozenset[str]) -> bool:
    """Backchannel phrases, the last one perhaps cut short: what a check hears of a backchannel
    still being spoken ("M" of "Mm-hmm", "Ye" of "Yeah"; whisper on the first 360 ms of
    espeak-ng's "Mm-hmm." wrote "M")."""
    ws = words(text)
    if not ws or is_backchannel(text, phrases):
        return bool(ws)
    starts = [p.split() for p in phrases]
    for cut in range(max(0, len(ws) - 3), len(ws)):  # the start is whole phrases, the rest
        head, tail = ws[:cut], ws[cut:]  # begins one
        if (not head or is_backchannel(" ".join(head), phrases)) and any(
            len(tail) <= len(p)
            and p[: len(tail) - 1] == tail[:-1]
            and p[len(tail) - 1].startswith(tail[-1])
            for p in starts
        ):
            return True
    return False


def is_echo(text: str, reply_text: str, share: float = 0.6) -> bool:
    """At least `share` of the heard words are words of the reply being played (by their
    first four letters: an echo comes back clipped, "sentence" heard as "sent")."""
    heard = words(text)
    stems = {w[:4] for w in words(reply_text)}
    return bool(heard) and sum(w[:4] in stems for w in heard) >= share * len(heard) - 1e-9


ECHO_REMOVED_DB = 12.0  # the canceller took this much out of the speech: it was mostly echo
# (a caller over the reply loses 0-3 dB: the double-talk guard,
# docs/turn_taking.md#echo-cancellation; a converged canceller removes ~30 dB of echo, and
# what whisper still turned into words while the path was learned under load had 8.8-14.4 dB
# removed: "Here it's", "here will send")
PARTLY_REMOVED_DB = 6.0  # this much removed: a third of the words being the reply's is echo
PARTLY_SHARE = 1 / 3  # ("Here it's" at 13.0 dB: one word of two; else 0.6 of them)
LEARNING_S = 1.5  # the canceller has processed less reply audio than this in the call: it is
# still learning the echo path, and what it lets through is no evidence of a caller (the
# greeting's echo had 5.3 dB removed and two words heard when a check cut it): an
# "interruption" is heard again at the next check instead (tests/e2e speakerphone test)


def judge(
    text: str, phrases: frozenset[str], reply_text: str, echo_on: bool, removed_db: float = 0.0
) -> str | None:
    """None: a real interruption; else the reason to ignore it. `removed_db`: how much the
    echo canceller removed from this speech."""
    if echo_on and (removed_db >= ECHO_REMOVED_DB or not words(text)):
        return "echo"  # (no word at all over a reply with the canceller on: its residue)
    if is_backchannel(text, phrases):
        return "backchannel"
    share = PARTLY_SHARE if removed_db >= PARTLY_REMOVED_DB else 0.6
    if echo_on and is_echo(text, reply_text, share):
        return "echo"
    return None


def removed_db(start: tuple[float, float], now: tuple[float, float]) -> float:
    before, after = now[0] - start[0], now[1] - start[1]
    return 0.0 if before <= 0 else float(10 * np.log10(before / max(after, 1.0)))


@dataclass(slots=True)
class Overlap:
    """Speech that started while a reply was playing, not judged yet."""

    start_ms: int  # on the input timeline
    reply: object  # the reply it was spoken over: no other may be cut for it
    reply_text: str  # that reply's words (what its echo says), kept past the reply's end: a
    # transcript late on a busy machine is judged against them, not the next reply's
    energy: tuple[float, float] = (0.0, 0.0)  # the canceller's totals when it began
    check: asyncio.Task[None] | None = None  # transcribing it
    checked_ms: int = 0  # how much of it the last check had heard
    echo: bool = True  # no check has heard an interruption's words yet
    checked_energy: tuple[float, float] | None = None  # the totals at the end of the speech
    # the last check judged (None: no check has judged it yet)
    end_energy: tuple[float, float] | None = None  # the totals when it ended
    decided: bool = False
    outlived: bool = False  # the reply ended while this speech, perhaps its echo, went on


class Spoken(Protocol):
    """The reply being spoken, as barge-in sees it (pipeline/reply.py `Reply`)."""

    @property
    def playing(self) -> bool: ...

    @property
    def text(self) -> str: ...

    def interrupt(self, reason: str) -> bool: ...


class Speculator(Protocol):
    """Partial transcripts of the speech so far (the call's STT stream)."""

    def speculate(self) -> asyncio.Future[str] | None: ...

    def speculation(self) -> asyncio.Future[str] | None:
        """The newest decode: a check's own is cancelled by a newer one when the speech
        pauses (a comma in "Wait, stop"), and that one, of more of the same speech, answers
        it."""


class VoicedClock(Protocol):
    """The input timeline (the call's turn detector)."""

    @property
    def last_voiced_ms(self) -> int:
        """The end of the caller's last voiced frame."""


class Spawner(Protocol):
    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...


@dataclass(slots=True, frozen=True)
class BargeInRules:
    check_ms: int  # VG_BARGE_IN_CHECK_MS: speech over a reply is transcribed after this much
    max_ms: int  # VG_BARGE_IN_MAX_MS: speech this long always interrupts (unless echo)
    phrases: frozenset[str]  # backchannels (VG_BACKCHANNELS)
    echo_on: bool  # the call's echo canceller is on


@dataclass
class BargeIn:
    """One call's barge-in. The call tells it of the reply being spoken (`reply`), speech
    confirmed, each frame and the end of an utterance; it interrupts that reply, transcribes
    speech over it (`stt`, in `tasks`) and returns what to ignore."""

    rules: BargeInRules
    clock: VoicedClock
    stt: Speculator
    tasks: Spawner
    echo: EchoCanceller = field(default_factory=NoCanceller)  # its energy totals, its age
    reply: Spoken | None = None  # the reply under way (its identity too)
    overlap: Overlap | None = None

    @property
    def check_ms(self) -> int:
        return self.rules.check_ms

    @property
    def echo_on(self) -> bool:
        return self.rules.echo_on

    def playing(self) -> bool:
        return self.reply is not None and self.reply.playing

    def reply_text(self) -> str:
        return self.reply.text if self.reply is not None else ""

    def interrupt(self, reason: str) -> None:
        if self.reply is not None:
            self.reply.interrupt(reason)

    def close(self) -> None:
        """The call ended: forget the reply and any speech over it."""
        self.reply = self.overlap = None

    def confirmed(self, start_ms: int) -> None:
        """Speech long enough to count: over a playing reply it is judged, else it cancels."""
        if self.playing():
            self.overlap = Overlap(start_ms, self.reply, self.reply_text(), self.echo.energy())
        else:
            self.interrupt("barge_in")  # (a no-op unless a reply is under way, still silent)

    def frame(self) -> None:
        """Per frame: cancel once the speech is long, or once its start is transcribed and is
        neither a backchannel nor the reply's echo."""
        ov = self.overlap
        if ov is None or ov.decided:
            return
        spoken_ms = self.clock.last_voiced_ms - ov.start_ms
        if not self.playing() or self.reply is not ov.reply:
            # the reply ended (or was cut) while this speech went on: what no check has
            # heard as words of the caller's may be its echo's tail, judged at its end
            ov.outlived = True
            if not (self.echo_on and ov.echo):
                self._cancel(ov, "")  # (a turn of its own, as speech after a reply is)
        elif spoken_ms >= self.rules.max_ms and not (self.echo_on and ov.echo):
            self._cancel(ov, f"{spoken_ms} ms of speech")  # unless it may be the echo
        elif ov.check is None and spoken_ms >= ov.checked_ms + self.check_ms:
            spec = self.stt.speculate()
            if spec is None:  # the vendor cannot transcribe a part: an interruption
                self._cancel(ov, "no partial transcript from this STT")
            else:  # an echo is checked again every check_ms: the caller may join in
                ov.checked_ms = spoken_ms
                ov.reply_text = self.reply_text() or ov.reply_text  # (sentences added)
                ov.check = self.tasks.create_task(self._check(ov, spec, self.echo.energy()))

    def _cancel(self, ov: Overlap, why: str) -> None:
        ov.decided = True
        self._interrupt(ov, why)

    def _interrupt(self, ov: Overlap, why: str) -> None:
        """Cut the reply the speech was over, if it is still the one under way."""
        if self.reply is not ov.reply:
            return  # (a late verdict must not cut the next reply: it was not spoken over)
        if why:
            log.info("barge-in: %s", why)
        self.interrupt("barge_in")

    async def _check(
        self, ov: Overlap, spec: asyncio.Future[str], energy: tuple[float, float]
    ) -> None:
        while True:
            await asyncio.wait([spec])
            newer = self.stt.speculation()
            if not spec.cancelled() or newer is None or newer is spec:
                break
            spec = newer  # (waiting for the next check cost ~0.45 s in the backchannel test)
        ov.check = None
        if ov.decided or spec.cancelled() or spec.exception() is not None:
            return
        removed = self.removed(ov)
        reason = self.reason(spec.result(), removed, ov.reply_text)
        unsure = reason is None and may_be_backchannel(spec.result(), self.rules.phrases)
        learning = reason is None and self.echo_on and self.echo.cancelled_s < LEARNING_S
        if unsure:
            verdict = "maybe a backchannel: heard again"
        elif learning:
            verdict = "the canceller is still learning: heard again"
        else:
            verdict = reason or "interruption"
        log.info(  # never the words themselves: logs hold no caller's words
            "speech over the reply: %d words (%.1f dB removed as echo) -> %s",
            len(words(spec.result())),
            removed,
            verdict,
        )
        if learning:
            return  # (ov.echo unchanged: long speech waits for the canceller too)
        # re-checked every check_ms: the caller may join in
        ov.echo = reason == "echo"
        ov.checked_energy = energy
        if unsure:
            return  # a backchannel still being spoken: the next check or its end decides
        if reason is None:
            self._cancel(ov, "its words are an interruption")

    def _echo_since(self, ov: Overlap) -> IgnoreReason | None:
        """ "echo" when the last check heard the reply's echo and the canceller still removed
        most of what came after it (a caller joining in loses 0-3 dB): the whole utterance's
        words are then no new evidence. Whisper's decodes of an echo's residue run loose
        ("Here is Santan Sam." for "Here is sentence number"), and a longer one may hold too
        few of the reply's words: in a full run, one such utterance (checks: echo, 3-5 words,
        6.8-9.9 dB removed; final: 8 words) cut a reply on the speakerphone test."""
        checked = ov.checked_energy
        if not (self.echo_on and ov.echo and checked is not None):
            return None
        end = ov.end_energy or self.echo.energy()
        return (
            "echo"
            if end[0] <= checked[0] or removed_db(checked, end) >= PARTLY_REMOVED_DB
            else None
        )

    def removed(self, ov: Overlap) -> float:
        """dB of the overlap's sound that the echo canceller took out (echo's share)."""
        return removed_db(ov.energy, ov.end_energy or self.echo.energy())

    def reason(self, text: str, removed: float, reply_text: str) -> str | None:
        return judge(text, self.rules.phrases, reply_text, self.echo_on, removed)

    def ended(self) -> Overlap | None:
        """The utterance ended: its overlap if still undecided (judge it with `judge_final`)."""
        ov, self.overlap = self.overlap, None
        if ov is None or ov.decided:
            return None
        ov.decided, ov.end_energy = True, self.echo.energy()
        if self.reply is ov.reply:
            ov.reply_text = self.reply_text() or ov.reply_text
        return ov

    async def judge_final(
        self, transcript: asyncio.Task[Any], ov: Overlap
    ) -> tuple[str, str] | None:
        """The whole utterance spoken over a reply: (the reason to ignore it, its text), for
        the call to report; None: it cancelled the reply."""
        await asyncio.wait([transcript])
        result = None if transcript.cancelled() else transcript.result()
        text = result.strip() if isinstance(result, str) else None
        removed = self.removed(ov)
        reason = None
        if text is not None:
            reason = self.reason(text, removed, ov.reply_text) or self._echo_since(ov)
        if ov.outlived and reason != "echo":
            reason = None  # said as the reply ended, not over it: an answer, not a backchannel
        if reason is None or text is None:
            heard = "no transcript" if text is None else f"{len(words(text))} words"
            self._interrupt(
                ov,
                f"the utterance over the reply ended ({heard}, {removed:.1f} dB removed as echo)"
                " -> interruption",
            )
            return None
        return reason, text
