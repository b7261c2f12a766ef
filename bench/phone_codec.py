"""Cost per 20 ms frame of the phone path's audio work (Twilio Media Streams, 8 kHz mu-law).

- ulaw_decode / ulaw_encode: G.711 mu-law with numpy lookup tables (voice_gateway.audio)
  on 160 samples; checked bit-exact against audioop where audioop still exists (Python < 3.13).
- resample 8k->16k (caller audio into VAD/STT) and 16k->8k: the streaming polyphase resampler
  on one frame, its state carried across frames as in a call.
- inbound: one Twilio `media` message to 16 kHz PCM: JSON parse, base64 decode, mu-law decode,
  resample (what TwilioTransport + VoiceSession do per frame before VAD).
- outbound: 20 ms of 8 kHz reply PCM to a `media` + `mark` message pair (encode, base64, JSON).
Baselines in the same run: audioop.ulaw2lin / lin2ulaw / ratecv (no anti-alias filter) when
importable, and a plain bytes copy of the frame (the floor). Times are microseconds per frame:
medians and p99 over batches of frames.

Run: .venv/bin/python bench/phone_codec.py [--quick]
"""

from __future__ import annotations

import base64
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import emit, parser, ratio

from voice_gateway.audio import StreamingResampler, ulaw_decode, ulaw_encode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop  # deprecated; gone in Python 3.13
    except ImportError:  # pragma: no cover - newer Pythons
        audioop = None  # type: ignore[assignment]


def per_frame_us(fn: Callable[[int], Any], frames: int, batches: int) -> dict[str, float]:
    """fn(i) handles frame i; timed in `batches` batches of `frames` calls."""
    for i in range(frames):  # warm caches and the resampler's index cache
        fn(i)
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for i in range(frames):
            fn(i)
        samples.append((time.perf_counter() - t0) / frames * 1e6)
    a = np.asarray(samples)
    return {
        "p50_us": round(float(np.percentile(a, 50)), 3),
        "p99_us": round(float(np.percentile(a, 99)), 3),
        "min_us": round(float(a.min()), 3),
    }


def speech_like(n: int, rate: int, seed: int = 7) -> np.ndarray:
    """Band-limited noise with a syllable-rate envelope: realistic sample statistics."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    x = np.convolve(rng.standard_normal(n), np.ones(4) / 4, "same")
    env = 0.3 + 0.7 * np.abs(np.sin(2 * np.pi * 3 * t))
    return np.clip(x * env * 6000, -32768, 32767).astype(np.int16)


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    frames, batches = (200, 15) if args.quick else (1000, 60)
    pcm8 = speech_like(160 * frames, 8000)
    pcm16 = speech_like(320 * frames, 16000)
    f8 = [pcm8[i * 160 : (i + 1) * 160] for i in range(frames)]
    f8b = [f.astype("<i2").tobytes() for f in f8]
    f16b = [pcm16[i * 320 : (i + 1) * 320].astype("<i2").tobytes() for i in range(frames)]
    ulaw = [ulaw_encode(f) for f in f8]
    sid = "MZ" + "1" * 32
    media = [
        json.dumps(
            {
                "event": "media",
                "sequenceNumber": str(i),
                "media": {
                    "track": "inbound",
                    "chunk": str(i),
                    "timestamp": str(20 * i),
                    "payload": base64.b64encode(u).decode(),
                },
                "streamSid": sid,
            }
        )
        for i, u in enumerate(ulaw)
    ]
    up, down = StreamingResampler(8000, 16000), StreamingResampler(16000, 8000)
    inbound_rs = StreamingResampler(8000, 16000)

    def inbound(i: int) -> bytes:
        msg = json.loads(media[i])
        raw = base64.b64decode(msg["media"]["payload"], validate=True)
        return inbound_rs.process(ulaw_decode(raw).astype("<i2").tobytes())

    def outbound(i: int) -> tuple[str, str]:
        payload = base64.b64encode(ulaw_encode(np.frombuffer(f8b[i], dtype="<i2"))).decode()
        return (
            json.dumps({"event": "media", "streamSid": sid, "media": {"payload": payload}}),
            json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": f"item-x:{20 * i}"}}),
        )

    ours = {
        "ulaw_decode": per_frame_us(lambda i: ulaw_decode(ulaw[i]), frames, batches),
        "ulaw_encode": per_frame_us(lambda i: ulaw_encode(f8[i]), frames, batches),
        "resample_8k_to_16k": per_frame_us(lambda i: up.process(f8b[i]), frames, batches),
        "resample_16k_to_8k": per_frame_us(lambda i: down.process(f16b[i]), frames, batches),
        "inbound_media_to_16k": per_frame_us(inbound, frames, batches),
        "outbound_media_and_mark": per_frame_us(outbound, frames, batches),
    }
    baseline: dict[str, Any] = {
        "bytes_copy": per_frame_us(lambda i: bytes(bytearray(f8b[i])), frames, batches)
    }
    result: dict[str, Any] = {"frame": "20 ms (160 samples at 8 kHz)", "ours": ours}
    if audioop is not None:
        state: list[Any] = [None]

        def ratecv(i: int) -> bytes:
            out, state[0] = audioop.ratecv(f8b[i], 2, 1, 8000, 16000, state[0])
            return out

        baseline["audioop_ulaw2lin"] = per_frame_us(
            lambda i: audioop.ulaw2lin(ulaw[i], 2), frames, batches
        )
        baseline["audioop_lin2ulaw"] = per_frame_us(
            lambda i: audioop.lin2ulaw(f8b[i], 2), frames, batches
        )
        baseline["audioop_ratecv_8k_to_16k"] = per_frame_us(ratecv, frames, batches)
        every = np.arange(-32768, 32768, dtype=np.int16)
        result["bit_exact_vs_audioop"] = {
            "encode_all_65536": ulaw_encode(every) == audioop.lin2ulaw(every.tobytes(), 2),
            "decode_all_256": ulaw_decode(bytes(range(256))).astype("<i2").tobytes()
            == audioop.ulaw2lin(bytes(range(256)), 2),
        }
        result["ratio_vs_audioop_p50"] = {
            "ulaw_decode": ratio(
                ours["ulaw_decode"]["p50_us"], baseline["audioop_ulaw2lin"]["p50_us"]
            ),
            "ulaw_encode": ratio(
                ours["ulaw_encode"]["p50_us"], baseline["audioop_lin2ulaw"]["p50_us"]
            ),
            "resample_8k_to_16k": ratio(
                ours["resample_8k_to_16k"]["p50_us"], baseline["audioop_ratecv_8k_to_16k"]["p50_us"]
            ),
        }
    result["baseline"] = baseline
    budget_us = 20_000
    result["share_of_realtime"] = {
        "inbound": round(ours["inbound_media_to_16k"]["p50_us"] / budget_us, 6),
        "outbound": round(ours["outbound_media_and_mark"]["p50_us"] / budget_us, 6),
    }
    result["quick"] = args.quick
    emit("phone_codec", result)


if __name__ == "__main__":
    main()
