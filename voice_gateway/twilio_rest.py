"""Twilio's REST API through the official `twilio` SDK (async HTTP client): place a call,
hang one up, move a live call to other TwiML (a transfer). The base URL is a setting
(VG_TWILIO_API_URL: a regional edge, or a loopback stand-in in tests); the account SID and
auth token are TWILIO_ACCOUNT_SID / TWILIO_AUTH_TOKEN."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.rest import Client

from voice_gateway.callers import masked
from voice_gateway.settings import Settings

T = TypeVar("T")
TIMEOUT_S = 10.0  # one REST request; Twilio answers Calls create in well under a second
# the progress Twilio reports to our status callback (completed is always sent)
STATUS_EVENTS = ["initiated", "ringing", "answered", "completed"]


# a phone number inside Twilio's error text ("The number +15551230000 is unverified")
_NUMBER = re.compile(r"\+?\d[\d ().-]{5,}\d")


def without_numbers(text: str) -> str:
    """Twilio's error text with every phone number in it masked as log lines show callers
    (voice_gateway/callers.py `masked`): the text reaches logs and API answers."""
    return _NUMBER.sub(lambda m: masked(re.sub(r"[^\d+]", "", m.group())), text)


class TwilioUnavailable(Exception):
    """Twilio refused or could not be reached; `status` is Twilio's HTTP status (0: none)."""

    def __init__(self, detail: str, status: int = 0) -> None:
        super().__init__(detail)
        self.detail, self.status = detail, status


@dataclass(frozen=True, slots=True)
class OutboundCall:
    to: str
    from_: str
    twiml_url: str
    status_url: str
    machine_detection: str | None = None  # "Enable" | "DetectMessageEnd"
    amd_url: str | None = None  # where Twilio POSTs AnsweredBy (async AMD: the call goes on)
    record: bool = False


class TwilioRest:
    def __init__(self, account_sid: str, auth_token: str, base_url: str | None = None) -> None:
        # a session per request (pool_connections=False): nothing to close, no loop binding
        self.client = Client(
            account_sid, auth_token, http_client=AsyncTwilioHttpClient(pool_connections=False)
        )
        if base_url:
            self.client.api.base_url = base_url.rstrip("/")

    @classmethod
    def of(cls, settings: Settings) -> TwilioRest | None:
        """The REST client when credentials are set, else None (no outbound calls)."""
        if not (settings.twilio_account_sid and settings.twilio_auth_token):
            return None
        return cls(settings.twilio_account_sid, settings.twilio_auth_token, settings.twilio_api_url)

    async def create_call(self, call: OutboundCall) -> str:
        """Place the call; its CallSid."""
        extra: dict[str, object] = {}
        if call.machine_detection:
            extra["machine_detection"] = call.machine_detection
            if call.amd_url:
                extra |= {"async_amd": "true", "async_amd_status_callback": call.amd_url}
                extra["async_amd_status_callback_method"] = "POST"
        if call.record:
            extra["record"] = True
        created = await self._do(
            self.client.calls.create_async(
                to=call.to,
                from_=call.from_,
                url=call.twiml_url,
                method="POST",
                status_callback=call.status_url,
                status_callback_method="POST",
                status_callback_event=STATUS_EVENTS,
                **extra,
            )
        )
        return str(created.sid)

    async def complete(self, call_sid: str) -> str:
        """Hang up the call (status=completed; a call still ringing is canceled by Twilio);
        its status as Twilio reports it."""
        updated = await self._do(self.client.calls(call_sid).update_async(status="completed"))
        return str(updated.status)

    async def redirect(self, call_sid: str, twiml: str) -> str:
        """Replace the live call's TwiML with `twiml` (a transfer's <Dial>); its status."""
        updated = await self._do(self.client.calls(call_sid).update_async(twiml=twiml))
        return str(updated.status)

    async def numbers(self, call_sid: str) -> tuple[str, str]:
        """(our number, the other party's) of a call, as Twilio reports it."""
        call = await self._do(self.client.calls(call_sid).fetch_async())
        inbound = str(call.direction) == "inbound"
        return (str(call.to), str(call._from)) if inbound else (str(call._from), str(call.to))

    async def create_leg(self, to: str, from_: str, twiml: str) -> str:
        """Place a call that runs `twiml` (a warm transfer's second leg); its CallSid."""
        created = await self._do(self.client.calls.create_async(to=to, from_=from_, twiml=twiml))
        return str(created.sid)

    async def _do(self, request: Coroutine[Any, Any, T]) -> T:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                return await request
        except TwilioRestException as exc:
            raise TwilioUnavailable(
                f"Twilio refused: {without_numbers(exc.msg)}", exc.status
            ) from exc
        except (TwilioException, OSError, aiohttp.ClientError, TimeoutError) as exc:
            raise TwilioUnavailable(f"Twilio could not be reached ({type(exc).__name__})") from exc
