"""Approvals and client tools in a call. The loop decides (agents/approvals.py); this only
speaks the question, maps the caller's answer to the loop's `Answer`s and tells the socket.

A call that waits for the caller's approval: the agent's read-back was spoken ("Shall I ...?")
and `approval.request` sent. The next utterance answers it: a clear yes approves, a clear no
denies, anything else re-asks once and then denies. An app may answer with
`approval.response` instead. A client tool's call is sent as `tool.call`; its `tool.result`
lets the run go on. A call that ends while something waits denies it (nothing runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents.approvals import Answer, PendingCall
from agents.events import ApprovalRequest

REASK = "Sorry, I need a yes or a no."
YES = frozenset(
    "yes yeah yep yup sure ok okay correct right affirmative absolutely definitely".split()
)
YES_PHRASES = ("go ahead", "do it", "please do", "of course", "that's right", "sounds good")
NO = frozenset("no nope nah don't dont cancel stop negative never".split())
NO_PHRASES = ("do not", "not now", "don't do", "no thanks", "no thank you")
SAID_NO = "the caller said no"
UNCLEAR = "the caller gave no clear answer"
HUNG_UP = "the call ended before the caller answered"

Verdict = Literal["yes", "no", "unclear"]


class Events(Protocol):
    """Where the socket events go (the call's Transport)."""

    async def send_event(self, event: dict[str, Any]) -> None: ...


def classify(text: str) -> Verdict:
    """A spoken answer: "yes" or "no" when clearly one of them, else "unclear"."""
    low = text.lower().replace("’", "'")
    words = set(re.findall(r"[a-z']+", low))
    yes = bool(words & YES) or any(p in low for p in YES_PHRASES)
    no = bool(words & NO) or any(p in low for p in NO_PHRASES)
    if yes == no:
        return "unclear"
    return "yes" if yes else "no"


@dataclass(slots=True)
class Waiting:
    """What the call's conversation waits for (from the loop's ApprovalRequest)."""

    calls: list[PendingCall]
    asked: int = 1  # times the question was put to the caller
    results: list[Answer] = field(default_factory=list)  # client results that came in

    @property
    def approvals(self) -> list[PendingCall]:
        return [c for c in self.calls if not c.client]

    @property
    def clients(self) -> list[PendingCall]:
        return [c for c in self.calls if c.client]

    def question(self) -> str:
        return " ".join(c.prompt for c in self.approvals)


class CallApprovals:
    """One call's waiting calls; `events` takes the socket events."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.waiting: Waiting | None = None

    async def requested(self, ev: ApprovalRequest) -> str | None:
        """The run stopped for these calls: tell the socket; the question to speak, if any."""
        self.waiting = Waiting(list(ev.calls))
        for c in ev.calls:
            kind = "tool.call" if c.client else "approval.request"
            extra = {} if c.client else {"prompt": c.prompt}
            event = {"type": kind, "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            await self.events.send_event({**event, **extra})
        question = self.waiting.question()
        return question or None

    def spoken(self, text: str) -> list[Answer] | str | None:
        """The caller's utterance while calls wait: the answers (the run goes on), a question
        to re-ask (str), or None (not an answer: an ordinary turn, which refuses what waits)."""
        w = self.waiting
        if w is None or not w.approvals:
            return None
        verdict = classify(text)
        if verdict == "unclear" and w.asked < 2:
            w.asked += 1
            return f"{REASK} {w.question()}"
        approve = verdict == "yes"
        reason = None if approve else SAID_NO if verdict == "no" else UNCLEAR
        return self._finish(
            [Answer(c.call_id, approve=approve, reason=reason) for c in w.approvals]
        )

    def answered(self, answer: Answer) -> list[Answer] | str:
        """An `approval.response` or `tool.result`: the answers once nothing else waits, or
        an error message (the call id waits for nothing: the call goes on)."""
        w = self.waiting
        ids = {c.call_id: c for c in w.calls} if w is not None else {}
        call = ids.get(answer.call_id)
        if w is None or call is None or call.client != (answer.kind == "tool"):
            what = "tool call" if answer.kind == "tool" else "approval"
            return f"no {what} {answer.call_id!r} is waiting"
        w.results = [r for r in w.results if r.call_id != answer.call_id] + [answer]
        if {r.call_id for r in w.results} != set(ids):
            return []  # more to come
        return self._finish(w.results)

    def hung_up(self) -> list[Answer]:
        """The call ended: every waiting call refused (nothing runs without its answer)."""
        w = self.waiting
        if w is None:
            return []
        return self._finish([Answer(c.call_id, approve=False, reason=HUNG_UP) for c in w.calls])

    def _finish(self, answers: list[Answer]) -> list[Answer]:
        self.waiting = None
        return answers
