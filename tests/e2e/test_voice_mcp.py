"""A voice call whose agent calls an MCP server's tool (a real server from the `mcp` SDK,
registered over REST; local whisper, espeak-ng, the one agent loop): the `pre_exec_msg` filler
is heard before the tool's result, the answer carries the result; the server killed mid-call
makes the tool fail clearly, the caller hears an apology and the call goes on."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.support import mcp_server
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient


def answer_from_tool(body: dict[str, Any]) -> Reply:
    """The model: reads the tool's result aloud, apologizes for a failed one."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        if "Error executing function" in last["content"]:
            return Reply(text="Sorry, the weather service is not answering right now.")
        return Reply(text=f"Here it is. {last['content']}")
    return Reply(text="Anything else?")


def weather_call() -> Reply:
    args = {"pre_exec_msg": "Let me check the forecast.", "city": "Paris"}
    return Reply(tool_calls=[ToolCallSpec("forecast", args, fragments=6)])


async def test_voice_mcp_tool_filler_result_and_dead_server(vg: VoiceGateway) -> None:
    srv = ServerThread(mcp_server.http_app()).start()
    try:
        resp = vg.http.post(
            "/v1/mcp-servers/",
            json={
                "server_name": "forecasts",
                "config": {
                    "mcp_server_type": "streamable_http",
                    "server_url": f"{srv.url}/mcp",
                    "voice_safe_tools": ["forecast"],
                },
            },
        )
        assert resp.status_code == 201, resp.text
        agent_id = vg.agent(include_base_tools=False, tools=["forecast"])
        vg.llm.responder = answer_from_tool
        vg.llm.push(weather_call())
        c = await VoiceClient(vg.ws(agent_id)).connect()
        await c.start(16000, 16000)
        speech = np.concatenate(
            [silence(300), speak("What is the forecast for Paris"), silence(900)]
        )
        await c.stream(speech, 16000)
        await c.wait_for("response.done", timeout=40)
        order = [r.event["type"] for r in c.events]
        assert order.index("response.filler") < order.index("response.tool_result")
        assert c.of_type("response.filler")[0]["text"] == "Let me check the forecast."
        tool_at = next(r.at for r in c.events if r.event["type"] == "response.tool_result")
        assert sum(n for t, n in c.audio_frames if t < tool_at) > 0  # filler heard first
        assert c.of_type("response.tool_result")[0] == {
            "type": "response.tool_result",
            "item_id": c.of_type("response.tool_result")[0]["item_id"],
            "name": "forecast",
            "ok": True,
        }
        said = c.of_type("response.text.done")[0]["text"]
        assert "light rain, 17 degrees" in said  # the answer carries the tool's result

        srv.stop()  # the server dies mid-call
        vg.llm.push(weather_call())
        await c.stream(speech, 16000)
        await c.wait_for("response.done", count=2, timeout=40)
        assert c.of_type("response.tool_result")[1]["ok"] is False
        said = c.of_type("response.text.done")[1]["text"]
        assert said == "Sorry, the weather service is not answering right now."
        tool_msg = vg.llm.requests[-1]["messages"][-1]
        assert "MCP server 'forecasts'" in tool_msg["content"]

        await c.send({"type": "input_text", "text": "Thanks"})  # the call goes on
        await c.wait_for("response.done", count=3, timeout=30)
        assert c.of_type("response.done")[2]["stop_reason"] == "end_turn"
        await c.send({"type": "session.end"})
        assert await c.wait_closed() == 1000
    finally:
        srv.stop()
