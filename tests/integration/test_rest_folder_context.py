"""A folder's files in the agent's context, as Letta clients expect (letta-client 1.12.1 strict
and raw HTTP, a live gateway on loopback): attaching a folder (or creating the agent with
`source_ids`) opens its newest files within `max_files_open`, a file uploaded to an attached
folder opens once it has its text, the prompt's `<directories>` shows them open (a window of
numbered lines cut at `per_file_view_window_char_limit`) or closed, and detaching or deleting
takes them out. The file tools answer as Letta's do; another user's folder is a 404."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import ConflictError, Letta, NotFoundError

from tests.integration.test_rest_conversations import make_user
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec

HUNDRED = "".join(f"x{n} = {n}\n" for n in range(1, 101))


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test")
    yield Letta(base_url=srv.url, api_key="k", timeout=120, _strict_response_validation=True)


def upload(client: Letta, folder_id: str, file_name: str, text: str, **kw: Any) -> str:
    f = client.folders.files.upload(folder_id, file=(file_name, text.encode(), "text/plain"), **kw)
    deadline = time.monotonic() + 300  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        got = client.folders.files.retrieve(f.id, folder_id=folder_id)
        if got.processing_status in ("completed", "error"):
            assert got.processing_status == "completed", got.error_message
            return f.id
        time.sleep(0.2)
    raise AssertionError("file never finished processing")


def system(client: Letta, agent_id: str) -> str:
    payload = client.post(
        f"/v1/agents/{agent_id}/messages/preview-raw-payload",
        cast_to=dict[str, Any],
        body={"messages": [{"role": "user", "content": "hi"}]},
    )
    text: str = payload["messages"][0]["content"]
    return text


def file_blocks(client: Letta, agent_id: str) -> list[Any]:
    return list(client.agents.retrieve(agent_id).memory.file_blocks or [])


def test_attach_opens_files_and_the_prompt_shows_them(client: Letta) -> None:
    folder = client.folders.create(name="docs")
    upload(client, folder.id, "note.txt", "test")
    agent = client.agents.create(model="openai/fake")
    assert "<directories>" not in system(client, agent.id)
    client.agents.folders.attach(folder.id, agent_id=agent.id)

    state = client.agents.retrieve(agent.id)
    assert (state.max_files_open, state.per_file_view_window_char_limit) == (5, 15000)
    [block] = state.memory.file_blocks or []
    assert (block.label, block.is_open, block.source_id) == ("docs/note.txt", True, folder.id)
    assert block.value == "[Viewing file start (out of 1 lines)]\n1: test"
    assert (
        "<directories>\n<file_limits>\n- current_files_open=1\n- max_files_open=5\n"
        '</file_limits>\n<directory name="docs">\n<file status="open" name="docs/note.txt">\n'
        "<metadata>\n- read_only=true\n- chars_current=45\n- chars_limit=15000\n</metadata>\n"
        "<value>\n[Viewing file start (out of 1 lines)]\n1: test\n</value>\n</file>\n"
        "</directory>\n</directories>"
    ) in system(client, agent.id)

    # a file uploaded to the attached folder opens once it has its text
    upload(client, folder.id, "hundred.py", HUNDRED)
    by_label = {b.label: b for b in file_blocks(client, agent.id)}
    assert by_label["docs/hundred.py"].value.startswith("[Viewing file start (out of 100 lines)]")
    # closed by hand: listed without its text
    client.agents.files.close(by_label["docs/hundred.py"].file_id, agent_id=agent.id)
    prompt = system(client, agent.id)
    assert '<file status="closed" name="docs/hundred.py">\n</file>' in prompt
    assert "x50 = 50" not in prompt

    client.agents.folders.detach(folder.id, agent_id=agent.id)
    assert file_blocks(client, agent.id) == []
    prompt = system(client, agent.id)
    assert "<directories>" not in prompt and 'name="docs' not in prompt


def test_limits_per_agent_and_deletes(client: Letta) -> None:
    folder = client.folders.create(name="kb", description="the handbook")
    old = upload(client, folder.id, "old.txt", "old text")
    new = upload(client, folder.id, "new.txt", HUNDRED)
    agent = client.agents.create(
        model="openai/fake",
        source_ids=[folder.id],
        max_files_open=1,
        per_file_view_window_char_limit=80,
    )
    # created with the folder: only the newest opens, its window cut at 80 characters
    blocks = {b.file_id: b for b in agent.memory.file_blocks or []}
    assert (blocks[new].is_open, blocks[old].is_open, blocks[old].value) == (True, False, "")
    assert blocks[new].value == (
        "[Viewing file start (out of 100 lines)]\n1: x1 = 1\n2: x2 = 2\n3: x3 = 3\n4: x4 = 4"
    )
    assert {t.name for t in agent.tools} >= {"open_files", "grep_files", "semantic_search_files"}
    prompt = system(client, agent.id)
    assert "- current_files_open=1\n- max_files_open=1" in prompt
    assert '<directory name="kb">\n<description>the handbook</description>' in prompt
    assert "- chars_limit=80" in prompt

    updated = client.agents.update(agent.id, max_files_open=3)
    assert (updated.max_files_open, updated.per_file_view_window_char_limit) == (3, 80)

    client.folders.files.delete(new, folder_id=folder.id)
    assert [b.file_id for b in file_blocks(client, agent.id)] == [old]
    assert "new.txt" not in system(client, agent.id)
    client.folders.delete(folder.id)
    assert file_blocks(client, agent.id) == []
    assert "<directories>" not in system(client, agent.id)


def test_file_tools_answer_as_lettas(client: Letta, fake_llm: FakeLLM) -> None:
    folder = client.folders.create(name="src")
    upload(client, folder.id, "hundred.py", HUNDRED)
    agent = client.agents.create(model="openai/fake", source_ids=[folder.id])

    [tool] = client.tools.list(name="open_files")
    schema = tool.json_schema or {}
    item = schema["parameters"]["properties"]["file_requests"]["items"]
    assert item["required"] == ["file_name"] and item["properties"]["offset"]["type"] == "integer"
    assert "Maximum of 5 files can be opened simultaneously." in schema["description"]

    def call(name: str, args: dict[str, Any]) -> Any:
        fake_llm.push(Reply(tool_calls=[ToolCallSpec(name, args)]), Reply(text="ok"))
        resp = client.agents.messages.create(
            agent_id=agent.id, messages=[{"role": "user", "content": "go"}]
        )
        return next(m for m in resp.messages if m.message_type == "tool_return_message")

    req = {"file_name": "src/hundred.py", "offset": 49, "length": 5}
    assert call("open_files", {"file_requests": [req]}).status == "success"
    [block] = file_blocks(client, agent.id)
    assert block.value == "\n".join(
        [
            "[Viewing lines 50 to 54 (out of 100 lines)]",
            *(f"{n}: x{n} = {n}" for n in range(50, 55)),
        ]
    )
    past = call("open_files", {"file_requests": [{"file_name": "src/hundred.py", "offset": 100}]})
    assert past.status == "error" and "past its end" in past.tool_return
    unknown = call("open_files", {"file_requests": [{"file_name": "src/none.py"}]})
    assert unknown.status == "error" and "no readable file" in unknown.tool_return

    grep = call("grep_files", {"pattern": r"x7 = 7$"})
    assert grep.status == "success"
    assert "Found 1 total matches across 1 files" in grep.tool_return
    assert "  6: x6 = 6\n> 7: x7 = 7\n  8: x8 = 8" in grep.tool_return
    many = call("grep_files", {"pattern": "x", "offset": 20})
    assert "Showing matches 21-40 of 100" in many.tool_return
    assert "offset=40" in many.tool_return


@pytest.fixture
def srv(gateway_factory, sqlite_url: str):  # type: ignore[no-untyped-def]
    return gateway_factory(database_url=sqlite_url, api_key="server-secret")


def test_names_duplicates_and_other_users(srv, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    alice_key, bob_key = make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")
    alice = Letta(base_url=srv.url, api_key=alice_key, _strict_response_validation=True)
    folder = alice.folders.create(name="inbox")
    fid = upload(alice, folder.id, "x.txt", "first", name="a/b/../c.txt")
    assert alice.folders.files.retrieve(fid, folder_id=folder.id).file_name == "a/b/c.txt"
    with pytest.raises(ConflictError) as err:
        alice.folders.files.upload(
            folder.id, file=("x.txt", b"again", "text/plain"), name="a/b/c.txt",
            duplicate_handling="error",
        )  # fmt: skip
    assert "already exists" in str(err.value)
    agent = alice.agents.create(model="openai/fake")
    with pytest.raises(NotFoundError):
        alice.agents.folders.attach(
            "source-00000000-0000-4000-8000-000000000000", agent_id=agent.id
        )

    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {bob_key}"}) as bob:
        theirs = bob.post("/v1/agents", json={"model": "openai/fake"}).json()["id"]
        for path in (
            f"/v1/agents/{theirs}/folders/attach/{folder.id}",  # alice's folder
            f"/v1/agents/{agent.id}/folders/attach/{folder.id}",  # alice's agent
        ):
            r = bob.patch(path)
            assert r.status_code == 404, r.text
        r = bob.post("/v1/agents", json={"model": "openai/fake", "source_ids": [folder.id]})
        assert r.status_code == 404, r.text
        r = bob.post("/v1/agents", json={"model": "openai/fake", "source_ids": "not-a-list"})
        assert r.status_code == 422 and "source_ids" in r.text
        r = bob.patch(f"/v1/agents/{theirs}", json={"max_files_open": 0})
        assert r.status_code == 422 and "max_files_open" in r.text
        r = bob.post("/v1/agents", json={"per_file_view_window_char_limit": "big"})
        assert r.status_code == 422 and "per_file_view_window_char_limit" in r.text
    assert alice.agents.retrieve(agent.id).memory.file_blocks == []
