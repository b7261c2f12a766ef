"""End of turn on real recorded speech: false cut-offs vs how long a finished caller waits.

Corpus: Debian's pocketsphinx-testdata (LibriVox readings, card-game commands, digit strings;
tests/support/real_speech.py), 13 clips. Each clip is played once as recorded (finished) and,
per pause length (300-1500 ms), once per inserted pause at one of its two quietest word
boundaries between 30% and 75% of the speech. Each sample runs through the real TurnDetector
(webrtcvad mode 3, 20 ms frames) with each end-of-turn policy:
- vad_<ms>: the silence rule at several silence lengths;
- smart_audio_<thr>: Smart Turn v3.2 alone (decided 200 ms into a pause, "not done" waits
  up to 1600 ms) at several thresholds;
- text: the speculative transcript alone (whisper tiny.en of the utterance so far, started
  60 ms into the pause, arriving after its measured decode time);
- smart_text_<thr>_<wait>: both (turns/smart.py `combine`), the voice's "done" waiting up to
  <wait> ms for the transcript's veto;
- fade_<db>: the voice's final fade alone (turns/fade.py): done at 200 ms when the last
  110 ms of sound are <db> below the utterance's level, else wait up to 1600 ms;
- smart_fade_<thr>_<db>, smart_text_fade_<thr>_<wait>_<db>: the model's "done" also needs the
  fade (with and without the transcript); smart_text_fade_0.5_400_-21 is `smart`'s defaults
  (the _0_ one: the voice deciding alone when the transcript is late; the ..._model_at_200
  one: the model asked at 200 ms even with the transcript on its way);
  ..._sentence_<ms>: and a finished sentence in the transcript ends the turn at <ms> of
  silence (VG_TURN_SENTENCE_MS);
- auto, auto_sentence_<ms>: `auto`'s defaults (smart's, a finished sentence ending the turn at
  340 ms, or <ms>), where a "not done" that only the voice gave ends at the silence rule's
  400 ms: only words that run on wait up to 1600 ms;
- words: `words`' defaults (auto with the text classifier's P(complete), turns/words.py).
`--phone`: every sample first goes through a phone line as the gateway receives a Twilio call
(bench/voice_stt.py `phone`: 8 kHz, mu-law, back to 16 kHz), and the speculative transcript is
decoded as a narrowband call's is (from the 15 s window).
`--cv`: the per-pause scores and the rules of bench/_turn_scores.py and bench/_turn_cv.py
(in sample and leave-one-clip-out, with espeak-ng speech), printed as JSON
(bench/results/turn_taking_cv.json).
Model scores and whisper decodes are cached within the run (the policies share them).
A cut-off: the turn ended before the end of the utterance. Delay: end of the last sound of a
finished clip -> the frame that ended the turn (the model's inference time is counted as one
20 ms frame; ~35 ms measured). Prints the curve as JSON (bench/results/turn_taking.json).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from concurrent.futures import Future
from typing import Any, ClassVar

import numpy as np
from _common import emit, parser, summary
from voice_latency import SENTENCES
from voice_stt import phone

from tests.support.real_speech import MISSING, clips, speech_span, with_pause, word_gaps
from voice_gateway.stt.whisper import RETRY_MIN_FRAMES, SHORT_MIN_FRAMES, WhisperSTT
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import PauseStarted, SpeechStopped
from voice_gateway.turns.fade import TailEnergy, faded
from voice_gateway.turns.features import columns_of
from voice_gateway.turns.model import SmartTurnModel, find_model
from voice_gateway.turns.policies import AutoTurn, SilenceRule, SmartTurn, WordsTurn
from voice_gateway.turns.policy import DecidingPolicy, Decision, EndOfTurn, Ready, Verdict
from voice_gateway.turns.transcript import text_complete
from voice_gateway.vad import create_vad

PAUSES_MS = (300, 500, 800, 1200, 1500)
AUTO_SENTENCE_MS = TurnConfig().auto_sentence_ms
ALONE = TurnConfig(min_silence_ms=200, max_silence_ms=1600, model_deadline=False)  # one signal


class InlineModel(SmartTurnModel):
    """The real model, run inline (the benchmark's clock is the frame timeline); a score is
    computed once per distinct input in the run."""

    cache: ClassVar[dict[bytes, float]] = {}

    def submit(self, pcm16: bytes) -> Future[float] | None:
        fut: Future[float] = Future()
        width = self.width(columns_of(pcm16))
        key = hashlib.sha1(pcm16 + bytes(str(width), "ascii")).digest()
        if key not in self.cache:
            self.cache[key] = self._timed(pcm16)
        fut.set_result(self.cache[key])
        return fut


class FadeOnly(DecidingPolicy):
    """The final fade alone: done at `min_silence_ms` when the voice faded by `fade_db`."""

    name = "fade"

    def __init__(self, fade_db: float) -> None:
        super().__init__(ALONE)
        self.fade_db, self.tail = fade_db, TailEnergy()

    def start(self, preroll: list[bytes]) -> None:
        self.tail.reset()
        for frame in preroll:
            self.tail.feed(frame)

    def feed(self, frame: bytes) -> None:
        self.tail.feed(frame)

    def decide(self, text: str | None = None) -> Decision:
        return Ready(Verdict(faded(self.tail.drop_db(), self.fade_db) is True, "prosody"))


class TextOnly(DecidingPolicy):
    """The speculative transcript alone: done unless the words run on; no text by
    `max_silence_ms`: a time-out."""

    name = "text"

    def __init__(self) -> None:
        super().__init__(ALONE)

    def decide(self, text: str | None = None) -> Any:
        class _D(Decision):
            text: str | None = None

            def give_text(self, text: str) -> None:
                self.text = text

            def poll(self) -> Verdict | None:
                if self.text is None:
                    return None
                return Verdict(text_complete(self.text) is not False, "text", text=self.text)

        return _D()


class Transcripts:
    """Whisper decodes of utterance prefixes, cached, with their measured decode time."""

    def __init__(self, narrowband: bool = False) -> None:
        self.stt = WhisperSTT(threads=2)
        # decoded as a phone call's pauses are: from the 15 s window
        self.first = RETRY_MIN_FRAMES if narrowband else SHORT_MIN_FRAMES
        self.cache: dict[bytes, tuple[str, float]] = {}
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.stt.warmup())

    def get(self, pcm: bytes) -> tuple[str, float]:
        if pcm not in self.cache:
            start = time.perf_counter()
            text = self.loop.run_until_complete(self.stt.decode(pcm, min_frames=self.first))
            self.cache[pcm] = (text, (time.perf_counter() - start) * 1000)
        return self.cache[pcm]


def run_sample(
    pcm: np.ndarray, eot: EndOfTurn, texts: Transcripts | None, clock: list[float]
) -> list[int]:
    """The frame indices at which turns ended."""
    det = TurnDetector(create_vad("webrtc", 3), TurnConfig(silence_ms=400), eot)
    audio = np.concatenate([pcm, np.zeros(16000 * 2, dtype="<i2")]).tobytes()
    ends: list[int] = []
    due: list[tuple[int, int, str]] = []  # (frame, pause, text)
    utterance_start = 0
    for i in range(len(audio) // 640):
        clock[0] = i * 0.02
        for _, pause, text in [d for d in due if d[0] == i]:
            det.give_text(pause, text)
        for ev in det.feed(audio[i * 640 : (i + 1) * 640]):
            if isinstance(ev, SpeechStopped):
                ends.append(i)
                utterance_start = i + 1
            elif isinstance(ev, PauseStarted) and texts is not None:
                det.expect_text(ev.pause)  # as the gateway does for local whisper
                prefix = audio[max(0, utterance_start - 15) * 640 : (i + 1) * 640]
                text, ms = texts.get(prefix + bytes((200 - 60) * 32))
                due.append((i + 1 + int(np.ceil(ms / 20)), ev.pause, text))
    return ends


def policies(model: SmartTurnModel | None, clock: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"vad_{ms}": (lambda ms=ms: SilenceRule(TurnConfig(silence_ms=ms)))
        for ms in (200, 300, 400, 500, 800, 1000)
    }
    out = {k: (v, False) for k, v in out.items()}
    if model is None:
        return out
    clk = lambda: clock[0]  # noqa: E731

    def smart(
        thr: float,
        use_text: bool,
        wait: float,
        fade: float | None = None,
        sentence: int = 0,
        first_ms: int = 200,
        text_first: bool = True,
        defer_model: bool = True,
        auto: bool = False,
    ) -> SmartTurn:
        config = TurnConfig(  # silence_ms 400: the deadline, as the gateway's
            min_silence_ms=first_ms,
            text_first=text_first,
            defer_model=defer_model,
            threshold=thr,
            use_text=use_text,
            text_wait_ms=wait,
            fade_db=fade or 0.0,
            sentence_ms=sentence,
        )
        return (AutoTurn if auto else SmartTurn)(model, config, clock=clk)

    for thr in (0.3, 0.5, 0.7, 0.9):
        out[f"smart_audio_{thr}"] = (lambda t=thr: smart(t, False, 0), False)
    out["text"] = (lambda: TextOnly(), True)
    for thr in (0.5, 0.7):
        for wait in (0, 250, 500):
            out[f"smart_text_{thr}_{wait}"] = (lambda t=thr, w=wait: smart(t, True, w), True)
    for db in (-22, -21, -20, -18, -16, -14, -12):
        out[f"fade_{db}"] = (lambda d=db: FadeOnly(d), False)
        out[f"smart_fade_0.5_{db}"] = (lambda d=db: smart(0.5, False, 0, d), False)
    for db in (-21, -16, -14):
        for wait in (0, 250) if db != -21 else (0, 250, 400):
            out[f"smart_text_fade_0.5_{wait}_{db}"] = (
                lambda w=wait, d=db: smart(0.5, True, w, d),
                True,
            )
    out["smart_text_fade_0.5_400_-21_model_at_200"] = (  # the model not deferred
        lambda: smart(0.5, True, 400, -21, defer_model=False),
        True,
    )
    out["smart_text_fade_0.5_0_-21_model_always"] = (  # before step 0 (decision.py)
        lambda: smart(0.5, True, 0, -21, text_first=False),
        True,
    )
    for ms in (100, 150):  # the model asked sooner in the pause (VG_TURN_MIN_SILENCE_MS)
        out[f"smart_text_fade_0.5_0_-21_asked_at_{ms}"] = (
            lambda m=ms: smart(0.5, True, 0, -21, first_ms=m),
            True,
        )
    for ms in (600, 800, 1000):
        out[f"smart_text_fade_0.5_0_-21_sentence_{ms}"] = (
            lambda m=ms: smart(0.5, True, 0, -21, m),
            True,
        )
    for ms in (0, 300, AUTO_SENTENCE_MS):  # `auto`: the voice's "not done" ends at 400 ms
        out["auto" if ms == AUTO_SENTENCE_MS else f"auto_sentence_{ms}"] = (
            lambda m=ms: smart(0.5, True, 400, -21, m, auto=True),
            True,
        )
    out["words"] = (lambda: WordsTurn(model, TurnConfig(), clock=clk), True)  # its defaults
    return out


def record_scores(model: SmartTurnModel, texts: Transcripts, pauses: tuple[int, ...]) -> Any:
    """Every sample's per-pause scores (bench/_turn_scores.py), for `--cv`."""
    from _turn_scores import Sample, record

    out = []
    for clip in clips():
        _, last = speech_span(clip.pcm)
        out.append(Sample(clip.name, 0, last, record(clip.pcm, model, texts.get)))
        for p in pauses:
            for gap in word_gaps(clip.pcm):
                pcm = with_pause(clip.pcm, gap, p)
                out.append(Sample(clip.name, p, last, record(pcm, model, texts.get)))
    return out


ESPEAK = (  # bench/voice_latency.py's sentences and a few more, finished
    *SENTENCES,
    "Hello there, how are you doing today?",
    "My number is five five five one two three four.",
    "Thank you, that is all for now.",
    "Is it going to rain on Saturday?",
)
ESPEAK_PAUSED = (("My number is five five five.", "one two three four."),)  # the e2e test's


def record_espeak(model: SmartTurnModel, texts: Transcripts) -> Any:
    """espeak-ng speech (which Smart Turn scores low, ~0.24): finished sentences, and the pause
    test's number with 800 ms inside it."""
    from _turn_scores import Sample, record

    from tests.support.speech import silence, speak

    out = []
    for i, text in enumerate(ESPEAK):
        pcm = np.concatenate([silence(300), speak(text)])
        out.append(Sample(f"espeak:{i}", 0, speech_span(pcm)[1], record(pcm, model, texts.get)))
    for i, (a, b) in enumerate(ESPEAK_PAUSED):
        pcm = np.concatenate([silence(300), speak(a), silence(800), speak(b)])
        out.append(Sample(f"espeak_paused:{i}", 800, speech_span(pcm)[1] - 40, []))
        out[-1].pauses = record(pcm, model, texts.get)
    return out


def record_conversation(model: SmartTurnModel, texts: Transcripts) -> Any:
    """The recorded phone conversation's turns that end in a gap (tests/support/real_speech.py
    `ended_turns`), each after 300 ms of silence and followed by silence, as the gateway would
    hear one caller: finished turns of conversational speech (the corpus above is read
    sentences and commands). Empty when pyannote.audio is not installed."""
    from _turn_scores import Sample, record

    from tests.support.real_speech import ended_turns
    from tests.support.speech import silence

    out = []
    for i, (_, said) in enumerate(ended_turns()):
        pcm = np.concatenate([silence(300), said])
        pcm = pcm[: len(pcm) // 320 * 320]
        sample = Sample(f"conversation:{i}", 0, speech_span(pcm)[1], [])
        sample.pauses = record(pcm, model, texts.get)
        out.append(sample)
    return out


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--only", default="", help="comma-separated policy-name prefixes to run")
    p.add_argument(
        "--cv",
        action="store_true",
        help="record per-pause scores once (bench/results/turn_scores.json; kept, pass "
        "--rescore to record again) and compare end-of-turn rules, leave-one-clip-out",
    )
    p.add_argument("--rescore", action="store_true", help="with --cv: record the scores again")
    p.add_argument(
        "--phone", action="store_true", help="the samples through a phone line (8 kHz mu-law)"
    )
    p.add_argument(
        "--full-window",
        action="store_true",
        help="Smart Turn on its 8 s window (VG_TURN_WINDOW=false), not cut to the utterance",
    )
    args = p.parse_args()
    only = tuple(x for x in args.only.split(",") if x)
    corpus = clips()
    if not corpus:
        emit("turn_taking", {"skipped": MISSING})
        return
    if args.cv and args.phone:
        p.error("--phone draws the curve; --cv records wideband scores only")
    if args.cv:
        from _common import RESULTS
        from _turn_cv import cross_validate
        from _turn_scores import load, save

        cache = RESULTS / "turn_scores.json"
        if args.rescore or not cache.is_file():
            path = find_model()
            assert path is not None, "--cv needs the Smart Turn model"
            RESULTS.mkdir(exist_ok=True)
            model = InlineModel(path, workers=1, windows=not args.full_window)
            texts = Transcripts()
            samples = record_scores(model, texts, PAUSES_MS) + record_espeak(model, texts)
            samples += record_conversation(model, texts)
            save(samples, cache)
        emit("turn_taking_cv", cross_validate(load(cache)))
        return
    pauses = (500, 1200) if args.quick else PAUSES_MS
    path = find_model()
    model = None if path is None else InlineModel(path, workers=1, windows=not args.full_window)
    texts = Transcripts(narrowband=args.phone)
    clock = [0.0]

    def line(pcm: np.ndarray) -> np.ndarray:  # what the gateway hears
        return np.frombuffer(phone(pcm), dtype="<i2") if args.phone else pcm

    results: dict[str, Any] = {"clips": len(corpus), "model": str(path) if path else None}
    for name, (make, needs_text) in policies(model, clock).items():
        if only and not name.startswith(only):
            continue
        heard = texts if needs_text else None
        delays: list[float] = []
        early_finished = 0
        cut: dict[int, list[bool]] = {p: [] for p in pauses}
        for clip in corpus:
            _, last = speech_span(clip.pcm)
            ends = run_sample(line(clip.pcm), make(), heard, clock)
            if ends and ends[0] < last - 1:
                early_finished += 1
            if ends:
                delays.append((ends[-1] + 1 - last) * 20.0)
            for p in pauses:
                for gap in word_gaps(clip.pcm):
                    pcm = with_pause(clip.pcm, gap, p)
                    last_p = last + p // 20
                    e = run_sample(line(pcm), make(), heard, clock)
                    cut[p].append(bool(e) and e[0] < last_p - 1)
        s = summary(delays)
        results[name] = {
            "delay_p50_ms": s.get("p50_ms"),
            "delay_p95_ms": s.get("p95_ms"),
            "finished_cut_early": early_finished,
            "cutoff_rate": {str(p): round(float(np.mean(v)), 3) for p, v in cut.items()},
            "samples_per_pause": len(cut[pauses[0]]),
        }
        print(name, results[name], file=sys.stderr, flush=True)  # progress; stdout: JSON
    if model is not None and model.inference_ms:
        results["model_inference"] = summary(model.inference_ms)
    emit("turn_taking_phone" if args.phone else "turn_taking", {"quick": args.quick, **results})


if __name__ == "__main__":
    main()
