"""Deepgram STT (listen.v1) and TTS (speak.v1) through the real deepgram-sdk, pointed with
DeepgramClientEnvironment at a loopback server that speaks Deepgram's message schema
(tests/support/fake_deepgram.py; its transcripts come from our local whisper)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("deepgram")

from tests.support.fake_deepgram import API_KEY, FakeDeepgram
from tests.support.servers import ServerThread, free_port
from tests.support.speech import frames, silence, speak, wer
from voice_gateway.stt.base import STTError
from voice_gateway.stt.deepgram import DeepgramStream, DeepgramSTT
from voice_gateway.tts.base import TTSError
from voice_gateway.tts.deepgram import DeepgramTTS

FIRST = "Hello, my name is Alice and I would like some green tea please."
SECOND = "What time does the library open tomorrow morning?"


@pytest.fixture(scope="module")
def deepgram_server() -> Iterator[tuple[FakeDeepgram, ServerThread]]:
    fake = FakeDeepgram()
    srv = ServerThread(fake.app).start()
    try:
        yield fake, srv
    finally:
        srv.stop()


@pytest.fixture
def dg(deepgram_server: tuple[FakeDeepgram, ServerThread]) -> tuple[FakeDeepgram, str]:
    fake, srv = deepgram_server
    fake.reset()
    return fake, srv.url


async def feed(stream: DeepgramStream | object, pcm: np.ndarray, realtime: bool = True) -> None:
    """Push 20 ms frames, paced like a live caller."""
    start = time.monotonic()
    for i, frame in enumerate(frames(pcm, 16000)):
        if realtime:
            await asyncio.sleep(max(0.0, start + i * 0.02 - time.monotonic()))
        await stream.push(frame)  # type: ignore[attr-defined]


def utterance(text: str) -> np.ndarray:
    return np.concatenate([silence(200), speak(text), silence(400)])


async def wait_until(cond: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


# ---- STT -------------------------------------------------------------------------------------


async def test_live_transcription_with_interim_results(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    partials: list[str] = []

    async def on_partial(text: str) -> None:
        partials.append(text)

    stt = DeepgramSTT(api_key=API_KEY, base_url=url)
    stream = stt.open(on_partial=on_partial)
    assert isinstance(stream, DeepgramStream)
    try:
        await feed(stream, utterance(FIRST))
        text = await stream.finish()
        assert wer(FIRST, text) <= 0.15, text
        # interim results became partial transcripts, growing as the caller spoke
        assert len(partials) >= 2 and partials[0].lower().startswith("hello"), partials
        assert len(partials[-1]) > len(partials[0])
        # the socket was opened as documented for live transcription
        params = fake.state.listen_params[0]
        assert params["encoding"] == "linear16" and params["sample_rate"] == "16000"
        assert params["interim_results"] == "true" and params["vad_events"] == "true"
        assert params["endpointing"] == "300" and params["utterance_end_ms"] == "1000"
        assert params["model"] == "nova-3"
        assert fake.state.auth_headers[0] == f"Token {API_KEY}"
        assert stream.vendor_speech_started >= 1  # VAD events arrived
        # a second utterance on the same socket; nothing of the first leaks into it
        await feed(stream, utterance(SECOND))
        second = await stream.finish()
        assert wer(SECOND, second) <= 0.2, second
        assert "alice" not in second.lower()
        assert fake.state.listen_connections == 1 and stream.reconnects == 0
        assert fake.state.count("Finalize") == 2
    finally:
        await stream.aclose()
    assert fake.state.messages[-1] == "CloseStream"


async def test_socket_dropped_mid_utterance_reconnects_and_resends(
    dg: tuple[FakeDeepgram, str],
) -> None:
    fake, url = dg
    fake.state.interim_every_ms = 100_000  # no interims: keep the CPU for the transcripts
    fake.state.drop_listen_after_ms = 1200  # the server drops the socket mid-sentence
    stream = DeepgramSTT(api_key=API_KEY, base_url=url).open()
    assert isinstance(stream, DeepgramStream)
    try:
        await feed(stream, utterance(FIRST))
        text = await stream.finish()
        assert wer(FIRST, text) <= 0.15, text  # the whole utterance, re-sent after the drop
        assert stream.reconnects == 1 and fake.state.listen_connections == 2
        await feed(stream, utterance(SECOND))  # and the stream carries on
        assert wer(SECOND, await stream.finish()) <= 0.2
        assert fake.state.listen_connections == 2
    finally:
        await stream.aclose()


async def test_socket_dropped_after_finalize_is_resent(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    fake.state.interim_every_ms = 100_000
    fake.state.ignore_finalize = True  # the utterance stays pending on the first socket ...
    stt = DeepgramSTT(api_key=API_KEY, base_url=url, endpointing_ms=5000)
    stream = stt.open()
    assert isinstance(stream, DeepgramStream)
    try:
        await feed(stream, utterance(SECOND), realtime=False)
        task = asyncio.create_task(stream.finish())
        await wait_until(lambda: fake.state.count("Finalize") == 1)
        fake.state.ignore_finalize = False
        fake.state.drop_listen_after_ms = 0  # ... which drops on the next audio frame
        await stream.push(bytes(640))
        text = await asyncio.wait_for(task, 30)
        assert wer(SECOND, text) <= 0.2, text
        assert fake.state.listen_connections == 2 and fake.state.count("Finalize") == 2
    finally:
        await stream.aclose()


async def test_finals_covering_the_audio_settle_without_from_finalize(
    dg: tuple[FakeDeepgram, str],
) -> None:
    """Deepgram answers Finalize only when audio is pending: when endpointing's speech_final
    result already covers everything sent, finish() must not wait for a from_finalize."""
    import webrtcvad

    fake, url = dg
    fake.state.interim_every_ms = 100_000
    stt = DeepgramSTT(api_key=API_KEY, base_url=url)
    stt.finalize_wait_s = 60.0  # a missed settle would hang here, not pass
    stream = stt.open()
    # stop exactly where the server's endpointing (webrtcvad, 300 ms) fires: nothing pending
    pcm = frames(np.concatenate([speak(SECOND), silence(1000)]), 16000)
    vad = webrtcvad.Vad(3)
    last_voiced = max(i for i, f in enumerate(pcm) if vad.is_speech(f, 16000))
    try:
        for frame in pcm[: last_voiced + 1 + 300 // 20]:
            await stream.push(frame)
        await wait_until(lambda: fake.state.finals)  # the endpointing final (speech_final)
        text = await asyncio.wait_for(stream.finish(), 20)
        assert wer(SECOND, text) <= 0.2, text
        assert len(fake.state.finals) == 1  # settled by the endpointing final alone
    finally:
        await stream.aclose()


async def test_keepalive_while_the_caller_is_quiet(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    stt = DeepgramSTT(api_key=API_KEY, base_url=url)
    stt.keepalive_s = 0.1
    stream = stt.open()
    try:
        await wait_until(lambda: fake.state.count("KeepAlive") >= 3)
        assert await stream.finish() == ""  # nothing was said
    finally:
        await stream.aclose()


async def test_rejected_key_is_a_clear_error(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    stream = DeepgramSTT(api_key="wrong-key", base_url=url).open()
    try:
        await feed(stream, utterance("Hello there."), realtime=False)  # push never raises
        with pytest.raises(STTError) as info:
            await stream.finish()
        assert "rejected the API key (HTTP 401)" in str(info.value)
        assert not info.value.retryable
        assert fake.state.listen_connections == 0
    finally:
        await stream.aclose()


async def test_unreachable_server_is_a_retryable_error() -> None:
    stt = DeepgramSTT(api_key=API_KEY, base_url=f"http://127.0.0.1:{free_port()}")
    stream = stt.open()
    try:
        await feed(stream, utterance("Hello there."), realtime=False)
        with pytest.raises(STTError) as info:
            await stream.finish()
        assert "cannot connect" in str(info.value) and info.value.retryable
    finally:
        await stream.aclose()


def test_missing_key_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="DEEPGRAM_API_KEY"):
        DeepgramSTT(api_key=None, base_url=None)
    with pytest.raises(ValueError, match="DEEPGRAM_API_KEY"):
        DeepgramTTS(api_key="", base_url=None)


# ---- TTS (Aura over speak.v1) ----------------------------------------------------------------


async def test_aura_sentence_round_trips_through_whisper(dg: tuple[FakeDeepgram, str]) -> None:
    from voice_gateway.stt.whisper import WhisperSTT

    fake, url = dg
    tts = DeepgramTTS(api_key=API_KEY, base_url=url)
    text = "The green tea is ready, please come to the counter."
    try:
        audio = await tts.synthesize_all(text, 16000)
    finally:
        await tts.aclose()
    assert fake.state.spoken == [text]
    params = fake.state.speak_params[0]
    assert params["encoding"] == "linear16" and params["sample_rate"] == "24000"
    assert params["model"] == "aura-2-thalia-en"
    assert 1.5 < len(audio) / 32000 < 6  # resampled 24 kHz -> 16 kHz
    heard = await WhisperSTT().decode(audio)
    assert wer(text, heard) <= 0.2, heard


async def test_sockets_are_reused_between_sentences(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    tts = DeepgramTTS(api_key=API_KEY, base_url=url)
    try:
        for sentence in ("One sentence.", "Another sentence.", "A third one."):
            assert await tts.synthesize_all(sentence, 8000)
        assert tts.opened == 1 and fake.state.speak_connections == 1
        # barge-in: a sentence cut off mid-way is not put back in the pool
        gen = tts.synthesize("This sentence is interrupted after its first piece of audio.", 8000)
        assert await gen.__anext__()
        await gen.aclose()
        assert await tts.synthesize_all("After the barge-in.", 8000)
        assert tts.opened == 2 and fake.state.speak_connections == 2
    finally:
        await tts.aclose()


async def test_tts_failures_are_tts_errors(dg: tuple[FakeDeepgram, str]) -> None:
    fake, url = dg
    tts = DeepgramTTS(api_key=API_KEY, base_url=url)
    try:
        fake.state.warn_speak = True
        with pytest.raises(TTSError, match="scripted"):
            await tts.synthesize_all("Hello.", 16000)
        fake.state.warn_speak, fake.state.fail_speak = False, True
        with pytest.raises(TTSError, match="deepgram TTS"):
            await tts.synthesize_all("Hello.", 16000)
        fake.state.fail_speak = False
        assert await tts.synthesize_all("Working again.", 16000)  # recovers
    finally:
        await tts.aclose()
    bad = DeepgramTTS(api_key="wrong", base_url=url)
    with pytest.raises(TTSError, match="HTTP 401"):
        await bad.synthesize_all("Hello.", 16000)
