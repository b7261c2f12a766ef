"""A recorded phone call over Twilio Media Streams (espeak-ng speech as 8 kHz mu-law at 20 ms
pacing, local whisper, espeak TTS, the loopback LLM): the WAV is 2 channels at 8 kHz, the
caller's words in channel 1, the consent and the reply in channel 2."""

from __future__ import annotations

import asyncio
import io
import time
import wave
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.fake_llm import Reply
from tests.support.phone import PhoneGateway, phone_gateway, transcribe_on
from tests.support.speech import silence, speak, wer

UTTERANCE = "Hello, my name is Alice and I would like some green tea please."
ANSWER = "Nice to meet you, Alice. Green tea is coming right up."
RECORDED = {"recording": {"enabled": True, "consent_message": "This call is recorded."}}


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("recorded-phone") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None) as gw:
        yield gw


async def recording(pg: PhoneGateway, agent_id: str) -> bytes:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        calls = pg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
        if calls:
            resp = pg.http.get(f"/v1/calls/{calls[0]['id']}/recording")
            if resp.status_code == 200:
                return resp.content
        await asyncio.sleep(0.2)
    raise AssertionError("no recording")


async def test_recorded_phone_call(pg: PhoneGateway) -> None:
    pg.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = pg.agent(name="recorded-phone", metadata=RECORDED)
    call = await pg.call(agent_id, call_sid="CA" + "7" * 32).connect()
    await call.begin()
    await call.wait_media(timeout=20)  # the consent
    await call.wait_quiet()
    end_of_speech = await call.say(np.concatenate([silence(300, 8000), speak(UTTERANCE, 8000)]))
    await call.wait_media(since=end_of_speech, timeout=40)
    await call.wait_quiet()
    await asyncio.sleep(0.5)
    await call.hang_up()

    with wave.open(io.BytesIO(await recording(pg, agent_id)), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (2, 2, 8000)
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    near, far = data[0::2], data[1::2]
    # one clock: the caller's words end before the reply starts in the other channel
    loud = 32768 * 10 ** (-40 / 20)

    def voiced(pcm: np.ndarray) -> np.ndarray:
        frames = pcm[: len(pcm) // 160 * 160].reshape(-1, 160).astype(np.float64)
        return np.flatnonzero(np.sqrt((frames**2).mean(axis=1)) > loud)

    spoke, out = voiced(near), voiced(far)
    reply = out[out > spoke[-1]]
    assert len(reply) > 50 and reply[0] - spoke[-1] < 200, (spoke[-1], reply[:3])
    assert out[0] < spoke[0] < spoke[-1] < reply[0]  # the consent first, then the caller
    # tiny.en's 8 kHz words swing ("Alice" -> "Natalie": docs/benchmarks.md, voice_stt): the
    # phone tests' 0.25
    caller = await transcribe_on(pg.server, near[spoke[0] * 160 : (spoke[-1] + 10) * 160])
    assert wer(UTTERANCE, caller) <= 0.25, caller
    consent = (await transcribe_on(pg.server, far[: spoke[0] * 160])).lower()
    assert "record" in consent, consent
    # (tiny.en need only hear the name in the 8 kHz reply: docs/benchmarks.md, voice_stt)
    answer = (await transcribe_on(pg.server, far[reply[0] * 160 - 1600 :])).lower()
    assert "alice" in answer or "coming right" in answer, answer
