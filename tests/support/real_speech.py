"""Real recorded speech for the turn-taking tests and bench/turn_taking.py: Debian's
`pocketsphinx-testdata` (LibriVox readings of Sense and Sensibility, card-game commands, digit
strings; 16 kHz mono). `clips()` is empty when the package is not installed; `MISSING` says
how to get it."""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path("/usr/share/pocketsphinx/test/data")
MISSING = (
    "real recorded speech not found: install Debian's pocketsphinx-testdata "
    "(apt-get install pocketsphinx-testdata; scripts/test does)"
)
RAW = ("numbers.raw", "goforward.raw", "something.raw")


@dataclass(frozen=True)
class Clip:
    name: str
    pcm: np.ndarray  # int16, 16 kHz
    text: str


def _transcripts() -> dict[str, str]:
    out: dict[str, str] = {}
    for f in (DATA / "librivox" / "transcription", DATA / "cards" / "cards.transcription"):
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            if "(" not in line:
                continue
            words, _, name = line.rpartition("(")
            text = words.replace("<s>", "").replace("</s>", "").strip()
            out[name.strip(" )")] = text
    return out


def clips() -> list[Clip]:
    if not DATA.is_dir():
        return []
    texts = _transcripts()
    found: list[Clip] = []
    for path in sorted((DATA / "librivox").glob("*.wav")) + sorted((DATA / "cards").glob("*.wav")):
        with wave.open(str(path)) as w:
            if w.getframerate() != 16000 or w.getnchannels() != 1:
                continue
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        found.append(Clip(path.stem, pcm[: len(pcm) // 320 * 320].copy(), texts.get(path.stem, "")))
    for name in RAW:
        path = DATA / name
        if path.is_file():
            pcm = np.frombuffer(path.read_bytes(), dtype="<i2")
            found.append(Clip(path.stem, pcm[: len(pcm) // 320 * 320].copy(), ""))
    return found


def frame_dbfs(pcm: np.ndarray) -> np.ndarray:
    f = pcm[: len(pcm) // 320 * 320].reshape(-1, 320).astype(np.float64)
    return 20 * np.log10(np.sqrt((f**2).mean(axis=1)) / 32768 + 1e-9)


def speech_span(pcm: np.ndarray, margin_db: float = 25.0) -> tuple[int, int]:
    """(first, last+1) 20 ms frames with sound: within `margin_db` of the loudest frame."""
    db = frame_dbfs(pcm)
    loud = np.flatnonzero(db > db.max() - margin_db)
    return int(loud[0]), int(loud[-1]) + 1


def word_gaps(pcm: np.ndarray, n: int = 2) -> list[int]:
    """Frame indices of the quietest points between 30% and 75% of the speech: word
    boundaries to insert a pause at (at least 300 ms apart)."""
    first, last = speech_span(pcm)
    db = frame_dbfs(pcm)
    lo, hi = first + (last - first) * 3 // 10, first + (last - first) * 3 // 4
    order = [int(i) for i in np.argsort(db[lo:hi]) + lo]
    picked: list[int] = []
    for i in order:
        if all(abs(i - j) >= 15 for j in picked):
            picked.append(i)
        if len(picked) == n:
            break
    return sorted(picked)


def background(pcm: np.ndarray, ms: int) -> np.ndarray:
    """`ms` of the recording's own quietest 20 ms frame, repeated: its room tone, for pauses
    and for the time between turns (a microphone never sends digital silence; after it,
    webrtcvad hears a recording's room tone as speech for up to 0.8 s, bench/voice_latency.py)."""
    db = frame_dbfs(pcm)
    quiet = pcm[int(np.argmin(db)) * 320 :][:320]
    return np.tile(quiet, ms // 20)


def with_pause(pcm: np.ndarray, at_frame: int, pause_ms: int) -> np.ndarray:
    """`pcm` with `pause_ms` of its own quietest background inserted at a frame boundary."""
    filler = background(pcm, pause_ms)
    return np.concatenate([pcm[: at_frame * 320], filler, pcm[at_frame * 320 :]])
