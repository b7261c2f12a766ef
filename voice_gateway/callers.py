"""Caller identity at the edges: the caller key of a turn (a Twilio `From` number, an app's
user id bound into a session token, OpenAI's `user` field, a REST `caller`), normalised and
checked, turned into the caller's identity and their conversation on an agent.

A phone number never appears whole in a log line: `masked` keeps the last two digits."""

from __future__ import annotations

import hashlib
import re

from sqlalchemy.exc import IntegrityError

from memory.identities import BadCallerKey, check_caller_key
from memory.models import AgentData, ConversationData, IdentityData, NotFound
from memory.service import Memory

_PHONE_JUNK = re.compile(r"[\s().\-]")
_PHONE = re.compile(r"^\+?\d{3,15}$")

__all__ = ["BadCallerKey", "CallerConversation", "masked", "normalize_phone", "open_conversation"]


def normalize_phone(number: str) -> str | None:
    """E.164-like form of a caller id (`+15551234567`); None for a withheld or non-numeric
    caller id ("anonymous", "restricted", a SIP URI without digits)."""
    digits = _PHONE_JUNK.sub("", number or "")
    if not _PHONE.match(digits):
        return None
    return digits if digits.startswith("+") else "+" + digits


def masked(key: str | None) -> str:
    """How a caller key may appear in logs: a short hash, plus the last two characters."""
    if not key:
        return "-"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"caller:{digest}…{key[-2:]}"


class CallerConversation:
    """The identity (None: no caller) and the conversation a call or request talks in."""

    __slots__ = ("conversation", "identity")

    def __init__(self, identity: IdentityData | None, conversation: ConversationData) -> None:
        self.identity = identity
        self.conversation = conversation

    @property
    def identity_id(self) -> str | None:
        return self.identity.id if self.identity is not None else None


async def open_conversation(
    memory: Memory,
    agent: AgentData,
    caller: str | None,
    *,
    requested: str | None = None,
    source: str = "voice",
    adopt: bool = False,
    new: bool = False,
) -> CallerConversation:
    """Resolve `caller` (creating their identity and their copies of the agent's caller
    blocks on first contact) and open their conversation: `requested` if it is theirs on
    this agent (NotFound otherwise), else their newest open one, else a new one. With
    `adopt`, an unknown `requested` id (a platform's call id) becomes a new conversation of
    this caller. BadCallerKey for a malformed key."""
    identity = None
    if caller is not None:
        key = check_caller_key(caller)
        identity = await memory.identities.resolve(agent.user_id, key, agent_id=agent.id)
        await memory.blocks.ensure_caller_copies(agent.id, identity.id)
    identity_id = identity.id if identity is not None else None
    if requested and adopt:
        try:
            conv = await memory.conversations.open_for(
                agent.id, identity_id=identity_id, requested=requested
            )
        except NotFound:
            try:
                conv = await memory.conversations.create(
                    agent.id,
                    identity_id=identity_id,
                    user_id=agent.user_id,
                    source=source,
                    conversation_id=requested,
                )
            except IntegrityError:
                # the id is taken: by a concurrent first request of this call (then it is
                # this caller's now), or by another caller or agent (NotFound, as unknown)
                conv = await memory.conversations.open_for(
                    agent.id, identity_id=identity_id, requested=requested
                )
        return CallerConversation(identity, conv)
    conv = await memory.conversations.open_for(
        agent.id,
        identity_id=identity_id,
        requested=requested,
        source=source,
        user_id=agent.user_id,
        new=new,
    )
    return CallerConversation(identity, conv)
