"""Call control in the web client, in real headless Chromium over the browser socket (a silent
fake microphone, typed turns, the one agent loop, espeak-ng replies): the agent's
`transfer_call` shows the transfer request (the target's name and the summary, never its
number) and the call goes on; its `end_call` plays the goodbye, then the page shows why the
call ended and goes back to idle."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Playwright

from tests.browser.conftest import browser_only, mic_wav, open_page
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec

pytestmark = browser_only

DESK = "+15551230000"


async def test_transfer_request_and_end_call_in_the_page(
    pw: Playwright, bg: VoiceGateway, tmp_path: Path
) -> None:
    agent_id = bg.agent(name="desk", transfer_targets={"front desk": DESK})
    transfer = {"target": "front desk", "mode": "cold", "summary": "Wants a table for four."}
    bg.llm.push(
        Reply(
            text="Let me get the front desk.", tool_calls=[ToolCallSpec("transfer_call", transfer)]
        ),
        Reply(text="Goodbye!", tool_calls=[ToolCallSpec("end_call", {"reason": "said goodbye"})]),
    )
    silent = mic_wav(tmp_path / "mic.wav", 1000)
    url = f"{bg.server.url}/?transport=websocket&aec=0&agent={agent_id}"
    async with open_page(pw, url, silent) as bp:
        page = bp.page
        await page.click("#connect")
        await bp.wait("vg.state === 'live'")
        await page.fill("#text-input", "Can I talk to the front desk?")
        await page.press("#text-input", "Enter")
        await bp.wait("vg.transfers.length === 1")
        assert await bp.vg(".transfers") == [
            {"target": "front desk", "mode": "cold", "summary": "Wants a table for four."}
        ]
        log = await bp.text("#log")
        assert "put you through to front desk (cold transfer)" in log and DESK not in log
        alert = await bp.text("#alerts")
        assert "Transfer to front desk requested: Wants a table for four." in alert
        assert await bp.vg(".state") == "live" and await bp.vg(".ended") is None  # it goes on

        await page.fill("#text-input", "Thanks, that is all.")
        await page.press("#text-input", "Enter")
        await bp.wait("vg.ended === 'agent_ended'")
        await bp.wait("vg.state === 'idle'")
        assert "Goodbye!" in await bp.vg(".replies")
        assert "The agent ended the call." in await bp.text("#log")
        # the goodbye was played to its end before the call closed
        items = await bp.vg(".items")
        assert items and all(i["done"] for i in items.values())
