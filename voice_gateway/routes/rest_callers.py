"""Many callers on one agent: conversations, shared blocks and caller identities."""

from __future__ import annotations

from starlette.routing import BaseRoute

from voice_gateway.routes import rest_blocks, rest_conversations, rest_identities


def routes() -> list[BaseRoute]:
    return [*rest_conversations.routes(), *rest_blocks.routes(), *rest_identities.routes()]
