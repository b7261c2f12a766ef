"""(d) Filler latency: how soon the caller hears "let me check" once the model starts a tool call.

Two gateways run, each in its own process, with the real espeak TTS and an instant model (a
subclass of our LLMProvider) that streams a tool call's JSON arguments in 6 pieces: `library`
(the default: libespeak-ng in-process) and `program` (the baseline: the espeak-ng program, a
process per sentence, the path used before). One client talks to both, alternating turn by
turn. Three cases per turn:
- pre_exec_msg: `archival_memory_search` with a pre_exec_msg, a different text every turn; the
  filler is synthesized by espeak as soon as the value has streamed in (the live path);
- cached: `search_memory` with no pre_exec_msg; the pre-synthesized phrase plays at once;
- text_tts_ttfb: a plain text turn's tts_ttfb_ms (espeak's time to first audio in the gateway).
filler_ms (turn.metrics, in the gateway) = the tool call's first streamed delta -> the filler's
first audio frame sent. Client-observed: `response.filler` received -> first audio frame after.
Then, in this process after the gateways stopped: the first audio of the same filler texts
through EspeakTTS by each path, and by the default path while the engine is busy with another
call's 2,000-character sentence (it overflows to the program rather than wait behind it).
Target: filler p99 < 30 ms (the library gateway's).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _common import Timer, emit, parser, ratio, summary
from _voice import load, start_gateway, timed_client

from voice_gateway.tts import register_tts
from voice_gateway.tts.base import TTSProvider
from voice_gateway.tts.espeak import EspeakTTS
from voice_gateway.tts.espeak_engine import shared_engine

# Every pre_exec_msg turn speaks a different filler (phrase x topic), so nothing anywhere can
# serve it from a cache keyed on the text: each one is synthesized live, as in a real call.
PHRASES = (
    "Hmm, let me look up {}.",
    "One moment, I am checking my notes on {}.",
    "Let me see what I wrote down about {}.",
    "Give me a second to find {}.",
    "Okay, searching for {} now.",
    "Just a moment while I look into {}.",
)
OPENERS = ("", "Sure. ", "Right. ")
TOPICS = (
    "your tea",
    "the trip to Lisbon",
    "your sister",
    "that recipe",
    "the meeting",
    "your garden",
    "the new job",
    "your favourite book",
    "the concert",
    "your cat",
)


def filler_text(i: int) -> str:
    """180 different texts of 4 to 11 words (the length of a spoken filler)."""
    phrase = PHRASES[i % len(PHRASES)].format(TOPICS[i // len(PHRASES) % len(TOPICS)])
    return OPENERS[i // (len(PHRASES) * len(TOPICS)) % len(OPENERS)] + phrase


def tools(n: int) -> dict[str, dict[str, Any]]:
    """Keyword -> tool call of the instant model: `[lookup<i>]` speaks filler i live."""
    out: dict[str, dict[str, Any]] = {
        f"[lookup{i}]": {
            "name": "archival_memory_search",
            "args": {"query": "favourite tea"},
            "filler": filler_text(i),
        }
        for i in range(n)
    }
    out["[recall]"] = {"name": "search_memory", "args": {"convo_keyword_queries": ["tea"]}}
    return out


def program_tts() -> TTSProvider:
    return EspeakTTS(in_process=False)


# The baseline gateway speaks through the espeak-ng program (a process per sentence, the path
# used before libespeak-ng). Registered at import: the gateway's process is started with
# multiprocessing's "spawn", which imports this script again (as __mp_main__) in the child.
register_tts("espeak-program", program_tts)
PATHS = {"library": "espeak", "program": "espeak-program"}


async def turn(c: Any, text: str) -> tuple[dict[str, Any], float | None]:
    """One typed turn: its turn.metrics, and the client-observed filler delay (None: no
    filler was spoken, or no audio came after it)."""
    done = len(c.of_type("response.done"))
    fillers = len(c.of_type("response.filler"))
    await c.send({"type": "input_text", "text": text})
    ended = await c.wait_for("response.done", timeout=60, count=done + 1)
    # turn.metrics follows response.done: wait for this turn's own
    metrics = await c.wait_for("turn.metrics", turn_id=ended["turn_id"])
    if len(c.of_type("response.filler")) == fillers:
        return metrics, None
    metrics["filler_spoken"] = True
    at = [r.at for r in c.events if r.event["type"] == "response.filler"][-1]
    first = c.first_audio_after(at)
    return metrics, None if first is None else (first - at) * 1000


async def run(urls: dict[str, str], turns: int, warmup: int) -> dict[str, Any]:
    """The same turns on each gateway, alternating between them turn by turn (so a busy
    moment on this shared machine falls on both paths alike)."""
    clients = {path: await timed_client(url).connect() for path, url in urls.items()}
    for c in clients.values():
        await c.start()
    server: dict[str, dict[str, list[float]]] = {}
    client: dict[str, dict[str, list[float]]] = {}
    for path in urls:
        server[path] = {"pre_exec_msg": [], "cached": [], "text_tts_ttfb": []}
        client[path] = {"pre_exec_msg": [], "cached": []}
    for i in range(warmup + turns):
        cases = (
            ("pre_exec_msg", f"What tea do I like? [lookup{i}]"),
            ("cached", "Do you remember my tea? [recall]"),
            ("text_tts_ttfb", "Just say something."),
        )
        for path in list(clients) if i % 2 == 0 else list(clients)[::-1]:
            for case, text in cases:
                metrics, heard_ms = await turn(clients[path], text)
                if i < warmup:
                    continue
                if case == "text_tts_ttfb":
                    server[path][case].append(metrics["tts_ttfb_ms"])
                    continue
                assert metrics.get("filler_spoken"), "no filler was spoken"
                server[path][case].append(metrics["filler_ms"])
                if heard_ms is not None:
                    client[path][case].append(heard_ms)
    for c in clients.values():
        await c.send({"type": "session.end"})
        await c.wait_closed()
    out: dict[str, Any] = {}
    for path in urls:
        out[path] = {f"server_filler_{k}": summary(v) for k, v in server[path].items()}
        out[path].update({f"client_filler_{k}": summary(v) for k, v in client[path].items()})
    return out


async def first_audio(texts: list[str]) -> dict[str, Any]:
    """Outside the gateway, in this process: a filler's first audio through our EspeakTTS by
    each path (libespeak-ng in-process vs a new espeak-ng process), the same texts; then
    through the default path while another call's long sentence (2,000 characters) is being
    synthesized by the engine (it overflows to the program rather than wait behind it)."""
    paths = {"library": EspeakTTS(), "program": EspeakTTS(in_process=False)}
    times: dict[str, list[float]] = {k: [] for k in (*paths, "engine_busy")}
    for tts in paths.values():
        await tts.warmup()  # as the gateway does at start-up (loads the voice)

    async def first(tts: EspeakTTS, text: str) -> float:
        with Timer() as t:
            gen = tts.synthesize(text, 16000)
            await gen.__anext__()
        await gen.aclose()
        return t.ms

    for name, tts in paths.items():  # one path at a time: reaping killed espeak-ng processes
        for text in texts:  # (asyncio's child watcher thread) must not slow the other one
            times[name].append(await first(tts, text))
    busy, engine = EspeakTTS(), shared_engine()
    assert engine is not None
    long_text = " ".join(texts)[:2000]
    waits = []
    for text in texts:
        hog = engine.submit(long_text, busy.voice, busy.speed)  # another call's sentence
        await hog.chunks.get()  # the engine is now synthesizing the rest of it
        waits.append(engine.expected_wait_ms())
        times["engine_busy"].append(await first(busy, text))
        hog.cancelled = True  # that call hangs up
    out: dict[str, Any] = {k: summary(v) for k, v in times.items()}
    out["engine_busy_expected_wait"] = summary(waits)
    out["served"] = {k: dict(t.served) for k, t in (*paths.items(), ("engine_busy", busy))}
    out["library_p99_vs_program_p99"] = ratio(
        float(out["library"]["p99_ms"]), float(out["program"]["p99_ms"])
    )
    return out


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns, warmup = (15, 2) if args.quick else (150, 5)
    gateways: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for path, tts in PATHS.items():
                gateways[path] = start_gateway(
                    f"sqlite+aiosqlite:///{Path(tmp) / path}.db",
                    llm={"reply": "You like green tea.", "tools": tools(warmup + turns)},
                    stt="instant",
                    tts=tts,
                    sleeptime_every_turns=10**6,
                    log_name=f"voice_filler_{path}",
                )
            urls = {
                path: f"{gw.ws_url}/v1/agents/{gw.agent()}/voice" for path, gw in gateways.items()
            }
            result = asyncio.run(run(urls, turns, warmup))
        finally:
            for gw in gateways.values():
                gw.stop()
    lib, prog = result["library"], result["program"]
    p99 = max(lib["server_filler_pre_exec_msg"]["p99_ms"], lib["server_filler_cached"]["p99_ms"])
    result["target"] = {"filler_p99_ms": 30.0, "met": bool(p99 < 30.0)}
    for stat in ("p50_ms", "p99_ms"):
        result[f"pre_exec_msg_{stat[:3]}_library_vs_program"] = ratio(
            float(lib["server_filler_pre_exec_msg"][stat]),
            float(prog["server_filler_pre_exec_msg"][stat]),
        )
    result["espeak_first_audio_by_path"] = asyncio.run(
        first_audio([filler_text(i) for i in range(turns)])
    )
    emit("voice_filler", {"turns_per_case": turns, "quick": args.quick, **result, **load()})


if __name__ == "__main__":
    main()
