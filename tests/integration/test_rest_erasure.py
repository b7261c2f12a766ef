"""Erasure of one caller (`DELETE /v1/identities/{id}`) on a live gateway with Redis: no table
row, search result, archival passage, transcript stream entry or log line holds their words or
key afterwards; the other caller of the same agent keeps everything."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import select

from memory.calls import CallStore
from memory.orm import Base
from tests.support.servers import ServerThread

KEY_A, KEY_B = "+15550001111", "+15550002222"
WORDS_A, WORDS_B = "xylophonist zanzibar", "quetzalcoatl marzipan"


def _rows(gw: ServerThread) -> list[str]:
    """Every row of every table of memory/orm/, as text."""

    async def dump() -> list[str]:
        memory = gw.app.state.gw.memory
        out: list[str] = []
        async with memory.db.read() as s:
            for table in Base.metadata.sorted_tables:
                for row in (await s.execute(select(table))).all():
                    out.append(f"{table.name}: {tuple(row)!r}")
        return out

    return list(gw.call(dump()))


def _stream_text(url: str) -> str:
    client = redis.Redis.from_url(url)
    try:
        return "".join(
            str(client.xrange(stream)) for stream in ("vg:transcripts", "vg:transcripts:dead")
        )
    finally:
        client.close()


def test_erase_one_caller(
    gateway_factory: Any,
    sqlite_url: str,
    fake_llm_url: str,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)  # what the gateway logs
    gw: ServerThread = gateway_factory(
        database_url=sqlite_url,
        openai_base_url=fake_llm_url,
        openai_api_key="t",
        redis_url=redis_url,
    )
    http = httpx.Client(base_url=gw.url, timeout=60)
    agent = http.post("/v1/agents/", json={"model": "openai/fake"}).json()
    convs, idents = {}, {}
    for key, words in ((KEY_A, WORDS_A), (KEY_B, WORDS_B)):
        conv = http.post(f"/v1/conversations/?agent_id={agent['id']}", json={"caller": key}).json()
        r = http.post(
            f"/v1/conversations/{conv['id']}/messages",
            json={"input": f"remember {words}", "streaming": False},
        )
        assert r.status_code == 200, r.text
        convs[key], idents[key] = conv["id"], conv["identity_id"]

    async def passages() -> None:
        memory = gw.app.state.gw.memory
        for key, words in ((KEY_A, WORDS_A), (KEY_B, WORDS_B)):
            await memory.archival.insert(agent["id"], [f"fact: {words}"], identity_id=idents[key])
            await CallStore(memory.db).create(  # a phone call of theirs: its record names them
                agent["id"],
                user_id=None,
                direction="inbound",
                transport="twilio",
                status="completed",
                caller=key,
                conversation_id=convs[key],
            )

    gw.call(passages())
    # the caller's own block, corrected by an operator through /v1/blocks
    ident_a = http.get(f"/v1/identities/{idents[KEY_A]}").json()
    assert ident_a["identifier_key"] == KEY_A and ident_a["agent_ids"] == [agent["id"]]
    (human_a,) = ident_a["block_ids"]
    r = http.patch(f"/v1/blocks/{human_a}", json={"value": f"Caller likes {WORDS_A}"})
    assert r.status_code == 200 and r.json()["identity_id"] == idents[KEY_A]
    listed = http.get("/v1/identities/", params={"agent_id": agent["id"]}).json()
    assert {i["identifier_key"] for i in listed} == {KEY_A, KEY_B}
    # a turn after the correction: the gateway keeps this turn's agent, block included, in RAM
    r = http.post(
        f"/v1/conversations/{convs[KEY_A]}/messages", json={"input": "hi", "streaming": False}
    )
    assert r.status_code == 200, r.text
    kept = gw.app.state.gw.memory.agents._turns  # memory/agents.py decode_for_turn
    assert WORDS_A in repr(kept.get(convs[KEY_A]))

    deadline = time.monotonic() + 20  # the outbox publisher puts each turn on the stream
    while time.monotonic() < deadline:
        text = _stream_text(redis_url)
        if WORDS_A.split()[0] in text and WORDS_B.split()[0] in text:
            break
        time.sleep(0.1)
    stream = _stream_text(redis_url)
    assert WORDS_A.split()[0] in stream and WORDS_B.split()[0] in stream
    before = "\n".join(_rows(gw))
    assert WORDS_A.split()[0] in before and KEY_A in before  # the test can see them

    r = http.delete(f"/v1/identities/{idents[KEY_A]}")
    assert r.status_code == 200, r.text
    erased = r.json()["erased"]
    assert erased["conversations"] == 1 and erased["passages"] == 1
    assert erased["stream_entries"] >= 1
    assert erased["call_records"] == 1  # the call stays on record, without their number

    rows = "\n".join(_rows(gw))
    stream = _stream_text(redis_url)
    assert WORDS_A.split()[0] not in repr(kept)  # and gone from RAM
    for word in (*WORDS_A.split(), KEY_A, idents[KEY_A]):
        assert word not in rows, word
        assert word not in stream, word
    assert KEY_B in rows  # the other caller keeps their call record
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "erased identity" in logged
    for word in (*WORDS_A.split(), KEY_A, *WORDS_B.split(), KEY_B):  # never, for any caller
        assert word not in logged, word

    async def searches() -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        memory = gw.app.state.gw.memory
        a_id = agent["id"]
        return (
            await memory.messages.search(a_id, "xylophonist", identity_id=idents[KEY_A]),
            await memory.messages.search(a_id, "xylophonist", identity_id=None),
            await memory.archival.search(a_id, WORDS_A, 10, identity_id=idents[KEY_A]),
            await memory.archival.search(a_id, WORDS_B, 10, identity_id=idents[KEY_B]),
        )

    hits_a, hits_none, arch_a, arch_b = gw.call(searches())
    assert hits_a == [] and hits_none == []
    assert all("xylophonist" not in p.text for p in arch_a)
    assert [p.text for p in arch_b] == [f"fact: {WORDS_B}"]
    # the other caller: conversation, messages, identity, stream entry all intact
    assert http.get(f"/v1/conversations/{convs[KEY_A]}").status_code == 404
    msgs = http.get(f"/v1/conversations/{convs[KEY_B]}/messages").json()
    assert any(WORDS_B in str(m.get("content")) for m in msgs)
    assert http.get(f"/v1/identities/{idents[KEY_B]}").status_code == 200
    assert WORDS_B.split()[0] in stream
    assert [i["identifier_key"] for i in http.get("/v1/identities/").json()] == [KEY_B]
    assert http.delete(f"/v1/identities/{idents[KEY_A]}").status_code == 404
    http.close()
