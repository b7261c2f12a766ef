"""The OpenAPI 3.1 document, built from the route table, the handler docstrings and the
per-operation table in openapi_schemas.py (request bodies from the pydantic models, query
parameters, success codes and response schemas). Every error is `{"detail": "..."}` (chat
completions: OpenAI's error object)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from starlette.routing import BaseRoute, Route

from voice_gateway.routes.openapi_callers import CALLER_OPS, CALLER_RESPONSES
from voice_gateway.routes.openapi_schedule import SCHEDULE_OPS, SCHEDULE_RESPONSES
from voice_gateway.routes.openapi_schemas import OPS, RESPONSES, Op, Schema, ref
from voice_gateway.routes.openapi_sources import SOURCE_OPS, SOURCE_RESPONSES

_PARAM = re.compile(r"{(\w+)}")
# 431: request headers over VG_MAX_HEADER_BYTES (answered by the server before any route)
ERROR_CODES = ("400", "401", "403", "404", "409", "413", "422", "429", "431")


def _body_schema(body: type[BaseModel] | Schema, components: dict[str, Schema]) -> Schema:
    if isinstance(body, dict):
        return body
    schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    components[body.__name__] = schema
    return ref(body.__name__)


def _operation(route: Route, method: str, components: dict[str, Schema]) -> dict[str, Any]:
    doc = (route.endpoint.__doc__ or "").strip()
    key = (route.name, method)
    spec = OPS.get(key) or CALLER_OPS.get(key) or SCHEDULE_OPS.get(key) or SOURCE_OPS.get(key, Op())
    params = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
        for p in _PARAM.findall(route.path)
    ]
    ok: dict[str, Any] = {}
    for media in spec.media:
        json_like = media == "application/json" and spec.response is not None
        ok[media] = {"schema": spec.response} if json_like else {}
    error = {"description": "Error", "content": {"application/json": {"schema": ref(spec.errors)}}}
    responses: dict[str, Any] = {
        str(code): {"description": "OK", "content": ok} for code in (spec.status, *spec.also)
    }
    responses.update({code: error for code in ERROR_CODES if not (spec.public and code == "401")})
    if spec.upstream:  # the MCP server the client named refused / did not answer
        responses.update({"502": error, "504": error})
    op: dict[str, Any] = {
        "summary": doc.split("\n")[0] if doc else route.name,
        "description": doc,
        "operationId": f"{route.name}_{method}",
        "parameters": params + list(spec.query),
        "responses": responses,
        # {}: no key needed on an open (loopback) gateway; a public operation never needs one
        "security": [] if spec.public else [{"bearer": []}, {}],
    }
    if spec.body is not None:
        media = "application/x-www-form-urlencoded" if spec.form else "application/json"
        op["requestBody"] = {
            "required": not spec.form,  # an empty JSON body is a 400
            "content": {media: {"schema": _body_schema(spec.body, components)}},
        }
    return op


def openapi_document(routes: list[BaseRoute], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Schema] = {**RESPONSES, **CALLER_RESPONSES, **SOURCE_RESPONSES}
    components.update(SCHEDULE_RESPONSES)
    for route in routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        path = route.path
        if path.endswith("/") and path.rstrip("/") in paths:
            continue  # the trailing-slash twin of a documented path
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = _operation(
                route, method.lower(), components
            )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "voice-gateway",
            "version": version,
            "description": "Letta-compatible agent API with real-time voice. See docs/.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
