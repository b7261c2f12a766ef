"""Turn-taking on live calls: a mid-sentence pause with smart turn vs VAD-only, backchannels
during a reply, the reply's own echo on a speakerphone (browser 16 kHz and Twilio 8 kHz
mu-law), the phone call's default (`auto`), and bad turn options in session.start.
espeak-ng speech, local whisper, the loopback LLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import numpy as np
import pytest

from tests.support.echo_room import Speakerphone, SpeakerphoneCall, browser_speakerphone
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import metric, running_gateway
from tests.support.phone import PhoneGateway, TwilioCall, parse_twiml, phone_gateway
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient
from voice_gateway.stt.whisper import WhisperStream
from voice_gateway.turns.model import MODEL_PACKAGE, find_model
from voice_gateway.turns.policy import VerdictSource

LONG_REPLY = " ".join(
    f"Here is sentence number {w} of a rather long answer about tea."
    for w in ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
)
needs_model = pytest.mark.skipif(
    find_model() is None, reason=f"Smart Turn model missing: pip install --no-deps {MODEL_PACKAGE}"
)


class Stack:
    def __init__(self, srv: ServerThread, llm: FakeLLM) -> None:
        self.srv, self.llm = srv, llm

    def agent(self) -> str:
        resp = httpx.post(f"{self.srv.url}/v1/agents/", json={"model": "openai/fake"})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def call(self, **options: Any) -> VoiceClient:
        c = await VoiceClient(f"{self.srv.ws_url}/v1/agents/{self.agent()}/voice").connect()
        await c.send({"type": "session.start", **options})
        await c.wait_for("session.started")
        return c


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    llm = FakeLLM(lambda body: Reply(text="Okay."))
    llm_srv = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("turns") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            openai_base_url=f"{llm_srv.url}/v1",
            openai_api_key="test",
            sleeptime_model="scripted/demo",
            turn_text_wait_ms=700,  # CI's decode may be slow: let the transcript always vote
            # and the model always judge: a verdict over the budget falls back to the silence
            # rule, which cuts the 800 ms pause (twice in full runs on a slow VM)
            turn_budget_ms=1500,
        ) as srv:
            yield Stack(srv, llm)
    finally:
        llm_srv.stop()


@pytest.fixture
def st(stack: Stack) -> Stack:
    stack.llm.queue.clear()
    stack.llm.responder = lambda body: Reply(text="Okay.")
    return stack


# ---- a pause mid-sentence --------------------------------------------------------------------

NUMBER = [speak("My number is five five five."), silence(800), speak("one two three four.")]


@needs_model
@pytest.mark.parametrize(("detection", "turns"), [("smart", 1), ("vad", 2)])
async def test_pause_in_a_phone_number(st: Stack, detection: str, turns: int) -> None:
    c = await st.call(turn_detection=detection)
    assert c.of_type("session.started")[0]["turn_detection"] == detection
    await c.stream(np.concatenate([silence(300), *NUMBER, silence(2500)]), 16000)
    await c.wait_for("response.done", timeout=40)
    verdicts = [m["end_of_turn"] for m in c.of_type("turn.metrics")]
    assert len(c.of_type("speech.stopped")) == turns, verdicts
    metrics = await c.wait_for("turn.metrics")
    verdict = metrics["end_of_turn"]
    assert metrics["end_of_turn_ms"] > 0
    if detection == "smart":
        final = " ".join(e["text"] for e in c.of_type("transcript.final")).lower()
        assert "1" in final or "one" in final, final  # the digits after the pause
        assert verdict["source"] in ("model", "text", "prosody", "fallback"), verdict
    else:
        assert verdict["source"] == "silence"
    await c.close()


@needs_model
async def test_auto_ends_a_finished_sentence_before_the_silence_rule(st: Stack) -> None:
    """`auto` (the gateway's default) ends this espeak-ng sentence on its finished words: at
    200 ms when the voice faded (the words decide at once, as in `smart`), else at
    AUTO_SENTENCE_MS (340 ms), where `smart` holds an unfaded voice its maximum; or on the
    model's "done" at 200 ms. Before `vad`'s 400 ms."""
    c = await st.call(turn_detection="auto")
    assert c.of_type("session.started")[0]["turn_detection"] == "auto"
    await c.stream(np.concatenate([silence(300), speak("What time is it?"), silence(1500)]), 16000)
    metrics = await c.wait_for("turn.metrics", timeout=40)
    assert metrics["end_of_turn"]["source"] in ("text", "model"), metrics
    # (later than 340 ms only when the pause's decode came later: ~80 ms here)
    assert 200 <= metrics["end_of_turn_ms"] < 400, metrics
    await c.wait_for("response.done", timeout=30)  # (no reply left in flight for the next test)
    await c.close()


async def test_the_pause_decode_hears_what_the_end_of_turn_would(
    st: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause's transcript becomes the turn's, so it must be decoded from the same audio
    the end of the turn has: the utterance and as much silence after it (tiny.en's phone words
    swung on 20 ms more: "collect all postage stamps" -> "collect all of both Digitames")."""
    lengths: dict[str, list[int]] = {"pause": [], "end": []}
    speculate, finish = WhisperStream.speculate, WhisperStream._finish

    def spy_speculate(self: WhisperStream, pad_ms: int = 300, **kw: Any) -> Any:
        lengths["pause"].append(len(self._buf) + pad_ms * 32)
        return speculate(self, pad_ms, **kw)

    async def spy_finish(self: WhisperStream) -> str:
        lengths["end"].append(len(self._buf))
        return await finish(self)

    monkeypatch.setattr(WhisperStream, "speculate", spy_speculate)
    monkeypatch.setattr(WhisperStream, "_finish", spy_finish)
    c = await st.call(turn_detection="vad")
    await c.stream(np.concatenate([silence(300), speak("What time is it?"), silence(1500)]), 16000)
    await c.wait_for("response.done", timeout=40)
    assert lengths["pause"] and lengths["pause"][-1] == lengths["end"][-1], lengths
    await c.close()


# ---- backchannels during a reply -------------------------------------------------------------


async def test_backchannels_do_not_cancel_but_an_interruption_does(st: Stack) -> None:
    st.llm.push(Reply(text=LONG_REPLY))
    st.llm.responder = lambda body: Reply(text="Tuesday it is.")
    c = await st.call()
    await c.send({"type": "input_text", "text": "Tell me about tea."})
    await c.wait_for("response.audio.started", timeout=20)
    for word in ("Mm-hmm.", "Yeah.", "Okay."):
        await asyncio.sleep(0.6)
        await c.stream(np.concatenate([speak(word), silence(700)]), 16000)
    await c.wait_for("speech.ignored", count=3, timeout=15)
    assert not c.of_type("response.cancelled") and not c.of_type("audio.clear")
    assert {e["reason"] for e in c.of_type("speech.ignored")} == {"backchannel"}
    started = time.monotonic()
    await c.stream(np.concatenate([speak("Wait, stop, I meant Tuesday."), silence(900)]), 16000)
    cancelled = await c.wait_for("response.cancelled", timeout=15)
    assert cancelled["reason"] == "barge_in"
    clear_at = c.first_at("audio.clear")
    assert clear_at is not None
    speech_at = next(
        r.at for r in c.events if r.event["type"] == "speech.started" and r.at >= started - 0.1
    )
    # the interruption began when speech.started was sent; audio.clear follows within ~0.6 s
    assert clear_at - speech_at < 0.9, clear_at - speech_at
    await c.wait_for("response.done", timeout=30)  # the cancelled reply has none
    asked = st.llm.requests[-1]["messages"][-1]["content"].lower()
    assert "tuesday" in asked, asked
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{st.srv.url}/metrics")).text
    ignored = [ln for ln in metrics.splitlines() if ln.startswith("vg_speech_ignored_total{")]
    assert any('reason="backchannel"' in ln and float(ln.split()[-1]) >= 3 for ln in ignored)
    assert "vg_turn_ends_total" in metrics and "vg_turn_detector_fallbacks_total" in metrics
    await c.close()


# ---- the reply's own echo --------------------------------------------------------------------


def speakerphone_replies(body: dict[str, Any]) -> Reply:
    """Replies by what was asked, not by queue order: a turn that the previous test's call
    still had under way (its own echo heard as words) must not take this call's greeting."""
    asked = str(body["messages"][-1]["content"]).lower()
    if "tea" in asked:
        return Reply(text=LONG_REPLY)
    return Reply(text="Hello there, how can I help you today?" if "hi." in asked else "Okay.")


@pytest.mark.parametrize(
    ("echo", "delay_ms", "interrupt"), [(False, 40, False), (True, 150, False), (True, 90, True)]
)
async def test_browser_speakerphone_echo(
    st: Stack, echo: bool, delay_ms: int, interrupt: bool
) -> None:
    """The speakerphone runs for the whole call, as a real one does: a short first reply (a
    greeting would do) lets the canceller learn the echo path before the long one."""
    st.llm.responder = speakerphone_replies
    c = await st.call(echo_cancellation=echo)
    assert c.of_type("session.started")[0]["echo_cancellation"] is echo
    room = Speakerphone(16000, delay_ms=delay_ms)
    await c.send({"type": "input_text", "text": "Hi."})
    await c.wait_for("response.started", timeout=20)
    phone = asyncio.create_task(browser_speakerphone(c, room, 12.0))
    await c.wait_for("response.done", timeout=20)
    await asyncio.sleep(0.5)
    await c.send({"type": "input_text", "text": "Tell me about tea."})
    await c.wait_for("response.audio.started", count=2, timeout=20)
    if interrupt:
        room.say(np.concatenate([silence(3000), speak("Wait, stop, I meant Tuesday.")]))
    await asyncio.wait_for(phone, 20)
    got = [
        (r.event["type"], r.event.get("reason"), r.event.get("text"), r.event.get("at_ms"))
        for r in c.events
        if r.event["type"] != "response.text.delta"
    ]
    # the reply did come back through the microphone
    assert room.echoed_samples > 16000 * 5 or c.of_type("response.cancelled"), got
    cancelled = c.of_type("response.cancelled")
    if echo and not interrupt:
        assert not cancelled and not c.of_type("audio.clear"), got
    else:  # without cancellation the reply cancels itself; a real interruption always does
        assert cancelled and cancelled[0]["reason"] == "barge_in", got
    if echo and interrupt:  # cut by the caller (who spoke 3 s in), not by the echo before
        assert cancelled[0]["played_ms"] > 2500, cancelled
    await c.close()


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("phone-echo") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None) as gw:
        yield gw


