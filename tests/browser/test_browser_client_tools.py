"""The web client's client-side tool demo and approval buttons in real headless Chromium (a
fake microphone playing espeak-ng speech, local whisper, the one agent loop): the agent calls
`show_link`, the page shows the link and returns its result over `tool.result`; the agent then
calls a tool that requires approval, the page shows Approve / Deny, and a click on Approve lets
the tool run (once)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from playwright.async_api import Playwright

from tests.browser.conftest import browser_only, mic_wav, open_page
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec

pytestmark = browser_only

BOOK = '''
def book_table(people: int) -> str:
    """Book a table at the restaurant.

    Args:
        people: How many people.
    """
    return f"table booked for {people}"
'''
LINK = "https://example.org/menu"
QUESTION = "Shall I book a table for 4 people?"


def model(body: dict[str, Any]) -> Reply:
    """Shows the menu, then books (the page approves), then says it is done."""
    last = body["messages"][-1]
    if last["role"] == "user" and "Incoming" not in str(last["content"]):
        args = {"url": LINK, "title": "Our menu"}
        return Reply(tool_calls=[ToolCallSpec("show_link", args)])
    if last["role"] == "tool" and str(last["content"]).startswith("shown"):
        return Reply(tool_calls=[ToolCallSpec("book_table", {"people": 4})])
    if last["role"] == "tool" and "table booked for 4" in str(last["content"]):
        return Reply(text="Your table for four is booked.")
    return Reply(text="Alright.")


def tool_returns(bg: VoiceGateway, agent_id: str) -> list[tuple[str, str, str]]:
    return [
        (m["name"], m["status"], str(m["tool_return"]))
        for m in bg.messages(agent_id)
        if m["message_type"] == "tool_return_message"
    ]


async def test_show_link_and_approve_in_the_page(
    pw: Playwright, bg: VoiceGateway, tmp_path: Path
) -> None:
    r = bg.http.put("/v1/tools/", json={"source_code": BOOK, "voice_safe": True})
    assert r.status_code in (200, 201), r.text
    rule = {
        "type": "requires_approval",
        "tool_name": "book_table",
        "prompt_template": "Shall I book a table for {{ people }} people?",
    }
    agent_id = bg.agent(include_base_tools=False, tools=["book_table"], tool_rules=[rule])
    bg.llm.responder = model
    wav = mic_wav(tmp_path / "mic.wav", 1000, "Can you book a table for four people", 3000)
    url = f"{bg.server.url}/?transport=websocket&aec=0&agent={agent_id}"
    async with open_page(pw, url, wav) as bp:
        page = bp.page
        await bp.wait("vg.agentId")
        await page.click("#connect")
        # the agent calls show_link: the page shows the link and answers with tool.result
        link = page.locator(".client-link a")
        await link.wait_for(timeout=60_000)
        assert await link.get_attribute("href") == LINK
        assert (await link.inner_text()).strip() == "Our menu"
        assert await bp.vg(".clientTools") == [{"name": "show_link", "status": "success"}]
        # then book_table waits for approval: the page shows the read-back and the buttons
        await bp.wait("vg.approvals.length === 1")
        approval = (await bp.vg(".approvals"))[0]
        assert approval["name"] == "book_table" and approval["prompt"] == QUESTION
        assert await page.get_by_text(QUESTION).count() >= 1
        assert [t[0] for t in tool_returns(bg, agent_id)] == ["show_link"]  # nothing else ran
        await page.get_by_role("button", name="Approve").click()
        deadline = time.monotonic() + 60
        while len(tool_returns(bg, agent_id)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert tool_returns(bg, agent_id) == [
            ("show_link", "success", f"shown: {LINK}"),
            ("book_table", "success", "table booked for 4"),
        ]
        await page.locator(".msg.agent .text", has_text="is booked").first.wait_for(timeout=60_000)
