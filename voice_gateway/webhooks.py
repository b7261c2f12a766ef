"""Signed webhooks of call events: when a call ends, its report (voice_gateway/call_reports.py)
is POSTed to VG_CALL_WEBHOOK_URL as `{id, type: "call.ended", created_at, data}`.

Signing is Stripe's scheme: `X-VG-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of
"<t>.<body>" with VG_CALL_WEBHOOK_SECRET>`; `X-VG-Event-Id` repeats the event's id, the same
on every attempt, for the receiver to drop a repeat. Deliveries are queued in the database
(memory/webhooks.py) and sent in the background: a call never waits for its webhook, and a
restart resumes what was pending. A 2xx delivers; a time-out, a connection error, a 5xx, a 408
or a 429 is retried after a pause that doubles per attempt (with jitter, at most
`MAX_PAUSE_S`), up to VG_CALL_WEBHOOK_ATTEMPTS attempts; any other answer, or the last
attempt failing, drops the event with one warning (ids and the error, never the call's
words or numbers)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta

import httpx

from memory.calls import CallData
from memory.db import Database
from memory.ids import new_id, utcnow
from memory.webhooks import DeliveryData, WebhookStore
from voice_gateway.call_reports import call_report
from voice_gateway.settings import Settings

log = logging.getLogger(__name__)
CALL_ENDED = "call.ended"
SIGNATURE_HEADER = "X-VG-Signature"
EVENT_ID_HEADER = "X-VG-Event-Id"
RETRIED_4XX = frozenset({408, 429})  # a time-out and a rate limit: worth another try
MAX_PAUSE_S = 600.0
LEASE_MARGIN_S = 30.0  # a claimed row waits this long past the attempt's time-out
POLL_S = 5.0  # a look at the table for rows another gateway queued or left
MAX_IN_FLIGHT = 8


class WebhookConfigError(ValueError):
    pass


def signature(secret: str, body: bytes, t: int) -> str:
    """The `X-VG-Signature` value of `body` sent at unix time `t`."""
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def pause_s(backoff_s: float, attempts: int) -> float:
    """The wait after the `attempts`-th failed attempt: doubling, capped, jittered (half to
    all of it) so that many events failing together do not retry together."""
    return min(MAX_PAUSE_S, backoff_s * 2 ** (attempts - 1)) * random.uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    attempts: int = 8
    timeout_s: float = 10.0
    backoff_s: float = 2.0


class CallWebhooks:
    """Queues call events and sends them from a background task (`start`, `aclose`)."""

    def __init__(
        self,
        db: Database,
        url: str,
        secret: str,
        policy: WebhookPolicy | None = None,
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = WebhookStore(db)
        self.db, self.url, self.secret = db, url, secret
        self.policy = policy or WebhookPolicy()
        self.poll_s = poll_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._http: httpx.AsyncClient | None = None

    @classmethod
    def of(cls, settings: Settings, db: Database) -> CallWebhooks | None:
        """The configured webhooks (None: VG_CALL_WEBHOOK_URL unset)."""
        if not settings.call_webhook_url:
            return None
        if not settings.call_webhook_secret:
            raise WebhookConfigError("VG_CALL_WEBHOOK_URL needs VG_CALL_WEBHOOK_SECRET to sign")
        policy = WebhookPolicy(
            settings.call_webhook_attempts,
            settings.call_webhook_timeout_s,
            settings.call_webhook_backoff_s,
        )
        return cls(db, settings.call_webhook_url, settings.call_webhook_secret, policy)

    async def call_ended(self, call: CallData) -> str | None:
        """Queue the `call.ended` event of an ended call: its id (None: it had one already)."""
        event_id = new_id("evt")
        event = {
            "id": event_id,
            "type": CALL_ENDED,
            "created_at": utcnow().isoformat(),
            "data": await call_report(self.db, call),
        }
        body = json.dumps(event, separators=(",", ":"))
        if not await self.store.enqueue(event_id, CALL_ENDED, call.id, self.url, body):
            return None
        self._wake.set()
        return event_id

    def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=self.policy.timeout_s, follow_redirects=False)
        self._task = asyncio.create_task(self._run(), name="call webhooks")

    async def aclose(self, grace_s: float = 5.0) -> None:
        """Stop: sends under way get `grace_s` to finish; what is left stays queued (a send
        cut short is retried when its lease runs out)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._sends:
            _, late = await asyncio.wait(list(self._sends), timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.send_due()
            except Exception:  # the database away for a moment: the next look retries
                log.warning("call webhooks: the queue could not be read", exc_info=True)
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            except TimeoutError:
                pass

    async def send_due(self) -> int:
        """Claim the due deliveries (as many as may be in flight) and start sending them."""
        room = MAX_IN_FLIGHT - len(self._sends)
        started = 0
        for d in await self.store.due(room) if room > 0 else []:
            lease = utcnow() + timedelta(seconds=self.policy.timeout_s + LEASE_MARGIN_S)
            claimed = await self.store.claim(d, lease)
            if claimed is None:
                continue
            task = asyncio.create_task(self._send(claimed), name=f"webhook {d.id}")
            self._sends.add(task)
            task.add_done_callback(self._sent)
            started += 1
        return started

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sends.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("webhook: an outcome not stored (%r); retried after its lease", exc)
        self._wake.set()  # room for another

    async def _send(self, d: DeliveryData) -> None:
        assert self._http is not None
        body = d.body.encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(self.secret, body, int(time.time())),
            EVENT_ID_HEADER: d.id,
            "User-Agent": "voice-gateway-webhooks",
        }
        try:
            resp = await self._http.post(d.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            await self._failed(d, type(exc).__name__, retry=True)
            return
        code = resp.status_code
        if 200 <= code < 300:
            await self.store.delivered(d)
            log.info("webhook %s %s (call %s) delivered", d.event_type, d.id, d.call_id)
            return
        await self._failed(d, f"HTTP {code}", retry=code >= 500 or code in RETRIED_4XX)

    async def _failed(self, d: DeliveryData, error: str, *, retry: bool) -> None:
        if retry and d.attempts < self.policy.attempts:
            wait = pause_s(self.policy.backoff_s, d.attempts)
            await self.store.retry(d, utcnow() + timedelta(seconds=wait), error)
            asyncio.get_running_loop().call_later(wait, self._wake.set)
            log.debug("webhook %s: attempt %d failed (%s)", d.id, d.attempts, error)
            return
        await self.store.dropped(d, error)
        log.warning(
            "webhook %s %s (call %s) dropped after %d attempt(s): %s",
            *(d.event_type, d.id, d.call_id, d.attempts, error),
        )
