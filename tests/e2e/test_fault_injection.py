"""Provider faults on a live voice socket, with fake providers built on our own base classes
(tests/support/fault_providers.py): the STT, TTS and LLM each failing at the start, mid-stream
and by hanging. Every case ends with the spoken apology, a non-fatal `error` event naming the
kind, and a normal second turn on the same socket. Then the fallbacks: a failing primary STT,
TTS or model is replaced by the configured fallback, and the caller hears no apology."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support.fault_providers import HEARD, REPLY, FaultLLM, Faults, Mode, install, tone_hz
from tests.support.gateway import metric, running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient
from voice_gateway.pipeline.services import APOLOGY, STT_APOLOGY

CODES = {"stt": "stt_error", "tts": "tts_error", "llm": "llm_error"}
FAST = {"llm_voice_timeout_s": 1.0, "stt_timeout_s": 1.0, "tts_timeout_s": 1.0}
RATE = 16000
# how often the failing provider was asked: a fast failure before output is retried once, a
# failure after output or a time-out never (STT counts final-transcript requests: a failed
# push fails the utterance before one is made)
ASKS = {
    ("stt", "start"): 0,
    ("stt", "mid"): 0,
    ("stt", "hang"): 1,
    ("tts", "start"): 2,
    ("tts", "mid"): 1,
    ("tts", "hang"): 1,
    ("llm", "start"): 2,
    ("llm", "mid"): 1,
    ("llm", "hang"): 1,
}


@dataclass
class Rig:
    server: ServerThread
    http: httpx.Client
    faults: Faults

    @property
    def gw(self) -> Any:
        return self.server.app.state.gw  # type: ignore[attr-defined]

    async def call(self) -> VoiceClient:
        resp = self.http.post("/v1/agents/", json={"model": "openai/fault"})
        assert resp.status_code == 201, resp.text
        url = f"{self.server.ws_url}/v1/agents/{resp.json()['id']}/voice"
        c = await VoiceClient(url).connect()
        await c.start()
        return c


def _rig(tmp: pytest.TempPathFactory, **settings: Any) -> Iterator[Rig]:
    faults = Faults()
    name = install(faults)
    db = tmp.mktemp("faults") / "vg.db"
    with (
        running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt=name,
            tts=name,
            sleeptime_model="scripted/demo",  # memory rewriting must not call the fault model
            **FAST,
            **settings,
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as http,
    ):
        srv.app.state.gw.llms.overrides["openai"] = FaultLLM(faults)  # type: ignore[attr-defined]
        yield Rig(srv, http, faults)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    yield from _rig(tmp_path_factory)


@pytest.fixture(scope="module")
def fallback_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    yield from _rig(
        tmp_path_factory,
        stt_fallback="whisper",
        tts_fallback="espeak",
        llm_fallback="scripted/demo",
        fallback_cooldown_s=0.0,
    )


async def _user_turn(c: VoiceClient, kind: str, words: str = HEARD) -> None:
    """A spoken turn for the STT cases, a typed one otherwise (quicker, same reply path)."""
    if kind == "stt":
        await c.stream(np.concatenate([speak(words), silence(800)]), RATE, realtime=False)
    else:
        await c.send({"type": "input_text", "text": words})


def _audio_after(c: VoiceClient, at: float) -> int:
    return sum(n for t, n in c.audio_frames if t >= at)


def _pitch(pcm: bytes) -> float:
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / RATE)[int(np.argmax(spectrum))])


def _assert_output_before_failure(c: VoiceClient, kind: str, err_at: float) -> None:
    """The "mid" cases: the provider produced output before it failed."""
    if kind == "stt":
        assert any(r.event["type"] == "transcript.partial" and r.at <= err_at for r in c.events)
    elif kind == "tts":
        assert sum(n for t, n in c.audio_frames if t < err_at) > 0
    else:
        deltas = [r for r in c.events if r.event["type"] == "response.text.delta"]
        assert deltas and deltas[0].at <= err_at


@pytest.mark.parametrize("mode", ["start", "mid", "hang"])
@pytest.mark.parametrize("kind", ["stt", "tts", "llm"])
async def test_fault_gives_apology_error_and_a_usable_session(
    rig: Rig, kind: str, mode: Mode
) -> None:
    rig.faults.reset()
    rig.faults.calls = dict.fromkeys(rig.faults.calls, 0)
    setattr(rig.faults, kind, mode)
    c = await rig.call()
    try:
        await _user_turn(c, kind)
        err = await c.wait_for("error", timeout=20)
        err_at = next(r.at for r in c.events if r.event is err)
        assert err["code"] == CODES[kind] and err["fatal"] is False, err
        # the apology is an audio item of its own (STT) or the end of the failed reply
        await c.wait_for("response.audio.done" if kind == "stt" else "response.done", timeout=20)
        apology = STT_APOLOGY if kind == "stt" else APOLOGY
        size = len(apology) * 10 * RATE // 1000 * 2  # FaultTTS: 10 ms per character
        assert _audio_after(c, err_at) >= size  # the apology came after the error
        assert _pitch(bytes(c.audio[-size + 1600 : -1600])) == pytest.approx(
            tone_hz(apology), abs=5
        )  # ... and it is the apology phrase, the last thing the caller heard
        if mode == "mid":
            _assert_output_before_failure(c, kind, err_at)
        assert rig.faults.calls[kind] == ASKS[kind, mode], rig.faults.calls
        if kind == "llm":
            assert c.of_type("response.done")[-1]["stop_reason"] == "llm_api_error"

        rig.faults.reset()  # the next turn on the same socket works normally
        dones, errors, audio = (
            len(c.of_type("response.done")),
            len(c.of_type("error")),
            len(c.audio),
        )
        await _user_turn(c, kind)
        done = await c.wait_for("response.done", count=dones + 1, timeout=20)
        assert done["stop_reason"] == "end_turn"
        assert c.of_type("response.text.done")[-1]["text"].strip() == REPLY
        assert len(c.audio) - audio >= len(REPLY) * 10 * RATE // 1000  # spoken
        assert len(c.of_type("error")) == errors
        if kind == "stt":
            assert c.of_type("transcript.final")[-1]["text"] == HEARD
    finally:
        await c.close()
    assert c.close_code == 1000


async def test_stt_that_cannot_open_leaves_the_call_usable(rig: Rig) -> None:
    """A call whose STT stream cannot be opened still starts: each utterance gets the STT
    apology and an stt_error, and typed turns work."""
    rig.faults.reset()
    rig.faults.stt = "open"
    c = await rig.call()
    try:
        await _user_turn(c, "stt")
        err = await c.wait_for("error", timeout=20)
        assert err["code"] == "stt_error" and "refused the connection" in err["message"]
        await c.wait_for("response.audio.done", timeout=20)
        size = len(STT_APOLOGY) * 10 * RATE // 1000 * 2
        assert _pitch(bytes(c.audio[-size + 1600 : -1600])) == pytest.approx(
            tone_hz(STT_APOLOGY), abs=5
        )
        await _user_turn(c, "llm")
        assert (await c.wait_for("response.done", timeout=20))["stop_reason"] == "end_turn"
    finally:
        rig.faults.reset()
        await c.close()
    assert c.close_code == 1000


def _served(rig: Rig, kind: str, provider: str) -> float:
    """vg_provider_served{kind, provider} from the live /metrics."""
    return metric(rig.server.url, "vg_provider_served", kind=kind, provider=provider)


async def test_stt_fallback_transcribes_and_cools_down(fallback_rig: Rig) -> None:
    rig = fallback_rig
    stt = rig.gw.voice.stt
    rig.faults.reset()
    rig.faults.stt = "start"  # the primary refuses the audio: whisper gets the replay
    c = await rig.call()
    try:
        await _user_turn(c, "stt", "What time do you open tomorrow?")
        final = await c.wait_for("transcript.final", timeout=30)
        assert "open tomorrow" in final["text"].lower()
        assert (await c.wait_for("response.done", timeout=20))["stop_reason"] == "end_turn"
        assert stt.served["whisper"] == 1 and not c.of_type("error")

        stt.cooldown_s = 60.0  # a failed primary is now skipped for a minute
        rig.faults.stt = "hang"
        await _user_turn(c, "stt", "Is the shop open on Sunday?")
        await c.wait_for("response.done", count=2, timeout=30)
        asked = rig.faults.calls["stt"]
        rig.faults.stt = "ok"
        await _user_turn(c, "stt", "Thank you very much.")
        await c.wait_for("response.done", count=3, timeout=30)
        assert rig.faults.calls["stt"] == asked  # the primary was not asked
        assert stt.served["whisper"] == 3 and not c.of_type("error")
        assert _served(rig, "stt", "whisper") == 3 and _served(rig, "stt", "fault-stt") == 0
    finally:
        stt.cooldown_s, stt._skip_until = 0.0, 0.0
        await c.close()


async def test_tts_fallback_speaks_without_apology(fallback_rig: Rig) -> None:
    rig = fallback_rig
    tts = rig.gw.voice.tts
    rig.faults.reset()
    rig.faults.tts = "hang"
    c = await rig.call()
    try:
        await _user_turn(c, "tts")
        done = await c.wait_for("response.done", timeout=20)
        assert done["stop_reason"] == "end_turn" and not c.of_type("error")
        assert tts.served["espeak"] == 2  # both sentences, in the fallback voice
        assert _served(rig, "tts", "espeak") == 2
        assert len(c.audio) > RATE  # over half a second of speech
        assert abs(_pitch(bytes(c.audio)) - tone_hz("It is sunny and warm.")) > 5
    finally:
        await c.close()


@pytest.mark.parametrize("mode", ["start", "hang"])
async def test_llm_fallback_model_answers(fallback_rig: Rig, mode: Mode) -> None:
    rig = fallback_rig
    rig.faults.reset()
    rig.faults.llm = mode
    c = await rig.call()
    try:
        await _user_turn(c, "llm", "say something")
        done = await c.wait_for("response.done", timeout=20)
        assert done["stop_reason"] == "end_turn" and not c.of_type("error")
        assert "offline demo model" in c.of_type("response.text.done")[-1]["text"]
        assert len(c.audio) > RATE
    finally:
        await c.close()
    provider, _ = rig.gw.llms.resolve("openai/fault")
    assert provider.served["scripted/demo"] >= 1
    assert _served(rig, "llm", "scripted/demo") == provider.served["scripted/demo"]
