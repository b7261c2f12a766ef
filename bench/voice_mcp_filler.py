"""Filler-to-result timing of an MCP tool in a voice call, as the caller hears it.

A server built with the official `mcp` SDK runs in this process's thread (streamable HTTP on
loopback) with two tools: `forecast` (answers at once) and `slow_forecast` (answers after
SLOW_S). It is registered over REST on a gateway in its own process (real espeak-ng TTS, real
VAD and turn-taking; an instant STT and an instant model, our own base classes), with both
tools voice-safe. A timed caller streams espeak speech in real time; the STT hears the
utterance's length: a short one is a plain turn (no tool: the same-run baseline), a medium one
asks `forecast`, a long one `slow_forecast`; the model streams the call with a `pre_exec_msg`
filler, then, with the result, the reply. Per tool turn (turn.metrics, in the gateway):
- speech_to_filler_ms: end of the caller's speech -> the filler's first audio frame sent;
- filler_to_reply_ms: the filler's first audio frame -> the first audio frame of the reply
  that carries the result.
Client-observed too: the last sound frame sent -> the first audio frame received. The filler's
own length (the same text through EspeakTTS here) is reported: a result that is ready before
the filler ends is heard right after it. Pass rule: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from _common import emit, parser, summary
from _voice import (
    InstantSTT,
    InstantSTTStream,
    last_sound_frame,
    load,
    speech_clip,
    start_gateway,
    timed_client,
)
from mcp.server.mcpserver import MCPServer

from voice_gateway.stt import register_stt
from voice_gateway.stt.base import PartialCallback, STTStream
from voice_gateway.tts.espeak import EspeakTTS

SLOW_S = 3.0
PLAIN_MAX_S, FAST_MAX_S = 2.3, 3.6
FAST_FILLER = "Let me check the forecast."
SLOW_FILLER = "One moment, I am looking that up."
CLIPS = {
    "plain": "Hello",
    "fast": "Forecast for Paris please",
    "slow": "What is the long range forecast for the city of Paris this week and next",
}
LLM = {
    "reply": "Here is the forecast. Light rain, seventeen degrees.",
    "tools": {
        "[fast]": {"name": "forecast", "args": {"city": "Paris"}, "filler": FAST_FILLER},
        "[slow]": {"name": "slow_forecast", "args": {"city": "Paris"}, "filler": SLOW_FILLER},
    },
}


class LengthSTTStream(InstantSTTStream):
    """Hears the utterance's length (the audio it was given, the turn's trailing silence
    included): short a plain turn, medium `[fast]`, long `[slow]`."""

    async def _finish(self) -> str:
        heard, self.bytes = self.bytes, 0
        seconds = heard / 32000
        if not heard:
            return ""
        if seconds < PLAIN_MAX_S:
            return f"Hello. ({seconds:.2f} s)"
        if seconds < FAST_MAX_S:
            return f"[fast] What is the forecast? ({seconds:.2f} s)"
        return f"[slow] And for the week? ({seconds:.2f} s)"


class LengthSTT(InstantSTT):
    name = "instant-length"

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return LengthSTTStream("")


# registered at import: the gateway's process ("spawn") imports this script again
register_stt("instant-length", LengthSTT)


def mcp_server() -> tuple[uvicorn.Server, int]:
    mcp = MCPServer("weather")

    @mcp.tool()
    def forecast(city: str) -> str:
        """Today's forecast for a city."""
        return f"{city}: light rain, 17 degrees"

    @mcp.tool()
    async def slow_forecast(city: str) -> str:
        """The week's forecast for a city (slow)."""
        await asyncio.sleep(SLOW_S)
        return f"{city}: rain all week"

    config = uvicorn.Config(mcp.streamable_http_app(), host="127.0.0.1", port=0, log_level="error")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, server.servers[0].sockets[0].getsockname()[1]


async def one_turn(c: Any, clip: Any, case: str) -> tuple[dict[str, Any], float | None]:
    done = len(c.of_type("response.done"))
    calls = len(c.of_type("response.tool_call"))
    base = len(c.sent_at)
    await c.stream(clip, 16000)
    ended = await c.wait_for("response.done", timeout=60, count=done + 1)
    metrics = await c.wait_for("turn.metrics", turn_id=ended["turn_id"])
    names = [e["name"] for e in c.of_type("response.tool_call")[calls:]]
    expected = {"plain": [], "fast": ["forecast"], "slow": ["slow_forecast"]}[case]
    heard = c.of_type("transcript.final")[-1]["text"]
    assert names == expected, (case, names, heard)
    speech_end = c.sent_at[base + last_sound_frame(clip)]
    first = c.first_audio_after(speech_end)
    return metrics, None if first is None else (first - speech_end) * 1000


