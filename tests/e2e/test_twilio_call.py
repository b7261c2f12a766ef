"""Phone calls over Twilio Media Streams against a live gateway: the signed webhook's TwiML,
then a real WebSocket speaking Twilio's JSON with espeak-ng speech as 8 kHz mu-law at 20 ms
pacing; local whisper, espeak TTS, the loopback LLM, Redis as the transcript bus."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.fake_llm import Reply
from tests.support.phone import PhoneGateway, TwilioCall, phone_gateway, transcribe_on
from tests.support.services import RedisServer
from tests.support.speech import rms_dbfs, silence, speak, wer, write_wav
from tests.support.voice_client import VoiceClient
from voice_gateway.audio import ulaw_decode, ulaw_encode
from voice_gateway.pipeline.sentences import SentenceSplitter

UTTERANCE = "Hello, my name is Alice and I would like some green tea please."
ANSWER = "Nice to meet you, Alice. Green tea is coming right up."
SALES = "I would like to talk to somebody in the sales department please."
LONG_REPLY = " ".join(
    f"Here is sentence number {w} of a rather long answer about tea."
    for w in ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
)


@pytest.fixture(scope="module")
def phone(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[PhoneGateway]:
    if redis_server.proc is None:
        redis_server.start()
    db = tmp_path_factory.mktemp("phone") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", redis_server.url) as gw:
        yield gw


@pytest.fixture
def pg(phone: PhoneGateway) -> PhoneGateway:
    phone.llm.queue.clear()
    phone.llm.requests.clear()
    phone.llm.responder = lambda body: Reply(text="Okay.")
    return phone


async def transcripts(pg: PhoneGateway, agent_id: str, n: int, timeout: float = 15) -> list[dict]:
    """The agent's transcript events once `n` are on the Redis stream (published async)."""
    deadline = time.monotonic() + timeout
    while True:
        events = pg.transcripts(agent_id)
        if len(events) >= n or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.1)


def mark_names(call: TwilioCall) -> list[str]:
    return [r.msg["mark"]["name"] for r in call.of_event("mark")]


