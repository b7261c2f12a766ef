"""The audio fast path (pipeline/input.py `InputPath.now`, the WebSocket's audio sink) against
the reader's path: STT must get the same audio, in order, whichever path carried each frame.

A recording STT (a subclass of our base class) keeps what it was given per utterance; with
`push_now` it takes frames of an utterance in the socket's read callback, without it every one
of them goes through the call's reader task. Real speech (espeak-ng), a real WebSocket, paced
in real time, so that the sink does take most frames when it can: the browser's binary frames,
and a phone call's Twilio media messages (JSON, base64 mu-law at 8 kHz, resampled to 16 kHz in
whichever path takes the frame)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import numpy as np
import pytest

from tests.support.fault_providers import FaultLLM, Faults, FaultTTS
from tests.support.gateway import running_gateway
from tests.support.phone import TOKEN, TwilioCall, call_form, parse_twiml, sign
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient
from voice_gateway.stt import register_stt
from voice_gateway.stt.base import PartialCallback, STTProvider, STTStream
from voice_gateway.tts import register_tts

RATE = 16000
HEARD = "hello there"
_names = itertools.count()


@dataclass
class Record:
    now: bool = True  # streams take frames at once (push_now)
    fail_now: bool = False  # ... and fail doing so
    by_sink: int = 0  # frames taken by push_now
    by_reader: int = 0  # pushes from the reader task
    utterances: list[bytes] = field(default_factory=list, repr=False)

    def reset(self, *, now: bool, fail_now: bool = False) -> None:
        self.now, self.fail_now, self.by_sink, self.by_reader = now, fail_now, 0, 0
        self.utterances.clear()


class RecordingStream(STTStream):
    provider = "recording-stt"

    def __init__(self, rec: Record) -> None:
        super().__init__()
        self.rec, self.buf = rec, bytearray()

    async def push(self, pcm16_16k: bytes) -> None:
        self.rec.by_reader += 1
        self.buf += pcm16_16k

    def push_now(self, pcm16_16k: bytes) -> bool:
        if not self.rec.now:
            return False
        if self.rec.fail_now:
            raise ConnectionError("the vendor's socket is gone")
        self.rec.by_sink += 1
        self.buf += pcm16_16k
        return True

    async def _finish(self) -> str:
        self.rec.utterances.append(bytes(self.buf))
        self.buf.clear()
        return HEARD

    async def reset(self) -> None:
        self.buf.clear()


class RecordingSTT(STTProvider):
    name = "recording-stt"

    def __init__(self, rec: Record) -> None:
        self.rec = rec

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return RecordingStream(self.rec)


@dataclass
class Rig:
    server: ServerThread
    http: httpx.Client
    rec: Record

    async def call(self) -> VoiceClient:
        resp = self.http.post("/v1/agents/", json={"model": "openai/fault"})
        assert resp.status_code == 201, resp.text
        c = await VoiceClient(f"{self.server.ws_url}/v1/agents/{resp.json()['id']}/voice").connect()
        await c.start()
        return c


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rec, faults = Record(), Faults()
    name = f"recording{next(_names)}"
    register_stt(name, lambda: RecordingSTT(rec))
    register_tts(name, lambda: FaultTTS(faults))
    db = tmp_path_factory.mktemp("sink") / "vg.db"
    with (
        running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt=name,
            tts=name,
            sleeptime_model="scripted/demo",
            twilio_auth_token=TOKEN,
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as http,
    ):
        srv.app.state.gw.llms.overrides["openai"] = FaultLLM(faults)  # type: ignore[attr-defined]
        yield Rig(srv, http, rec)


AUDIO = np.concatenate([silence(400), speak("Hello there, how are you today?"), silence(900)])


async def _heard(rig: Rig, *, now: bool) -> tuple[bytes, Record]:
    rig.rec.reset(now=now)
    c = await rig.call()
    try:
        await c.stream(AUDIO, RATE)  # paced as a microphone
        final = await c.wait_for("transcript.final", timeout=20)
        assert final["text"] == HEARD
        await c.wait_for("response.done", timeout=20)
    finally:
        await c.close()
    assert len(rig.rec.utterances) == 1, [len(u) for u in rig.rec.utterances]
    return rig.rec.utterances[0], rig.rec


async def test_stt_gets_the_same_audio_by_either_path(rig: Rig) -> None:
    by_reader, rec = await _heard(rig, now=False)
    assert rec.by_sink == 0 and rec.by_reader > 10
    by_sink, rec = await _heard(rig, now=True)
    # the sink took most frames of the utterance; the reader only the confirmation's audio
    # and frames that came while it was busy
    assert rec.by_sink > 20 and rec.by_sink > rec.by_reader, rec
    sent = AUDIO.astype("<i2").tobytes()
    for utterance in (by_reader, by_sink):
        # a whole-frame slice of what was sent: nothing dropped, doubled or reordered
        start = sent.find(utterance)
        assert start >= 0 and start % 640 == 0 and len(utterance) % 640 == 0
        assert len(utterance) >= 0.8 * (len(sent) - 1300 * 32)  # all the speech
    assert by_sink == by_reader


async def test_a_failing_push_now_fails_the_utterance_like_push(rig: Rig) -> None:
    rig.rec.reset(now=True, fail_now=True)
    c = await rig.call()
    try:
        await c.stream(AUDIO, RATE)
        err = await c.wait_for("error", timeout=20)
        assert err["code"] == "stt_error" and err["fatal"] is False, err
        assert not c.of_type("transcript.final")
        # the session is still usable: the next utterance (push_now healthy) is heard
        rig.rec.fail_now = False
        await c.stream(AUDIO, RATE)
        final = await c.wait_for("transcript.final", timeout=20)
        assert final["text"] == HEARD
    finally:
        await c.close()


PHONE_AUDIO = speak("Hello there, how are you today?", 8000)


async def _phone_heard(rig: Rig, *, now: bool, sid: str) -> tuple[bytes, Record]:
    rig.rec.reset(now=now)
    resp = rig.http.post("/v1/agents/", json={"model": "openai/fault"})
    assert resp.status_code == 201, resp.text
    url = f"{rig.server.url}/v1/telephony/twilio/voice?agent_id={resp.json()['id']}"
    form = call_form(sid)
    hook = rig.http.post(url, data=form, headers={"X-Twilio-Signature": sign(url, form)})
    assert hook.status_code == 200, hook.text
    twiml = parse_twiml(hook.text)
    call = await TwilioCall(twiml.stream_url, sid, twiml.parameters).connect()
    try:
        await call.begin()
        await asyncio.sleep(0.4)  # the line's silence first, as a call starts
        await call.say(PHONE_AUDIO)
        await call.wait_until(lambda: rig.rec.utterances, 20, "the utterance's transcript")
        await call.stop()
        assert await call.wait_closed() == 1000
    finally:
        for task in call._tasks:
            task.cancel()
    assert len(rig.rec.utterances) == 1, [len(u) for u in rig.rec.utterances]
    return rig.rec.utterances[0], rig.rec


async def test_a_phone_call_takes_the_sink_and_stt_gets_the_same_audio(rig: Rig) -> None:
    by_reader, rec = await _phone_heard(rig, now=False, sid="CA" + "5" * 32)
    assert rec.by_sink == 0 and rec.by_reader > 10
    by_sink, rec = await _phone_heard(rig, now=True, sid="CA" + "6" * 32)
    # Twilio's media messages went to the session from the socket's read callback, decoded
    # and resampled there, not in the reader task
    assert rec.by_sink > 20 and rec.by_sink > rec.by_reader, rec
    assert len(by_sink) % 640 == 0 and len(by_sink) >= 0.8 * len(PHONE_AUDIO) * 4
    assert by_sink == by_reader  # the same 16 kHz audio, nothing dropped, doubled or reordered