async def run(url: str, turns: int, warmup: int) -> dict[str, Any]:
    from tests.support.speech import silence

    # the caller's speech, then silence long enough for the turn to end
    clips = {k: np.concatenate([speech_clip(v), silence(900)]) for k, v in CLIPS.items()}
    c = await timed_client(url).connect()
    await c.start()
    server: dict[str, dict[str, list[float]]] = {
        "plain": {"voice_to_voice_ms": []},
        "fast": {"speech_to_filler_ms": [], "filler_to_reply_ms": []},
        "slow": {"speech_to_filler_ms": [], "filler_to_reply_ms": []},
    }
    client: dict[str, list[float]] = {k: [] for k in CLIPS}
    for i in range(warmup + turns):
        for case in CLIPS if i % 2 == 0 else list(CLIPS)[::-1]:
            metrics, heard_ms = await one_turn(c, clips[case], case)
            await asyncio.sleep(0.3)
            if i < warmup:
                continue
            for key, samples in server[case].items():
                assert metrics[key] is not None, (case, key, metrics)
                samples.append(metrics[key])
            if heard_ms is not None:
                client[case].append(heard_ms)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    out: dict[str, Any] = {}
    for case, keys in server.items():
        out[case] = {k: summary(v) for k, v in keys.items()}
        out[case]["client_speech_end_to_first_audio_ms"] = summary(client[case])
    return out


async def filler_lengths() -> dict[str, float]:
    """How long each filler sounds (espeak-ng, as the gateway speaks it)."""
    tts, out = EspeakTTS(), {}
    await tts.warmup()
    for case, text in (("fast", FAST_FILLER), ("slow", SLOW_FILLER)):
        pcm = b"".join([chunk async for chunk in tts.synthesize(text, 16000)])
        out[case] = round(len(pcm) / 32, 1)  # 16 kHz PCM16: 32 bytes per ms
    return out


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns, warmup = (10, 2) if args.quick else (60, 3)
    server, port = mcp_server()
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'gw.db'}",
            llm=LLM,
            stt="instant-length",
            sleeptime_every_turns=10**6,
            log_name="voice_mcp_filler",
        )
        try:
            resp = httpx.post(
                f"{gw.url}/v1/mcp-servers/",
                json={
                    "server_name": "weather",
                    "config": {
                        "mcp_server_type": "streamable_http",
                        "server_url": f"http://127.0.0.1:{port}/mcp",
                        "voice_safe_tools": ["forecast", "slow_forecast"],
                    },
                },
                timeout=30,
            )
            resp.raise_for_status()
            agent = gw.agent(include_base_tools=False, tools=["forecast", "slow_forecast"])
            result = asyncio.run(run(f"{gw.ws_url}/v1/agents/{agent}/voice", turns, warmup))
        finally:
            gw.stop()
            server.should_exit = True
    lengths = asyncio.run(filler_lengths())
    base_p99 = float(result["plain"]["voice_to_voice_ms"]["p99_ms"])
    fast, slow = result["fast"], result["slow"]
    rules = {
        # the filler reaches the caller no later than a plain reply's first audio does
        "filler_p99_within_plain_p99_plus_100ms": max(
            float(fast["speech_to_filler_ms"]["p99_ms"]),
            float(slow["speech_to_filler_ms"]["p99_ms"]),
        )
        <= base_p99 + 100,
        # a result ready before the filler ends is heard right after it (no dead air)
        "fast_reply_p99_within_filler_plus_250ms": float(fast["filler_to_reply_ms"]["p99_ms"])
        <= lengths["fast"] + 250,
        # a slow result: the reply follows it within 500 ms (or right after a longer filler)
        "slow_reply_p99_within_result_plus_500ms": float(slow["filler_to_reply_ms"]["p99_ms"])
        <= max(lengths["slow"], SLOW_S * 1000) + 500,
    }
    emit(
        "voice_mcp_filler",
        {
            "turns_per_case": turns,
            "quick": args.quick,
            "slow_tool_s": SLOW_S,
            "filler_audio_ms": lengths,
            **result,
            "pass": {**rules, "met": all(rules.values())},
            **load(),
        },
    )


if __name__ == "__main__":
    main()
