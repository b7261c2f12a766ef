"""Migration 0007 on a database with data: an agent's existing passages move into its own
default archive and stay searchable; a new shared archive attaches next to it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import numpy as np
import sqlalchemy as sa
from alembic import command
from sqlalchemy.ext.asyncio import create_async_engine

from memory.db import alembic_config, normalize_url
from memory.embeddings import LOCAL_HANDLE, get_embedder
from memory.service import Memory

AGENT = "agent-11111111-2222-3333-4444-555555555555"


def test_passages_move_into_the_agents_own_archive(db_url: str) -> None:
    command.upgrade(alembic_config(normalize_url(db_url)), "0006")
    now = datetime.now(UTC).replace(tzinfo=None)
    text = "Ada's cat is called Pixel."
    vec = get_embedder(LOCAL_HANDLE).embed_sync([text])[0].astype(np.float32).tobytes()

    def seed(conn: sa.Connection) -> None:
        meta = sa.MetaData()
        agents = sa.Table("agents", meta, autoload_with=conn)
        passages = sa.Table("passages", meta, autoload_with=conn)
        conn.execute(
            agents.insert().values(
                id=AGENT,
                name="old",
                system="",
                model="scripted/demo",
                embedding=LOCAL_HANDLE,
                tags=[],
                tool_names=[],
                voice_default=False,
                archival_version=1,
                archival_deletes=0,
                messages_version=0,
                metadata={},
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            passages.insert().values(
                id="passage-old",
                agent_id=AGENT,
                text=text,
                tags=[],
                embedding=vec,
                embedding_handle=LOCAL_HANDLE,
                created_at=now,
            )
        )

    async def before() -> None:
        engine = create_async_engine(normalize_url(db_url))
        async with engine.begin() as conn:
            await conn.run_sync(seed)
        await engine.dispose()

    asyncio.run(before())

    async def after() -> None:
        memory = await Memory.open(db_url)  # upgrades to head
        try:
            agent_id = AGENT
            own = await memory.archives.page(None, scoped=False, agent_id=agent_id)
            assert [a.id for a in own] == ["archive-11111111-2222-3333-4444-555555555555"]
            assert own[0].agent_id == agent_id and own[0].name == "old's archive"
            hits = await memory.archival.search(agent_id, "what is the cat's name?")
            assert [h.id for h in hits] == ["passage-old"] and hits[0].archive_id == own[0].id
            kb = await memory.archives.create(None, "kb", LOCAL_HANDLE)
            await memory.archives.add_passages(kb, [("Pixel likes tuna.", [], None)])
            await memory.archives.set_attached(agent_id, kb.id, True)
            hits = await memory.archival.search(agent_id, "Pixel", top_k=5)
            assert {h.archive_id for h in hits} == {own[0].id, kb.id}
        finally:
            await memory.close()

    asyncio.run(after())
