"""A loopback stand-in for Twilio's REST API (Calls create, update, fetch), which the official
`twilio` SDK talks to through VG_TWILIO_API_URL. Every request is recorded (method, path, form
fields, the Basic auth user, the monotonic time it arrived); answers have the shape of
Twilio's Call resource. `inbound` makes a call that came in (for updates of a live call)."""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CALLS = "/2010-04-01/Accounts/{account}/Calls"


@dataclass
class Recorded:
    method: str
    path: str
    form: dict[str, list[str]]
    user: str
    password: str
    at: float = field(default_factory=time.monotonic)

    def one(self, name: str) -> str:
        return self.form[name][0]


@dataclass
class FakeTwilioApi:
    account_sid: str
    auth_token: str
    requests: list[Recorded] = field(default_factory=list)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_create: int | None = None  # answer Calls create with this HTTP status (Twilio's error)
    fail_update: int | None = None  # answer Calls update with this HTTP status

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(CALLS + ".json", self.create, methods=["POST"]),
                Route(CALLS + "/{sid}.json", self.update, methods=["POST"]),
                Route(CALLS + "/{sid}.json", self.fetch, methods=["GET"]),
            ]
        )

    async def _record(self, request: Request) -> Recorded | JSONResponse:
        form: dict[str, list[str]] = {}
        for key, value in (await request.form()).multi_items():
            form.setdefault(key, []).append(str(value))
        scheme, _, cred = request.headers.get("authorization", "").partition(" ")
        user, _, password = base64.b64decode(cred).decode().partition(":") if cred else ("", "", "")
        rec = Recorded(request.method, request.url.path, form, user, password)
        self.requests.append(rec)
        if scheme != "Basic" or (user, password) != (self.account_sid, self.auth_token):
            return _error(401, 20003, "Authenticate")
        if request.path_params["account"] != self.account_sid:
            return _error(404, 20404, "The requested resource was not found")
        return rec

    async def create(self, request: Request) -> JSONResponse:
        rec = await self._record(request)
        if isinstance(rec, JSONResponse):
            return rec
        if self.fail_create is not None:
            return _error(
                self.fail_create, 21215, "Geo Permission configuration is not permitting call"
            )
        sid = "CA" + uuid.uuid4().hex
        call = self._resource(sid, rec.one("To"), rec.one("From"), "queued")
        self.calls[sid] = call
        return JSONResponse(call, 201)

    async def update(self, request: Request) -> JSONResponse:
        rec = await self._record(request)
        if isinstance(rec, JSONResponse):
            return rec
        call = self.calls.get(request.path_params["sid"])
        if call is None:
            return _error(404, 20404, "The requested resource was not found")
        if self.fail_update is not None:
            return _error(self.fail_update, 13223, "Dial: Invalid phone number format")
        if "Status" in rec.form:
            status = rec.one("Status")
            call["status"] = (
                "canceled"
                if call["status"] in ("queued", "ringing") and status == "completed"
                else status
            )
            call["end_time"] = formatdate(usegmt=True)
        return JSONResponse(call)

    async def fetch(self, request: Request) -> JSONResponse:
        rec = await self._record(request)
        if isinstance(rec, JSONResponse):
            return rec
        call = self.calls.get(request.path_params["sid"])
        if call is None:
            return _error(404, 20404, "The requested resource was not found")
        return JSONResponse(call)

    def _resource(self, sid: str, to: str, from_: str, status: str) -> dict[str, Any]:
        now = formatdate(usegmt=True)
        uri = f"/2010-04-01/Accounts/{self.account_sid}/Calls/{sid}"
        return {
            "account_sid": self.account_sid,
            "annotation": None,
            "answered_by": None,
            "api_version": "2010-04-01",
            "caller_name": None,
            "date_created": now,
            "date_updated": now,
            "direction": "outbound-api",
            "duration": None,
            "end_time": None,
            "forwarded_from": None,
            "from": from_,
            "from_formatted": from_,
            "group_sid": None,
            "parent_call_sid": None,
            "phone_number_sid": "PN" + "0" * 32,
            "price": None,
            "price_unit": "USD",
            "queue_time": "0",
            "sid": sid,
            "start_time": None,
            "status": status,
            "subresource_uris": {
                "notifications": f"{uri}/Notifications.json",
                "recordings": f"{uri}/Recordings.json",
                "payments": f"{uri}/Payments.json",
                "events": f"{uri}/Events.json",
                "siprec": f"{uri}/Siprec.json",
                "streams": f"{uri}/Streams.json",
                "transcriptions": f"{uri}/Transcriptions.json",
                "user_defined_message_subscriptions": f"{uri}/UserDefinedMessageSubscriptions.json",
                "user_defined_messages": f"{uri}/UserDefinedMessages.json",
            },
            "to": to,
            "to_formatted": to,
            "trunk_sid": None,
            "uri": f"{uri}.json",
        }

    def inbound(self, sid: str, from_: str, to: str) -> None:
        """A call that came in to `to` (our number) and is in progress."""
        self.calls[sid] = {**self._resource(sid, to, from_, "in-progress"), "direction": "inbound"}

    def progress(self, sid: str, status: str) -> None:
        """The call moves on at Twilio (ringing, in-progress, ...), as the test plays it."""
        self.calls[sid]["status"] = status

    def of(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]


def _error(status: int, code: int, message: str) -> JSONResponse:
    """Twilio's error body."""
    body = {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return JSONResponse(body, status)
