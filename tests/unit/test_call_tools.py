"""The call tools (agents/tools/call_tools.py) on the real call control of a voice call
(voice_gateway/pipeline/call_control.py) over a transport that records what it is asked:
which runs are offered them, and what the model's bad calls get back (the executor's error
results, as the loop stores them), while the call goes on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agents.tools import REGISTRY, ToolContext
from agents.tools.call_tools import CALL_TOOLS, call_tools, with_call_tools
from agents.tools.executor import Call, execute
from memory.models import AgentData
from voice_gateway.pipeline.call_control import SessionCallControl
from voice_gateway.pipeline.transport import Inbound, StartInfo, Transport

DESK = "+15551230000"


class RecordingTransport(Transport):
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None

    async def start(self) -> StartInfo | None:
        return None

    async def receive(self) -> Inbound:
        raise AssertionError("not read here")

    async def send_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        raise AssertionError("no audio here")

    async def clear_audio(self) -> None:
        pass

    async def close(self, code: int, reason: str = "") -> None:
        self.closed = (code, reason)


@dataclass
class Host:
    transport: RecordingTransport = field(default_factory=RecordingTransport)
    reply: None = None
    output_rate: int = 16000
    closing: bool = False


def agent(**kw: Any) -> AgentData:
    now = datetime.now(UTC)
    return AgentData(
        id="agent-1",
        name="n",
        system="",
        model="openai/fake",
        embedding="",
        tool_names=["search_memory", "end_call"],
        created_at=now,
        updated_at=now,
        **kw,
    )


async def run(ctx: ToolContext, name: str, **args: Any) -> tuple[bool, str]:
    call = Call(0, "call-1", name, raw=json.dumps(args))
    call.finalize()
    return await execute(call, REGISTRY.get(name), ctx, 5.0)


def test_only_a_call_is_offered_the_call_tools() -> None:
    a = agent(transfer_targets={"front desk": DESK})
    base = REGISTRY.select(a.tool_names, voice=True)
    assert [t.name for t in base] == ["search_memory", "end_call"]
    text = with_call_tools(base, a, None)  # a text turn, sleeptime: none, even if listed
    assert [t.name for t in text] == ["search_memory"]
    control = SessionCallControl(Host())
    on_call = with_call_tools(base, a, control)
    assert [t.name for t in on_call] == ["search_memory", *CALL_TOOLS]
    transfer = on_call[2].schema(voice=True)["function"]
    assert transfer["parameters"]["properties"]["target"]["enum"] == ["front desk"]
    assert DESK not in json.dumps(transfer)  # the model sees names, never numbers
    assert "front desk" in transfer["description"]


def test_which_call_tools_an_agent_gets() -> None:
    assert [t.name for t in call_tools(agent())] == ["end_call", "send_dtmf"]  # no targets
    only = agent(call_tools=["end_call"], transfer_targets={"desk": DESK})
    assert [t.name for t in call_tools(only)] == ["end_call"]
    assert call_tools(agent(call_tools=[])) == []


async def test_end_call_twice_is_a_tool_error() -> None:
    host = Host()
    control = SessionCallControl(host)
    ctx = ToolContext(memory=None, agent=agent(), call=control)  # type: ignore[arg-type]
    assert await run(ctx, "end_call", reason="the caller said goodbye") == (
        True,
        "The call ends after your goodbye has been played.",
    )
    assert await run(ctx, "end_call", reason="again") == (False, "the call is already ending")
    assert control.ending == "agent_ended"
    assert host.transport.closed is None  # nothing ends before the reply has been heard


async def test_transfer_goes_to_named_targets_only() -> None:
    host = Host()
    control = SessionCallControl(host)
    a = agent(transfer_targets={"front desk": DESK})
    ctx = ToolContext(memory=None, agent=a, call=control)  # type: ignore[arg-type]
    ok, text = await run(ctx, "transfer_call", target="billing")
    assert not ok and text == "unknown transfer target 'billing'; the targets are: front desk"
    ok, text = await run(ctx, "transfer_call", target="+15559999999")  # a made-up number
    assert not ok and "unknown transfer target '+15559999999'" in text
    ok, text = await run(ctx, "transfer_call", target="front desk", mode="hot")
    assert not ok and text == 'mode must be "cold" or "warm"'
    assert host.transport.events == []  # nothing was asked of the call
    ok, text = await run(ctx, "transfer_call", target="front desk", summary="Wants a refund.")
    assert ok, text
    assert host.transport.events == [
        {
            "type": "transfer.requested",
            "target": "front desk",
            "mode": "cold",
            "summary": "Wants a refund.",
        }
    ]
    assert control.ending is None  # a browser call goes on: the app decides


async def test_bad_dtmf_digits_are_a_tool_error() -> None:
    ctx = ToolContext(memory=None, agent=agent(), call=SessionCallControl(Host()))  # type: ignore[arg-type]
    for digits in ("12a", "", "1 2", "9" * 65):
        ok, text = await run(ctx, "send_dtmf", digits=digits)
        assert not ok and "0-9, *, #, w and W" in text, digits


async def test_without_a_call_the_tools_say_so() -> None:
    ctx = ToolContext(memory=None, agent=agent())  # type: ignore[arg-type]
    assert await run(ctx, "end_call", reason="x") == (
        False,
        "there is no call to control in this conversation",
    )
