"""(d) Filler latency: how soon the caller hears "let me check" once the model starts a tool call.

The gateway runs in its own process with the real espeak-ng TTS and an instant model (a
subclass of our LLMProvider) that streams a tool call's JSON arguments in 6 pieces. Two cases:
- pre_exec_msg: `archival_memory_search` with a pre_exec_msg; the filler is synthesized by
  espeak-ng as soon as the value has streamed in (the live path);
- cached: `search_memory` with no pre_exec_msg; the pre-synthesized phrase plays at once.
filler_ms (turn.metrics, in the gateway) = the tool call's first streamed delta -> the filler's
first audio frame sent. Client-observed: `response.filler` received -> first audio frame after.
Baseline in the same run: a plain text turn's tts_ttfb_ms (espeak-ng's time to first audio).
Target: filler p99 < 30 ms.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _common import emit, parser, ratio, summary
from _voice import load, start_gateway, timed_client

TOOLS = {
    "[lookup]": {
        "name": "archival_memory_search",
        "args": {"query": "favourite tea"},
        "filler": "Hmm, let me look that up.",
    },
    "[recall]": {"name": "search_memory", "args": {"convo_keyword_queries": ["tea"]}},
}


async def run(url: str, turns: int, warmup: int) -> dict[str, Any]:
    c = await timed_client(url).connect()
    await c.start()
    server: dict[str, list[float]] = {"pre_exec_msg": [], "cached": [], "text_tts_ttfb": []}
    client: dict[str, list[float]] = {"pre_exec_msg": [], "cached": []}
    for i in range(warmup + turns):
        for case, text in (
            ("pre_exec_msg", "What tea do I like? [lookup]"),
            ("cached", "Do you remember my tea? [recall]"),
            ("text_tts_ttfb", "Just say something."),
        ):
            done = len(c.of_type("response.done"))
            fillers = len(c.of_type("response.filler"))
            await c.send({"type": "input_text", "text": text})
            ended = await c.wait_for("response.done", timeout=60, count=done + 1)
            # turn.metrics follows response.done: wait for this turn's own
            metrics = await c.wait_for("turn.metrics", turn_id=ended["turn_id"])
            if i < warmup:
                continue
            if case == "text_tts_ttfb":
                server[case].append(metrics["tts_ttfb_ms"])
                continue
            assert len(c.of_type("response.filler")) == fillers + 1, "no filler was spoken"
            server[case].append(metrics["filler_ms"])
            at = [r.at for r in c.events if r.event["type"] == "response.filler"][-1]
            first = c.first_audio_after(at)
            if first is not None:
                client[case].append((first - at) * 1000)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    out: dict[str, Any] = {f"server_filler_{k}": summary(v) for k, v in server.items()}
    out.update({f"client_filler_{k}": summary(v) for k, v in client.items()})
    out["pre_exec_p50_vs_espeak_ttfb_p50"] = ratio(
        float(summary(server["pre_exec_msg"]).get("p50_ms", 0)),
        float(summary(server["text_tts_ttfb"]).get("p50_ms", 0)),
    )
    return out


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns, warmup = (15, 2) if args.quick else (150, 5)
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}",
            llm={"reply": "You like green tea.", "tools": TOOLS},
            stt="instant",
            tts="espeak",
            sleeptime_every_turns=10**6,
            log_name="voice_filler",
        )
        try:
            agent = gw.agent()
            result = asyncio.run(run(f"{gw.ws_url}/v1/agents/{agent}/voice", turns, warmup))
        finally:
            gw.stop()
    p99 = max(
        result["server_filler_pre_exec_msg"]["p99_ms"], result["server_filler_cached"]["p99_ms"]
    )
    result["target"] = {"filler_p99_ms": 30.0, "met": bool(p99 < 30.0)}
    emit("voice_filler", {"turns_per_case": turns, "quick": args.quick, **result, **load()})


if __name__ == "__main__":
    main()
