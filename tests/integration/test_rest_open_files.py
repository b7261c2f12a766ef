"""An agent's files (`client.agents.files`) and a block's agents (`client.blocks.agents`) with
letta-client 1.12.1 in strict mode, against a live gateway on loopback: the files of the
attached folders listed open or closed and paged, opened past `max_files_open` (the least
recently used closes), closed one by one and all at once; the same state the `open_files`
tool keeps (the compiled prompt shows it); a file of a folder that is not attached is a 404."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from letta_client import ConflictError, Letta, NotFoundError

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test")
    yield Letta(base_url=srv.url, api_key="k", timeout=120, _strict_response_validation=True)


def _upload(client: Letta, folder_id: str, name: str, text: str) -> str:
    f = client.folders.files.upload(folder_id, file=(name, text.encode(), "text/markdown"))
    deadline = time.monotonic() + 300  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        got = client.folders.files.retrieve(f.id, folder_id=folder_id)
        if got.processing_status in ("completed", "error"):
            assert got.processing_status == "completed", got.error_message
            return f.id
        time.sleep(0.2)
    raise AssertionError("file never finished processing")


def test_open_close_and_list_an_agents_files(client: Letta, fake_llm: FakeLLM) -> None:
    folder = client.folders.create(name="docs")
    ids = {n: _upload(client, folder.id, f"{n}.md", f"# {n}\nline two of {n}\n") for n in "abc"}
    agent = client.agents.create(model="openai/fake", metadata={"max_files_open": 2})
    client.agents.folders.attach(folder.id, agent_id=agent.id)

    # attaching opens the newest files within max_files_open (Letta's)
    page = client.agents.files.list(agent.id)
    assert [f.file_name for f in page.files] == ["c.md", "b.md", "a.md"]  # newest first
    assert page.has_more is False and [f.is_open for f in page.files] == [True, True, False]
    first = page.files[0]
    assert (first.file_id, first.folder_id, first.folder_name) == (ids["c"], folder.id, "docs")
    assert first.id.startswith("file_agent-")
    assert (
        first.visible_content == "[Viewing file start (out of 2 lines)]\n1: # c\n2: line two of c"
    )
    assert sorted(client.agents.files.close_all(agent.id)) == ["docs/b.md", "docs/c.md"]

    assert client.agents.files.open(ids["a"], agent_id=agent.id) == []
    assert client.agents.files.open(ids["b"], agent_id=agent.id) == []
    # the third open closes the least recently used: a
    assert client.agents.files.open(ids["c"], agent_id=agent.id) == ["docs/a.md"]
    open_now = client.agents.files.list(agent.id, is_open=True, order="asc").files
    assert [f.file_name for f in open_now] == ["b.md", "c.md"]
    assert open_now[0].visible_content == (
        "[Viewing file start (out of 2 lines)]\n1: # b\n2: line two of b"
    )
    assert (open_now[0].start_line, open_now[0].end_line) == (1, 2)
    assert open_now[0].last_accessed_at is not None
    assert [f.file_name for f in client.agents.files.list(agent.id, is_open=False).files] == [
        "a.md"
    ]
    # opening b again is a use: a now closes c, not b
    client.agents.files.open(ids["b"], agent_id=agent.id)
    assert client.agents.files.open(ids["a"], agent_id=agent.id) == ["docs/c.md"]
    prompt = json.loads(client.agents.recompile(agent.id, dry_run=True))  # a JSON string
    assert '<file status="open" name="docs/a.md">' in prompt and "line two of b" in prompt
    assert '<file status="closed" name="docs/c.md">' in prompt
    assert "line two of c" not in prompt

    # the SDK's auto-pagination walks every file once, in order
    first_page = client.agents.files.list(agent.id, limit=1, order="asc")
    assert first_page.has_more is True and first_page.next_cursor == first_page.files[0].id
    walked = [f.file_name for f in client.agents.files.list(agent.id, limit=1, order="asc")]
    assert walked == ["a.md", "b.md", "c.md"]
    after_a = client.agents.files.list(agent.id, after=ids["a"], order="asc").files
    assert [f.file_name for f in after_a] == ["b.md", "c.md"]  # a file id works as a cursor

    assert client.agents.files.close(ids["b"], agent_id=agent.id) == {
        "message": f"File id={ids['b']} successfully closed"
    }
    client.agents.files.close(ids["b"], agent_id=agent.id)  # closed already: no change
    assert client.agents.files.close_all(agent.id) == ["docs/a.md"]
    assert client.agents.files.list(agent.id, is_open=True).files == []
    assert client.agents.files.close_all(agent.id) == []

    # the open_files tool and the routes keep one state
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("open_files", {"file_requests": [{"file_name": "c.md"}]})]),
        Reply(text="Opened."),
    )
    client.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": "c"}])
    assert [f.file_name for f in client.agents.files.list(agent.id, is_open=True).files] == ["c.md"]


def test_files_of_other_folders_and_unknown_ids_are_404(client: Letta) -> None:
    mine, other = client.folders.create(name="mine"), client.folders.create(name="other")
    kept = _upload(client, mine.id, "kept.md", "kept\n")
    stray = _upload(client, other.id, "stray.md", "stray\n")
    agent = client.agents.create(model="openai/fake")
    client.agents.folders.attach(mine.id, agent_id=agent.id)
    for call in (client.agents.files.open, client.agents.files.close):
        with pytest.raises(NotFoundError):
            call(stray, agent_id=agent.id)  # its folder is not attached to the agent
        with pytest.raises(NotFoundError):
            call("file-00000000-0000-4000-8000-000000000000", agent_id=agent.id)
    with pytest.raises(NotFoundError):
        client.agents.files.list("agent-00000000-0000-4000-8000-000000000000")
    with pytest.raises(NotFoundError):
        client.agents.files.close_all("agent-00000000-0000-4000-8000-000000000000")
    assert client.agents.files.open(kept, agent_id=agent.id) == []
    # detaching the folder closes its files and takes them off the list
    client.agents.folders.detach(mine.id, agent_id=agent.id)
    assert client.agents.files.list(agent.id).files == []
    with pytest.raises(NotFoundError):
        client.agents.files.open(kept, agent_id=agent.id)


def test_a_file_still_processing_cannot_be_opened(client: Letta) -> None:
    folder = client.folders.create(name="slow")
    agent = client.agents.create(model="openai/fake")
    client.agents.folders.attach(folder.id, agent_id=agent.id)
    broken = client.folders.files.upload(
        folder.id, file=("broken.pdf", b"%PDF-1.4 not really", "application/pdf")
    )
    deadline = time.monotonic() + 120
    while client.folders.files.retrieve(broken.id, folder_id=folder.id).processing_status not in (
        "completed",
        "error",
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(ConflictError) as err:
        client.agents.files.open(broken.id, agent_id=agent.id)
    assert "processing_status error" in str(err.value.body)


def test_a_blocks_agents(client: Letta) -> None:
    shared = client.blocks.create(label="policy", value="Refunds within 14 days.")
    a = client.agents.create(model="openai/fake", name="a")
    b = client.agents.create(model="openai/fake", name="b")
    client.agents.create(model="openai/fake", name="c")
    assert client.blocks.agents.list(shared.id).items == []
    client.agents.blocks.attach(shared.id, agent_id=a.id)
    client.agents.blocks.attach(shared.id, agent_id=b.id)
    on = client.blocks.agents.list(shared.id)
    assert [x.id for x in on] == [a.id, b.id]
    assert [x.id for x in client.blocks.agents.list(shared.id, order="desc")] == [b.id, a.id]
    assert [x.id for x in client.blocks.agents.list(shared.id, after=a.id)] == [b.id]
    assert [x.id for x in client.blocks.agents.list(shared.id, limit=1).items] == [a.id]
    # an agent's own block: that agent
    own = client.agents.blocks.retrieve("persona", agent_id=a.id)
    assert [x.id for x in client.blocks.agents.list(own.id)] == [a.id]
    with pytest.raises(NotFoundError):
        client.blocks.agents.list("block-00000000-0000-4000-8000-000000000000")
