"""Letta wire shapes of runs and steps (letta-client 1.x `Run`, `Step`, run usage, step
metrics) and the request bodies of their routes."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from memory.runs import RunData, StepData
from voice_gateway.protocol.letta import MessagesRequest, _Body, iso

CALLBACK_KEY = "callback"  # run metadata: the callback's url and outcome (run_callbacks.py)


class AsyncMessagesRequest(MessagesRequest):
    """POST /v1/agents/{id}/messages/async: a background run; `callback_url` (http or https)
    is POSTed the run's outcome when it ends."""

    callback_url: str | None = Field(None, max_length=2048)

    @field_validator("callback_url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return url


class RunStream(_Body):
    """POST /v1/runs/{id}/stream."""

    starting_after: int = Field(0, ge=0)
    include_pings: bool | None = None
    poll_interval: float | None = None
    batch_size: int | None = None


class CancelRequest(_Body):
    run_ids: list[str] | None = None


class FeedbackRequest(_Body):
    feedback: Literal["positive", "negative"] | None = None
    tags: list[str] | None = None


def run_json(r: RunData) -> dict[str, Any]:
    request_config = r.request_config or {}
    metadata = dict(r.metadata_ or {})
    callback = metadata.pop(CALLBACK_KEY, None) or {}
    return {
        "id": r.id,
        "agent_id": r.agent_id,
        "conversation_id": r.conversation_id,
        "background": r.background,
        "status": r.status,
        "stop_reason": r.stop_reason,
        "created_at": iso(r.created_at),
        "completed_at": iso(r.completed_at) if r.completed_at else None,
        "ttft_ns": r.ttft_ns,
        "total_duration_ns": r.total_duration_ns,
        "callback_url": callback.get("url"),
        "callback_sent_at": callback.get("sent_at"),
        "callback_status_code": callback.get("status_code"),
        "callback_error": callback.get("error"),
        "metadata": {
            **metadata,
            "source": r.source,
            "model": r.model,
            **({"error": r.error} if r.error else {}),
            **({"voice_metrics": r.metrics} if r.metrics else {}),
        },
        "request_config": request_config or None,
    }


def usage_json(r: RunData) -> dict[str, Any]:
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
    }


def step_json(s: StepData) -> dict[str, Any]:
    provider, _, model = (s.model or "").partition("/")
    return {
        "id": s.id,
        "run_id": s.run_id,
        "agent_id": s.agent_id,
        "model": model or s.model,
        "model_handle": s.model,
        "provider_name": provider or None,
        "status": s.status,
        "stop_reason": s.stop_reason,
        "error_data": {"message": s.error} if s.error else None,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "feedback": s.feedback,
        "tags": s.tags,
        "messages": [],
    }


def metrics_json(s: StepData, run: RunData | None) -> dict[str, Any]:
    """Letta's step metrics (ns); a voice turn's latencies (ms) as `voice_metrics`."""
    out: dict[str, Any] = {
        "id": s.id,
        "agent_id": s.agent_id,
        "run_id": s.run_id,
        "step_start_ns": s.step_start_ns,
        "step_ns": s.step_ns,
        "llm_request_ns": s.llm_request_ns,
        "llm_request_start_ns": s.step_start_ns,
        "tool_execution_ns": s.tool_execution_ns,
        "ttft_ns": s.ttft_ns,
    }
    if run is not None and run.metrics:
        out["voice_metrics"] = run.metrics
    return out
