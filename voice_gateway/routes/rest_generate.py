"""The agent's model outside a turn: `POST /v1/agents/{id}/generate` (a one-off completion
that stores nothing) and `POST /v1/agents/{id}/messages/preview-raw-payload` (the request a
turn would send the model now)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.direct import generate, preview
from agents.llm import LLMError
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import MessagesRequest, _Body
from voice_gateway.routes.http import parse_body

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway


class GenerateRequest(_Body):
    """Letta's GenerateRequest."""

    prompt: str = Field(max_length=200_000)
    system_prompt: str | None = Field(None, max_length=200_000)
    override_model: str | None = Field(None, max_length=200)

    @field_validator("prompt")
    @classmethod
    def _some_text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must hold text, not only whitespace")
        return v


async def generate_route(request: Request) -> JSONResponse:
    """One completion by the agent's model (or `override_model`): no memory, no tools, and
    nothing stored."""
    gw: Gateway = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, GenerateRequest)
    handle = body.override_model or agent.model
    try:
        gw.llms.validate(handle)
    except ValueError as exc:
        raise ApiError(404, f"model not found: {handle} ({exc})") from exc
    try:
        out = await generate(gw.llms, handle, body.prompt, body.system_prompt)
    except LLMError as exc:
        raise ApiError(502, f"the model failed: {exc}") from exc
    usage = {
        "message_type": "usage_statistics",
        "completion_tokens": out.usage.completion_tokens,
        "prompt_tokens": out.usage.prompt_tokens,
        "total_tokens": out.usage.total_tokens,
        "step_count": 1,
    }
    return JSONResponse({"content": out.content, "model": out.model, "usage": usage})


async def preview_route(request: Request) -> JSONResponse:
    """The chat-completions request a turn of this message would send as its first step."""
    gw: Gateway = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, MessagesRequest)
    text = body.user_text()
    if text is None:
        raise ApiError(422, "messages must include a user message with text content")
    if body.conversation_id is not None:
        await gw.memory.conversations.get(body.conversation_id, agent.id)
    return JSONResponse(await preview(gw.loop, agent, text, body.conversation_id))


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/agents/{agent_id}/generate", generate_route, methods=["POST"]),
        Route(
            "/v1/agents/{agent_id}/messages/preview-raw-payload", preview_route, methods=["POST"]
        ),
    ]
