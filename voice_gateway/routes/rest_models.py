"""Models (Letta paths): `GET /v1/models/` lists the LLM handles this server can use now (each
configured provider's own model list, and the offline demo model), `GET /v1/models/embedding`
the embedding handles."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.llm.providers import PROVIDERS
from memory.embeddings import LOCAL_HANDLE
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import LOCAL_EMBED_DIM

OPENAI_EMBEDDINGS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072}
CATEGORIES = ("base", "byok")


def model_json(provider: str, name: str) -> dict[str, Any]:
    """One LLM handle as Letta's Model (LLMConfig fields included, as Letta returns them)."""
    spec = PROVIDERS[provider]
    return {
        "handle": f"{provider}/{name}",
        "name": name,
        "model": name,
        "display_name": name,
        "provider_type": spec.provider_type,
        "provider_name": provider,
        "provider_category": "base",
        "model_endpoint_type": spec.endpoint_type,
        "model_type": "llm",
        "context_window": spec.context_window,
        "max_context_window": spec.context_window,
    }


def embedding_json(provider: str, name: str, dim: int) -> dict[str, Any]:
    local = provider == "local"
    return {
        "handle": f"{provider}/{name}",
        "name": name,
        "embedding_model": name,
        "display_name": name,
        "embedding_dim": dim,
        # our local MiniLM is a Hugging Face sentence-transformers model (Letta has no "local")
        "embedding_endpoint_type": "hugging-face" if local else "openai",
        "provider_type": "hugging-face" if local else "openai",
        "provider_name": provider,
        "model_type": "embedding",
        "embedding_chunk_size": 300,
    }


async def list_models(request: Request) -> JSONResponse:
    """The LLM handles usable now (provider_name, provider_type, provider_category filters)."""
    gw = gateway_of(request)
    await gw.auth.principal(request)
    q = request.query_params
    categories = {c for raw in q.getlist("provider_category") for c in raw.split(",") if c}
    if categories - set(CATEGORIES):
        bad = ", ".join(sorted(categories - set(CATEGORIES)))
        raise ApiError(422, f"unknown provider_category {bad}; known: {', '.join(CATEGORIES)}")
    out = [
        model_json(provider, name)
        for provider, names in (await gw.llms.available()).items()
        for name in names
    ]
    name, kind = q.get("provider_name"), q.get("provider_type")
    out = [
        m
        for m in out
        if (name is None or m["provider_name"] == name)
        and (kind is None or m["provider_type"] == kind)
        and (not categories or m["provider_category"] in categories)
    ]
    return JSONResponse(out)


async def list_embedding_models(request: Request) -> JSONResponse:
    """The embedding handles usable now: the local MiniLM always, OpenAI's with its key."""
    gw = gateway_of(request)
    await gw.auth.principal(request)
    provider, _, name = LOCAL_HANDLE.partition("/")
    out = [embedding_json(provider, name, LOCAL_EMBED_DIM)]
    if gw.settings.openai_api_key:
        out += [embedding_json("openai", n, d) for n, d in OPENAI_EMBEDDINGS.items()]
    return JSONResponse(out)


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/", list_models, methods=["GET"]),
        Route("/v1/models/embedding", list_embedding_models, methods=["GET"]),
        Route("/v1/models/embedding/", list_embedding_models, methods=["GET"]),
    ]
