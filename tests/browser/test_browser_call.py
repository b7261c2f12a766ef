"""The web client in real headless Chromium with a fake microphone playing espeak-ng speech:
a spoken turn end to end (transcript, reply audio played, memory panel, latency) and barge-in."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Playwright

from tests.browser.conftest import browser_only, mic_wav, open_page
from tests.e2e.conftest import VoiceGateway
from tests.e2e.test_voice_call import LONG_REPLY
from tests.support.fake_llm import Reply
from tests.support.speech import normalize, wer

pytestmark = browser_only

UTTERANCE = "Hello, my name is Alice and I would like some green tea please."
REPLY = "Nice to meet you, Alice. Green tea is coming right up."
# whisper tiny.en hears this one well from espeak-ng (WER <= 0.33 over offsets, gains and noise);
# "Stop, stop, that's enough." came out as "star star ..." or "never see her" too often
BARGE_IN = "Wait, stop, I have a question."


async def test_spoken_turn_in_the_browser(
    pw: Playwright, bg: VoiceGateway, tmp_path: Path, artifacts_dir: Path
) -> None:
    bg.llm.responder = lambda body: Reply(text=REPLY)
    wav = mic_wav(tmp_path / "mic.wav", 1000, UTTERANCE, 3000)
    async with open_page(pw, f"{bg.server.url}/?transport=websocket&aec=0", wav) as bp:
        page = bp.page
        # create an agent from the page: name + persona, no greeting (this test is about one
        # spoken turn)
        persona = "I am a tea expert who remembers what guests like."
        agent_id = await bp.create_agent("Tea helper", persona=persona, greeting="")
        assert "Tea helper" in await page.locator("#agent-select option:checked").inner_text()
        persona = await bp.text(".block[data-label=persona] pre")
        assert persona == "I am a tea expert who remembers what guests like."
        human_v = await bp.vg(".blocks.human.version")

        await page.click("#connect")
        await bp.wait("vg.state === 'live' && vg.mic === 'on'")
        # the server hears the fake microphone: a final transcript appears in the page
        await page.locator(".msg.user:not(.partial)").first.wait_for(timeout=60_000)
        said = await bp.text(".msg.user:not(.partial) .text")
        assert wer(UTTERANCE, said) <= 0.15, said
        assert await bp.vg(".framesSent") > 100 and await bp.vg(".bytesSent") > 100 * 640

        # the reply streams in as text and its audio is played to the end
        await bp.wait("vg.replies.length === 1 && Object.values(vg.items).some((i) => i.done)")
        assert await bp.text(".msg.agent .text") == REPLY
        items = list((await bp.vg(".items")).values())
        assert len(items) == 1
        item = items[0]
        received_ms = item["bytesReceived"] / 2 / item["rate"] * 1000
        assert received_ms > 1500 and abs(item["durationMs"] - received_ms) < 25
        assert abs(item["playedMs"] - received_ms) < 25  # every received sample was played
        assert await bp.vg(".bytesPlayed") >= 0.99 * await bp.vg(".bytesReceived") > 0

        # latency readout and sparkline from turn.metrics
        await bp.wait("vg.metrics.length === 1")
        v2v = await bp.text("#latency dd[data-key=voice_to_voice_ms]")
        assert v2v.endswith("ms") or v2v.endswith(" s"), v2v
        for key in ("stt_ms", "llm_ttft_ms", "tts_ttfb_ms"):
            assert await bp.text(f"#latency dd[data-key={key}]") != "–", key
        assert await page.locator("#sparkline circle").count() == 1

        # the sleeptime worker rewrites the caller's own `human`; the panel follows
        # memory.updated (the agent-wide `human` is the template new callers start from)
        await bp.wait("vg.callerBlocks.human && vg.callerBlocks.human.value.includes('Alice')")
        update = (await bp.vg(".memoryUpdates"))[-1]
        assert update["label"] == "human"
        assert update["version"] == await bp.vg(".callerBlocks.human.version")
        own = "#caller-blocks .block[data-label=human]"
        assert "Alice" in await bp.text(f"{own} pre")
        assert f"v{update['version']}" in await bp.text(f"{own} .version")
        assert await bp.vg(".blocks.human.version") == human_v  # the template is untouched
        template = "#blocks .block[data-label=human]"
        assert "Alice" not in await bp.text(f"{template} pre")
        assert "template" in await bp.text(f"{template} .scope")

        await page.screenshot(path=str(artifacts_dir / "browser_call.png"), full_page=True)
        await page.click("#connect")  # disconnect: session.end, the server closes 1000
        await bp.wait("vg.state === 'idle'")
        assert await bp.text("#status") == "Not connected"
    stored = [
        (m["message_type"], m.get("content"))
        for m in bg.messages(agent_id)
        if m["message_type"] in ("user_message", "assistant_message")
    ]
    assert stored == [("user_message", said), ("assistant_message", REPLY)]


async def test_returning_caller_is_greeted_by_name(
    pw: Playwright, bg: VoiceGateway, tmp_path: Path
) -> None:
    """The newcomer's path: create an agent in the page (its default greeting), call, say your
    name, hang up; the memory worker writes it to `human`; call back: the greeting has it."""
    bg.llm.responder = lambda body: Reply(text=REPLY)
    # the greeting (~2 s) plays before the caller speaks, so it is not barged in
    wav = mic_wav(tmp_path / "mic.wav", 5000, UTTERANCE, 2000)
    async with open_page(pw, f"{bg.server.url}/?transport=websocket&aec=0", wav) as bp:
        page = bp.page
        await bp.wait("vg.agents !== null")
        greeting = await page.input_value("#new-greeting")
        assert greeting.startswith("Hello!")  # the form's default
        agent_id = await bp.create_agent("Greeter")

        await page.click("#connect")
        await bp.wait("vg.replies.length >= 1")
        # no name known yet
        assert (await bp.vg(".replies"))[0] == greeting, (
            await bp.vg(".events"),
            await bp.vg(".cancelled"),
        )
        await bp.wait(f"vg.replies.includes({REPLY!r})")
        await bp.wait("vg.callerBlocks.human && vg.callerBlocks.human.value.includes('Alice')")
        await page.click("#connect")  # hang up
        await bp.wait("vg.state === 'idle'")

        await page.click("#connect")  # call back
        await bp.wait("vg.state === 'live'")
        await bp.wait("vg.replies.filter((r) => r.includes('Alice')).length >= 2")
        replies = await bp.vg(".replies")
        assert replies[-1] == greeting.replace("Hello!", "Hello Alice!", 1), replies
        await bp.wait("Object.values(vg.items).filter((i) => i.done).length >= 3")
    greeted = [m for m in bg.messages(agent_id) if m["message_type"] == "assistant_message"]
    assert [m["content"] for m in greeted][-1] == REPLY  # greetings are not stored as turns


async def test_barge_in_clears_playback(pw: Playwright, bg: VoiceGateway, tmp_path: Path) -> None:
    bg.llm.push(Reply(text=LONG_REPLY))
    bg.llm.responder = lambda body: Reply(text="Okay, I will stop.")
    agent_id = bg.agent(name="barge-in")
    # the second utterance comes while the long reply (~40 s of speech) is playing
    wav = mic_wav(tmp_path / "mic.wav", 1000, "Tell me about tea.", 9000, BARGE_IN, 2500)
    async with open_page(
        pw, f"{bg.server.url}/?transport=websocket&aec=0&agent={agent_id}", wav
    ) as bp:
        await bp.page.click("#connect")
        await bp.wait("vg.cancelled.length === 1 && vg.clears.length >= 1")
        cancelled = (await bp.vg(".cancelled"))[0]
        assert cancelled["reason"] == "barge_in"
        first = (await bp.vg(".items"))[cancelled["item"]]
        clear = (await bp.vg(".clears"))[0]
        # audio that had arrived but not played yet was thrown away at once, and none of it
        # played after the clear
        assert clear["droppedMs"] > 0
        assert first["clearedAt"] is not None and first["clearedAt"] > 1000
        assert first["clearedAt"] < first["bytesReceived"] / 2 / first["rate"] * 1000
        assert await bp.vg(".playedAfterClear") == 0
        # the server cut the reply at what the page reported as played (audio.played)
        assert 0 < cancelled["playedMs"] <= first["clearedAt"] + 1
        interrupted = bp.page.locator(f".msg.agent[data-item='{cancelled['item']}']")
        assert "interrupted" in (await interrupted.get_attribute("class") or "")
        # the second utterance becomes the next turn, and its reply plays in full
        await bp.wait("vg.replies.includes('Okay, I will stop.')")
        await bp.wait("Object.values(vg.items).filter((i) => i.done).length === 1")
        heard = (await bp.vg(".transcripts"))[1]
        assert wer(BARGE_IN, heard) <= 0.5, heard
    stored = [m for m in bg.messages(agent_id) if m["message_type"] == "assistant_message"]
    assert stored[0]["truncated"] is True and LONG_REPLY.startswith(stored[0]["content"])
    assert len(stored[0]["content"]) < len(LONG_REPLY) / 2


async def test_mute_and_push_to_talk(pw: Playwright, bg: VoiceGateway, tmp_path: Path) -> None:
    bg.llm.responder = lambda body: Reply(text="Now I hear you.")
    agent_id = bg.agent(name="push-to-talk")
    wav = mic_wav(tmp_path / "mic.wav", 500, UTTERANCE, 1500)  # ~6 s, played over and over
    sent = "[vg.framesSent, vg.silentFrames]"
    async with open_page(
        pw, f"{bg.server.url}/?transport=websocket&aec=0&agent={agent_id}", wav, loop=True
    ) as bp:
        page = bp.page
        await bp.wait("vg.agentId")
        await page.click("#mute")  # join muted
        assert await page.get_attribute("#mute", "aria-pressed") == "true"
        await page.click("#connect")
        await bp.wait("vg.state === 'live' && vg.framesSent > 350")  # more than one pass
        frames, silent = await page.evaluate(f"() => {{ const vg = window.vg; return {sent}; }}")
        assert frames == silent  # muted: only digital silence went out
        await page.click("#ptt-mode")  # push-to-talk, not held yet
        assert await page.evaluate("document.activeElement.id") == "talk"
        await page.click("#mute")  # unmute
        assert await page.get_attribute("#ptt-mode", "aria-pressed") == "true"
        assert await page.get_attribute("#mute", "aria-pressed") == "false"
        assert await page.is_visible("#talk")
        await page.focus("#talk")
        await bp.wait(f"vg.framesSent > {frames + 350}")
        frames, silent = await page.evaluate(f"() => {{ const vg = window.vg; return {sent}; }}")
        assert frames == silent
        assert "speech.started" not in await bp.vg(".events")  # the server heard nothing
        await page.keyboard.down("Space")  # hold to talk
        await bp.wait("vg.talking && vg.transcripts.length >= 1")
        await page.keyboard.up("Space")
        assert not await bp.vg(".talking")
        assert await bp.vg(".silentFrames") < await bp.vg(".framesSent")
        heard = set(normalize((await bp.vg(".transcripts"))[0]))
        assert len(heard & set(normalize(UTTERANCE))) >= 2, heard
