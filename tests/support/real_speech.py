"""Real recorded speech for the turn-taking tests and bench/turn_taking.py: Debian's
`pocketsphinx-testdata` (LibriVox readings of Sense and Sensibility, card-game commands, digit
strings; 16 kHz mono). `clips()` is empty when the package is not installed; `MISSING` says
how to get it."""

from __future__ import annotations

import itertools
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


CONVERSATION = "pyannote/audio/sample/sample.stm"  # and sample.wav, in the pyannote.audio wheel


@dataclass(frozen=True)
class Turn:
    speaker: str
    start_s: float
    end_s: float
    text: str


def conversation() -> tuple[np.ndarray, list[Turn]] | None:
    """The 30 s two-person phone conversation (16 kHz mono, telephone band) in the pyannote.audio
    wheel (installed `--no-deps` by scripts/_setup.sh with the dev extra) and its speaker turns:
    the transcript's consecutive segments of one speaker joined. None when not installed."""
    from importlib import metadata

    try:
        stm = Path(str(metadata.distribution("pyannote.audio").locate_file(CONVERSATION)))
    except metadata.PackageNotFoundError:
        return None
    if not stm.is_file():
        return None
    with wave.open(str(stm.with_suffix(".wav"))) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
    turns: list[Turn] = []
    for line in stm.read_text().splitlines():
        _, _, who, start, end, *said = line.split()
        text = " ".join(said)
        if turns and turns[-1].speaker == who:
            last = turns[-1]
            turns[-1] = Turn(who, last.start_s, float(end), f"{last.text} {text}")
        else:
            turns.append(Turn(who, float(start), float(end), text))
    return pcm, turns


def ended_turns(gap_s: float = 0.2) -> list[tuple[Turn, np.ndarray]]:
    """The conversation's turns that the other speaker leaves a gap of `gap_s` or more after,
    each cut from the mixed recording up to 20 ms before the other speaker starts (at most
    0.4 s past the transcript's end): the voice's own decay is in it; a latched turn's is under
    the other voice, so those are left out. Empty when pyannote.audio is not installed."""
    found = conversation()
    if found is None:
        return []
    pcm, turns = found
    out = []
    for turn, after in itertools.pairwise(turns):
        if after.start_s - turn.end_s >= gap_s:
            end = min(after.start_s - 0.02, turn.end_s + 0.4)
            out.append((turn, pcm[int(turn.start_s * 16000) : int(end * 16000)]))
    return out


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
