"""Archives (shared archival memory), folders and files (Letta's data sources).

- An archive holds passages (`Passage.archive_id`). Every agent has its own default
  archive (`default_archive_id`, `agent_id` set: deleted with the agent; its cache version is
  the agent's `archival_version`); shared archives (`agent_id` NULL) attach to any number of
  agents through `archives_agents`; a folder's chunk index is an archive with `folder_id` set
  (hidden from /v1/archives).
- A folder holds files; each file is parsed, chunked and embedded in the background
  (`processing_status` pending -> parsing -> embedding -> completed | error). Folders attach
  to agents through `folders_agents`; an agent's open files are read-only blocks of scope
  "file" (memory/files.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from memory.ids import utcnow
from memory.orm.base import Base, UTCDateTime


class Folder(Base):
    __tablename__ = "folders"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    instructions: Mapped[str | None] = mapped_column(Text)
    embedding: Mapped[str] = mapped_column(String(200))
    chunk_size: Mapped[int] = mapped_column(Integer, default=800)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Archive(Base):
    __tablename__ = "archives"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    agent_id: Mapped[str | None] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    folder_id: Mapped[str | None] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    embedding: Mapped[str] = mapped_column(String(200))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    version: Mapped[int] = mapped_column(Integer, default=0)
    deletes: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ArchiveAgent(Base):
    __tablename__ = "archives_agents"
    archive_id: Mapped[str] = mapped_column(
        ForeignKey("archives.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class FileRecord(Base):
    __tablename__ = "files"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    folder_id: Mapped[str] = mapped_column(ForeignKey("folders.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str | None] = mapped_column(String(64))
    file_name: Mapped[str] = mapped_column(String(300))
    original_file_name: Mapped[str] = mapped_column(String(300))
    file_type: Mapped[str] = mapped_column(String(100))
    file_size: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(12), default="pending")
    error_message: Mapped[str | None] = mapped_column(Text)
    total_chunks: Mapped[int | None] = mapped_column(Integer)
    chunks_embedded: Mapped[int | None] = mapped_column(Integer)
    pages: Mapped[int | None] = mapped_column(Integer)
    content: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class FolderAgent(Base):
    __tablename__ = "folders_agents"
    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True, index=True
    )
