"""Agent files with folders (Letta's `sources`, `files` and each agent's `files_agents`) through
letta-client 1.12.1 in strict mode on a live gateway: an agent with a folder attached exports
its folder, the files' text and which files are open (the shape Letta's importer requires);
importing it makes a folder of its own (a name in use gets a suffix, as in Letta), chunks and
embeds the files again, attaches the folder and opens the same windows. A malformed files
section is a 422 naming the first problem, and nothing is imported."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import Letta

from memory.orm import Agent, Block, FileRecord, Folder, Passage
from tests.integration.test_agent_files import counts as agent_file_counts
from tests.integration.test_agent_files import exported, upload
from tests.support.letta_export import letta_file
from tests.support.servers import ServerThread


@pytest.fixture
def srv(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )


@pytest.fixture
def client(srv: ServerThread) -> Iterator[Letta]:
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


MANUAL = "\n".join(f"Step {n}: tighten bolt {n} to {n * 2} Nm." for n in range(1, 151))
FAQ = "# FAQ\nRefunds are paid within 14 days.\n"


def _processed(client: Letta, folder_id: str, file_id: str) -> Any:
    deadline = time.monotonic() + 300  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        f = client.folders.files.retrieve(file_id, folder_id=folder_id, include_content=True)
        if f.processing_status in ("completed", "error"):
            return f
        time.sleep(0.2)
    raise AssertionError("file never finished processing")


def _agent_with_folder(client: Letta) -> tuple[str, str, dict[str, str]]:
    folder = client.folders.create(name="handbook", description="how-tos")
    ids = {}
    for name, text in (("manual.md", MANUAL), ("faq.md", FAQ)):
        f = client.folders.files.upload(folder.id, file=(name, text.encode(), "text/markdown"))
        assert _processed(client, folder.id, f.id).processing_status == "completed"
        ids[name] = f.id
    agent = client.agents.create(model="openai/fake", name="fixer", metadata={"max_files_open": 2})
    client.agents.folders.attach(folder.id, agent_id=agent.id)  # opens both
    client.agents.files.close(ids["faq.md"], agent_id=agent.id)
    return agent.id, folder.id, ids


def test_folders_and_open_files_round_trip(client: Letta) -> None:
    agent_id, folder_id, _ = _agent_with_folder(client)
    af = exported(client, agent_id)  # validated against Letta's schema
    [source] = af["sources"]
    assert (source["id"], source["name"], source["description"]) == (
        "source-0",
        "handbook",
        "how-tos",
    )
    assert source["embedding_config"]["handle"]
    by_name = {f["file_name"]: f for f in af["files"]}
    assert by_name["manual.md"]["content"] == MANUAL and by_name["faq.md"]["content"] == FAQ
    assert {f["source_id"] for f in af["files"]} == {"source-0"}
    agent = af["agents"][0]
    assert agent["source_ids"] == ["source-0"]
    state = {fa["file_name"]: fa for fa in agent["files_agents"]}
    assert state["faq.md"]["is_open"] is False and state["faq.md"]["visible_content"] is None
    manual = state["manual.md"]
    assert manual["is_open"] and (manual["start_line"], manual["end_line"]) == (1, 150)
    assert manual["visible_content"].startswith(
        "[Viewing file start (out of 150 lines)]\n1: Step 1: tighten bolt 1 to 2 Nm."
    )

    new_id = upload(client, af)
    folders = client.agents.folders.list(agent_id=new_id).items
    assert len(folders) == 1 and folders[0].id != folder_id
    assert folders[0].name.startswith("handbook_") and len(folders[0].name) == len("handbook_") + 8
    new_files = {f.file_name: f for f in client.folders.files.list(folders[0].id)}
    assert set(new_files) == {"manual.md", "faq.md"}
    done = _processed(client, folders[0].id, new_files["manual.md"].id)
    assert done.processing_status == "completed" and done.content == MANUAL
    assert done.total_chunks and done.chunks_embedded == done.total_chunks
    listed = {f.file_name: f for f in client.agents.files.list(new_id).files}
    assert listed["manual.md"].is_open and not listed["faq.md"].is_open
    assert listed["manual.md"].visible_content == manual["visible_content"]
    assert (listed["manual.md"].start_line, listed["manual.md"].end_line) == (1, 150)
    tools = {t.name for t in client.agents.retrieve(agent_id=new_id).tools}
    assert {"open_files", "grep_files", "semantic_search_files"} <= tools
    # the file's state is the agent's own: closing it there leaves the original open
    client.agents.files.close_all(new_id)
    assert [f.file_name for f in client.agents.files.list(agent_id, is_open=True).files] == [
        "manual.md"
    ]


def test_a_letta_file_with_a_window_and_a_file_without_text(client: Letta) -> None:
    af = letta_file()
    af["sources"] = [
        {
            "id": "source-0",
            "name": "letta docs",
            "embedding_config": {"embedding_chunk_size": 300, "handle": "acme/unknown-embedder"},
        }
    ]
    af["files"] = [
        {"id": "file-0", "source_id": "source-0", "file_name": "notes.txt", "content": MANUAL},
        {"id": "file-1", "source_id": "source-0", "file_name": "scan.pdf", "content": None,
         "processing_status": "error", "error_message": "no text layer"},
    ]  # fmt: skip
    af["agents"][0]["source_ids"] = ["source-0"]
    af["agents"][0]["files_agents"] = [
        {"id": "file_agent-0", "agent_id": "agent-0", "file_id": "file-0", "source_id": "source-0",
         "file_name": "letta docs/notes.txt", "is_open": True, "start_line": 120, "end_line": 125,
         "visible_content": "whatever Letta showed"},
    ]  # fmt: skip
    new_id = upload(client, af)
    [folder] = client.agents.folders.list(agent_id=new_id).items
    assert folder.name == "letta docs" and folder.embedding_config.embedding_chunk_size == 300
    files = {f.file_name: f for f in client.folders.files.list(folder.id)}
    assert files["scan.pdf"].processing_status == "error"
    assert files["scan.pdf"].error_message == "no text layer"
    [opened] = client.agents.files.list(new_id, is_open=True).files
    assert opened.file_name == "notes.txt" and (opened.start_line, opened.end_line) == (120, 125)
    assert opened.visible_content == "\n".join(
        [
            "[Viewing lines 120 to 125 (out of 150 lines)]",
            *(f"{n}: Step {n}: tighten bolt {n} to {n * 2} Nm." for n in range(120, 126)),
        ]
    )
    assert _processed(client, folder.id, files["notes.txt"].id).processing_status == "completed"


def _bad(change: str) -> bytes:
    af = letta_file()
    af["sources"] = [{"id": "source-0", "name": "docs"}]
    af["files"] = [{"id": "file-0", "source_id": "source-0", "file_name": "a.md", "content": "a"}]
    agent = af["agents"][0]
    agent["source_ids"] = ["source-0"]
    agent["files_agents"] = [
        {"id": "file_agent-0", "agent_id": "agent-0", "file_id": "file-0", "is_open": True}
    ]
    if change == "file-ref":
        agent["files_agents"][0]["file_id"] = "file-7"
    elif change == "file-source":
        af["files"][0]["source_id"] = "source-3"
    elif change == "agent-source":
        agent["source_ids"] = ["source-5"]
    elif change == "not-attached":
        agent["source_ids"] = []
    elif change == "no-name":
        del af["sources"][0]["name"]
    elif change == "dup":
        af["files"].append(dict(af["files"][0]))
    elif change == "is-open":
        agent["files_agents"][0]["is_open"] = "perhaps"
    elif change == "blank-name":
        af["files"][0]["file_name"] = "../"
    return json.dumps(af).encode()


BAD = {
    "file-ref": "agents.0.files_agents.0.file_id: 'file-7' is not in the file",
    "file-source": "files.0.source_id: 'source-3' is not in the file",
    "agent-source": "agents.0.source_ids: 'source-5' is not in the file",
    "not-attached": "agents.0.files_agents.0: the source of 'file-0' ('source-0') is not in",
    "no-name": "sources.0.name: Field required",
    "dup": "files.1.id: 'file-0' is in the file twice",
    "is-open": "agents.0.files_agents.0.is_open",
    "blank-name": "files.0.file_name: not a file name",
}


def counts(db_url: str) -> dict[str, int]:
    return agent_file_counts(db_url, (Agent, Block, Folder, FileRecord, Passage))


@pytest.mark.parametrize("change", sorted(BAD))
def test_bad_files_section_is_422_and_imports_nothing(
    srv: ServerThread, db_url: str, change: str
) -> None:
    before = counts(db_url)
    resp = httpx.post(
        f"{srv.url}/v1/agents/import",
        files={"file": ("x.af", _bad(change), "application/json")},
        timeout=30,
    )
    assert resp.status_code == 422, resp.text
    assert BAD[change] in resp.json()["detail"]
    assert counts(db_url) == before
