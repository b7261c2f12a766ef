"""Shared helpers of the voice benchmarks (bench/voice_*.py).

- Instant providers: subclasses of our own STTProvider / TTSProvider / LLMProvider base classes
  that answer at once (the STT and TTS are registered by name, so VG_STT=instant and
  VG_TTS=instant select them; the LLM is injected through LLMRegistry.overrides).
- `start_gateway`: the real app under uvicorn (uvloop, httptools, as `voice-gateway serve`) in
  its own process, so load generators in other processes measure it honestly. Optional
  instrumentation times every audio frame the session handles and the event loop's lag.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from _common import RESULTS, ROOT
from _frames import FrameStats, instrument, watch_lag

from agents.llm import LLMChunk, LLMProvider, LLMRequest, ToolCallDelta, Usage
from voice_gateway.stt import register_stt
from voice_gateway.stt.base import PartialCallback, STTProvider, STTStream
from voice_gateway.tts import register_tts
from voice_gateway.tts.base import TTSProvider

INSTANT_TEXT = "What is the weather like today?"
REPLY = "It is sunny and warm. Enjoy your day."


class InstantSTTStream(STTStream):
    provider = "instant"

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.bytes = text, 0

    async def push(self, pcm16_16k: bytes) -> None:
        self.push_now(pcm16_16k)

    def push_now(self, pcm16_16k: bytes) -> bool:
        self.bytes += len(pcm16_16k)
        return True

    async def _finish(self) -> str:
        heard, self.bytes = self.bytes, 0
        return self.text if heard else ""

    async def reset(self) -> None:
        self.bytes = 0


class InstantSTT(STTProvider):
    name = "instant"
    text = INSTANT_TEXT

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return InstantSTTStream(self.text)


class MuteSTT(InstantSTT):
    """Hears nothing: no agent turn ever starts (isolates the audio path)."""

    name = "instant-mute"
    text = ""


class InstantTTS(TTSProvider):
    """A 440 Hz tone, 60 ms per character, produced at once at 16 kHz."""

    name = "instant"
    native_rate = 16000

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        n = int(len(text) * 0.06 * self.native_rate)
        t = np.arange(n) / self.native_rate
        yield (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()

    async def warmup(self) -> None:
        return None


class InstantLLM(LLMProvider):
    """Streams `reply` word by word after `ttft_s`. `tools` maps a keyword to a tool call: a
    user message containing the keyword first gets that call (its JSON arguments streamed in
    `arg_fragments` pieces, a `pre_exec_msg` filler first when given), then the reply."""

    name = "instant"

    def __init__(
        self,
        reply: str = REPLY,
        ttft_s: float = 0.0,
        tools: dict[str, dict[str, Any]] | None = None,
        arg_fragments: int = 6,
    ) -> None:
        super().__init__()
        self.reply, self.ttft_s, self.tools = reply, ttft_s, tools or {}
        self.arg_fragments = arg_fragments

    def _call_for(self, req: LLMRequest) -> dict[str, Any] | None:
        last = req.messages[-1]
        if last["role"] != "user":
            return None
        text = str(last.get("content") or "")
        return next((spec for key, spec in self.tools.items() if key in text), None)

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        import json

        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        spec = self._call_for(req)
        if spec is not None:
            args = dict(spec.get("args") or {})
            if spec.get("filler"):
                args = {"pre_exec_msg": spec["filler"], **args}
            raw = json.dumps(args)
            yield LLMChunk(tool_calls=[ToolCallDelta(0, "call_1", spec["name"], "")])
            step = max(1, len(raw) // self.arg_fragments)
            for i in range(0, len(raw), step):
                yield LLMChunk(tool_calls=[ToolCallDelta(0, arguments=raw[i : i + step])])
            yield LLMChunk(usage=Usage(10, 10), finish_reason="tool_calls")
            return
        for word in self.reply.split(" "):
            yield LLMChunk(text=word + " ")
        yield LLMChunk(usage=Usage(10, 10), finish_reason="stop")


def register_instant() -> None:
    register_stt("instant", InstantSTT)
    register_stt("instant-mute", MuteSTT)
    register_tts("instant", InstantTTS)


# ---- the gateway in its own process ----------------------------------------------------------


def _child(
    conn: Connection,
    port: int,
    overrides: dict[str, Any],
    llm: dict[str, Any] | None,
    do_instrument: bool,
    ws_impl: str,
    log_name: str,
    reuse_port: bool = False,
    cpu_split: bool = False,
) -> None:
    import logging
    import os

    import _cpu_split
    import uvicorn

    from tests.support.gateway import make_settings

    log_path = RESULTS / f"{log_name}.server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=log_path, filemode="w", level=logging.WARNING, force=True)
    from voice_gateway.app import create_app

    register_instant()
    if cpu_split:  # bench/_cpu_split.py: CPU by STT, turn detection and the rest
        _cpu_split.install()
    stats = FrameStats()
    split_base: dict[str, Any] = {}
    if do_instrument:
        instrument(stats)
    settings = make_settings(overrides.pop("database_url"), **overrides)
    app = create_app(settings)
    from voice_gateway.protocol.uvicorn_ws import ws_protocol

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        log_config=None,  # uvicorn's dictConfig would close the log file's handler
        # "fast": what `voice-gateway serve` runs (VG_WS_FAST_PATH); else a uvicorn protocol
        ws=ws_protocol(True) if ws_impl == "fast" else ws_impl,
        ws_per_message_deflate=False,
        ws_ping_interval=None,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    profile = Profiling(log_name)

    def commands() -> None:
        while True:
            try:
                cmd = conn.recv()
            except EOFError:
                cmd = "stop"
            if cmd == "stats":
                snap = stats.snapshot()
                snap["tracemalloc"] = _trace_growth()
                cache = app.state.gw.memory.messages.cache  # context windows reused or read
                snap["gc"]["context_cache"] = {"hits": cache.hits, "misses": cache.misses}
                conn.send(snap)
            elif cmd == "cpu":
                profile.stop()
                cpu = stats.cpu()
                if cpu_split:  # the split of the same window (since the last reset)
                    cpu["split"] = _cpu_split.delta(split_base, _cpu_split.snapshot())
                conn.send(cpu)
            elif cmd == "reset":
                stats.clear()
                _trace_start()
                if cpu_split:
                    split_base.update(_cpu_split.snapshot())
                profile.start()
                conn.send("ok")
            else:
                server.should_exit = True
                return

    async def main() -> None:
        # a worker of several on one port (as `serve --workers N`): its own SO_REUSEPORT socket
        from voice_gateway.workers import reuse_port_socket

        sockets = [reuse_port_socket("127.0.0.1", port)] if reuse_port else None
        serving = asyncio.create_task(server.serve(sockets=sockets))
        while not server.started:
            if serving.done():
                await serving
                raise RuntimeError("the gateway did not start")
            await asyncio.sleep(0.01)
        if llm is not None:
            app.state.gw.llms.overrides["openai"] = InstantLLM(**llm)
        import gc

        stats.startup_objects = gc.get_freeze_count()  # the app froze its start-up objects
        if os.environ.get("VG_BENCH_GARBAGE"):  # keep cyclic garbage for a census (_frames.py)
            gc.set_debug(gc.DEBUG_SAVEALL)
        profile.loop = asyncio.get_running_loop()
        if os.environ.get("VG_BENCH_NO_BUS"):  # what the transcript bus costs: stop it
            for task in app.state.gw.bus.tasks:
                task.cancel()
        lag = asyncio.create_task(watch_lag(stats))
        threading.Thread(target=commands, daemon=True).start()
        conn.send("ready")
        await serving
        lag.cancel()

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(main())


_trace_base: list[Any] = []


def _trace_start() -> None:
    """VG_BENCH_TRACEMALLOC=1: trace Python allocations from the measured window's start (a
    leak hunt: tracemalloc slows allocation, so not for the CPU figures of the same run)."""
    import os
    import tracemalloc

    if os.environ.get("VG_BENCH_TRACEMALLOC"):
        if not tracemalloc.is_tracing():
            tracemalloc.start(8)
        _trace_base[:] = [tracemalloc.take_snapshot()]


def _trace_growth(top: int = 15) -> list[str]:
    """What grew since `_trace_start`, by allocating line (largest first)."""
    import tracemalloc

    if not _trace_base or not tracemalloc.is_tracing():
        return []
    diff = tracemalloc.take_snapshot().compare_to(_trace_base[0], "traceback")
    out = []
    for stat in diff[:top]:
        recent = list(stat.traceback)[::-1][:4]  # the allocating line first, then its callers
        where = " <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in recent)
        out.append(f"{stat.size_diff / 1e6:+.2f} MB {stat.count_diff:+d} blocks: {where}")
    return out


class Profiling:
    """cProfile of the gateway's main thread over each measured window (from `reset` to `cpu`),
    when VG_BENCH_PROFILE names a folder: one `<log_name>.<n>.prof` per window (read them with
    `python -m pstats`). cProfile slows the code it measures: for where the time goes, not
    for the CPU figures of the same run."""

    def __init__(self, log_name: str) -> None:
        import os

        self.folder = os.environ.get("VG_BENCH_PROFILE", "")
        self.name, self.n = log_name, 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.prof: Any = None

    def start(self) -> None:
        if self.folder and self.loop is not None and self.prof is None:
            import cProfile

            self.prof = cProfile.Profile()
            self.loop.call_soon_threadsafe(self.prof.enable)  # it profiles the main thread

    def stop(self) -> None:
        prof, self.prof = self.prof, None
        if prof is None or self.loop is None:
            return
        done = threading.Event()

        def disable() -> None:
            prof.disable()
            done.set()

        self.loop.call_soon_threadsafe(disable)
        done.wait(10)
        self.n += 1
        prof.dump_stats(f"{self.folder}/{self.name}.{self.n}.prof")


@dataclass
class GatewayProcess:
    proc: Any
    conn: Connection
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        self.conn.send("stats")
        return dict(self.conn.recv())

    def cpu(self) -> dict[str, Any]:
        """CPU since the last reset (cheap: no snapshot of samples or objects)."""
        self.conn.send("cpu")
        return dict(self.conn.recv())

    def reset(self) -> None:
        self.conn.send("reset")
        self.conn.recv()

    def stop(self) -> None:
        try:
            self.conn.send("stop")
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(20)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)

    def agent(self, **body: Any) -> str:
        import httpx

        body.setdefault("model", "openai/instant")
        resp = httpx.post(f"{self.url}/v1/agents/", json=body, timeout=30)
        resp.raise_for_status()
        return str(resp.json()["id"])


def start_gateway(
    database_url: str,
    *,
    llm: dict[str, Any] | None = None,
    instrument_frames: bool = True,
    ws_impl: str = "fast",
    log_name: str = "gateway",
    timeout_s: float = 180.0,
    port: int | None = None,
    cpu_split: bool = False,
    **settings: Any,
) -> GatewayProcess:
    """The gateway in a child process. `llm`: InstantLLM arguments (injected for `openai/*`
    agents); None: agents use the configured OpenAI-compatible endpoint. With `port` given the
    process binds it with SO_REUSEPORT: one worker of several (bench/_capacity.py). `cpu_split`:
    the process's CPU is attributed to STT, turn detection and the rest (bench/_cpu_split.py).
    Turn detection is `vad` unless `turn_detection` is given (the gateway's default is `auto`):
    the benches that do not compare policies keep measuring the same silence rule."""
    from tests.support.servers import free_port

    settings = {"voice": True, "database_url": database_url, "turn_detection": "vad", **settings}
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    reuse = port is not None
    port = port or free_port()
    proc = ctx.Process(
        target=_child,
        args=(child, port, settings, llm, instrument_frames, ws_impl, log_name, reuse, cpu_split),
        daemon=True,
    )
    proc.start()
    if not parent.poll(timeout_s) or parent.recv() != "ready":
        proc.terminate()
        raise RuntimeError("the gateway process did not start")
    return GatewayProcess(proc, parent, port)


def load() -> dict[str, Any]:
    """The machine's load average when a run ends: other work on a shared box skews timings."""
    import os

    return {"loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def speech_clip(text: str, rate: int = 16000) -> np.ndarray:
    from tests.support.speech import speak

    return speak(text, rate)


# ---- a timed caller --------------------------------------------------------------------------


def timed_client(url: str) -> Any:
    """A VoiceClient (tests/support) that also records when each 20 ms input frame was sent:
    `sent_at[i]` is the send time of input-timeline frame i (at_ms = 20 * i)."""
    from tests.support.speech import frames
    from tests.support.voice_client import VoiceClient

    class TimedClient(VoiceClient):
        sent_at: list[float]

        async def stream(
            self, pcm: np.ndarray, rate: int, *, realtime: bool = True, frame_ms: int = 20
        ) -> None:
            assert self.ws is not None
            start = time.monotonic()
            for i, frame in enumerate(frames(pcm, rate, frame_ms)):
                delay = start + i * frame_ms / 1000 - time.monotonic()
                if realtime and delay > 0:
                    await asyncio.sleep(delay)
                self.sent_at.append(time.monotonic())
                await self.ws.send(frame)

        def first_audio_after(self, t: float) -> float | None:
            return next((at for at, _n in self.audio_frames if at >= t), None)

        def first_at_after(self, type_: str, t: float) -> float:
            return next(r.at for r in self.events if r.at >= t and r.event["type"] == type_)

    client = TimedClient(url)
    client.sent_at = []
    return client


def last_sound_frame(pcm: np.ndarray, rate: int = 16000) -> int:
    """Index of the last 20 ms frame with sound in it (espeak-ng pads ~360 ms of silence)."""
    from tests.support.speech import frames, rms_dbfs

    loud = [i for i, f in enumerate(frames(pcm, rate)) if rms_dbfs(np.frombuffer(f, "<i2")) > -45]
    return loud[-1]


__all__ = [
    "INSTANT_TEXT",
    "REPLY",
    "ROOT",
    "FrameStats",
    "GatewayProcess",
    "InstantLLM",
    "InstantSTT",
    "InstantTTS",
    "last_sound_frame",
    "load",
    "register_instant",
    "speech_clip",
    "start_gateway",
    "timed_client",
]
