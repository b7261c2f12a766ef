"""Who a call is from: the caller key a call may use, and its conversation (VoiceSession)."""

from __future__ import annotations

from dataclasses import dataclass

from memory.identities import BadCallerKey
from memory.models import AgentData, NotFound
from memory.service import Memory
from voice_gateway.callers import CallerConversation, open_conversation
from voice_gateway.pipeline.transport import CLOSE_NOT_FOUND, CLOSE_POLICY, StartInfo


class CallRefused(Exception):
    """The call cannot start: a fatal `error` event with `code`, then close `close_code`."""

    def __init__(self, code: str, message: str, close_code: int) -> None:
        super().__init__(message)
        self.code, self.message, self.close_code = code, message, close_code


@dataclass(frozen=True, slots=True)
class CallerRule:
    """`bound`: the caller the credential names (a session token's, Twilio's `From`); the
    client cannot name another. `may_choose`: the client may name one in its start message
    (an API key or open loopback mode: the app is trusted with its users' ids)."""

    bound: str | None = None
    may_choose: bool = False
    # the start message's conversation id is the platform's call id (Twilio's CallSid), not
    # one of ours: a caller continues their own conversation; a call without a caller (a
    # withheld number) gets a new conversation under the call's id
    platform_call_id: bool = False

    def key(self, named: str | None) -> str | None:
        if self.bound is not None:
            if named is not None and named != self.bound:
                raise CallRefused(
                    "caller_mismatch", "the session token was issued for another caller", 4401
                )
            return self.bound
        if named is not None and not self.may_choose:
            raise CallRefused(
                "caller_not_allowed",
                "name the caller when the session token is issued (POST .../voice/sessions)",
                4401,
            )
        return named

    async def open(
        self, memory: Memory, agent: AgentData, info: StartInfo, source: str
    ) -> CallerConversation:
        try:
            key = self.key(info.caller)
            if self.platform_call_id:
                return await open_conversation(
                    memory,
                    agent,
                    key,
                    requested=None if key is not None else info.conversation_id,
                    source=source,
                    adopt=True,
                )
            return await open_conversation(
                memory, agent, key, requested=info.conversation_id, source=source
            )
        except BadCallerKey as exc:
            raise CallRefused("invalid_caller", str(exc), CLOSE_POLICY) from exc
        except NotFound as exc:
            raise CallRefused(
                "conversation_not_found",
                f"conversation not found: {info.conversation_id}",
                CLOSE_NOT_FOUND,
            ) from exc
