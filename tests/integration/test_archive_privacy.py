"""Caller privacy across archives: a caller's own passages (in the agent's own archive) are
found by that caller's searches only — not by another caller's, not by agent-wide searches
over the agent's archives (`/v1/passages/search`), and never through a shared archive."""

from __future__ import annotations

from agents.tools import PRE_EXEC_MSG, REGISTRY
from memory.archival import SearchFilter
from memory.embeddings import LOCAL_HANDLE
from memory.models import BlockSpec
from memory.service import Memory


async def test_caller_passages_stay_with_the_caller(db_url: str) -> None:
    memory = await Memory.open(db_url)
    try:
        a = await memory.agents.create(
            user_id=None,
            name="a",
            system="",
            model="scripted/demo",
            embedding=LOCAL_HANDLE,
            blocks=[BlockSpec(label="human", value="")],
        )
        b = await memory.agents.create(
            user_id=None,
            name="b",
            system="",
            model="scripted/demo",
            embedding=LOCAL_HANDLE,
            blocks=[],
        )
        kb = await memory.archives.create(None, "kb", LOCAL_HANDLE)
        await memory.archives.add_passages(kb, [("The shop sells red bicycles.", [], None)])
        for agent in (a, b):
            await memory.archives.set_attached(agent.id, kb.id, True)
        await memory.archival.insert(
            a.id, ["Alice's bicycle lock code is 7719."], identity_id="identity-alice"
        )
        q = "bicycle lock code"
        mine = await memory.archival.search(a.id, q, 5, identity_id="identity-alice")
        assert "7719" in mine[0].text
        for who in ("identity-bob", None):
            hits = await memory.archival.search(a.id, q, 5, identity_id=who)
            assert all("7719" not in h.text for h in hits) and hits  # the kb is still found
        rest = await memory.archives.search(
            q, 5, SearchFilter(), user_id=None, scoped=False, agent_id=a.id
        )
        assert all("7719" not in h.text for h in rest)
        everything = await memory.archives.search(q, 50, SearchFilter(), user_id=None, scoped=False)
        assert all("7719" not in h.text for h in everything)
        other = await memory.archival.search(b.id, q, 5, identity_id="identity-alice")
        assert all("7719" not in h.text for h in other)  # another agent: not its archive
    finally:
        await memory.close()


def test_file_tools_are_voice_safe_with_the_filler() -> None:
    names = ["open_files", "grep_files", "semantic_search_files", "core_memory_append"]
    voice = REGISTRY.select(names, voice=True)
    assert [t.name for t in voice] == names[:3]
    for tool in voice:
        assert PRE_EXEC_MSG in tool.schema(voice=True)["function"]["parameters"]["properties"]
