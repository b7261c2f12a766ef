"""The web client calls over native WebRTC in real headless Chromium (fake microphone playing
espeak-ng speech, media on 127.0.0.1): the transcript on the page, reply audio in the
browser's WebRTC stats, barge-in, and the same event sequence as a WebSocket call."""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import Playwright

from tests.browser.conftest import BrowserPage, browser_only, mic_wav, open_page
from tests.browser.test_browser_call import BARGE_IN, REPLY, UTTERANCE
from tests.e2e.conftest import VoiceGateway
from tests.e2e.test_voice_call import LONG_REPLY
from tests.e2e.test_webrtc_call import _shape
from tests.support.fake_llm import Reply
from tests.support.speech import wer

pytestmark = browser_only


async def _call(bp: BrowserPage) -> tuple[str, list[str]]:
    """Connect, wait for the turn, hang up; the transcript on the page and the events."""
    await bp.page.click("#connect")
    await bp.page.locator(".msg.user:not(.partial)").first.wait_for(timeout=60_000)
    said = await bp.text(".msg.user:not(.partial) .text")
    await bp.wait("vg.replies.length === 1 && vg.metrics.length === 1")
    events = list(await bp.vg(".events"))
    return said, events


async def test_webrtc_call_in_the_browser(pw: Playwright, bg: VoiceGateway, tmp_path: Path) -> None:
    bg.llm.responder = lambda body: Reply(text=REPLY)
    agent_id = bg.agent(name="webrtc")
    wav = mic_wav(tmp_path / "mic.wav", 1000, UTTERANCE, 5000)
    async with open_page(pw, f"{bg.server.url}/?aec=0&agent={agent_id}", wav) as bp:
        assert await bp.page.locator("#transport").input_value() == "webrtc"  # the default
        said, rtc_events = await _call(bp)
        assert await bp.vg(".transport") == "webrtc" and await bp.vg(".mic") == "on"
        assert wer(UTTERANCE, said) <= 0.15, said
        assert await bp.text(".msg.agent .text") == REPLY
        # reply audio arrived over RTP: packets, and energy. totalAudioEnergy is the sum of
        # audioLevel^2 x duration over the call, so it keeps the reply once it has played;
        # the instantaneous audioLevel, sampled every 250 ms, can miss a short reply whole
        # (CI: peak 0.009 sampled, energy 0.33). Silence adds ~0; 0.02 is 2 s at level 0.1.
        for _ in range(40):
            stats = await bp.page.evaluate("() => window.vg.rtcStats()")
            if stats["totalAudioEnergy"] > 0.02:
                break
            await asyncio.sleep(0.25)
        assert stats["packetsReceived"] > 50 and stats["packetsSent"] > 50, stats
        assert stats["totalAudioEnergy"] > 0.02, stats
        assert await bp.page.locator("audio[data-role=webrtc-reply]").count() == 1
        await bp.page.click("#connect")  # hang up: DELETE on the call's URL
        await bp.wait("vg.state === 'idle'")
    stored = [
        (m["message_type"], m.get("content"))
        for m in bg.messages(agent_id)
        if m["message_type"] in ("user_message", "assistant_message")
    ]
    assert stored == [("user_message", said), ("assistant_message", REPLY)]
    # the same audio over the voice socket: the same event sequence
    ws_agent = bg.agent(name="websocket")
    url = f"{bg.server.url}/?transport=websocket&aec=0&agent={ws_agent}"
    async with open_page(pw, url, wav) as bp:
        _, ws_events = await _call(bp)
        assert await bp.vg(".transport") == "websocket"
        await bp.page.click("#connect")
        await bp.wait("vg.state === 'idle'")
    assert _shape(rtc_events) == _shape(ws_events), (rtc_events, ws_events)


async def test_webrtc_barge_in(pw: Playwright, bg: VoiceGateway, tmp_path: Path) -> None:
    bg.llm.push(Reply(text=LONG_REPLY))
    bg.llm.responder = lambda body: Reply(text="Okay, I will stop.")
    agent_id = bg.agent(name="webrtc-barge-in")
    wav = mic_wav(tmp_path / "mic.wav", 1000, "Tell me about tea.", 9000, BARGE_IN, 2500)
    async with open_page(pw, f"{bg.server.url}/?aec=0&agent={agent_id}", wav) as bp:
        await bp.page.click("#connect")
        await bp.wait("vg.cancelled.length === 1")
        cancelled = (await bp.vg(".cancelled"))[0]
        assert cancelled["reason"] == "barge_in" and cancelled["playedMs"] > 1000
        assert "audio.clear" in await bp.vg(".events")
        await bp.wait("vg.replies.includes('Okay, I will stop.')")
    stored = [m for m in bg.messages(agent_id) if m["message_type"] == "assistant_message"]
    assert stored[0]["truncated"] is True and LONG_REPLY.startswith(stored[0]["content"])
    assert len(stored[0]["content"]) < len(LONG_REPLY) / 2
