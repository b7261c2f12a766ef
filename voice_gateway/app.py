"""create_app(settings) -> Starlette. The lifespan opens the database, models and buses."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute
from starlette.staticfiles import StaticFiles

from agents.llm import LLMRegistry
from agents.loop import AgentLoop, LoopConfig
from agents.memory_events import MemoryEvents
from agents.tools.mcp_client import McpPool
from agents.tools.mcp_tools import McpTools, jailed_launcher
from agents.tools.sandbox import SandboxConfig
from memory.mcp_servers import McpServerStore
from memory.service import Memory
from memory.usage import UsageStore
from transcripts.locks import RedisLocks
from voice_gateway.auth import Auth
from voice_gateway.bus_runtime import start_bus
from voice_gateway.call_records import CallRecords
from voice_gateway.capacity import Capacity
from voice_gateway.errors import EXCEPTION_HANDLERS
from voice_gateway.file_jobs import FileJobs
from voice_gateway.gateway import Gateway
from voice_gateway.limits import Admission, BodyLimit, ControlCharPath
from voice_gateway.metrics import Metrics
from voice_gateway.native_threads import limit_blas
from voice_gateway.origins import OriginGuard, OriginPolicy
from voice_gateway.quotas import Quotas
from voice_gateway.recordings import RecordingSweep
from voice_gateway.routes.http import WebMount
from voice_gateway.routes.rest_messages import messages_json
from voice_gateway.run_callbacks import RunCallbacks
from voice_gateway.run_mirror import ORPHANED, RunMirror
from voice_gateway.secrets_key import secrets_key
from voice_gateway.settings import Settings
from voice_gateway.tool_isolation import check_tool_isolation
from voice_gateway.webhooks import CallWebhooks

if TYPE_CHECKING:
    from voice_gateway.scheduler import Scheduler

log = logging.getLogger(__name__)
WEB_DIR = Path(__file__).resolve().parent.parent / "web_client"


async def open_gateway(settings: Settings) -> Gateway:
    memory = await Memory.open(
        settings.database_url,
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
    )
    llms = LLMRegistry(
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        timeout_s=settings.llm_timeout_s,
        fallback=settings.llm_fallback,
        providers=settings.llm_providers(),
    )
    await asyncio.to_thread(llms.warmup)
    loop = AgentLoop(
        memory,
        llms,
        config=LoopConfig(
            max_steps=settings.max_steps,
            context_token_budget=settings.context_token_budget,
            tool_timeout_s=max(30.0, settings.tool_timeout_s + 5),  # the sandbox times out first
            sandbox=SandboxConfig(
                timeout_s=settings.tool_timeout_s,
                cpu_s=settings.tool_cpu_s,
                memory_mb=settings.tool_memory_mb,
                max_output_bytes=settings.tool_max_output_bytes,
                return_char_limit=settings.tool_return_char_limit,
                max_concurrent=settings.tool_max_concurrent,
                namespaces=settings.tool_namespaces,
            ),
        ),
    )
    auth = Auth(memory, settings.api_key, settings.session_secret, settings.session_token_ttl_s)
    events = MemoryEvents()
    memory.on_block_change(events.changed)
    if llms.configured() == ["scripted"] and not settings.default_model:
        log.warning(
            "No LLM configured: agents use the offline demo model (scripted/demo). For real "
            "answers set OPENAI_API_KEY (OpenAI), or OPENAI_BASE_URL to a local OpenAI-compatible "
            "server such as Ollama (http://127.0.0.1:11434/v1), vLLM or llama.cpp."
        )
    capacity = Capacity(settings.process_max_calls, settings.admit_max_lag_ms)
    capacity.start()
    refused = await check_tool_isolation(loop.sandbox, settings.sandbox_allow_weak)
    bus = await start_bus(settings, memory, loop, events)
    if bus.redis is not None:  # turns of one agent never interleave across instances
        loop.locks = RedisLocks(bus.redis)
    metrics = Metrics()
    file_jobs = FileJobs(memory)
    await file_jobs.recover()
    gw = Gateway(
        settings=settings,
        memory=memory,
        llms=llms,
        loop=loop,
        auth=auth,
        memory_events=events,
        metrics=metrics,
        capacity=capacity,
        bus=bus,
        quotas=Quotas(settings, UsageStore(memory.db), metrics, bus.redis),
        file_jobs=file_jobs,
        run_callbacks=RunCallbacks(memory, messages_json),
        run_mirror=RunMirror(bus.redis, settings.run_owner_ttl_s) if bus.redis else None,
        tools_refused=refused,
    )
    loop.mcp = mcp_tools(settings, memory)
    gw.call_webhooks = CallWebhooks.of(settings, memory.db)
    gw.calls.recorder = CallRecords(memory, gw.call_webhooks)  # a record for every call
    if gw.call_webhooks is not None:  # resumes what an earlier run left pending
        gw.call_webhooks.start()
    if settings.voice:
        from voice_gateway.voice import open_voice

        gw.voice = await open_voice(settings)
        from voice_gateway.webrtc.calls import WebRTCCalls
        from voice_gateway.webrtc.ice import IceConfig

        gw.webrtc = WebRTCCalls(IceConfig.from_settings(settings), settings.idle_timeout_s)
    probes(gw)
    await orphaned_runs(gw)
    return gw


def probes(gw: Gateway) -> None:
    """The state gauges of /metrics, each read from the component that holds the state."""
    llms, voice = gw.llms, gw.voice

    async def served(m: Metrics) -> None:  # the fallback wrappers (stt/tts/llm fallback.py)
        m.served("llm", llms.served())
        if voice is not None:
            m.served("stt", getattr(voice.stt, "served", {}))
            m.served("tts", getattr(voice.tts, "served", {}))

    gw.metrics.probe(gw.calls.report)
    gw.metrics.probe(gw.bus.report)
    gw.metrics.probe(served)


def start_scheduler(gw: Gateway) -> Scheduler | None:
    """Due scheduled messages, claimed once across processes (VG_SCHEDULE_TICK_S > 0)."""
    if gw.settings.schedule_tick_s <= 0:
        return None
    from voice_gateway.scheduler import Scheduler

    return Scheduler(gw).start()


async def orphaned_runs(gw: Gateway) -> None:
    """With Redis: background runs left `running` by a gateway that crashed (no owner key)
    are marked failed (voice_gateway/run_mirror.py)."""
    mirror = gw.run_mirror
    if mirror is None:
        return
    for run_id in await gw.memory.runs.active_background():
        if not await mirror.owned(run_id) and await gw.memory.runs.mark_failed(run_id, ORPHANED):
            log.warning("run %s: left running by a stopped gateway, marked failed", run_id)


def mcp_tools(s: Settings, memory: Memory) -> McpTools:
    """MCP servers' tools: pooled sessions; stdio servers only inside the tool isolation."""
    launcher = jailed_launcher(
        strict=not s.sandbox_allow_weak,
        memory_mb=s.tool_memory_mb * 2,
        read_dirs=tuple(s.mcp_stdio_paths),
    )
    pool = McpPool(launcher, connect_timeout_s=s.mcp_connect_timeout_s)
    key = secrets_key(s.secrets_key, s.secrets_key_path)  # SecretsKeyError: start refused
    return McpTools(McpServerStore(memory.db, key), pool, s.mcp_timeout_s)


