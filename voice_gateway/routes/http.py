"""Small shared helpers for HTTP routes: parsing bodies and query values with clear errors."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.routing import Match, Mount
from starlette.types import Scope

from voice_gateway.errors import ApiError, validation_detail

M = TypeVar("M", bound=BaseModel)
_INTEGER = re.compile(r"-?[0-9]{1,18}")


# a \\uD800-\\uDFFF escape: a lone one decodes to a string no UTF-8 store or response can hold
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def load_json(raw: bytes) -> Any:
    """A request's JSON (an empty body is {}), or ApiError 400. Found by the fuzz tests:
    JSON nested beyond the recursion limit, numbers of over 4300 digits, and lone surrogate
    escapes ("\\ud800") were 500s (the last crashed even the error response)."""
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON body: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "malformed JSON body: nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of over 4300 digits
        raise ApiError(400, f"malformed JSON body: {exc}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            raise ApiError(400, "malformed JSON body: a lone surrogate escape (\\ud800)") from exc
    return data


async def parse_body(request: Request, model: type[M]) -> M:
    """The body as `model` (strict types): 400 when empty or not JSON, 422 naming the field."""
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "empty request body: send a JSON object ({} for the defaults)")
    data = load_json(raw)
    if not isinstance(data, dict):
        raise ApiError(422, "the JSON body must be an object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(422, validation_detail(exc)) from exc


def query_int(request: Request, name: str, default: int, *, lo: int = 1, hi: int = 1000) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):  # int() would take " 5", "5_000" and non-ASCII digits
        raise ApiError(422, f"query parameter '{name}' must be an integer")
    value = int(raw)
    if not lo <= value <= hi:
        raise ApiError(422, f"query parameter '{name}' must be between {lo} and {hi}")
    return value


def query_bool(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise ApiError(422, f"query parameter '{name}' must be true or false")


def query_choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    """An enum query parameter: one of `choices` (absent: `default`), else a 422 naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw not in choices:
        raise ApiError(422, f"query parameter '{name}' must be one of: {', '.join(choices)}")
    return raw


class WebMount(Mount):
    """The static web client at `/`, but never under `/v1/`: there a path the API serves with
    other methods stays the API's 405 (with `Allow`), an unknown path the API's JSON 404."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("path", "").startswith("/v1/"):
            return Match.NONE, {}
        return super().matches(scope)


def paginate(
    request: Request, items: list[dict[str, Any]], default_limit: int = 1000
) -> list[dict[str, Any]]:
    """In-memory `after`/`before`/`limit` over an ordered list of objects with an "id" (for
    short collections such as blocks and tools); an unknown or last cursor gives []."""
    after, before = request.query_params.get("after"), request.query_params.get("before")
    ids = [item.get("id") for item in items]
    if after:
        items = items[ids.index(after) + 1 :] if after in ids else []
    if before:
        ids = [item.get("id") for item in items]
        items = items[: ids.index(before)] if before in ids else []
    return items[: query_int(request, "limit", default_limit, hi=10_000)]
