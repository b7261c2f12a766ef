"""Local whisper with the short encoder window: the real tiny.en model on espeak-ng speech (and
one real recording)."""

from __future__ import annotations

from collections.abc import Iterator

import faster_whisper.transcribe as fw
import numpy as np
import pytest

from tests.support.real_speech import MISSING, clips, speech_span
from tests.support.speech import silence, speak, wer
from voice_gateway.stt import whisper
from voice_gateway.stt.whisper import WhisperSTT, encoder_frames, looks_looped, transcribe
from voice_gateway.turns.transcript import text_complete


def padded(content: int, total: int = 3000) -> np.ndarray:
    feats = np.zeros((80, total), dtype=np.float32)
    feats[:, :content] = -0.5
    feats[3, content - 1] = 0.25  # one non-zero bin is enough to count as content
    return feats


def test_encoder_window_is_the_content_plus_padding_at_least_ten_seconds() -> None:
    assert encoder_frames(padded(300)) == 1000  # 3 s of speech: the 10 s floor
    assert encoder_frames(padded(1200)) == 1400  # 12 s: + 2 s of padding
    assert encoder_frames(padded(2950)) == 3000  # never more than it was given
    assert encoder_frames(padded(300)[None]) == 1000  # batched (1, 80, n) too
    whisper._window.full = True
    try:
        assert encoder_frames(padded(300)) == 3000
    finally:
        whisper._window.full = False


def test_looped_text_is_recognised() -> None:
    assert looks_looped(". . . . . . . . . . .")
    assert looks_looped(" ".join(["What's my name?"] * 6))
    assert not looks_looped("")
    assert not looks_looped("What time does the library open tomorrow morning?")
    # a phrase said again at once, too short for the compression ratio (tiny.en, real:001)
    assert looks_looped("10 of clubs 10 of clubs 10 of clubs 10 of")
    assert looks_looped("10 of clubs 10 of clubs")
    assert looks_looped("call me call me call me")
    for speech in (
        "My number is five five five one two three four",
        "My number is 555-555-1234.",
        "No, no, no. Yeah yeah yeah.",
        "One two, one two, testing.",
        "Thank you, thank you.",  # two words twice is speech
        "Here is sentence number one. Here is sentence number two.",
    ):
        assert not looks_looped(speech), speech


