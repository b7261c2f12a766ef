"""(b) Gateway overhead of a spoken turn, with STT, LLM and TTS that answer at once.

The gateway runs in its own process (uvicorn + uvloop, as `voice-gateway serve`); one caller
streams real espeak-ng speech in real time (20 ms frames) over a loopback WebSocket. STT, LLM and
TTS are instant subclasses of our own provider base classes (bench/_voice.py), so every
millisecond between "the caller's silence made this a turn" and "the first reply frame" is the
gateway's own work: finishing STT, the transcript event, the agent loop (prompt, SQLite writes),
cutting sentences, TTS resampling and pacing, the first frame on the socket.

- server_overhead: turn.metrics voice_to_voice_ms - endpointing_ms (measured in the gateway),
  split into agent_loop_to_first_token (llm_ttft_ms: the agent loop's work before the instant
  model's first token: persisting the user message, compiling the prompt) and
  voice_pipeline (the rest: STT finish, events, sentence cut, TTS, first frame).
- client_overhead: the frame on which the turn was endpointed was sent -> first reply audio
  frame received (adds the socket both ways and the client's own scheduling).
- typed_overhead: an input_text turn, sent -> first reply audio frame received.
- baseline socket_rtt: a bad text frame answered by an `error` event (the transport alone).
Target: server_overhead p99 < 5 ms.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import emit, parser, ratio, summary
from _voice import load, speech_clip, start_gateway, timed_client

from tests.support.speech import silence

SILENCE_MS = 400


async def run(url: str, turns: int, warmup: int) -> dict[str, object]:
    clip = np.concatenate([speech_clip("Hello there, how are you?"), silence(700)])
    c = await timed_client(url).connect()
    await c.start()
    server, loop, client, typed, rtt = [], [], [], [], []
    for i in range(warmup + turns):
        done = len(c.of_type("response.done"))
        await c.stream(clip, 16000)
        ended = await c.wait_for("response.done", timeout=30, count=done + 1)
        # turn.metrics follows response.done: wait for this turn's own
        metrics = await c.wait_for("turn.metrics", turn_id=ended["turn_id"])
        stopped = c.of_type("speech.stopped")[-1]
        endpoint_frame = (stopped["at_ms"] + SILENCE_MS) // 20 - 1
        first = c.first_audio_after(c.sent_at[endpoint_frame])
        if i >= warmup and first is not None:
            server.append(metrics["voice_to_voice_ms"] - metrics["endpointing_ms"])
            loop.append(metrics["llm_ttft_ms"])
            client.append((first - c.sent_at[endpoint_frame]) * 1000)
        # a typed turn
        done = len(c.of_type("response.done"))
        t0 = time.monotonic()
        await c.send({"type": "input_text", "text": "and a typed question"})
        await c.wait_for("response.done", timeout=30, count=done + 1)
        first = c.first_audio_after(t0)
        if i >= warmup and first is not None:
            typed.append((first - t0) * 1000)
        # the transport alone
        assert c.ws is not None
        n = len(c.of_type("error"))
        t0 = time.monotonic()
        await c.ws.send("{not json")
        await c.wait_for("error", count=n + 1)
        if i >= warmup:
            rtt.append((c.first_at_after("error", t0) - t0) * 1000)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    base = summary(rtt)
    out: dict[str, object] = {
        "server_overhead": summary(server),
        "agent_loop_to_first_token": summary(loop),
        "voice_pipeline": summary([s - x for s, x in zip(server, loop, strict=True)]),
        "client_overhead": summary(client),
        "typed_overhead": summary(typed),
        "baseline_socket_rtt": base,
    }
    p50 = summary(client).get("p50_ms", 0.0)
    out["client_overhead_p50_vs_rtt_p50"] = ratio(float(p50), float(base.get("p50_ms", 0.0)))
    return out


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns, warmup = (15, 3) if args.quick else (100, 5)
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}",
            llm={"reply": "Sure thing."},
            stt="instant",
            tts="instant",
            endpoint_silence_ms=SILENCE_MS,
            sleeptime_every_turns=10**6,
            log_name="voice_overhead",
        )
        try:
            agent = gw.agent()
            result = asyncio.run(run(f"{gw.ws_url}/v1/agents/{agent}/voice", turns, warmup))
            result["server_frame_handling"] = gw.stats()["frame_handling"]
        finally:
            gw.stop()
    p99 = result["server_overhead"]["p99_ms"]  # type: ignore[index]
    result["target"] = {"server_overhead_p99_ms": 5.0, "met": bool(p99 < 5.0)}
    emit("voice_overhead", {"turns": turns, "quick": args.quick, **result, **load()})


if __name__ == "__main__":
    main()