@pytest.mark.parametrize("echo", [False, True])
async def test_twilio_speakerphone_echo(phone: PhoneGateway, echo: bool) -> None:
    phone.llm.queue.clear()
    phone.llm.push(Reply(text=LONG_REPLY))
    agent_id = phone.agent()
    sid = "CA" + ("e" if echo else "f") * 32
    twiml = parse_twiml(phone.webhook(agent_id, sid).text)
    params = {**twiml.parameters, "echo_cancellation": str(echo).lower()}
    call = await SpeakerphoneCall(twiml.stream_url, sid, params).connect()
    call.room = Speakerphone(8000, delay_ms=120)
    call.room.say(np.concatenate([silence(1000, 8000), speak("Tell me about tea.", 8000)]))
    await call.begin()
    await call.wait_media(timeout=40)
    await asyncio.sleep(7.0)
    cleared = call.of_event("clear")
    assert call.room.echoed_samples > 8000 * 3 or cleared  # the reply came back (or cut itself)
    assert bool(cleared) is not echo, [r.msg.get("event") for r in call.received][:5]
    await call.stop()


# ---- the phone's default: auto, or what the call asks ----


@pytest.fixture(scope="module")
def phone_auto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("phone-auto") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None, turn_detection="auto") as gw:
        yield gw


