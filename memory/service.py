"""The memory layer as one object: database, stores, embedders."""

from __future__ import annotations

from dataclasses import dataclass

from memory.agents import AgentStore, UserStore
from memory.archival import ArchivalStore
from memory.archives import ArchiveStore
from memory.blocks import BlockStore, ChangeHook
from memory.conversations import ConversationStore
from memory.db import Database
from memory.embeddings import Embedder, get_embedder
from memory.files import FileStore, FolderStore
from memory.identities import IdentityStore
from memory.messages import MessageStore
from memory.models import AgentData, ConversationData, NotFound, TranscriptEvent
from memory.orm import Conversation
from memory.outbox import OutboxStore
from memory.raw import Codec, Stmt
from memory.runs import RunStore, TurnMetrics, metrics_stmt
from memory.tools import ToolStore

_CONVERSATIONS = Codec(Conversation.__table__)  # type: ignore[arg-type]
_CONVERSATION = f"SELECT {_CONVERSATIONS.columns('c')} FROM conversations c WHERE c.id = ?"


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
    conversations: ConversationStore
    identities: IdentityStore
    runs: RunStore
    archives: ArchiveStore
    folders: FolderStore
    files: FileStore

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

        archival = ArchivalStore(db, embedder_for)
        return cls(
            db=db,
            agents=AgentStore(db),
            users=UserStore(db),
            blocks=BlockStore(db),
            messages=MessageStore(db),
            archival=archival,
            outbox=OutboxStore(db),
            tools=ToolStore(db),
            conversations=ConversationStore(db),
            identities=IdentityStore(db),
            runs=RunStore(db),
            archives=ArchiveStore(db, archival),
            folders=FolderStore(db),
            files=FileStore(db),
        )

    async def turn_state(
        self, agent_id: str, conversation_id: str
    ) -> tuple[AgentData, ConversationData]:
        """What a turn starts from, in one snapshot (one thread hop / round trip): the agent
        with the blocks of the conversation's caller, and the conversation (its context
        version). NotFound if either is gone or the conversation is another agent's."""
        conv_rows, rows, folders = await self.db.batch(
            [
                Stmt(_CONVERSATION, (conversation_id,), returns=True),
                self.agents.get_stmt_in(agent_id, conversation_id),
                self.agents.folders_stmt(agent_id),
            ]
        )
        if not conv_rows or conv_rows[0]["agent_id"] != agent_id:
            raise NotFound("conversation", conversation_id)
        if not rows:
            raise NotFound("agent", agent_id)
        conv = ConversationData.model_validate(
            _CONVERSATIONS.decode(conv_rows[0], sqlite=self.db.is_sqlite)
        )
        return self.agents.decode_for_turn(conversation_id, rows, folders), conv

    async def finish_turn(
        self,
        event: TranscriptEvent | None,
        truncations: dict[str, str] | None = None,
        metrics: TurnMetrics | None = None,
    ) -> None:
        """Cut assistant messages to what the caller heard and queue the turn's transcript
        event (and keep a voice turn's latencies on its run), in one transaction."""
        also = [self.outbox.insert(event)] if event is not None else []
        if metrics is not None and event is not None:
            also.append(metrics_stmt(event.turn_id, metrics))
        await self.messages.truncate(truncations or {}, also=also)
        if event is not None:
            self.outbox.added()

    def on_block_change(self, hook: ChangeHook | None) -> None:
        self.blocks.on_change = hook

    async def close(self) -> None:
        await self.db.close()
