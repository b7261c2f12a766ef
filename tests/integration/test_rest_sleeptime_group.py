"""Sleeptime groups as Letta clients see them (strict letta-client 1.12.1 and raw HTTP):
`enable_sleeptime` gives an agent a sleeptime agent (Letta's `multi_agent_group`) that the
agents API shows with its memory tools and shares the agent's blocks, later attached blocks
included; `/v1/groups/{id}` reads and tunes it; PATCH `enable_sleeptime: false` or deleting
the agent removes it. Bad input: unknown or another user's group 404, wrong types 422."""

from __future__ import annotations

import httpx
import pytest
from letta_client import Letta, NotFoundError

from tests.integration.test_rest_conversations import make_user


@pytest.fixture
def two(gateway_factory, sqlite_url: str):  # type: ignore[no-untyped-def]
    keys = make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")
    srv = gateway_factory(database_url=sqlite_url, api_key="server-secret")
    return [
        (
            Letta(base_url=srv.url, api_key=k, timeout=60, _strict_response_validation=True),
            httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {k}"}, timeout=60),
        )
        for k in keys
    ]


def test_enable_sleeptime_group(two) -> None:  # type: ignore[no-untyped-def]
    (c, http), _ = two
    main = c.agents.create(
        model="openai/fake",
        memory_blocks=[{"label": "persona", "value": "p"}, {"label": "human", "value": "h"}],
        enable_sleeptime=True,
    )
    assert main.enable_sleeptime is True and main.multi_agent_group is not None
    group = main.multi_agent_group
    assert group.manager_type == "sleeptime" and len(group.agent_ids) == 1
    names = {t.name for t in main.tools}
    assert not names & {"core_memory_append", "core_memory_replace", "archival_memory_insert"}
    helper_id = group.agent_ids[0]
    helper = c.agents.retrieve(helper_id)
    assert helper.agent_type == "sleeptime_agent"
    assert {"memory_rethink", "memory_finish_edits"} <= {t.name for t in helper.tools}
    assert any(r.type == "exit_loop" for r in helper.tool_rules or [])
    human = c.agents.blocks.retrieve("human", agent_id=main.id)
    assert {a.id for a in c.blocks.agents.list(human.id)} == {main.id, helper_id}
    # a block attached later is shared too; the helper sees the primary's edits
    prefs = c.blocks.create(label="preferences", value="tea")
    c.agents.blocks.attach(prefs.id, agent_id=main.id)
    assert prefs.id in {b.id for b in c.agents.retrieve(helper_id).memory.blocks}
    c.agents.blocks.update("human", agent_id=main.id, value="name: Sam")
    assert c.agents.blocks.retrieve("human", agent_id=helper_id).value == "name: Sam"
    c.agents.blocks.detach(prefs.id, agent_id=main.id)
    assert prefs.id not in {b.id for b in c.agents.retrieve(helper_id).memory.blocks}

    r = http.patch(
        f"/v1/groups/{group.id}",
        json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 2}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["sleeptime_agent_frequency"] == 2 and r.json()["agent_ids"] == [helper_id]
    assert http.get(f"/v1/groups/{group.id}").json()["sleeptime_agent_frequency"] == 2
    assert [g["id"] for g in http.get("/v1/groups").json()] == [group.id]

    c.agents.delete(main.id)  # the sleeptime agent goes with it
    with pytest.raises(NotFoundError):
        c.agents.retrieve(helper_id)
    assert http.get(f"/v1/groups/{group.id}").status_code == 404


def test_enable_and_disable_by_update(two) -> None:  # type: ignore[no-untyped-def]
    (c, http), _ = two
    agent = c.agents.create(model="openai/fake")
    assert agent.enable_sleeptime is False and agent.multi_agent_group is None
    on = c.agents.update(agent.id, enable_sleeptime=True)
    assert on.multi_agent_group is not None
    helper_id = on.multi_agent_group.agent_ids[0]
    again = c.agents.update(agent.id, enable_sleeptime=True)  # idempotent: the same helper
    assert again.multi_agent_group is not None
    assert again.multi_agent_group.agent_ids == [helper_id]
    off = c.agents.update(agent.id, enable_sleeptime=False)
    assert off.multi_agent_group is None and off.enable_sleeptime is False
    assert http.get(f"/v1/agents/{helper_id}").status_code == 404


def test_group_bad_input(two) -> None:  # type: ignore[no-untyped-def]
    (c, http), (_, bob_http) = two
    main = c.agents.create(model="openai/fake", enable_sleeptime=True)
    assert main.multi_agent_group is not None
    gid = main.multi_agent_group.id
    plain = c.agents.create(model="openai/fake")
    for path in ("/v1/groups/group-nope", "/v1/groups/agent-x", plain.id.replace("agent", "group")):
        url = path if path.startswith("/") else f"/v1/groups/{path}"
        r = http.get(url)
        assert r.status_code == 404 and "detail" in r.json(), (url, r.text)
    for method in ("get", "delete"):  # another user's group
        r = getattr(bob_http, method)(f"/v1/groups/{gid}")
        assert r.status_code == 404 and "detail" in r.json()
    assert bob_http.get("/v1/groups").json() == []
    for body in (
        {"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": "2"}},
        {"manager_config": {"manager_type": "round_robin"}},
        {"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 0}},
        {"description": 5},
    ):
        r = http.patch(f"/v1/groups/{gid}", json=body)
        assert r.status_code == 422 and "detail" in r.json(), (body, r.text)
    r = http.post("/v1/agents", json={"model": "openai/fake", "enable_sleeptime": "yes"})
    assert r.status_code == 422 and "detail" in r.json()
    r = http.patch(f"/v1/agents/{plain.id}", json={"enable_sleeptime": 1})
    assert r.status_code == 422 and "detail" in r.json()
    assert http.get(f"/v1/groups/{gid}").json()["sleeptime_agent_frequency"] == 5  # unchanged
    assert http.delete(f"/v1/groups/{gid}").status_code == 200
    assert c.agents.retrieve(main.id).multi_agent_group is None