def turn_ends(gw: PhoneGateway) -> dict[str, float]:
    """vg_turn_ends_total by what decided, from the live /metrics."""
    return {
        by: metric(gw.server.url, "vg_turn_ends_total", by=by) for by in get_args(VerdictSource)
    }


@needs_model
@pytest.mark.parametrize(
    ("asked", "decided_by"),
    [
        ({}, {"text", "silence"}),
        ({"turn_detection": "vad"}, {"silence"}),
        ({"turn_detection": "smart"}, {"prosody", "model", "text"}),
    ],
)
async def test_a_phone_call_ends_its_turns_by_its_policy(
    phone_auto: PhoneGateway, asked: dict[str, str], decided_by: set[str]
) -> None:
    """VG_TURN_DETECTION=auto (the default): a Twilio call's espeak-ng sentence, whose voice
    does not fade, ends by its finished words or at the silence rule's time, never held by
    the voice; `turn_detection=vad` always by the silence rule; `smart` never by it (its
    unfaded voice waits the maximum)."""
    phone_auto.llm.queue.clear()
    phone_auto.llm.responder = lambda body: Reply(text="Okay.")
    agent_id = phone_auto.agent()
    sid = "CA" + {"": "d", "vad": "e", "smart": "b"}[asked.get("turn_detection", "")] * 32
    twiml = parse_twiml(phone_auto.webhook(agent_id, sid).text)
    before = turn_ends(phone_auto)
    call = await TwilioCall(twiml.stream_url, sid, {**twiml.parameters, **asked}).connect()
    await call.begin()
    end = await call.say(np.concatenate([silence(300, 8000), speak("My name is Alice.", 8000)]))
    await call.wait_media(since=end, timeout=40)
    after = turn_ends(phone_auto)
    await call.stop()
    grew = {k: v - before.get(k, 0.0) for k, v in after.items() if v > before.get(k, 0.0)}
    assert sum(grew.values()) == 1, grew
    assert set(grew) <= decided_by, grew


