"""Outbound calls: what may be dialled (E.164, the operator's allowlist), the request body of
`POST /v1/agents/{id}/calls`, and the placing of a call (that route and scheduled calls:
voice_gateway/scheduler.py): checks, the call record, Twilio's Calls create."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memory.calls import CallData, CallStore
from memory.identities import BadCallerKey, check_caller_key
from memory.models import AgentData
from voice_gateway.callers import masked
from voice_gateway.capacity import RETRY_AFTER_S
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway
from voice_gateway.quotas import QuotaExceeded
from voice_gateway.twilio_rest import OutboundCall, TwilioRest, TwilioUnavailable

log = logging.getLogger(__name__)
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
VOICE_PATH = "/v1/telephony/twilio/voice"
STATUS_PATH = "/v1/telephony/twilio/status"
AMD_PATH = "/v1/telephony/twilio/amd"  # Twilio's answering-machine verdict (async AMD)
NO_TWILIO = "outbound calls need TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN"


class PlaceCall(BaseModel):
    """`POST /v1/agents/{id}/calls`. `to` and `from` are E.164 numbers; `caller` is the caller
    key of the person called (default: the `to` number): their memory and conversation."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    to: str = Field(max_length=16)
    from_: str = Field(alias="from", max_length=16)
    caller: str | None = Field(None, max_length=256)
    first_message: str | None = Field(None, min_length=1, max_length=2000)
    machine_detection: Literal["Enable", "DetectMessageEnd"] | None = None
    record: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("to", "from_")
    @classmethod
    def _e164(cls, value: str) -> str:
        if not E164.match(value):
            raise ValueError("must be an E.164 number: '+' and 7 to 15 digits, e.g. +15551230000")
        return value

    def caller_key(self, field: str = "caller") -> str:
        """Whose memory and conversation the call is; ApiError 422 naming `field` if bad."""
        try:
            return check_caller_key(self.caller) if self.caller is not None else self.to
        except BadCallerKey as exc:
            raise ApiError(422, f"{field}: {exc}") from exc


def allowlist(setting: str | None) -> list[str]:
    return [p.strip() for p in (setting or "").split(",") if p.strip()]


def dial_out_refusal(gw: Gateway, to: str) -> str | None:
    """Why `to` may not be dialled (VG_DIAL_OUT_ALLOWLIST set and no prefix matches), or None."""
    prefixes = allowlist(gw.settings.dial_out_allowlist)
    if prefixes and not any(to.startswith(p) for p in prefixes):
        return "the number is outside the dial-out allowlist (VG_DIAL_OUT_ALLOWLIST)"
    return None


async def place(
    gw: Gateway, agent: AgentData, body: PlaceCall, base: str, *, record_refusal: bool = False
) -> CallData:
    """Place `body` as a Twilio call of `agent` (Twilio reaches this gateway at `base`): its
    call record, status queued. ApiError when refused: 422 bad caller, 403 allowlist, 503 no
    credentials or no call slot, 429 quota, 502 Twilio refused (the record is then failed).
    `record_refusal`: a call refused before Twilio gets a failed record too (its end_reason
    says why), as a call nobody waits on must leave a trace."""
    caller = body.caller_key()
    store = CallStore(gw.memory.db)
    options = {"first_message": body.first_message, "machine_detection": body.machine_detection}

    async def create(status: str) -> CallData:
        return await store.create(
            agent.id,
            user_id=agent.user_id,
            direction="outbound",
            transport="twilio",
            status=status,
            caller=caller,
            options={**options, "record": body.record},
            metadata=body.metadata,
        )

    async def refused(end_reason: str, exc: ApiError) -> ApiError:
        if record_refusal:
            failed = await create("queued")
            await store.update(failed.id, status="failed", end_reason=end_reason)
        return exc

    if (why := dial_out_refusal(gw, body.to)) is not None:
        raise await refused("not_allowed", ApiError(403, why))
    rest = TwilioRest.of(gw.settings)
    if rest is None:
        raise await refused("not_configured", ApiError(503, NO_TWILIO))
    if (busy := gw.capacity.refusal()) is not None:
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        raise await refused("over_capacity", ApiError(503, busy.detail, retry))
    # the call counts against the agent's owner, as its media stream will (routes/twilio.py)
    identity = f"user:{agent.user_id}" if agent.user_id else "admin"
    try:
        await (await gw.quotas.open_call(identity)).close()  # a free slot and minutes left
    except QuotaExceeded as exc:
        raise await refused("quota_exceeded", ApiError(429, exc.detail)) from exc
    record = await create("queued")
    twiml_url = f"{base}{VOICE_PATH}?{urlencode({'agent_id': agent.id, 'call_id': record.id})}"
    outbound = OutboundCall(
        to=body.to,
        from_=body.from_,
        twiml_url=twiml_url,
        status_url=f"{base}{STATUS_PATH}?{urlencode({'call_id': record.id})}",
        machine_detection=body.machine_detection,
        amd_url=f"{base}{AMD_PATH}?{urlencode({'call_id': record.id})}",
        record=body.record,
    )
    try:
        sid = await rest.create_call(outbound)
    except TwilioUnavailable as exc:
        await store.update(record.id, status="failed", end_reason="failed")
        log.warning("outbound call %s to %s failed: %s", record.id, masked(body.to), exc.detail)
        raise ApiError(502, exc.detail) from exc
    record = await store.update(record.id, vendor_call_id=sid)
    log.info("outbound call %s to %s placed (agent %s)", record.id, masked(body.to), agent.id)
    return record