async def close_gateway(gw: Gateway, scheduler: Scheduler | None = None) -> None:
    await gw.capacity.aclose()
    if gw.webrtc is not None:
        await gw.webrtc.aclose()
    if scheduler is not None:  # no new runs from here on
        await scheduler.aclose()
    await gw.runs.aclose()  # background runs store what they produced before the bus stops
    await gw.run_callbacks.aclose()  # their last callbacks
    if gw.run_mirror is not None:  # the runs' last frames
        await gw.run_mirror.aclose()
    await gw.file_jobs.aclose()
    if gw.call_webhooks is not None:  # what is not sent stays queued for the next start
        await gw.call_webhooks.aclose()
    await gw.bus.stop()
    if gw.voice is not None:
        await gw.voice.aclose()
    await gw.llms.aclose()
    if gw.loop.mcp is not None:
        await gw.loop.mcp.pool.aclose()
    await gw.memory.close()


def routes(settings: Settings) -> list[BaseRoute]:
    from voice_gateway.routes import (
        call_recordings,
        calls,
        chat_completions,
        ops,
        rest,
        rest_archives,
        rest_callers,
        rest_folders,
        rest_recall,
        rest_runs,
        rest_schedule,
    )

    out: list[BaseRoute] = [
        *ops.routes(),
        *rest.routes(),
        *rest_runs.routes(),
        *rest_schedule.routes(),
        *rest_recall.routes(),
        *rest_callers.routes(),
        *calls.routes(),
        *call_recordings.routes(),
        *rest_archives.routes(),
        *rest_folders.routes(),
        *chat_completions.routes(),
    ]
    if settings.voice:
        from voice_gateway.routes import twilio, voice_ws, webrtc

        out += voice_ws.routes() + twilio.routes() + webrtc.routes()
    if WEB_DIR.is_dir():
        out.append(WebMount("/", app=StaticFiles(directory=WEB_DIR, html=True), name="web"))
    return out


def middleware(settings: Settings) -> list[Middleware]:
    """Outermost first: browser Origin check (403 / close 4403), CORS headers for allowed
    origins (so browsers can read 401s and 429s too), key and request rate (401, 429), body
    size (413)."""
    origins = OriginPolicy(settings)
    return [
        Middleware(ControlCharPath),
        Middleware(OriginGuard, policy=origins),
        Middleware(CORSMiddleware, **origins.cors_options()),
        Middleware(Admission),
        Middleware(
            BodyLimit, max_bytes=settings.max_body_bytes, upload_bytes=settings.max_file_bytes
        ),
    ]


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gw = await open_gateway(settings)
        app.state.gw = gw
        scheduler = start_scheduler(gw)
        sweep = RecordingSweep(gw).start()  # recordings past retention
        # one BLAS thread: its pool's spinning took the CPU calls need (native_threads.py)
        unlimit_blas = limit_blas(settings.blas_threads)
        # Move everything loaded at start-up (modules, models, ORM) out of the garbage
        # collector's reach: a full collection then scans only what calls create, instead of
        # pausing the event loop ~50-100 ms every few seconds (bench/voice_concurrency.py).
        gc.freeze()
        before = gc.get_threshold()
        gc.set_threshold(settings.gc_young_every, before[1], settings.gc_full_every)
        try:
            yield
        finally:
            gc.set_threshold(*before)
            unlimit_blas()
            await sweep.aclose()
            await close_gateway(gw, scheduler)

    return Starlette(
        routes=routes(settings),
        middleware=middleware(settings),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
