"""Webhook deliveries in the database: queued in one row per event, so pending deliveries
outlive a restart and any gateway on the same database can send them.

A sender `claim`s a due row before each attempt: the claim counts the attempt and leases the
row (its `next_at` moves past the attempt's time-out) by compare-and-set on `attempts`, so
two gateways never send the same attempt; a sender that dies mid-attempt leaves the row to be
claimed again when the lease runs out (at least once)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from memory.db import Database
from memory.ids import utcnow
from memory.models import NotFound, _Model
from memory.orm import WebhookDelivery

DeliveryStatus = Literal["pending", "delivered", "dropped"]


class DeliveryData(_Model):
    id: str
    event_type: str
    call_id: str
    url: str
    body: str
    status: DeliveryStatus
    attempts: int
    next_at: datetime
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None


class WebhookStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def enqueue(
        self, event_id: str, event_type: str, call_id: str, url: str, body: str
    ) -> bool:
        """Queue an event, due at once; False if this call already has one of this type."""
        now = utcnow()
        row = WebhookDelivery(
            id=event_id, event_type=event_type, call_id=call_id, url=url, body=body,
            status="pending", attempts=0, next_at=now, created_at=now,
        )  # fmt: skip
        try:
            async with self.db.write() as s:
                s.add(row)
        except IntegrityError:
            return False
        return True

    async def get(self, event_id: str) -> DeliveryData:
        async with self.db.read() as s:
            row = await s.scalar(select(WebhookDelivery).where(WebhookDelivery.id == event_id))
        if row is None:
            raise NotFound("webhook delivery", event_id)
        return DeliveryData.model_validate(row)

    async def of_call(self, call_id: str) -> list[DeliveryData]:
        async with self.db.read() as s:
            q = select(WebhookDelivery).where(WebhookDelivery.call_id == call_id)
            return [DeliveryData.model_validate(r) for r in await s.scalars(q)]

    async def due(self, limit: int) -> list[DeliveryData]:
        """Pending rows whose next attempt is due, oldest first."""
        q = (
            select(WebhookDelivery)
            .where(WebhookDelivery.status == "pending", WebhookDelivery.next_at <= utcnow())
            .order_by(WebhookDelivery.next_at)
            .limit(limit)
        )
        async with self.db.read() as s:
            return [DeliveryData.model_validate(r) for r in await s.scalars(q)]

    async def claim(self, d: DeliveryData, lease_until: datetime) -> DeliveryData | None:
        """Take the row for one attempt (see the module docstring): the row as claimed, to
        pass to `delivered`, `retry` or `dropped`; None: another sender took it, or it is no
        longer pending."""
        if not await self._set(d, attempts=d.attempts + 1, next_at=lease_until):
            return None
        return d.model_copy(update={"attempts": d.attempts + 1, "next_at": lease_until})

    async def delivered(self, d: DeliveryData) -> None:
        await self._set(d, status="delivered", last_error=None, finished_at=utcnow())

    async def retry(self, d: DeliveryData, next_at: datetime, error: str) -> None:
        await self._set(d, next_at=next_at, last_error=error[:300])

    async def dropped(self, d: DeliveryData, error: str) -> None:
        await self._set(d, status="dropped", last_error=error[:300], finished_at=utcnow())

    async def _set(self, d: DeliveryData, **values: object) -> bool:
        """Change a pending row still at `d`'s attempt count (the compare-and-set)."""
        async with self.db.write() as s:
            res = await s.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.id == d.id,
                    WebhookDelivery.status == "pending",
                    WebhookDelivery.attempts == d.attempts,
                )
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]
