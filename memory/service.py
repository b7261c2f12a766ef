"""The memory layer as one object: database, stores, embedders."""

from __future__ import annotations

from dataclasses import dataclass

from memory.agents import AgentStore, UserStore
from memory.archival import ArchivalStore
from memory.blocks import BlockStore, ChangeHook
from memory.db import Database
from memory.embeddings import Embedder, get_embedder
from memory.messages import MessageStore
from memory.models import TranscriptEvent
from memory.outbox import OutboxStore
from memory.tools import ToolStore


@dataclass
class Memory:
    db: Database
    agents: AgentStore
    users: UserStore
    blocks: BlockStore
    messages: MessageStore
    archival: ArchivalStore
    outbox: OutboxStore
    tools: ToolStore

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
    ) -> Memory:
        db = Database(url)
        if migrate:
            await db.migrate()

        def embedder_for(handle: str) -> Embedder:
            return get_embedder(
                handle, openai_api_key=openai_api_key, openai_base_url=openai_base_url
            )

        return cls(
            db=db,
            agents=AgentStore(db),
            users=UserStore(db),
            blocks=BlockStore(db),
            messages=MessageStore(db),
            archival=ArchivalStore(db, embedder_for),
            outbox=OutboxStore(db),
            tools=ToolStore(db),
        )

    async def finish_turn(
        self, event: TranscriptEvent | None, truncations: dict[str, str] | None = None
    ) -> None:
        """Cut assistant messages to what the caller heard and queue the turn's transcript
        event, in one transaction."""
        also = [self.outbox.insert(event)] if event is not None else []
        await self.messages.truncate(truncations or {}, also=also)
        if event is not None:
            self.outbox.added()

    def on_block_change(self, hook: ChangeHook | None) -> None:
        self.blocks.on_change = hook

    async def close(self) -> None:
        await self.db.close()