@pytest.fixture
def encoder_inputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of mel frames each call of the real CTranslate2 encoder received."""
    seen: list[int] = []
    real = fw.get_ctranslate2_storage

    def spy(features: np.ndarray) -> object:
        seen.append(int(features.shape[-1]))
        return real(features)

    monkeypatch.setattr(fw, "get_ctranslate2_storage", spy)
    yield seen


def test_a_short_utterance_is_encoded_in_a_short_window(encoder_inputs: list[int]) -> None:
    text = "Can you remind me to call my sister at six this evening?"
    heard = transcribe(speak(text).astype(np.float32) / 32768.0, 2)
    assert wer(text, heard) <= 0.15, heard
    assert encoder_inputs and max(encoder_inputs) == 1000  # not the 3000-frame window


@pytest.mark.parametrize(("loops", "windows"), [(1, [1000, 1500]), (2, [1000, 1500, 3000])])
def test_a_looping_short_decode_is_redone(
    encoder_inputs: list[int], monkeypatch: pytest.MonkeyPatch, loops: int, windows: list[int]
) -> None:
    # Whether tiny.en's greedy short-window pass loops on a given input (quiet noise answers
    # ". . . . ." on some CPUs, "" on others) depends on the processor's arithmetic, so the
    # first decodes are declared looped here: a 15 s window, then (that one looped too) the
    # real full-window decode must run and win.
    seen: list[str] = []

    def looped(text: str) -> bool:
        seen.append(text)
        return len(seen) <= loops

    monkeypatch.setattr(whisper, "looks_looped", looped)
    text = "Please cancel my appointment with the dentist on Friday."
    heard = transcribe(speak(text).astype(np.float32) / 32768.0, 2)
    assert encoder_inputs == windows
    assert len(seen) == min(loops + 1, 2) and wer(text, heard) <= 0.15, heard


def test_long_speech_keeps_every_part(encoder_inputs: list[int]) -> None:
    text = (
        "I would like to book a table for four people on Saturday evening. "
        "Please cancel my appointment with the dentist on Friday. "
        "What time does the library open tomorrow morning?"
    )
    pcm = np.concatenate([speak(text), silence(500)])
    heard = transcribe(pcm.astype(np.float32) / 32768.0, 2)
    assert wer(text, heard) <= 0.15, heard
    assert 1000 < encoder_inputs[0] < 3000


@pytest.mark.parametrize(("input_rate", "window"), [(16000, 1000), (48000, 1000), (8000, 1500)])
async def test_a_call_stream_picks_its_window_by_the_callers_rate(
    encoder_inputs: list[int], input_rate: int, window: int
) -> None:
    """Phone calls (8 kHz, resampled to 16 kHz) start from the 15 s window (the standard 30 s
    one takes 3-5x the time for no better words, bench/voice_stt.py)."""
    stt = WhisperSTT()
    stream = stt.open_stream(input_rate=input_rate)
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    assert "library" in (await stream.finish()).lower()
    assert encoder_inputs == [window]
    await stt.aclose()


@pytest.mark.parametrize("input_rate", [16000, 8000])
async def test_a_pause_transcript_is_the_turn_s_when_no_speech_followed(
    encoder_inputs: list[int], input_rate: int
) -> None:
    """The pause's decode becomes the turn's transcript without a second decode, on phone
    calls too (a second decode would cost ~300 ms of the 30 s window after the end of the
    turn); speech after the pause means a new decode."""
    stt = WhisperSTT()
    stream = stt.open_stream(input_rate=input_rate)
    assert stream.speculation_final
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    await stream.feed(pcm)
    spec = stream.speculate(340)
    assert spec is not None
    said = await spec
    assert "library" in (await stream.finish(speculated=True)).lower()
    assert len(encoder_inputs) == 1 and stream.speculation_used == 1, encoder_inputs
    await stream.feed(pcm)  # the next turn: a pause, then more speech before the end
    await stream.speculate(340)  # type: ignore[misc]
    await stream.feed(speak("Thank you.").tobytes())
    assert (await stream.finish(speculated=False)) != said
    assert len(encoder_inputs) == 3 and stream.speculation_used == 1
    await stt.aclose()


async def test_a_fallback_stream_passes_the_callers_rate_on(encoder_inputs: list[int]) -> None:
    from voice_gateway.stt.fallback import FallbackSTT

    stt = FallbackSTT(WhisperSTT(), WhisperSTT())
    stream = stt.open_stream(input_rate=8000)
    assert stream.input_rate == 8000
    stt.primary_failed(RuntimeError("down"))  # the utterance goes to the fallback's stream
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    assert "library" in (await stream.finish()).lower()
    assert encoder_inputs == [1500]
    await stt.aclose()


async def test_a_phone_call_s_looped_text_goes_on_to_the_30_s_window(
    encoder_inputs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the 15 s window a looped text is decoded again the standard way at the end of the
    turn, as the wideband calls' 10 s one is (first 15 s, then 30 s)."""
    looped = iter([True, False])
    monkeypatch.setattr(whisper, "looks_looped", lambda text: next(looped, False))
    stt = WhisperSTT()
    stream = stt.open_stream(input_rate=8000)
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    assert "library" in (await stream.finish()).lower()
    assert encoder_inputs == [1500, 3000]
    await stt.aclose()


async def test_a_speculative_decode_keeps_a_looped_text_and_the_final_one_does_not(
    encoder_inputs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause's (or a barge-in check's) decode is not redone with the 30 s window when its
    text looks looped (1.1 s on a 2-vCPU Xeon, for speech cut mid-word), and such a text is
    never the turn's transcript: the end of the turn decodes again."""
    monkeypatch.setattr(whisper, "looks_looped", lambda text: "library" in text.lower())
    stt = WhisperSTT()
    stream = stt.open_stream()
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    spec = stream.speculate()
    assert spec is not None and "library" in (await spec).lower()
    assert encoder_inputs == [1000]  # the short window only
    assert "library" in (await stream.finish(speculated=True)).lower()
    # decoded again, from the 15 s window (the 10 s one looped on the same audio), then in full
    assert encoder_inputs == [1000, 1500, 3000]
    assert stream.speculation_used == 0
    # the rest of the call starts from the 15 s window
    await stream.feed(pcm)
    assert "library" in (await stream.speculate()).lower()  # type: ignore[union-attr]
    assert encoder_inputs[3:] == [1500]
    await stt.aclose()


