"""Call recording over a real browser socket: espeak-ng speech in real time, local whisper,
espeak TTS, the loopback LLM. The agent's consent sentence plays first; the call's WAV has the
caller in channel 1 and what was played in channel 2, at the call's rate, on one clock; the
owner downloads it (another user: 404); erasing the caller and the retention sweep delete it."""

from __future__ import annotations

import asyncio
import io
import os
import time
import wave
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memory.calls import CallData, CallStore
from memory.ids import utcnow
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak, wer
from tests.support.voice_client import VoiceClient
from voice_gateway.gateway import Gateway
from voice_gateway.recordings import sweep

UTTERANCE = "Hello, my name is Alice and I would like some green tea please."
ANSWER = "Nice to meet you, Alice. Green tea is coming right up."
CONSENT = "This call is recorded."
RECORDED = {"recording": {"enabled": True, "consent_message": CONSENT}}


async def transcribe(server: ServerThread, pcm: np.ndarray) -> str:
    """16 kHz audio through the gateway's own STT (its model is loaded), after 300 ms of
    silence as a live turn has."""
    gw = server.app.state.gw
    audio = np.concatenate([np.zeros(4800, dtype="<i2"), pcm.astype("<i2")]).tobytes()

    async def run() -> str:
        stream = gw.voice.stt.open_stream(input_rate=16000)
        try:
            for i in range(0, len(audio), 640):
                await stream.push(audio[i : i + 640])
            return str(await stream.finish())
        finally:
            await stream.aclose()

    return str(await asyncio.to_thread(server.call, run(), 60))


