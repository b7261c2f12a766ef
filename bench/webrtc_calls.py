"""WebRTC calls next to voice-socket calls, in the same run, on loopback (127.0.0.1 only).

The gateway runs in its own process (as `voice-gateway serve`) with instant STT/LLM/TTS
(bench/_voice.py) and the real webrtcvad, so what differs between the two paths is the
transport: for WebRTC, Opus decode of every caller frame, Opus encode of every reply frame
(20 ms of silence between replies too), SRTP both ways, SCTP for the events and the ICE
consent checks; for the socket, PCM16 in WebSocket frames. The callers run in this process
(aiortc peers / WebSocket clients), each speaking an espeak-ng sentence every CYCLE_S.

Per transport and level (number of concurrent calls):
- gateway CPU: process CPU over the streaming window, in cores, and per call (cores / calls);
- reply latency: client voice-to-voice, from the last voiced 20 ms frame sent to the first
  reply audio received (for WebRTC: the first decoded frame with sound), p50 / p99; and the
  gateway's own `turn.metrics` voice_to_voice_ms;
- turns that got no reply in time.
A level holds when every call got every reply and the p99 client voice-to-voice is under
HOLD_P99_MS; `held` is the largest level that holds per transport. Level 1 is the
voice-to-voice comparison of the two transports on loopback.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import emit, parser, summary
from _voice import last_sound_frame, load, speech_clip, start_gateway, timed_client

from tests.support.speech import silence
from voice_gateway.webrtc.client import WebRTCCaller
from voice_gateway.webrtc.media import OUT_RATE, ReplyTrack

CYCLE_S = 5.0
HOLD_P99_MS = 1000.0


class TimedMic(ReplyTrack):
    """The caller's microphone track, recording when each 20 ms frame went out."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: list[float] = []

    async def recv(self) -> Any:
        frame = await super().recv()
        self.sent_at.append(time.monotonic())
        return frame


def clip() -> tuple[np.ndarray, int]:
    speech = np.concatenate([silence(200), speech_clip("What is the weather like today?")])
    pad = int(CYCLE_S * 16000) - len(speech)
    pcm = np.concatenate([speech, np.zeros(max(0, pad), dtype=np.int16)])
    return pcm, last_sound_frame(pcm)


async def ws_call(url: str, cycles: int, out: dict[str, list[float]]) -> None:
    pcm, last = clip()
    c = await timed_client(url).connect()
    await c.start()
    for _ in range(cycles):
        base = len(c.sent_at)
        await c.stream(pcm, 16000)
        t = c.sent_at[base + last]
        first = c.first_audio_after(t)
        if first is None:
            out["missed"].append(1.0)
        else:
            out["client"].append((first - t) * 1000)
    out["server"] += [float(m["voice_to_voice_ms"]) for m in c.of_type("turn.metrics")]
    await c.close()


async def rtc_call(base_url: str, agent: str, cycles: int, out: dict[str, list[float]]) -> None:
    pcm, last = clip()
    mic = TimedMic()
    c = WebRTCCaller(base_url, agent, mic=mic)
    await c.connect()
    await c.wait_for("session.started", timeout=30)
    frames_per_cycle = int(CYCLE_S * 50)
    for _ in range(cycles):
        start = len(mic.sent_at) + int(mic.buffered_ms // 20)  # frames before this cycle's first
        await c.play_and_wait(pcm, 16000)
        sent = mic.sent_at
        idx = start + last
        if idx >= len(sent):
            out["missed"].append(1.0)
            continue
        t = sent[idx]
        first = next((at for at, rms in c.audio_frames if at >= t and rms > 300), None)
        if first is None or first > t + frames_per_cycle * 0.02:
            out["missed"].append(1.0)
        else:
            out["client"].append((first - t) * 1000)
    out["server"] += [float(m["voice_to_voice_ms"]) for m in c.of_type("turn.metrics")]
    await c.hang_up()
    await c.close()


async def level(gw: Any, agent: str, transport: str, calls: int, cycles: int) -> dict[str, Any]:
    out: dict[str, list[float]] = {"client": [], "server": [], "missed": []}
    url = f"{gw.ws_url}/v1/agents/{agent}/voice"
    gw.reset()
    if transport == "websocket":
        tasks = [ws_call(url, cycles, out) for _ in range(calls)]
    else:
        tasks = [rtc_call(gw.url, agent, cycles, out) for _ in range(calls)]
    await asyncio.gather(*tasks)
    cpu = gw.cpu()
    cores = cpu["process_cores"] or 0.0
    client = summary(out["client"])
    holds = not out["missed"] and bool(out["client"]) and client["p99_ms"] < HOLD_P99_MS
    return {
        "calls": calls,
        "gateway_cores": cores,
        "gateway_cores_per_call": round(cores / calls, 4),
        "client_voice_to_voice": client,
        "server_voice_to_voice": summary(out["server"]),
        "missed_replies": len(out["missed"]),
        "holds": holds,
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="1,5,10,20")
    args = p.parse_args()
    levels = [1, 4] if args.quick else [int(x) for x in args.levels.split(",")]
    cycles = 2 if args.quick else 4
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}",
            llm={},
            stt="instant",
            tts="instant",
            webrtc_host_addresses="127.0.0.1",
            max_concurrent_calls=0,
            rate_limit_rps=0,
            log_name="webrtc_calls",
        )
        try:
            agent = gw.agent()
            for transport in ("websocket", "webrtc"):
                rows = []
                for n in levels:
                    rows.append(asyncio.run(level(gw, agent, transport, n, cycles)))
                    print(transport, rows[-1], flush=True)
                held = [r["calls"] for r in rows if r["holds"]]
                results[transport] = {"levels": rows, "held": max(held) if held else 0}
        finally:
            gw.stop()
    one = {t: results[t]["levels"][0] for t in ("websocket", "webrtc")}
    results["level_1_p50_ms"] = {
        t: one[t]["client_voice_to_voice"].get("p50_ms") for t in ("websocket", "webrtc")
    }
    results["cpu_ratio_webrtc_to_websocket"] = [
        round(r["gateway_cores"] / w["gateway_cores"], 2) if w["gateway_cores"] else None
        for w, r in zip(results["websocket"]["levels"], results["webrtc"]["levels"], strict=True)
    ]
    emit(
        "webrtc_calls",
        {
            "cycle_s": CYCLE_S,
            "cycles": cycles,
            "quick": args.quick,
            "out_rate": OUT_RATE,
            **results,
            **load(),
        },
    )


if __name__ == "__main__":
    main()
