"""Per-pause scores for bench/turn_taking.py's `--cv` mode: every signal the `smart` policy has
at a pause, recorded once per sample, so that end-of-turn rules can be compared (and tuned
leave-one-clip-out) without running the model or whisper again.

A sample is played once through the real TurnDetector (webrtcvad mode 3) with a recording
policy that never ends the turn: at each pause that reaches 200 ms it stores Smart Turn's
probability, the voice's fade (turns/fade.py), the speculative transcript with its
measured decode time, and later the pause's length. A rule maps one pause's record to the
silence after which it would end the turn (or never); the sample's turn ends in the first
pause that lasts that long. Exact for what the curve counts (the first end of a paused sample,
the only end of a finished clip that is not cut early); a finished clip that a rule cuts in a
natural pause would, in the live detector, start a new utterance whose later scores differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import PauseStarted
from voice_gateway.turns.fade import drop_db
from voice_gateway.turns.features import N_FRAMES, RecentPcm, window_features
from voice_gateway.turns.model import SmartTurnModel
from voice_gateway.turns.policy import DecidingPolicy, Decision, Verdict
from voice_gateway.vad import create_vad

FRAME = 640  # 20 ms of 16 kHz PCM16


@dataclass
class Pause:
    first: int  # the pause's first silent frame
    p: float  # Smart Turn v3.2 at 200 ms (on the cut window when the model has cuts)
    drop_db: float | None  # the fade at the last sound
    voiced_ms: int  # speech in the utterance so far
    text: str | None = None  # the speculative transcript (decoded from 60 ms into the pause)
    decode_ms: float | None = None
    length_ms: float = math.inf  # silence before speech resumed (inf: it never did)
    p_full: float | None = None  # the model on its 8 s window (recorded when `p` is on a cut)


@dataclass
class Sample:
    clip: str
    pause_ms: int  # the inserted pause; 0: the finished clip
    last: int  # frame after the utterance's last sound
    pauses: list[Pause] = field(default_factory=list)


class Recorder(DecidingPolicy):
    """Decides at 200 ms, never ends the turn; keeps the pause's scores."""

    name = "record"
    max_silence_ms = 10**9  # type: ignore[assignment]

    def __init__(self, model: SmartTurnModel) -> None:
        super().__init__(TurnConfig(min_silence_ms=200, model_deadline=False))
        self.model = model
        self.audio = RecentPcm()
        self.pauses: list[Pause] = []
        self.frames = self.voiced = 0

    def start(self, preroll: list[bytes]) -> None:
        for frame in preroll:
            self.feed(frame)

    def feed(self, frame: bytes) -> None:
        self.audio.append(frame)

    def decide(self, text: str | None = None) -> Decision:
        pcm = self.audio.pcm()
        fut = self.model.submit(pcm)
        assert fut is not None
        pause = Pause(0, fut.result(), drop_db(pcm), self.voiced)
        if len(self.model.sessions) > 1:  # the same pause on the 8 s window (turns/window.py)
            pause.p_full = self.model.score(window_features(pcm, N_FRAMES))
        self.pauses.append(pause)

        class _Never(Decision):
            def give_text(self, text: str) -> None:
                pause.text = text

            def poll(self) -> Verdict:
                return Verdict(False, "model")

        return _Never()


def record(
    pcm: np.ndarray, model: SmartTurnModel, transcribe: Callable[[bytes], tuple[str, float]]
) -> list[Pause]:
    rec = Recorder(model)
    det = TurnDetector(create_vad("webrtc", 3), TurnConfig(silence_ms=400), rec)
    audio = np.concatenate([pcm, np.zeros(16000 * 2, dtype="<i2")]).tobytes()
    decodes: list[tuple[str, float]] = []
    silent = voiced = 0
    for i in range(len(audio) // FRAME):
        n_before = len(rec.pauses)
        events = det.feed(audio[i * FRAME : (i + 1) * FRAME])
        speaking = det.last_voiced_ms == det.now_ms
        if speaking:
            if silent and rec.pauses and rec.pauses[-1].first == i - silent:
                rec.pauses[-1].length_ms = silent * 20.0
            silent = 0
            voiced += 20
            rec.voiced = voiced
        else:
            silent += 1
        for ev in events:
            if isinstance(ev, PauseStarted):
                prefix = audio[: (i + 1) * FRAME] + bytes((200 - 60) * 32)
                decodes.append(transcribe(prefix))
        if len(rec.pauses) > n_before:
            pause = rec.pauses[-1]
            pause.first = i - silent + 1
            pause.text, pause.decode_ms = decodes[-1]
    return rec.pauses


def save(samples: list[Sample], path: Path) -> None:
    path.write_text(json.dumps([asdict(s) for s in samples]))


def load(path: Path) -> list[Sample]:
    out = []
    for s in json.loads(path.read_text()):
        pauses = [Pause(**p) for p in s.pop("pauses")]
        out.append(Sample(**s, pauses=pauses))
    return out


Rule = Callable[[Pause], float]  # a pause -> the silence (ms) after which the turn ends
MAX_MS = 1600.0


def text_at_ms(pause: Pause, decode_ms: float | None = None) -> float:
    """The silence at which the transcript reaches the decision (the bench's timeline: decoding
    starts 60 ms into the pause, a result is seen on the next 20 ms frame)."""
    ms = pause.decode_ms if decode_ms is None else decode_ms
    return 80.0 + 20.0 * math.ceil((ms or 0.0) / 20.0)


def end_frame(sample: Sample, rule: Rule) -> int | None:
    """The frame at which the rule ends the sample's (first) turn."""
    for pause in sample.pauses:
        wait = max(200.0, min(rule(pause), MAX_MS))
        wait = 20.0 * math.ceil(wait / 20.0)
        if wait <= pause.length_ms:
            return pause.first + int(wait // 20) - 1
    return None


def evaluate(samples: list[Sample], rule: Rule) -> dict[str, Any]:
    """Delay: last sound -> the turn's end; ready: last sound -> the later of the end and the
    pause's transcript (the earliest a reply can start: it needs the words)."""
    delays, ready, cut, early = [], [], {}, 0
    for s in samples:
        end = end_frame(s, rule)
        if s.pause_ms == 0:
            if end is not None and end < s.last - 1:
                early += 1  # cut in a natural pause; the delay is still its final pause's
            final = Sample(s.clip, 0, s.last, [p for p in s.pauses if p.length_ms == math.inf])
            end = end_frame(final, rule)
            if end is not None:
                delays.append((end + 1 - s.last) * 20.0)
                words = [p.first + int(text_at_ms(p) // 20) - 1 for p in final.pauses[:1]]
                ready.append((max(end, *words) + 1 - s.last) * 20.0)
        else:
            last_p = s.last + s.pause_ms // 20
            cut.setdefault(s.pause_ms, []).append(end is not None and end < last_p - 1)
    return {
        "delays": delays,
        "delay_p50_ms": float(np.percentile(delays, 50)) if delays else None,
        "delay_p95_ms": float(np.percentile(delays, 95)) if delays else None,
        "ready_p50_ms": float(np.percentile(ready, 50)) if ready else None,
        "ready_p95_ms": float(np.percentile(ready, 95)) if ready else None,
        "finished_cut_early": early,
        "cutoff_rate": {str(k): round(float(np.mean(v)), 3) for k, v in sorted(cut.items())},
        "cuts": {str(k): int(np.sum(v)) for k, v in sorted(cut.items())},
    }