def voiced_frames(pcm: np.ndarray) -> np.ndarray:
    """The 20 ms frames of 8 kHz audio that are not all zero, back to back."""
    frames = pcm[: len(pcm) // 160 * 160].reshape(-1, 160)
    return frames[np.any(frames != 0, axis=1)].reshape(-1)


def contour_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two clips' loudness contours (dB per 20 ms frame, both stretched
    to one length): near 1 for the same words, low for other speech or noise."""

    def contour(pcm: np.ndarray) -> np.ndarray:
        frames = pcm[: len(pcm) // 160 * 160].reshape(-1, 160).astype(np.float64)
        db = 20 * np.log10(np.sqrt((frames**2).mean(axis=1)) + 1.0)
        return np.interp(np.linspace(0, len(db) - 1, 400), np.arange(len(db)), db)

    return float(np.corrcoef(contour(a), contour(b))[0, 1])


async def rendered_reply(pg: PhoneGateway, text: str, rate: int) -> np.ndarray:
    """`text` as the gateway speaks it: cut into the chunks it synthesises one by one, each
    padded to whole 20 ms frames, through mu-law and back."""
    splitter = SentenceSplitter()
    chunks = [*splitter.push(text + " "), splitter.flush()]
    tts = pg.server.app.state.gw.voice.tts
    frame = rate // 50 * 2

    async def render() -> bytes:
        out = b""
        for chunk in filter(None, chunks):
            pcm = b"".join([part async for part in tts.synthesize(chunk, rate)])
            out += pcm + bytes(-len(pcm) % frame)
        return out

    pcm = await asyncio.to_thread(pg.server.call, render(), 60)
    return ulaw_decode(ulaw_encode(np.frombuffer(pcm, dtype="<i2")))


async def test_phone_call(pg: PhoneGateway, artifacts_dir: Path) -> None:
    pg.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = pg.agent(name="phone-agent")
    call = await pg.call(agent_id, call_sid="CA" + "1" * 32).connect()
    assert (
        call.url.endswith("/v1/telephony/twilio/media") and call.parameters["agent_id"] == agent_id
    )
    await call.begin()
    speech = speak(UTTERANCE, 8000)
    end_of_speech = await call.say(np.concatenate([silence(300, 8000), speech]))
    await call.wait_media(since=end_of_speech, timeout=40)
    await call.wait_quiet()

    # every outgoing media chunk is followed by its mark; marks count the item's audio in ms
    out = [r.msg for r in call.received]
    assert out and all(m["streamSid"] == call.stream_sid for m in out)
    media_idx = [i for i, m in enumerate(out) if m["event"] == "media"]
    assert len(media_idx) > 50
    for i in media_idx:
        assert out[i + 1]["event"] == "mark", out[i + 1]
    names = mark_names(call)
    item = names[0].rpartition(":")[0]
    assert [int(n.rpartition(":")[2]) for n in names] == [20 * (k + 1) for k in range(len(names))]
    assert all(n.startswith(item + ":") for n in names)
    assert not call.of_event("clear")
    # the media payloads are non-silent 8 kHz mu-law speech that says the reply
    sizes = {len(base64.b64decode(out[i]["media"]["payload"])) for i in media_idx}
    assert sizes == {160}  # 20 ms of 8 kHz mu-law per chunk
    audio = call.audio()
    assert len(audio) / 8000 > 2.0 and rms_dbfs(audio) > -35
    write_wav(str(artifacts_dir / "twilio_reply_8k.wav"), audio, 8000)
    # The reply is ANSWER: its loudness contour follows the gateway's own TTS rendering of the
    # chunks it speaks. Not sample for sample: while a chunk is being synthesised the stream is
    # kept playing with digital silence (pipeline/speech.py), and a busy in-process engine hands
    # a chunk to the espeak-ng program (tts/espeak.py), whose stream the resampler gets in other
    # pieces. So the all-zero frames are left out of both sides and the contours compared.
    expected = await rendered_reply(pg, ANSWER, 8000)
    similarity = contour_similarity(voiced_frames(audio), voiced_frames(expected))
    assert similarity > 0.7, similarity  # 0.84-0.9999 seen; other speech below 0.2
    # another sentence's contour does not match: the measure tells replies apart
    other = await rendered_reply(pg, SALES, 8000)
    assert contour_similarity(voiced_frames(audio), voiced_frames(other)) < 0.5
    heard = (await transcribe_on(pg.server, audio)).lower()
    assert "alice" in heard, heard  # tiny.en hears the name in every 8 kHz rendering

    await call.stop()
    assert await call.wait_closed() == 1000
    events = await transcripts(pg, agent_id, 2)
    turn = next(e for e in events if not e.get("call_ended"))
    # the turn is in the caller's (From number's) conversation, not keyed by the call sid
    assert turn["source"] == "phone" and turn["conversation_id"].startswith("conv-")
    assert turn["identity_id"] and turn["identity_id"].startswith("identity-")
    # STT at 8 kHz, by the phone tests' bound: on an AMD EPYC the 15 s window heard
    # "Nellie ... green deep leaves" (0.23) where the 30 s one passed at 0.2, while over many
    # sentences the 15 s window is as good (bench/voice_stt.py, same machine: real recordings
    # 8.7 % WER at 30 s, 7.6 % at 15 s; espeak-ng 22.9 and 24.1 %)
    assert wer(UTTERANCE, turn["user_text"]) <= 0.25, turn["user_text"]
    assert turn["agent_text"] == ANSWER and turn["interrupted"] is False
    assert any(e.get("call_ended") and e["source"] == "phone" for e in events)
    stored = [(m["message_type"], m.get("content")) for m in pg.messages(agent_id)]
    assert ("user_message", turn["user_text"]) in stored
    assert ("assistant_message", ANSWER) in stored


async def test_barge_in_sends_clear_and_keeps_what_was_heard(pg: PhoneGateway) -> None:
    pg.llm.push(Reply(text=LONG_REPLY))
    pg.llm.responder = lambda body: Reply(text="Okay, I will stop.")
    agent_id = pg.agent()
    call = await pg.call(agent_id, call_sid="CA" + "2" * 32).connect()
    await call.begin()
    end = await call.say(np.concatenate([speak("Please tell me all about tea.", 8000)]))
    await call.wait_media(since=end, timeout=40)
    await asyncio.sleep(2.0)  # about two seconds of the reply play
    await call.say(speak("Stop, stop, that is enough.", 8000), wait=False)
    await call.wait_until(lambda: call.of_event("clear"), 20, "for clear")
    out = [r.msg for r in call.received]
    at_clear = next(i for i, m in enumerate(out) if m["event"] == "clear")
    first_item = out[1]["mark"]["name"].rpartition(":")[0]
    before = [m["mark"]["name"] for m in out[:at_clear] if m["event"] == "mark"]
    after = [m["mark"]["name"] for m in out[at_clear:] if m["event"] == "mark"]
    assert before and all(n.startswith(first_item) for n in before)
    assert not any(n.startswith(first_item) for n in after)  # nothing of the reply after clear
    await call.wait_media(since=call.of_event("clear")[0].at + 0.01, timeout=40)  # next reply
    await call.wait_quiet()
    await call.stop()
    assert await call.wait_closed() == 1000

    events = await transcripts(pg, agent_id, 3)
    cut = next(e for e in events if e["interrupted"])
    assert cut["source"] == "phone" and LONG_REPLY.startswith(cut["agent_text"])
    heard = cut["agent_text_heard"]
    assert LONG_REPLY.startswith(heard) and 10 < len(heard) < len(LONG_REPLY) / 2
    first = next(m for m in pg.messages(agent_id) if m["message_type"] == "assistant_message")
    assert first["truncated"] is True and first["content"] == heard


async def test_stop_mid_reply_publishes_the_turn_cut_at_what_was_heard(pg: PhoneGateway) -> None:
    pg.llm.push(Reply(text=LONG_REPLY))
    agent_id = pg.agent()
    call = await pg.call(agent_id, call_sid="CA" + "3" * 32).connect()
    call.mark_limit_ms = 600  # the caller's playback stalls after 600 ms of the reply
    await call.begin()
    end = await call.say(speak(UTTERANCE, 8000))
    await call.wait_media(since=end, timeout=40)
    await asyncio.sleep(1.5)
    await call.stop()  # the caller hung up
    assert await call.wait_closed() == 1000
    events = await transcripts(pg, agent_id, 2)
    turn = next(e for e in events if not e.get("call_ended"))
    assert turn["source"] == "phone" and turn["interrupted"] is True
    # tiny.en's narrowband words swing with the line's timing, in every window: here "Alice"
    # came as "Nellis" and "green tea please" as "green deep leaves" (0.23, the 15 s window);
    # an offline replay of the same sentence gave "Natalie" from the 30 s one
    assert wer(UTTERANCE, turn["user_text"]) <= 0.25, turn["user_text"]
    # what was heard comes from the echoed marks (600 ms: a word or two of the ~3 s first
    # sentence), not from how much audio was sent (1.5 s and more)
    heard = turn["agent_text_heard"]
    assert LONG_REPLY.startswith(heard) and 1 <= len(heard.split()) <= 3, heard
    assert any(e.get("call_ended") for e in events)


async def test_dtmf_reaches_the_agent_as_a_note(pg: PhoneGateway) -> None:
    pg.llm.responder = lambda body: Reply(text="Got it.")
    agent_id = pg.agent()
    call = await pg.call(agent_id, call_sid="CA" + "4" * 32).connect()
    await call.begin()
    await call.dtmf("1")  # a digit alone is a turn once the keypad goes quiet
    await call.wait_media(timeout=30)
    await call.wait_quiet()
    first = pg.llm.requests[0]["messages"][-1]
    assert first["role"] == "user" and "caller pressed 1 " in first["content"]
    for digit in "42#":  # '#' ends an entry at once
        await call.dtmf(digit)
    await call.wait_until(lambda: len(pg.llm.requests) >= 2, 20, "for the second turn")
    assert "caller pressed 42#" in pg.llm.requests[1]["messages"][-1]["content"]
    # a digit pressed while speaking joins the spoken turn
    n = len(pg.llm.requests)
    await call.dtmf("3")
    await call.say(speak(SALES, 8000))
    await call.wait_until(lambda: len(pg.llm.requests) > n, 30, "for the spoken turn")
    await call.wait_quiet()
    assert len(pg.llm.requests) == n + 1
    spoken = pg.llm.requests[n]["messages"][-1]["content"]
    note = "[The caller pressed 3 on the keypad.]"
    assert spoken.startswith(note) and wer(SALES, spoken[len(note) :]) <= 0.25, spoken
    await call.stop()
    await call.wait_closed()
    users = [m["content"] for m in pg.messages(agent_id) if m["message_type"] == "user_message"]
    assert any("caller pressed 1 " in u for u in users)


async def test_greeting_on_the_phone_uses_the_name_from_memory(pg: PhoneGateway) -> None:
    agent_id = pg.agent(
        # tiny.en hears espeak's narrowband "today" as "Punei" or "Pomey", and on another CPU
        # fell back to sampling and looped ("can I help you, can I help you, ..."): these words
        # come through whole on the phone path
        greeting="Hello! Thanks for calling. What can I do for you?",
        memory_blocks=[{"label": "human", "value": "name: Alice\nLikes green tea."}],
    )
    call = await pg.call(agent_id, call_sid="CA" + "5" * 32).connect()
    await call.begin()
    await call.wait_media(timeout=20)  # spoken without any caller input
    await call.wait_quiet()
    audio = call.audio()
    assert rms_dbfs(audio) > -35
    # the greeting with the name from memory: its loudness contour matches the gateway's own
    # rendering of it (as in test_phone_call), and not that of the same greeting to someone
    # else (tiny.en at 8 kHz hears "Hello Alice" as "The long list" in some renderings)
    said = voiced_frames(audio)
    to_alice = await rendered_reply(
        pg, "Hello Alice! Thanks for calling. What can I do for you?", 8000
    )
    to_sam = await rendered_reply(
        pg, "Hello Samantha! Thanks for calling. What can I do for you?", 8000
    )
    alice, sam = (contour_similarity(said, voiced_frames(x)) for x in (to_alice, to_sam))
    assert alice > 0.7 and sam < 0.5, (alice, sam)
    assert not pg.llm.requests  # the greeting is not an LLM turn
    await call.stop()
    assert await call.wait_closed() == 1000


async def test_greeting_in_the_browser(pg: PhoneGateway) -> None:
    agent_id = pg.agent(
        greeting="Hi {name}, good to hear from you.",
        memory_blocks=[{"label": "human", "value": "The user's name is Bob."}],
    )
    c = await VoiceClient(f"{pg.server.ws_url}/v1/agents/{agent_id}/voice").connect()
    await c.start()
    done = await c.wait_for("response.text.done", timeout=20)
    assert done["text"] == "Hi Bob, good to hear from you."
    await c.wait_for("response.done", timeout=20)
    audio = np.frombuffer(bytes(c.audio), dtype="<i2")
    assert len(audio) / 16000 > 1.0 and rms_dbfs(audio) > -35
    assert not pg.llm.requests
    await c.close()
