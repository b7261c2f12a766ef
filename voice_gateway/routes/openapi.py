"""A compact OpenAPI 3.1 document built from the route table and handler docstrings."""

from __future__ import annotations

import re
from typing import Any

from starlette.routing import BaseRoute, Route

_PARAM = re.compile(r"{(\w+)}")


def openapi_document(routes: list[BaseRoute], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        path = route.path
        if path.endswith("/") and path.rstrip("/") in paths:
            continue  # the trailing-slash twin of a documented path
        doc = (route.endpoint.__doc__ or "").strip()
        summary = doc.split("\n")[0] if doc else route.name
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = {
                "summary": summary,
                "description": doc,
                "operationId": f"{route.name}_{method.lower()}",
                "parameters": [
                    {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                    for p in _PARAM.findall(path)
                ],
                "responses": {
                    "200": {"description": "OK", "content": {"application/json": {}}},
                    "default": {"description": 'Error: {"detail": "..."}'},
                },
                "security": [{"bearer": []}],
            }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "voice-gateway",
            "version": version,
            "description": "Letta-compatible agent API with real-time voice. See docs/.",
        },
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
