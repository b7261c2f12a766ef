"""Running and finding tools (Letta paths): `POST /v1/agents/{id}/tools/{tool_name}/run` runs
one of the agent's tools (built-in or custom, in the sandbox) with the given arguments, outside
any turn; `POST /v1/tools/search` ranks the tools a user sees by a query: full text over name,
description and tags, by meaning with the local embedder, or both (reciprocal rank fusion)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.tools import REGISTRY, ToolContext
from agents.tools.custom import custom_tool
from agents.tools.executor import Call, execute
from memory.embeddings import LOCAL_HANDLE, get_embedder
from memory.models import NotFound
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import _Body, custom_tool_json, tool_json
from voice_gateway.routes.http import parse_body

RRF_K = 60  # reciprocal rank fusion constant (as Letta's hybrid search)
_WORD = re.compile(r"[a-z0-9]+")


class ToolRun(_Body):
    args: dict[str, Any] = Field(default_factory=dict)


class ToolSearch(_Body):
    query: str | None = Field(None, max_length=2000)
    limit: int = Field(50, ge=1, le=1000)
    search_mode: Literal["vector", "fts", "hybrid"] = "hybrid"
    tags: list[str] | None = None
    tool_types: list[str] | None = None


async def run_tool(request: Request) -> JSONResponse:
    """Run one of the agent's tools with `args` (Letta's ToolExecutionResult: status,
    func_return, stdout, stderr). A failing tool is a 200 with status "error"."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    name = request.path_params["tool_name"]
    body = await parse_body(request, ToolRun)
    if name not in agent.tool_names:
        raise NotFound("tool", f"{name} (not attached to agent {agent.id})")
    tool = REGISTRY.get(name)
    custom = tool is None
    if tool is None:
        rows = await gw.memory.tools.by_names(agent.user_id, [name])
        if not rows:
            raise NotFound("tool", name)
        tool = custom_tool(rows[0], gw.loop.sandbox)
    call = Call(index=0, id="run", name=name, raw=json.dumps(body.args))
    call.finalize()
    ctx = ToolContext(memory=gw.memory, agent=agent)
    ok, text = await execute(call, tool, ctx, gw.loop.config.tool_timeout_s)
    out: dict[str, Any] = {"status": "success" if ok else "error", "func_return": text}
    if custom and text.startswith('{"status": '):
        result = json.loads(text)  # the sandbox's envelope (agents/tools/custom.py)
        out["func_return"] = result.get("func_return" if ok else "error")
        out["stdout"], out["stderr"] = result.get("stdout", []), result.get("stderr", [])
    if name in ("core_memory_append", "core_memory_replace", "memory_insert", "memory_replace"):
        gw.loop.prompts.forget(agent.id)  # a block changed outside a turn
    return JSONResponse(out)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _ranks(scores: list[float]) -> list[int | None]:
    """1-based rank of each positive score (None: no match)."""
    order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i])
    ranks: list[int | None] = [None] * len(scores)
    for rank, i in enumerate(order, 1):
        ranks[i] = rank
    return ranks


async def search_tools(request: Request) -> JSONResponse:
    """Tools ranked by `query` (search_mode fts, vector or hybrid), filtered by tags and
    tool_types; each result has the tool, combined_score and its ranks."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, ToolSearch)
    tools = [tool_json(t) for t in REGISTRY.all()]
    tools += [custom_tool_json(t) for t in await gw.memory.tools.page(p.user_id, limit=10_000)]
    tools = [
        t
        for t in tools
        if (not body.tags or set(body.tags) & set(t["tags"]))
        and (not body.tool_types or t["tool_type"] in body.tool_types)
    ]
    texts = [f"{t['name'].replace('_', ' ')}: {t['description'] or ''}" for t in tools]
    query = (body.query or "").strip()
    if not query or not tools:
        listed: list[dict[str, Any]] = [
            {"tool": t, "combined_score": 1.0, "embedded_text": x}
            for t, x in zip(tools, texts, strict=True)
        ]
        return JSONResponse(listed[: body.limit])
    q = _words(query)  # may be empty: a query of punctuation or symbols only
    fts = [
        len(q & _words(f"{x} {' '.join(t['tags'])}")) / max(1, len(q))
        for t, x in zip(tools, texts, strict=True)
    ]
    vec = [0.0] * len(tools)
    if body.search_mode != "fts":
        embedder = get_embedder(LOCAL_HANDLE)
        matrix = await embedder.embed([query, *texts])
        vec = [max(0.0, float(s)) for s in matrix[1:] @ matrix[0]]
    fts_rank, vec_rank = _ranks(fts), _ranks(vec)
    hits: list[tuple[float, dict[str, Any]]] = []
    for i, t in enumerate(tools):
        f, v = fts_rank[i], vec_rank[i]
        if body.search_mode == "fts":
            score = fts[i]
        elif body.search_mode == "vector":
            score = vec[i]
        else:
            score = sum(1.0 / (RRF_K + r) for r in (f, v) if r is not None)
        if score > 0:
            hits.append((score, {"tool": t, "combined_score": score, "embedded_text": texts[i],
                                 "fts_rank": f, "vector_rank": v}))  # fmt: skip
    hits.sort(key=lambda h: -h[0])
    return JSONResponse([h for _, h in hits[: body.limit]])


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/agents/{agent_id}/tools/{tool_name}/run", run_tool, methods=["POST"]),
        Route("/v1/tools/search", search_tools, methods=["POST"]),
        Route("/v1/tools/search/", search_tools, methods=["POST"]),
    ]