# ---- a call's own waits ----------------------------------------------------------------------

# a 600 ms pause mid-sentence: webrtcvad hears 480-660 ms of silence
PAUSED = [speak("My number is five five five."), silence(600), speak("one two three four.")]


@pytest.mark.parametrize(("asked", "turns"), [({}, 2), ({"turn_silence_ms": 1000}, 1)])
async def test_a_call_sets_its_own_silence(st: Stack, asked: dict[str, int], turns: int) -> None:
    c = await st.call(turn_detection="vad", **asked)
    started = c.of_type("session.started")[0]
    silence_ms = asked.get("turn_silence_ms", 400)
    assert (started["turn_silence_ms"], started["turn_max_silence_ms"]) == (silence_ms,) * 2
    await c.stream(np.concatenate([silence(300), *PAUSED, silence(2000)]), 16000)
    await c.wait_for("speech.stopped", count=turns, timeout=40)
    # the last turn's reply: the first, cut at the pause, may be cancelled by the words after
    kinds = [r.event["type"] for r in c.events]
    last_stop = len(kinds) - 1 - kinds[::-1].index("speech.stopped")
    await c.wait_for("turn.metrics", count=kinds[:last_stop].count("turn.metrics") + 1)
    assert len(c.of_type("speech.stopped")) == turns
    waited = c.of_type("turn.metrics")[-1]["end_of_turn_ms"]
    assert silence_ms <= waited < silence_ms + 20, waited  # counted in whole 20 ms frames
    await c.close()


@needs_model
async def test_a_smart_call_sets_its_longest_wait(st: Stack) -> None:
    """espeak-ng ends at full level, which `smart` does not call done: it waits its longest,
    1600 ms unless the call asks for less."""
    c = await st.call(turn_detection="smart", turn_max_silence_ms=700)
    started = c.of_type("session.started")[0]
    assert (started["turn_detection"], started["turn_max_silence_ms"]) == ("smart", 700)
    said = speak("I would like to book a table for two at seven.")
    await c.stream(np.concatenate([silence(300), said, silence(1500)]), 16000)
    metrics = await c.wait_for("turn.metrics", timeout=40)
    assert metrics["end_of_turn"]["complete"] is not True, metrics["end_of_turn"]
    assert 700 <= metrics["end_of_turn_ms"] < 720, metrics
    await c.close()


@pytest.mark.parametrize("asked", [{}, {"turn_silence_ms": "1000"}])
async def test_a_phone_call_sets_its_own_silence(
    phone: PhoneGateway, asked: dict[str, str]
) -> None:
    """The same as a Twilio stream parameter (a string): a 600 ms pause is one turn."""
    phone.llm.queue.clear()
    phone.llm.responder = lambda body: Reply(text="Okay.")
    agent_id = phone.agent()
    sid = "CA" + ("9" if asked else "8") * 32
    twiml = parse_twiml(phone.webhook(agent_id, sid).text)
    params = {**twiml.parameters, "turn_detection": "vad", **asked}
    before = turn_ends(phone)
    call = await TwilioCall(twiml.stream_url, sid, params).connect()
    await call.begin()
    said = [speak("My number is five five five.", 8000), silence(600, 8000)]
    end = await call.say(np.concatenate([silence(300, 8000), *said, speak("one two.", 8000)]))
    await call.wait_media(since=end, timeout=40)
    await call.wait_quiet()
    after = turn_ends(phone)
    await call.stop()
    assert after["silence"] - before["silence"] == (1 if asked else 2), (before, after)


# ---- bad turn options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"turn_detection": "psychic"},
        {"echo_cancellation": "yes"},
        {"echo_cancellation": 1},
        {"turn_silence_ms": 50},
        {"turn_silence_ms": "soon"},
        {"turn_max_silence_ms": True},
        {"turn_max_silence_ms": 1e9},
    ],
)
async def test_bad_turn_options_are_an_error_and_the_call_goes_on(
    st: Stack, options: dict[str, Any]
) -> None:
    c = await st.call(**options)
    err = await c.wait_for("error")
    assert err["code"] == "invalid_option" and not err["fatal"]
    started = c.of_type("session.started")[0]
    assert started["turn_detection"] == "vad" and started["echo_cancellation"] is False
    assert started["turn_silence_ms"] == 400
    await c.send({"type": "input_text", "text": "hello"})
    await c.wait_for("response.done", timeout=20)
    await c.close()
