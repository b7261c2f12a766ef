"""A turn's agent state (Memory.turn_state) reuses the last turn's decoded agent only when the
rows read for that turn are the same (memory/agents.py `decode_for_turn`): on SQLite and
PostgreSQL, two callers of one agent each see only their own blocks, turn after turn; a
change made by another process (a sleeptime worker, another gateway) shows in the next turn;
what a turn does to its own copy never reaches the next one."""

from __future__ import annotations

import asyncio

from memory.models import BlockSpec
from memory.service import Memory


async def _agent_and_callers(memory: Memory) -> tuple[str, dict[str, str]]:
    agent = await memory.agents.create(
        user_id=None,
        name="shared",
        system="You answer the phone.",
        model="openai/gpt-4o-mini",
        embedding="local/all-minilm-l6-v2",
        tool_names=[],
        blocks=[
            BlockSpec(label="persona", value="A receptionist."),
            BlockSpec(label="human", value="Name: unknown"),
        ],
    )
    convs: dict[str, str] = {}
    for name in ("Ada", "Bo"):
        ident = await memory.identities.resolve(None, f"caller-{name}", agent_id=agent.id)
        await memory.blocks.ensure_caller_copies(agent.id, ident.id)
        await memory.blocks.set_value(
            agent.id, "human", f"Name: {name}", actor="agent", identity_id=ident.id
        )
        conv = await memory.conversations.open_for(agent.id, identity_id=ident.id, new=True)
        convs[name] = conv.id
    return agent.id, convs


def _human(agent: object) -> str:
    blocks = agent.blocks  # type: ignore[attr-defined]
    return next(b.value for b in blocks if b.label == "human")


async def _run(db_url: str) -> None:
    memory = await Memory.open(db_url)
    other = await Memory.open(db_url, migrate=False)  # another process's view of the database
    try:
        agent_id, convs = await _agent_and_callers(memory)
        for _ in range(3):  # alternating turns: each caller's state comes from its own rows
            for name, conv in convs.items():
                agent, conv_data = await memory.turn_state(agent_id, conv)
                assert _human(agent) == f"Name: {name}"
                assert conv_data.id == conv

        # a turn replaces blocks on its own copy (as the memory tools do): the next turn of
        # the same caller starts from the stored blocks again
        first, _ = await memory.turn_state(agent_id, convs["Ada"])
        first.blocks = [b for b in first.blocks if b.label != "human"]
        again, _ = await memory.turn_state(agent_id, convs["Ada"])
        assert again is not first and _human(again) == "Name: Ada"

        # written elsewhere: the next turn reads it
        ident = (await memory.identities.resolve(None, "caller-Ada", agent_id=agent_id)).id
        await other.blocks.set_value(
            agent_id, "human", "Name: Ada Lovelace", actor="sleeptime", identity_id=ident
        )
        ada, _ = await memory.turn_state(agent_id, convs["Ada"])
        bo, _ = await memory.turn_state(agent_id, convs["Bo"])
        assert _human(ada) == "Name: Ada Lovelace"
        assert _human(bo) == "Name: Bo"
        await other.blocks.set_value(agent_id, "persona", "A night receptionist.", actor="user")
        for conv in convs.values():
            agent, _ = await memory.turn_state(agent_id, conv)
            persona = next(b.value for b in agent.blocks if b.label == "persona")
            assert persona == "A night receptionist."
    finally:
        await other.close()
        await memory.close()


def test_turn_state_reuses_only_identical_rows(db_url: str) -> None:
    asyncio.run(_run(db_url))
