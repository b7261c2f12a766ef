"""`callback_url` of background runs (`agents.messages.create_async`) with letta-client 1.12.1
in strict mode: a real loopback HTTP server receives Letta's callback body when the run
completes and when it is cancelled; a failing endpoint is retried and its failure kept on the
run; a URL that is not http(s) is a 422."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest
from letta_client import Letta, UnprocessableEntityError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.servers import ServerThread


class Receiver:
    """Records every POST; answers `/fail` with 503, anything else with 200."""

    def __init__(self) -> None:
        self.got: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

        async def hook(request: Request) -> JSONResponse:
            self.got.put((request.url.path, json.loads(await request.body())))
            status = 503 if request.url.path == "/fail" else 200
            return JSONResponse({"ok": status == 200}, status_code=status)

        self.app = Starlette(routes=[Route("/{path:path}", hook, methods=["POST"])])

    def next(self, timeout: float = 30.0) -> tuple[str, dict[str, Any]]:
        return self.got.get(timeout=timeout)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rec = Receiver()
    srv = ServerThread(rec.app).start()
    try:
        yield rec, srv.url
    finally:
        srv.stop()


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test")
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def _settled(client: Letta, run_id: str) -> Any:
    """The run once its callback outcome is stored (a poll, not a timing assertion)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = client.runs.retrieve(run_id)
        if run.callback_sent_at is not None:
            return run
        time.sleep(0.1)
    raise AssertionError("the callback outcome was never stored")


def test_completed_run_posts_its_outcome(
    client: Letta, fake_llm: FakeLLM, receiver: tuple[Receiver, str]
) -> None:
    rec, base = receiver
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text="Done with that."))
    run = client.agents.messages.create_async(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "do it"}],
        callback_url=f"{base}/hooks/run",
    )
    assert run.callback_url == f"{base}/hooks/run" and run.callback_sent_at is None
    path, body = rec.next()
    assert path == "/hooks/run"
    assert set(body) == {"run_id", "status", "completed_at", "metadata"}
    assert (body["run_id"], body["status"]) == (run.id, "completed")
    assert body["completed_at"]
    result = body["metadata"]["result"]
    assert [m["message_type"] for m in result["messages"]] == ["user_message", "assistant_message"]
    assert result["messages"][-1]["content"] == "Done with that."
    assert result["stop_reason"] == {"message_type": "stop_reason", "stop_reason": "end_turn"}
    assert result["usage"]["step_count"] == 1
    done = _settled(client, run.id)
    assert (done.callback_status_code, done.callback_error) == (200, None)
    assert "callback" not in (done.metadata or {})
    assert rec.got.empty()  # sent once


def test_cancelled_run_posts_and_a_failing_endpoint_is_retried(
    client: Letta, fake_llm: FakeLLM, receiver: tuple[Receiver, str]
) -> None:
    rec, base = receiver
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text=" ".join(["slow"] * 200), chunk_delay_s=0.05))
    run = client.agents.messages.create_async(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "go on and on"}],
        callback_url=f"{base}/fail",
    )
    for _ in range(100):
        if client.runs.retrieve(run.id).status == "running":
            break
        time.sleep(0.05)
    assert client.agents.messages.cancel(agent.id) == {run.id: "cancelled"}
    attempts = [rec.next() for _ in range(3)]  # the first try and two retries
    assert all(path == "/fail" for path, _ in attempts)
    assert {(b["run_id"], b["status"]) for _, b in attempts} == {(run.id, "cancelled")}
    done = _settled(client, run.id)
    assert done.status == "cancelled" and done.callback_status_code == 503
    assert done.callback_error and "503" in done.callback_error


def test_unreachable_endpoint_is_recorded_not_fatal(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text="ok"))
    run = client.agents.messages.create_async(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "hi"}],
        callback_url="http://127.0.0.1:9/nobody-listens",
    )
    done = _settled(client, run.id)
    assert done.status == "completed" and done.callback_status_code is None
    assert done.callback_error and "ConnectError" in done.callback_error


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "file:///etc/passwd", "not a url", "http://", "javascript:1"]
)
def test_a_callback_url_that_is_not_http_is_a_422(client: Letta, url: str) -> None:
    agent = client.agents.create(model="openai/fake")
    with pytest.raises(UnprocessableEntityError) as err:
        client.agents.messages.create_async(
            agent_id=agent.id, messages=[{"role": "user", "content": "hi"}], callback_url=url
        )
    assert "callback_url" in str(err.value.body)
    assert client.runs.list(agent_id=agent.id).items == []
