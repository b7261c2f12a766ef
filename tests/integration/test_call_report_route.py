"""`GET /v1/calls/{id}/report` is the call's owner's: another user's key gets the 404 an
unknown call gets, no key a 401; the owner gets the record and the transcript of the call's
conversation within the call's time (not what was said in it before or after)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import httpx

from memory.calls import CallStore
from memory.ids import new_id, utcnow
from memory.models import MessageData, Role
from memory.service import Memory


@dataclass
class Seeded:
    alice_key: str
    bob_key: str
    call_id: str
    conversation_id: str


def seed(db_url: str) -> Seeded:
    """Alice's agent and call: a message of its conversation before the call, two during it,
    one after it. Bob: a user of his own."""

    async def main() -> Seeded:
        memory = await Memory.open(db_url)
        try:
            alice, alice_key = await memory.users.create("alice")
            _, bob_key = await memory.users.create("bob")
            agent = await memory.agents.create(
                user_id=alice, blocks=[], name="a", model="scripted/demo", system="s",
                embedding="x",
            )  # fmt: skip
            conv = await memory.conversations.create(agent.id, user_id=alice, source="voice")

            def msg(role: Role, text: str, hours: float = 0.0) -> MessageData:
                at = utcnow() + timedelta(hours=hours)
                return MessageData(
                    id=new_id("message"), agent_id=agent.id, role=role, content=text,
                    conversation_id=conv.id, created_at=at,
                )  # fmt: skip

            await memory.messages.append([msg("user", "said before the call", -1)])
            store = CallStore(memory.db)
            call = await store.create(
                agent.id, user_id=alice, direction="inbound", transport="browser",
                status="in-progress",
            )  # fmt: skip
            await memory.messages.append([msg("user", "Hello"), msg("assistant", "Hi there")])
            await store.update(
                call.id, status="completed", end_reason="caller_ended", conversation_id=conv.id
            )
            await memory.messages.append([msg("user", "said after the call", 1)])
            return Seeded(alice_key, bob_key, call.id, conv.id)
        finally:
            await memory.close()

    return asyncio.run(main())


def test_the_report_is_the_owners(gateway_factory, db_url: str) -> None:  # type: ignore[no-untyped-def]
    s = seed(db_url)
    srv = gateway_factory(database_url=db_url, api_key="server-secret")
    path = f"/v1/calls/{s.call_id}/report"
    with httpx.Client(base_url=srv.url) as http:
        assert http.get(path).status_code == 401
        bob = http.get(path, headers={"Authorization": f"Bearer {s.bob_key}"})
        assert bob.status_code == 404 and s.call_id in bob.json()["detail"]
        resp = http.get(path, headers={"Authorization": f"Bearer {s.alice_key}"})
        assert resp.status_code == 200, resp.text
        report = resp.json()
        admin = http.get(path, headers={"Authorization": "Bearer server-secret"})
        assert admin.json() == report
    assert report["call"]["id"] == s.call_id
    assert report["call"]["conversation_id"] == s.conversation_id
    assert [(e["role"], e["text"]) for e in report["transcript"]] == [
        ("user", "Hello"), ("assistant", "Hi there"),
    ]  # fmt: skip
    assert report["transcript"][1]["truncated"] is False
    assert (report["turns"], report["recording"]) == ([], None)