def voiced(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Per 20 ms frame: is it louder than -40 dBFS?"""
    step = rate // 50
    frames = pcm[: len(pcm) // step * step].reshape(-1, step).astype(np.float64)
    return np.sqrt((frames**2).mean(axis=1)) > 32768 * 10 ** (-40 / 20)


async def start(c: VoiceClient, **options: Any) -> dict[str, Any]:
    event = {"type": "session.start", **options}
    await c.send(event)
    return await c.wait_for("session.started")


async def recorded_call(vg: VoiceGateway, agent_id: str) -> dict[str, Any]:
    """The agent's one call once its recording is on the record."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        calls = vg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
        if calls and vg.http.get(f"/v1/calls/{calls[0]['id']}/recording").status_code == 200:
            return dict(calls[0])
        await asyncio.sleep(0.2)
    raise AssertionError("no recording")


def channels(wav: bytes) -> tuple[int, np.ndarray, np.ndarray]:
    with wave.open(io.BytesIO(wav), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth()) == (2, 2)
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return w.getframerate(), data[0::2], data[1::2]


async def test_recorded_browser_call(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = vg.agent(name="recorded", metadata=RECORDED)
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await start(c, caller="recorded-caller")
    consent = await c.wait_for("response.done", timeout=20)  # the first words: the consent
    assert "".join(e["text"] for e in c.of_type("response.text.delta")) == CONSENT
    await c.stream(silence(1500, 16000), 16000)  # (it plays out)
    utterance = np.concatenate([silence(300, 16000), speak(UTTERANCE), silence(900, 16000)])
    await c.stream(utterance, 16000)
    done = await c.wait_for("response.done", timeout=40, count=2)
    assert done["item_id"] != consent["item_id"]
    await c.stream(silence(4000, 16000), 16000)  # the reply plays out to the caller
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000

    call = await recorded_call(vg, agent_id)
    url = f"/v1/calls/{call['id']}/recording"
    assert vg.http.get(f"/v1/calls/{call['id']}").json()["recording_url"] == url
    assert vg.http.get(f"/v1/calls/{call['id']}/report").json()["recording"] == url
    resp = vg.http.get(url)
    assert resp.headers["content-type"] == "audio/wav"
    rate, near, far = channels(resp.content)
    assert rate == 16000
    assert abs(len(near) - (1500 + len(utterance) / 16 + 4000) * 16) < 16000 * 0.2
    # channel 1: the caller as sent (from the consent's silence on), and their words
    said = 1500 * 16
    assert np.array_equal(near[said : said + len(utterance)], utterance)
    heard_near = await transcribe(vg.server, near[said : said + len(utterance)])
    assert wer(UTTERANCE, heard_near) <= 0.15, heard_near
    # channel 2: the consent, then the reply after the caller stopped speaking
    out = voiced(far, rate)
    first = int(np.argmax(out))
    assert first * 20 < 1000, "the consent plays at the start"
    end_of_speech = (said + len(utterance) - 900 * 16) // 320
    reply_start = end_of_speech + int(np.argmax(out[end_of_speech:]))
    assert not out[said // 320 + 20 : end_of_speech].any()  # nothing played while they spoke
    assert 0 < reply_start - end_of_speech < 200, "the reply within 4 s of the end of speech"
    heard_far = await transcribe(vg.server, far[reply_start * 320 - 3200 :])
    assert wer(ANSWER, heard_far) <= 0.25, heard_far
    heard_consent = await transcribe(vg.server, far[: said + 8000])
    assert "recorded" in heard_consent.lower(), heard_consent

    # another user's call, an unknown call, a call with no recording: 404 with a detail
    gw = vg.server.app.state.gw
    _, key = vg.server.call(gw.memory.users.create("someone-else"))
    other = vg.http.get(
        f"/v1/calls/{call['id']}/recording", headers={"Authorization": f"Bearer {key}"}
    )
    assert other.status_code == 404 and "detail" in other.json()
    assert vg.http.get("/v1/calls/call-nope/recording").status_code == 404

    erase_caller(vg, call["id"], agent_id)


def erase_caller(vg: VoiceGateway, call_id: str, agent_id: str) -> None:
    """Erasing the caller deletes the recording and says so."""
    gw = vg.server.app.state.gw
    wav_path = Path(vg.server.call(_record(gw, call_id)).recording_path)
    assert wav_path.is_file() and wav_path.parent.name == agent_id
    ident = vg.server.call(gw.memory.identities.by_key(None, "recorded-caller"))
    erased = vg.http.delete(f"/v1/identities/{ident.id}")
    assert erased.status_code == 200, erased.text
    assert erased.json()["erased"]["recordings"] == 1
    assert not wav_path.exists()
    gone = vg.http.get(f"/v1/calls/{call_id}/recording")
    assert gone.status_code == 404 and "no recording" in gone.json()["detail"]
    assert vg.http.get(f"/v1/calls/{call_id}").json()["recording_url"] is None


async def _record(gw: Gateway, call_id: str) -> CallData:
    return await CallStore(gw.memory.db).get(call_id)


async def test_call_options_retention_and_bad_input(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Okay.")
    plain = vg.agent(name="not-recorded")
    bad = vg.agent(name="bad-recording", metadata={"recording": {"enabled": "yes"}})
    # a call asks for its recording on an agent that does not record; a bad `record` value
    # and a bad agent setting are error events, and those calls go on unrecorded
    for agent_id, options, complaint in (
        (plain, {"record": "please"}, "record must be true or false"),
        (bad, {}, "metadata.recording is invalid (enabled"),
        (plain, {"record": True}, None),
    ):
        c = await VoiceClient(vg.ws(agent_id)).connect()
        await start(c, **options)
        if complaint is not None:
            err = await c.wait_for("error")
            assert err["code"] == "invalid_option" and complaint in err["message"], err
        await c.stream(silence(1000, 16000), 16000)
        await c.send({"type": "session.end"})
        assert await c.wait_closed() == 1000
    call = await recorded_call(vg, plain)
    calls = vg.http.get("/v1/calls/", params={"agent_id": plain}).json()
    assert calls[0]["id"] == call["id"] and len(calls) == 2
    unrecorded = vg.http.get(f"/v1/calls/{calls[1]['id']}/recording")
    assert unrecorded.status_code == 404 and "no recording" in unrecorded.json()["detail"]
    (bad_call,) = vg.http.get("/v1/calls/", params={"agent_id": bad}).json()
    assert vg.http.get(f"/v1/calls/{bad_call['id']}/recording").status_code == 404
    rate, near, _ = channels(vg.http.get(f"/v1/calls/{call['id']}/recording").content)
    assert rate == 16000 and abs(len(near) - 16000) < 3200 and not near.any()

    retention_sweep(vg, call["id"])


def retention_sweep(vg: VoiceGateway, call_id: str) -> None:
    """Nothing is due now; past retention the file and its path go, and an old file no
    record names goes too."""
    gw = vg.server.app.state.gw
    wav_path = Path(vg.server.call(_record(gw, call_id)).recording_path)
    orphan = wav_path.parent / "call-orphan.wav"
    orphan.write_bytes(b"RIFF")
    assert vg.server.call(sweep(gw)) == 0 and wav_path.exists() and orphan.exists()
    old = time.time() - (gw.settings.recording_retention_days + 1) * 86400
    os.utime(orphan, (old, old))
    assert vg.server.call(sweep(gw)) == 1 and not orphan.exists() and wav_path.exists()
    later = utcnow() + timedelta(days=gw.settings.recording_retention_days + 1)
    assert vg.server.call(sweep(gw, later)) >= 1 and not wav_path.exists()
    assert vg.server.call(_record(gw, call_id)).recording_path is None
    assert vg.http.get(f"/v1/calls/{call_id}/recording").status_code == 404
