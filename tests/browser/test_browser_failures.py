"""Bad conditions in the browser: the server going away mid-call (the page says so, reconnects
and resumes the conversation), a denied microphone (the page explains it and offers the text
box), and a server `error` event shown to the person."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from playwright.async_api import Playwright

from tests.browser.conftest import browser_only, mic_wav, open_page
from tests.e2e.conftest import VoiceGateway
from tests.e2e.test_voice_call import LONG_REPLY
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import make_settings
from tests.support.servers import ServerThread, free_port
from voice_gateway.app import create_app

pytestmark = browser_only


async def test_server_going_away_mid_call_reconnects_and_resumes(
    pw: Playwright, tmp_path: Path
) -> None:
    llm = FakeLLM(lambda body: Reply(text="Noted."))
    llm_srv = ServerThread(llm.app).start()
    settings = make_settings(
        f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        voice=True,
        openai_base_url=f"{llm_srv.url}/v1",
        openai_api_key="test",
        sleeptime_model="scripted/demo",
    )
    port = free_port()

    def start() -> ServerThread:  # the same port and database each time: a restart
        return ServerThread(create_app(settings), port=port, ws_ping_interval=None).start(120)

    srv = start()
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            resp = await http.post("/v1/agents/", json={"name": "restart", "model": "openai/x"})
            agent_id = resp.json()["id"]
        silent = mic_wav(tmp_path / "mic.wav", 1000)
        async with open_page(
            pw, f"{srv.url}/?transport=websocket&aec=0&agent={agent_id}", silent
        ) as bp:
            page = bp.page
            await page.click("#connect")
            await bp.wait("vg.state === 'live'")
            conversation = await bp.vg(".conversationId")
            await page.fill("#text-input", "My name is Bob.")
            await page.press("#text-input", "Enter")
            await bp.wait("vg.replies.length === 1")
            llm.push(Reply(text=LONG_REPLY))
            await page.fill("#text-input", "Tell me about tea.")
            await page.press("#text-input", "Enter")
            await bp.wait("Object.values(vg.items).some((i) => !i.done && i.playedMs > 500)")

            await asyncio.to_thread(srv.stop)  # the server goes away while the reply plays
            await bp.wait("vg.state === 'reconnecting'")
            assert (await bp.text("#status")).startswith("Reconnecting")
            assert "Connection lost" in await bp.text("#alerts .alert[data-key=connection]")
            await bp.wait("vg.clears.length >= 1")  # the dead call's reply stopped playing

            srv = await asyncio.to_thread(start)  # ... and comes back
            await bp.wait("vg.state === 'live' && vg.reconnects === 1")
            assert await bp.vg(".conversationId") == conversation  # resumed, not a new one
            assert await bp.vg(".connects") == 2
            assert "Reconnected" in await bp.text("#log .note")
            assert await page.locator("#alerts .alert[data-key=connection]").count() == 0
            assert await bp.text("#status") == "Live"

            await page.fill("#text-input", "What is my name?")
            await page.press("#text-input", "Enter")
            await bp.wait("vg.replies.length === 2")
        history = [m.get("content") for m in llm.requests[-1]["messages"]]
        assert any("My name is Bob." in str(c) for c in history)  # the conversation went on
    finally:
        srv.stop()
        llm_srv.stop()


async def test_denied_microphone_offers_the_text_box(pw: Playwright, bg: VoiceGateway) -> None:
    bg.llm.responder = lambda body: Reply(text="Hello! I can read what you type.")
    agent_id = bg.agent(name="no-mic")
    async with open_page(
        pw, f"{bg.server.url}/?transport=websocket&agent={agent_id}", grant_mic=False
    ) as bp:
        page = bp.page
        await bp.wait("vg.agents !== null && vg.agentId")
        await page.focus("#connect")
        await page.keyboard.press("Enter")  # keyboard only
        await bp.wait("vg.state === 'live' && vg.mic === 'denied'")
        alert = await bp.text("#alerts .alert[data-key=mic]")
        assert "Microphone access was denied" in alert and "type" in alert, alert
        assert await page.locator("#alerts .alert[data-key=mic] button").first.inner_text() == (
            "Retry microphone"
        )
        assert await page.evaluate("document.activeElement.id") == "text-input"
        assert await bp.text("#status") == "Live (text only)"

        await page.keyboard.type("Hello, can you hear me?")
        await page.keyboard.press("Enter")
        await bp.wait("vg.replies.length === 1 && Object.values(vg.items).some((i) => i.done)")
        assert await bp.text(".msg.user .text") == "Hello, can you hear me?"
        assert await bp.text(".msg.agent .text") == "Hello! I can read what you type."
        assert await bp.vg(".bytesPlayed") > 0 and await bp.vg(".framesSent") == 0

        # a server `error` event is shown to the person; the call goes on
        await page.evaluate("window.vg.send('{not json')")
        await bp.wait("vg.errors.length === 1")
        err = (await bp.vg(".errors"))[0]
        assert err["code"] == "invalid_json" and err["fatal"] is False
        assert "Server error (invalid_json)" in await bp.text("#alerts")
        assert await bp.vg(".state") == "live"


async def test_missing_api_key_is_explained(pw: Playwright, tmp_path: Path) -> None:
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}", api_key="sekrit-key")
    srv = ServerThread(create_app(settings)).start(120)
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            resp = await http.post(
                "/v1/agents/",
                json={"name": "keyed", "model": "scripted/demo"},
                headers={"Authorization": "Bearer sekrit-key"},
            )
            assert resp.status_code == 201
        async with open_page(pw, f"{srv.url}/?transport=websocket") as bp:
            page = bp.page
            alert = page.locator("#alerts .alert[data-key=agents]")
            await alert.wait_for()
            text = await alert.inner_text()
            assert "401" in text and "API key" in text and "Settings" in text, text
            await page.click(".settings summary")
            await page.fill("#api-key", "sekrit-key")
            await page.press("#api-key", "Enter")  # commits the field (change event)
            await bp.wait("vg.agents === 1 && vg.blocks.persona")
            assert await alert.count() == 0
            assert "keyed" in await page.locator("#agent-select option:checked").inner_text()
    finally:
        srv.stop()
