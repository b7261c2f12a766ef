"""SQLAlchemy 2 models: one schema for SQLite (embedded) and PostgreSQL (scale-out). Importing
the package registers every table on `Base.metadata`. Ids and the clock are memory/ids.py."""

from memory.orm.base import Base, UTCDateTime
from memory.orm.calls import CallRecord
from memory.orm.schedules import ScheduledMessage
from memory.orm.sources import Archive, ArchiveAgent, FileRecord, Folder, FolderAgent
from memory.orm.tables import (
    Agent,
    Block,
    BlockAgent,
    BlockHistory,
    CallUsage,
    Conversation,
    Identity,
    IdentityAgent,
    McpServer,
    Message,
    Outbox,
    Passage,
    ProcessedEvent,
    Run,
    SleeptimeState,
    Step,
    Tool,
    User,
    UserLimits,
)
from memory.orm.webhooks import WebhookDelivery

__all__ = [
    "Agent",
    "Archive",
    "ArchiveAgent",
    "Base",
    "Block",
    "BlockAgent",
    "BlockHistory",
    "CallRecord",
    "CallUsage",
    "Conversation",
    "FileRecord",
    "Folder",
    "FolderAgent",
    "Identity",
    "IdentityAgent",
    "McpServer",
    "Message",
    "Outbox",
    "Passage",
    "ProcessedEvent",
    "Run",
    "ScheduledMessage",
    "SleeptimeState",
    "Step",
    "Tool",
    "UTCDateTime",
    "User",
    "UserLimits",
    "WebhookDelivery",
]
