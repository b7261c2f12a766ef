"""Folders and files with letta-client 1.12.1 in strict mode: a 50-page PDF and a Markdown
FAQ uploaded and processed in the background; an agent with the folder attached answers a
question about a fact on page 37 through semantic_search_files (the fake model calls the tool
and echoes its result), opens and greps files; bad uploads store nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from letta_client import APIStatusError, ConflictError, Letta, NotFoundError

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.pdf import write_pdf

FACT = "The maintenance code for the north turbine is KESTREL-4471."
TOPICS = ["pumps", "valves", "wiring", "cooling", "lighting", "alarms", "fencing", "roads"]
FAQ = """# Frequently asked questions

## Can I get a refund?
Refunds are paid within 14 days to the original card.

## Where do I park?
Visitors park in lot B, next to the visitor centre.
"""


def manual() -> bytes:
    pages = []
    for n in range(1, 51):
        topic = TOPICS[n % len(TOPICS)]
        lines = [f"Chapter {n}: care of the {topic}."]
        if n == 37:
            lines.insert(0, FACT)
        lines += [f"Inspect the {topic} of section {n} every {n % 7 + 1} weeks." for _ in range(3)]
        pages.append(lines)
    return write_pdf(pages)


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(
        database_url=db_url,
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        max_file_bytes=200_000,
    )
    yield Letta(base_url=srv.url, api_key="k", timeout=120, _strict_response_validation=True)


def processed(client: Letta, folder_id: str, file_id: str) -> str:
    deadline = time.monotonic() + 300  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        f = client.folders.files.retrieve(file_id, folder_id=folder_id)
        if f.processing_status in ("completed", "error"):
            return str(f.processing_status)
        time.sleep(0.5)
    raise AssertionError("file never finished processing")


def test_pdf_and_markdown_answered_through_file_tools(client: Letta, fake_llm: FakeLLM) -> None:
    folder = client.folders.create(name="plant docs", description="manuals")
    assert client.folders.retrieve(folder.id).name == "plant docs"
    pdf = client.folders.files.upload(folder.id, file=("manual.pdf", manual(), "application/pdf"))
    faq = client.folders.files.upload(folder.id, file=("faq.md", FAQ.encode(), "text/markdown"))
    assert pdf.processing_status in ("pending", "parsing", "embedding", "completed")
    assert processed(client, folder.id, pdf.id) == "completed"
    assert processed(client, folder.id, faq.id) == "completed"
    files = client.folders.files.list(folder.id)
    assert {f.file_name for f in files} == {"manual.pdf", "faq.md"}
    done = client.folders.files.retrieve(pdf.id, folder_id=folder.id, include_content=True)
    assert done.total_chunks == done.chunks_embedded and done.total_chunks >= 50
    assert "[Page 37]" in (done.content or "")

    agent = client.agents.create(model="openai/fake", name="plant helper")
    state = client.agents.folders.attach(folder.id, agent_id=agent.id)
    assert {"open_files", "grep_files", "semantic_search_files"} <= {t.name for t in state.tools}
    assert [f.id for f in client.agents.folders.list(agent_id=agent.id)] == [folder.id]
    assert client.folders.agents.list(folder.id) == [agent.id]

    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("semantic_search_files", {"query": "north turbine code"})])
    )  # then the default responder echoes the tool's result
    resp = client.agents.messages.create(
        agent_id=agent.id,
        messages=[
            {"role": "user", "content": "What is the maintenance code of the north turbine?"}
        ],
    )
    answer = resp.messages[-1].content
    assert "KESTREL-4471" in answer and "page 37" in answer

    fake_llm.push(
        Reply(
            tool_calls=[
                ToolCallSpec("open_files", {"file_requests": [{"file_name": "plant docs/faq.md"}]})
            ]
        ),
        Reply(text="Opened."),
        Reply(tool_calls=[ToolCallSpec("grep_files", {"pattern": "refund"})]),
    )
    client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Open the FAQ."}]
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Any refunds?"}]
    )
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert '<file status="open" name="plant docs/faq.md">' in system
    assert "Refunds are paid within 14 days" in system
    assert "faq.md:3" in resp.messages[-1].content  # grep: file and line number
    assert all(b.label != "plant docs/faq.md" for b in client.agents.blocks.list(agent.id))

    client.folders.files.delete(faq.id, folder_id=folder.id)
    assert [f.id for f in client.folders.files.list(folder.id)] == [pdf.id]
    fake_llm.push(Reply(text="ok"))
    client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "And now?"}]
    )
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert '<directory name="plant docs">' in system and "faq.md" not in system
    state = client.agents.folders.detach(folder.id, agent_id=agent.id)
    assert "semantic_search_files" not in {t.name for t in state.tools}
    client.folders.delete(folder.id)
    with pytest.raises(NotFoundError):
        client.folders.retrieve(folder.id)


def test_bad_uploads_store_nothing(client: Letta) -> None:
    folder = client.folders.create(name="inbox")
    with pytest.raises(APIStatusError) as err:
        client.folders.files.upload(folder.id, file=("big.txt", b"x" * 250_000, "text/plain"))
    assert err.value.status_code == 413 and "limit" in err.value.body["detail"]  # type: ignore[index]
    with pytest.raises(APIStatusError) as err:
        client.folders.files.upload(folder.id, file=("tool.exe", b"MZ\x90\x00", "application/x"))
    assert err.value.status_code == 415 and ".exe" in err.value.body["detail"]  # type: ignore[index]
    with pytest.raises(APIStatusError) as err:
        client.folders.files.upload(folder.id, file=("fake.pdf", b"hello", "application/pdf"))
    assert err.value.status_code == 415
    with pytest.raises(APIStatusError) as err:
        client.folders.files.upload(folder.id, file=("bin.txt", b"\xff\xfe\x00a", "text/plain"))
    assert err.value.status_code == 415
    assert list(client.folders.files.list(folder.id)) == []
    with pytest.raises(NotFoundError):
        client.folders.files.upload("source-nope", file=("a.txt", b"a", "text/plain"))
    with pytest.raises(NotFoundError):
        client.folders.files.retrieve("file-nope", folder_id=folder.id)
    with pytest.raises(NotFoundError):
        client.folders.files.delete("file-nope", folder_id=folder.id)
    agent = client.agents.create(model="openai/fake")
    with pytest.raises(NotFoundError):
        client.agents.folders.attach("source-nope", agent_id=agent.id)
    with pytest.raises(ConflictError):
        client.folders.create(name="inbox")
    # duplicates: a suffix by default, 409 on request
    first = client.folders.files.upload(folder.id, file=("a.txt", b"alpha", "text/plain"))
    second = client.folders.files.upload(folder.id, file=("a.txt", b"beta", "text/plain"))
    assert (first.file_name, second.file_name) == ("a.txt", "a_(1).txt")
    with pytest.raises(ConflictError):
        client.folders.files.upload(
            folder.id, file=("a.txt", b"gamma", "text/plain"), duplicate_handling="error"
        )
