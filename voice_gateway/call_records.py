"""Every call's record, written as calls enter and leave the live-calls registry
(voice_gateway/live_calls.py): an inbound call gets a new record when it starts; an outbound
Twilio call answers the record `POST /v1/agents/{id}/calls` made (found by its CallSid).
When a call leaves, its conversation, its caller key and how it ended are stored.

End reasons: `server_shutdown` (the gateway drained the call), else the session's own
`end_reason` (`caller_hung_up`, `caller_ended`, `idle`); without one, the record says
`completed`. A Twilio status callback
then refines an outbound call's outcome (routes/twilio.py). With webhooks configured, an ended
call's `call.ended` event is queued (voice_gateway/webhooks.py)."""

from __future__ import annotations

import logging

from memory.calls import CallStore
from memory.models import NotFound
from memory.service import Memory
from voice_gateway.live_calls import RecordedCall
from voice_gateway.webhooks import CallWebhooks

log = logging.getLogger(__name__)
TRANSPORTS = {  # transport class -> the record's transport
    "BrowserTransport": "browser",
    "TwilioTransport": "twilio",
    "WebRTCTransport": "webrtc",
}


def transport_of(call: RecordedCall) -> str:
    name = type(call.transport).__name__
    return TRANSPORTS.get(name, call.transport.source)


class CallRecords:
    """The registry's recorder: call records in the database."""

    def __init__(self, memory: Memory, webhooks: CallWebhooks | None = None) -> None:
        self.memory = memory
        self.store = CallStore(memory.db)
        self.webhooks = webhooks

    async def opened(self, call: RecordedCall) -> str:
        sid = str(getattr(call.transport, "call_sid", "") or "") or None
        if sid is not None:
            known = await self.store.by_vendor_id(sid)
            if known is not None and not known.ended:
                await self.store.update(known.id, status="in-progress")
                return known.id
        record = await self.store.create(
            call.agent.id,
            user_id=call.agent.user_id,
            direction="inbound",
            transport=transport_of(call),
            status="in-progress",
            vendor_call_id=sid,
        )
        log.info("call %s (%s) started on agent %s", record.id, record.transport, call.agent.id)
        return record.id

    async def closed(self, call: RecordedCall, record_id: str, end_reason: str | None) -> None:
        reason = end_reason or call.end_reason or "completed"
        caller = None
        if call.identity_id is not None:
            try:
                identity = await self.memory.identities.get(call.identity_id, None, scoped=False)
                caller = identity.identifier_key
            except NotFound:
                pass
        record = await self.store.update(
            record_id,
            status="completed",
            end_reason=str(reason),
            conversation_id=call.conversation_id,
            caller=caller,
        )
        log.info("call %s ended: %s", record_id, reason)
        if self.webhooks is not None:
            try:
                await self.webhooks.call_ended(record)
            except Exception as exc:  # the record is stored: only its webhook is lost
                log.warning("call %s: call.ended webhook not queued: %r", record_id, exc)
