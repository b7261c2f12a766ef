"""Runs and steps, messages across agents, and tags with letta-client 1.12.1 in strict mode,
against a live gateway on loopback (the fake OpenAI-compatible LLM records the requests)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from letta_client import ConflictError, Letta, NotFoundError, UnprocessableEntityError

from tests.integration.test_rest_letta_client import strict
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread
from voice_gateway.routes.rest import DEFAULT_PERSONA


@pytest.fixture
def server(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )


@pytest.fixture
def client(server: ServerThread) -> Iterator[Letta]:
    yield Letta(base_url=server.url, api_key="k", timeout=60, _strict_response_validation=True)


def _tool_turn(client: Letta, fake_llm: FakeLLM, agent_id: str) -> str:
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("archival_memory_insert", {"content": "Ada likes tea."})]),
        Reply(text="Noted: tea."),
    )
    resp = client.agents.messages.create(
        agent_id=agent_id,
        messages=[{"role": "user", "content": "Remember that I like tea", "otid": "otid-1"}],
    )
    assert resp.usage.run_ids and len(resp.usage.run_ids) == 1
    return resp.usage.run_ids[0]


def test_a_turn_is_a_run_with_steps(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake", tags=["tea", "alpha"])
    run_id = _tool_turn(client, fake_llm, agent.id)
    run = client.runs.retrieve(run_id)
    assert (run.status, run.stop_reason, run.agent_id) == ("completed", "end_turn", agent.id)
    assert run.conversation_id and run.total_duration_ns and run.total_duration_ns > 0
    assert run.completed_at is not None and run.created_at is not None
    assert [r.id for r in strict(client.runs.list(agent_id=agent.id))] == [run_id]
    assert not list(client.runs.list(agent_id=agent.id, active=True))
    assert [r.id for r in client.runs.list(statuses=["completed"])] == [run_id]
    steps = strict(client.runs.steps.list(run_id, order="asc"))
    assert len(steps) == 2 and all(s.run_id == run_id and s.status == "success" for s in steps)
    assert steps[0].model_handle == "openai/fake" and steps[0].total_tokens
    usage = client.runs.usage.retrieve(run_id)
    assert usage.total_tokens == sum(s.total_tokens or 0 for s in steps) > 0
    messages = strict(client.runs.messages.list(run_id, order="asc"))
    kinds = [m.message_type for m in messages]
    assert kinds == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert messages[0].otid == "otid-1" and all(m.run_id == run_id for m in messages)
    assert {m.step_id for m in messages[1:]} == {s.id for s in steps}
    # steps
    step = client.steps.retrieve(steps[0].id)
    assert step.id == steps[0].id and step.agent_id == agent.id
    metrics = client.steps.metrics.retrieve(step.id)
    assert metrics.run_id == run_id and metrics.step_ns and metrics.llm_request_ns
    assert metrics.step_ns >= metrics.llm_request_ns > 0 and metrics.tool_execution_ns
    own = strict(client.steps.messages.list(step.id))
    assert {m.message_type for m in own} == {"tool_call_message", "tool_return_message"}
    rated = client.steps.feedback.create(step.id, feedback="positive", tags=["good"])
    assert rated.feedback == "positive" and rated.tags == ["good"]
    assert [s.id for s in strict(client.steps.list(has_feedback=True))] == [step.id]
    assert [s.id for s in client.steps.list(feedback="positive", tags=["good"])] == [step.id]
    assert len(list(client.steps.list(agent_id=agent.id))) == 2
    assert client.tags.list() == ["alpha", "tea"]
    assert client.tags.list(name="te") == ["tea"]


def test_messages_across_agents(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(
        model="openai/fake",
        initial_message_sequence=[{"role": "user", "content": "You are talking to Ada."}],
    )
    assert agent.message_ids and len(agent.message_ids) == 2  # the system message, then it
    _tool_turn(client, fake_llm, agent.id)
    listed = strict(client.messages.list(order="asc"))
    assert [m.message_type for m in listed][-1] == "assistant_message"
    only = client.messages.list(include_return_message_types=["assistant_message"])
    assert [m.message_type for m in only] == ["assistant_message"]
    one = client.messages.retrieve(listed[-1].id)
    assert one[0].id == listed[-1].id
    hits = client.messages.search(query="like TEA")
    assert [h.message_type for h in hits] == ["user_message"]
    assert client.messages.search(query="no such words at all") == []
    again = client.agents.retrieve(agent.id)
    assert again.message_ids and len(again.message_ids) == 6  # system, initial, the turn's four
    compacted = client.agents.messages.compact(agent.id)
    assert compacted.num_messages_before == 5 > compacted.num_messages_after
    reset = client.agents.messages.reset(agent.id)
    assert reset.message_ids == again.message_ids[:1]  # the system message stays (Letta's)
    assert len(list(client.agents.messages.list(agent.id))) >= 5  # still in recall
    prompt = client.agents.recompile(agent.id)
    assert isinstance(prompt, str) and DEFAULT_PERSONA in prompt


def test_include_return_message_types(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("archival_memory_insert", {"content": "x"})]),
        Reply(text="Done."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "store x"}],
        include_return_message_types=["assistant_message"],
    )
    assert [m.message_type for m in resp.messages] == ["assistant_message"]
    with pytest.raises(UnprocessableEntityError) as bad:
        client.agents.messages.create(
            agent_id=agent.id,
            messages=[{"role": "user", "content": "hi"}],
            include_return_message_types=["bogus_message"],  # type: ignore[list-item]
        )
    assert "include_return_message_types" in str(bad.value)
    with pytest.raises(UnprocessableEntityError):
        client.messages.list(include_return_message_types=["bogus_message"])  # type: ignore[list-item]


def test_unknown_ids_are_404(client: Letta, server: ServerThread) -> None:
    for call in (
        lambda: client.runs.retrieve("run-00000000-0000-0000-0000-000000000000"),
        lambda: client.runs.steps.list("run-nope"),
        lambda: client.runs.usage.retrieve("run-nope"),
        lambda: client.steps.retrieve("step-nope"),
        lambda: client.steps.metrics.retrieve("step-nope"),
        lambda: client.steps.feedback.create("step-nope", feedback="negative"),
        lambda: client.messages.retrieve("message-nope"),
    ):
        with pytest.raises(NotFoundError) as err:
            call()
        assert err.value.status_code == 404
    body = httpx.get(f"{server.url}/v1/runs/run-nope").json()
    assert "run" in body["detail"]


def _sse(lines: Iterator[str]) -> Iterator[dict[str, object]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def test_background_run_survives_disconnect_and_reattaches(
    client: Letta, server: ServerThread, fake_llm: FakeLLM
) -> None:
    agent = client.agents.create(model="openai/fake")
    words = " ".join(f"word{i}" for i in range(30))
    fake_llm.push(Reply(text=words, chunk_delay_s=0.05))
    run = client.agents.messages.create_async(
        agent_id=agent.id, messages=[{"role": "user", "content": "talk slowly"}]
    )
    assert run.background and run.status in ("created", "running")
    # attach, read one chunk (a token), and go away mid-run
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("POST", f"/v1/runs/{run.id}/stream", json={}) as resp:
            assert resp.status_code == 200
            first = next(_sse(resp.iter_lines()))
    assert first["message_type"] == "assistant_message" and isinstance(first["seq_id"], int)
    assert client.runs.retrieve(run.id).status == "running"
    for _ in range(300):
        state = client.runs.retrieve(run.id)
        if state.status == "completed":
            break
        time.sleep(0.1)
    assert state.status == "completed" and state.stop_reason == "end_turn"
    # re-attach after that chunk: the rest of the reply, in order, then the stop reason
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream(
            "POST", f"/v1/runs/{run.id}/stream", json={"starting_after": first["seq_id"]}
        ) as resp:
            chunks = list(_sse(resp.iter_lines()))
    rest = [c for c in chunks if c.get("message_type") == "assistant_message"]
    assert all(c["seq_id"] > first["seq_id"] for c in rest)
    said = str(first["content"]) + "".join(str(c["content"]) for c in rest)
    assert said.split() == words.split()
    assert {"message_type": "stop_reason", "stop_reason": "end_turn"} in chunks
    stored = client.runs.messages.list(run.id, order="asc")
    assert [m.message_type for m in stored] == ["user_message", "assistant_message"]


def test_cancel_an_agents_background_run(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text=" ".join(["slow"] * 200), chunk_delay_s=0.05))
    run = client.agents.messages.create_async(
        agent_id=agent.id, messages=[{"role": "user", "content": "go on and on"}]
    )
    for _ in range(100):
        if client.runs.retrieve(run.id).status == "running":
            break
        time.sleep(0.05)
    assert client.agents.messages.cancel(agent.id) == {run.id: "cancelled"}
    done = client.runs.retrieve(run.id)
    assert (done.status, done.stop_reason) == ("cancelled", "cancelled")
    with pytest.raises(ConflictError, match="No active runs to cancel"):  # nothing running
        client.agents.messages.cancel(agent.id)
    assert client.agents.messages.cancel(agent.id, run_ids=[run.id]) == {}  # named: not running
