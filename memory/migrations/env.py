"""Alembic environment: async engines, one lock so concurrent gateways migrate once."""

from __future__ import annotations

import asyncio
import warnings

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from memory.orm import Base

# SQLite batch migrations reflect tables; SQLAlchemy cannot reflect expression indexes (the
# coalesce(...) unique indexes) and warns on stderr, though every one of them is still there
# after `upgrade head` (checked: uq_tools_owner_name, uq_identities_owner_key,
# uq_blocks_agent_label_identity, uq_mcp_servers_owner_name)
warnings.filterwarnings("ignore", message="Skipped unsupported reflection of expression-based")

config = context.config
target_metadata = Base.metadata
MIGRATION_LOCK_KEY = 727_001  # pg_advisory_lock key shared by every gateway process


def _run(connection: Connection) -> None:
    is_pg = connection.dialect.name == "postgresql"
    if is_pg:
        connection.execute(text(f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
        connection.commit()
    try:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if is_pg:
            connection.execute(text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
            connection.commit()


async def _main() -> None:
    engine = create_async_engine(config.get_main_option("sqlalchemy.url") or "")
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_main())