async def test_a_pause_decode_that_loops_is_redone_in_the_pause(
    encoder_inputs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause that may end the turn (no reply playing: `retry_looped`) tries a looped text
    once more from the 15 s window while the caller is still silent, so the end of the turn
    finds its transcript ready instead of decoding it again after it."""
    checked: list[str] = []

    def looped_once(text: str) -> bool:
        checked.append(text)
        return len(checked) == 1

    monkeypatch.setattr(whisper, "looks_looped", looped_once)
    stt = WhisperSTT()
    stream = stt.open_stream()
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    spec = stream.speculate(retry_looped=True)
    assert spec is not None and "library" in (await spec).lower()
    assert encoder_inputs == [1000, 1500]  # looped at 10 s, redone at 15 s in the pause
    assert "library" in (await stream.finish(speculated=True)).lower()
    assert encoder_inputs == [1000, 1500] and stream.speculation_used == 1  # nothing after
    await stream.feed(pcm)  # the rest of the call starts from the 15 s window
    assert "library" in (await stream.speculate(retry_looped=True)).lower()  # type: ignore[union-attr]
    assert encoder_inputs[2:] == [1500]
    await stt.aclose()


@pytest.mark.skipif(not clips(), reason=MISSING)
def test_a_finished_recording_is_never_heard_as_running_on() -> None:
    """The speculative decode of a real finished command ("ten of clubs"), started after 0 to
    580 ms of the pause as a loaded gateway may start it: its text never vetoes the end of
    turn. tiny.en loops on it at one length ("10 of clubs 10 of clubs 10 of clubs 10 of",
    80 ms on an AMD Zen 3), which ends in "of" and used to make that turn wait the full
    1.6 s: one turn in ~40 at 8-10 calls in bench/turn_capacity.py."""
    clip = next(c for c in clips() if c.name.endswith("001"))
    _, last = speech_span(clip.pcm)
    verdicts = {}
    for extra in range(30):  # 20 ms frames of the pause
        audio = clip.pcm[: (last + 1 + extra) * 320].astype(np.float32) / 32768
        text = transcribe(audio, retry_looped=False)  # as WhisperStream.speculate decodes
        verdicts[extra] = (text, text_complete(text))
    assert all(v is not False for _, v in verdicts.values()), verdicts
    assert any("clubs" in t.lower() for t, _ in verdicts.values()), verdicts


async def test_a_looped_partial_is_dropped_without_a_retry(
    encoder_inputs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial transcript is speech cut wherever it fell, which tiny.en often loops on: such
    a text is not shown, and not decoded again (on a Zen 3 the retries cost ~1.2 s of CPU a
    turn in turn_capacity, where every partial of "ten of clubs" looped)."""
    monkeypatch.setattr(whisper, "looks_looped", lambda text: True)
    shown: list[str] = []

    async def on_partial(text: str) -> None:
        shown.append(text)

    stt = WhisperSTT(partials=True)
    stream = stt.open_stream(on_partial=on_partial)
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    for i in range(0, len(pcm), 640):
        await stream.feed(pcm[i : i + 640])
    task = stream._partial_task  # type: ignore[attr-defined]
    assert task is not None
    await task
    assert shown == [] and encoder_inputs == [1000]  # one short-window decode, no retry
    await stt.aclose()


@pytest.mark.skipif(not clips(), reason=MISSING)
def test_a_real_command_comes_out_once_whatever_silence_surrounds_it(
    encoder_inputs: list[int],
) -> None:
    """A real recording ("ten of clubs") with 0-0.3 s of silence before it and 0.2-0.4 s
    after, as a turn's audio has: the transcript says it once. tiny.en's 10 s window repeated
    it ("10 of clubs 10 of clubs ...") in 11 of these 15 on an AMD Zen 3, the 15 s retry in
    1, the 30 s window in none."""
    clip = next(c for c in clips() if c.name.endswith("001")).pcm.astype(np.float32) / 32768
    for lead in (0, 60, 120, 200, 300):
        for tail in (200, 300, 400):
            audio = np.concatenate([silence(lead).astype(np.float32), clip, silence(tail) * 0.0])
            heard = transcribe(audio)
            assert wer("ten of clubs", heard.replace("10", "ten")) == 0, (lead, tail, heard)
    # the 30 s window only where the 15 s one looped too (1 of 15 on that machine)
    assert encoder_inputs.count(3000) <= 3, encoder_inputs


async def test_the_backlog_counts_decodes_waiting_for_a_worker() -> None:
    """`backlog` (what `smart` sheds its model on): three decodes on one worker leave two
    waiting; a cancelled one that waits leaves at once; none is left when all are done."""
    import asyncio

    stt = WhisperSTT(workers=1)
    await stt.warmup()
    pcm = speak("What time does the library open tomorrow morning?").tobytes()
    jobs = [asyncio.ensure_future(stt.decode(pcm)) for _ in range(3)]
    await asyncio.sleep(0)  # the three are on the pool
    assert stt.in_flight == 3 and stt.backlog() == 2
    jobs[2].cancel()
    await asyncio.sleep(0.01)
    assert stt.backlog() == 1
    texts = await asyncio.gather(*jobs[:2])
    assert all("library" in t.lower() for t in texts)
    assert stt.in_flight == 0 and stt.backlog() == 0
    await stt.aclose()
