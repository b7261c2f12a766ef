from __future__ import annotations

from dataclasses import replace

from agents.events import ToolArgsDelta
from agents.greeting import known_name, personalize
from agents.llm.base import LLMRequest
from agents.llm.facts import extract_facts, lookup, merge_facts
from agents.llm.scripted import ScriptedProvider
from agents.voice import DEFAULT_FILLER, FillerDetector, pre_exec_from_partial
from memory.models import AgentData, BlockData


def test_extract_and_merge_facts() -> None:
    facts = extract_facts(
        "Hi, my name is alice and I live in New York. Remember that I hate olives."
    )
    assert facts["Name"] == "Alice" and facts["Location"] == "New York"
    merged = merge_facts("Name: Bob\nLikes: tea", facts)
    assert "Name: Alice" in merged and "Bob" not in merged and "Likes: tea" in merged
    assert "- I hate olives" in merged
    assert merge_facts(merged, facts) == merged  # idempotent
    assert lookup("what's my name?", merged) == ("name", "Alice")
    assert lookup("where do I live", merged) == ("location", "New York")
    assert lookup("what's the weather", merged) is None


def test_scripted_sleeptime_plan_is_deterministic() -> None:
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"properties": {}}}}
        for n in ("memory_rethink", "archival_memory_insert", "memory_finish_edits")
    ]
    req = LLMRequest(
        model="demo",
        tools=tools,
        messages=[
            {"role": "system", "content": "<human>\n<value>\nName: Bob\n</value>\n</human>"},
            {
                "role": "user",
                "content": (
                    "Transcript:\nuser: my name is Carol and I live in Lisbon\nassistant: Nice."
                ),
            },
        ],
    )
    p = ScriptedProvider()
    text, calls = p.decide(req)
    assert [c[0] for c in calls] == ["archival_memory_insert", "memory_rethink"]
    assert calls[1][1] == {"label": "human", "new_memory": "Name: Carol\nLocation: Lisbon"}
    assert p.decide(req) == (text, calls)
    # after the tool results it finishes
    step = {"role": "assistant", "content": None}
    done = [*req.messages, step, {"role": "tool", "content": "Stored in archival memory."}]
    assert p.decide(replace(req, messages=done))[1] == [("memory_finish_edits", {})]


def test_filler_detector() -> None:
    d = FillerDetector()
    assert (
        d.feed(ToolArgsDelta("m", 0, "c1", "archival_memory_search", '{"pre_exec_msg": "Hold on'))
        is None
    )
    f = d.feed(
        ToolArgsDelta(
            "m", 0, "c1", "archival_memory_search", '{"pre_exec_msg": "Hold on \\"please\\"", "q'
        )
    )
    assert f is not None and f.text == 'Hold on "please"' and not f.cached
    assert (
        d.feed(
            ToolArgsDelta(
                "m", 0, "c1", "archival_memory_search", '{"pre_exec_msg": "x", "query": "y"}'
            )
        )
        is None
    )
    f2 = d.feed(ToolArgsDelta("m", 1, "c2", "search_memory", ""))
    assert f2 is not None and f2.cached and f2.text == DEFAULT_FILLER
    assert pre_exec_from_partial('{"pre_exec_msg": ""}') is None


def _agent(human: str, greeting: str) -> AgentData:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return AgentData(
        id="a",
        name="n",
        system="",
        model="scripted/demo",
        embedding="local/all-minilm-l6-v2",
        greeting=greeting,
        created_at=now,
        updated_at=now,
        blocks=[BlockData(id="b", agent_id="a", label="human", value=human, limit=100)],
    )


def test_greeting_personalization() -> None:
    assert known_name(_agent("Name: Alice\nLocation: Paris", "")) == "Alice"
    assert known_name(_agent("The user's name is Bob.", "")) == "Bob"
    assert known_name(_agent("", "")) is None
    assert personalize("Hi {name}, good to hear you!", "Alice") == "Hi Alice, good to hear you!"
    assert personalize("Hi {name}, good to hear you!", None) == "Hi, good to hear you!"
    assert personalize("Hello! How can I help?", "Alice") == "Hello Alice! How can I help?"
    assert personalize("How can I help?", "Alice") == "Hi Alice! How can I help?"
    assert personalize("How can I help?", None) == "How can I help?"


def _chat(user: str, human: str = "") -> str:
    req = LLMRequest(
        model="demo",
        messages=[
            {"role": "system", "content": f"<human>\n<value>\n{human}\n</value>\n</human>"},
            {"role": "user", "content": user},
        ],
    )
    text, calls = ScriptedProvider().decide(req)
    assert calls == []
    return text


def test_scripted_chat_acknowledges_a_name_even_after_hi() -> None:
    said = _chat("Hi there. My name is Alice, and I live in Lisbon.")
    assert said.startswith("Nice to meet you, Alice!") and "offline demo model" in said
    assert _chat("Hello!", "Name: Alice").startswith("Hello, Alice!")
    assert _chat("Hello!").startswith("Hello! I'm the offline demo model")
    assert _chat("What is my name?", "Name: Alice\nLocation: Lisbon") == "Your name is Alice."
    assert _chat("I live in Porto.").startswith("Thanks, I'll remember that.")
