"""Many callers on one agent in the browser: each page calls as its own caller id
(typed, or made once and kept in localStorage), the id is bound into the session token, each
caller gets a conversation of their own, and a page cannot resume another caller's."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.async_api import Playwright

from tests.browser.conftest import browser_only, mic_wav, open_page
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply

pytestmark = browser_only


def _said(request: dict) -> str:
    return " ".join(str(m.get("content") or "") for m in request["messages"])


async def test_two_callers_on_one_agent(pw: Playwright, bg: VoiceGateway, tmp_path: Path) -> None:
    bg.llm.responder = lambda body: Reply(text="Noted.")
    agent_id = bg.agent(name="two callers")
    silent = mic_wav(tmp_path / "mic.wav", 1000)
    url = f"{bg.server.url}/?aec=0&agent={agent_id}"
    async with open_page(pw, url, silent) as a, open_page(pw, url, silent) as b:
        # page A types a caller id; bad ones are refused in the page
        await a.wait("vg.agentId && vg.caller")
        generated_a = await a.vg(".caller")
        await a.page.fill("#caller-input", "   ")
        await a.page.press("#caller-input", "Enter")
        assert "must not be empty" in await a.text("#caller-note")
        assert await a.vg(".caller") == generated_a
        await a.page.fill("#caller-input", "browser-alice")
        await a.page.press("#caller-input", "Enter")
        await a.wait("vg.caller === 'browser-alice' && !vg.callerLoading")
        assert await a.text("#caller-current") == "browser-alice"
        # page B keeps the id it made for this browser
        await b.wait("vg.agentId && vg.caller")
        bob = await b.vg(".caller")
        assert re.fullmatch(r"web-[0-9a-f]{12}", bob), bob
        assert bob != "browser-alice"
        assert await b.text("#caller-current") == bob

        for page, words in ((a, "My name is Alice."), (b, "My name is Bob.")):
            await page.page.click("#connect")
            await page.wait("vg.state === 'live'")
            await page.page.fill("#text-input", words)
            await page.page.press("#text-input", "Enter")
            await page.wait("vg.replies.length === 1")
        conv_a, conv_b = await a.vg(".conversationId"), await b.vg(".conversationId")
        assert conv_a and conv_b and conv_a != conv_b  # a conversation per caller
        assert await a.text("#caller-current") == "browser-alice"
        assert await b.text("#caller-current") == bob
        # neither caller's turn saw the other's words
        turns = [_said(r) for r in bg.llm.requests if "My name is" in _said(r)]
        assert len(turns) == 2, turns
        assert all(("Alice" in t) != ("Bob" in t) for t in turns), turns

        listed = bg.http.get("/v1/identities/", params={"agent_id": agent_id})
        if listed.status_code == 404:  # a server without the identities routes: said so
            for page in (a, b):
                assert await page.vg(".callerNote") == "unsupported"
                assert "404" in await page.text("#caller-note")
        else:
            assert listed.status_code == 200, listed.text
            keys = {i["identifier_key"] for i in listed.json()}
            assert {"browser-alice", bob} <= keys
            for page in (a, b):  # each page shows the caller's own `human`, made at the call
                await page.wait("vg.identityId && vg.callerBlocks.human")
                own = page.page.locator("#caller-blocks .block[data-label=human]")
                assert await own.count() == 1
            ids_a = await a.vg(".identityId")
            assert ids_a != await b.vg(".identityId")
            assert conv_a in await a.vg(".conversations")
            assert conv_b not in await a.vg(".conversations")  # only the caller's own

        await a.page.click("#connect")
        await a.wait("vg.state === 'idle'")
        await b.page.click("#connect")
        await b.wait("vg.state === 'idle'")

        # a reload keeps the caller id (localStorage)
        await b.page.reload()
        await b.page.wait_for_function("() => window.vg && window.vg.ready")
        assert await b.vg(".caller") == bob
        assert await b.page.input_value("#caller-input") == bob

        # page B cannot resume caller A's conversation: the server refuses, the page says why
        await b.page.goto(f"{url}&conversation={conv_a}")
        await b.page.wait_for_function("() => window.vg && window.vg.ready")
        assert await b.vg(".caller") == bob
        assert await b.page.input_value("#conversation-select") == conv_a
        await b.page.click("#connect")
        await b.wait("vg.state === 'failed'")
        assert [e["code"] for e in await b.vg(".errors")] == ["conversation_not_found"]
        assert "conversation not found" in await b.text("#alerts")
