"""Letta wire shapes of archives, folders and files (as letta-client 1.12.1 parses them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from memory.archives import ArchiveData
from memory.files import FileData, FolderData
from memory.models import PassageData
from voice_gateway.protocol.letta import LOCAL_EMBED_DIM, _Body, iso


def _iso_text(v: Any) -> Any:
    if v is not None and not isinstance(v, str):
        raise ValueError("must be an ISO 8601 date-time string")
    return v


class ArchiveIn(_Body):
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)
    embedding: str | None = None
    embedding_config: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class ArchiveUpdate(_Body):
    name: str | None = Field(None, min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)


class ArchivePassageIn(_Body):
    text: str = Field(min_length=1, max_length=100_000)
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = Field(None, strict=False)

    _created = field_validator("created_at", mode="before")(_iso_text)


class ArchivePassagesIn(_Body):
    # at most 1000 (checked below, not in the schema: a longer list a client could send
    # would be over the body size limit, a 413 before validation)
    passages: list[ArchivePassageIn] = Field(min_length=1)

    @field_validator("passages")
    @classmethod
    def _at_most(cls, v: list[ArchivePassageIn]) -> list[ArchivePassageIn]:
        if len(v) > 1000:
            raise ValueError("at most 1000 passages per batch")
        return v


class PassageSearchIn(_Body):
    query: str | None = Field(None, max_length=10_000)
    agent_id: str | None = None
    archive_id: str | None = None
    limit: int = Field(50, ge=1, le=1000)
    tags: list[str] | None = None
    tag_match_mode: Literal["any", "all"] = "any"
    start_date: datetime | None = Field(None, strict=False)
    end_date: datetime | None = Field(None, strict=False)

    _dates = field_validator("start_date", "end_date", mode="before")(_iso_text)


class FolderIn(_Body):
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)
    instructions: str | None = Field(None, max_length=10_000)
    embedding: str | None = None
    embedding_chunk_size: int | None = Field(None, ge=100, le=8000)
    embedding_config: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class FolderUpdate(_Body):
    name: str | None = Field(None, min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)
    instructions: str | None = Field(None, max_length=10_000)
    metadata: dict[str, Any] | None = None


def embedding_config_json(handle: str) -> dict[str, Any]:
    provider, _, model = handle.partition("/")
    return {
        "embedding_model": model or handle,
        "embedding_endpoint_type": "openai" if provider == "openai" else "hugging-face",
        "embedding_dim": LOCAL_EMBED_DIM if provider == "local" else 1536,
        "handle": handle,
    }


def archive_json(a: ArchiveData) -> dict[str, Any]:
    return {
        "id": a.id,
        "name": a.name,
        "description": a.description,
        "metadata": a.metadata,
        "embedding_config": embedding_config_json(a.embedding),
        "vector_db_provider": "native",
        "created_by_id": a.user_id,
        "created_at": iso(a.created_at),
        "updated_at": iso(a.updated_at),
    }


def search_item_json(p: PassageData) -> dict[str, Any]:
    from voice_gateway.protocol.letta import passage_json

    return {"passage": passage_json(p), "score": p.score or 0.0, "metadata": {}}


def folder_json(f: FolderData) -> dict[str, Any]:
    return {
        "id": f.id,
        "name": f.name,
        "description": f.description,
        "instructions": f.instructions,
        "metadata": f.metadata,
        "embedding_config": {
            **embedding_config_json(f.embedding),
            "embedding_chunk_size": f.chunk_size,
        },
        "vector_db_provider": "native",
        "created_by_id": f.user_id,
        "created_at": iso(f.created_at),
        "updated_at": iso(f.updated_at),
    }


def file_json(f: FileData, *, content: bool = False) -> dict[str, Any]:
    return {
        "id": f.id,
        "source_id": f.folder_id,
        "file_name": f.file_name,
        "original_file_name": f.original_file_name,
        "file_path": None,
        "file_type": f.file_type,
        "file_size": f.file_size,
        "processing_status": f.status,
        "error_message": f.error_message,
        "total_chunks": f.total_chunks,
        "chunks_embedded": f.chunks_embedded,
        "content": f.content if content else None,
        "created_at": iso(f.created_at),
        "updated_at": iso(f.updated_at),
    }
