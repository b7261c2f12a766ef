"""`voice-gateway serve | migrate | users create | agents list|create | sleeptime | call`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence

from voice_gateway import __version__
from voice_gateway.logs import setup_logging
from voice_gateway.settings import Settings


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from voice_gateway.app import create_app

    if args.host:
        settings.host = args.host
    if args.port:
        settings.port = args.port
    if args.workers:
        settings.workers = args.workers
    settings.check_bind_safety()
    from voice_gateway.workers import Supervisor, WorkersRefused, check_workers, reuse_port_socket

    try:
        check_workers(settings)
    except WorkersRefused as exc:
        raise SystemExit(f"voice-gateway: {exc}") from None
    if settings.voice:
        from voice_gateway.provider_check import ProviderSettingError, check_provider_settings

        try:
            check_provider_settings(settings)
        except ProviderSettingError as exc:
            raise SystemExit(f"voice-gateway: {exc}") from None
    if settings.workers > 1 and not args.reuse_port:
        logging.getLogger("voice_gateway").info(
            "voice-gateway %s: %d workers on http://%s:%s",
            __version__,
            settings.workers,
            settings.host,
            settings.port,
        )
        return Supervisor(settings.workers, settings.host, settings.port).run()
    logging.getLogger("voice_gateway").info(
        "voice-gateway %s: serving on http://%s:%s", __version__, settings.host, settings.port
    )
    from voice_gateway.protocol.uvicorn_http import http_options
    from voice_gateway.protocol.uvicorn_ws import ws_protocol
    from voice_gateway.shutdown import GracefulServer

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ws=ws_protocol(settings.ws_fast_path),
        **http_options(settings),
        ws_per_message_deflate=False,
        ws_ping_interval=20,
        ws_ping_timeout=20,
        log_config=None,
        timeout_graceful_shutdown=5,  # after the drain: what is left gets 5 s
    )
    server = GracefulServer(config, app, settings.drain_timeout_s)
    # a worker of `--workers N`: its own socket on the shared port (SO_REUSEPORT)
    server.run(
        sockets=[reuse_port_socket(settings.host, settings.port)] if args.reuse_port else None
    )
    return 0


async def _migrate(settings: Settings) -> int:
    from memory.db import Database

    db = Database(settings.database_url)
    print(f"migrating {db.url.split('@')[-1]} ...", file=sys.stderr)
    await db.migrate()
    await db.close()
    print("schema is at the newest revision", file=sys.stderr)
    return 0


async def _users(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from memory.models import NotFound
    from memory.service import Memory
    from memory.usage import LimitOverrides, UsageStore

    overrides = LimitOverrides(args.rps, args.burst, args.max_calls, args.call_minutes)
    memory = await Memory.open(settings.database_url)
    try:
        if args.users_cmd == "create":
            user_id, key = await memory.users.create(args.name)
            out: dict[str, object] = {"user_id": user_id, "api_key": key}
        else:
            user_id, out = args.user_id, {"user_id": args.user_id}
        if overrides != LimitOverrides() or args.users_cmd == "limits":
            stored = await UsageStore(memory.db).set_limits(user_id, overrides)
            out["limits"] = asdict(stored)
    except NotFound as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        await memory.close()
    print(json.dumps(out))
    if args.users_cmd == "create":
        print("store the key now: it is kept only as a hash", file=sys.stderr)
    return 0


def _limit_options(p: argparse.ArgumentParser) -> None:
    """Per-user overrides of the VG_ rate limit and quota defaults (0: no limit)."""
    p.add_argument("--rps", type=float, help="REST requests per second")
    p.add_argument("--burst", type=int, help="REST burst size (default: 2 s worth of --rps)")
    p.add_argument("--max-calls", type=int, help="concurrent voice/phone calls")
    p.add_argument("--call-minutes", type=float, help="call minutes per UTC day")


async def _agents(args: argparse.Namespace, settings: Settings) -> int:
    from agents.llm import LLMRegistry
    from agents.tools import BASE_TOOLS
    from memory.models import BlockSpec
    from memory.service import Memory

    memory = await Memory.open(settings.database_url)
    try:
        if args.agents_cmd == "create":
            llms = LLMRegistry(
                openai_api_key=settings.openai_api_key,
                openai_base_url=settings.openai_base_url,
                providers=settings.llm_providers(),
            )
            agent = await memory.agents.create(
                user_id=None,
                name=args.name,
                system="",
                model=args.model or settings.default_model or llms.default_handle(),
                embedding=settings.default_embedding,
                tool_names=BASE_TOOLS,
                greeting=args.greeting,
                blocks=[
                    BlockSpec(label="persona", value=args.persona),
                    BlockSpec(label="human", value=""),
                ],
            )
            print(json.dumps({"id": agent.id, "name": agent.name, "model": agent.model}))
        else:
            for a in await memory.agents.page(limit=1000):
                print(json.dumps({"id": a.id, "name": a.name, "model": a.model}))
    finally:
        await memory.close()
    return 0


async def _sleeptime(args: argparse.Namespace, settings: Settings) -> int:
    import os
    import socket

    from voice_gateway.bus_runtime import run_worker
    from voice_gateway.native_threads import limit_blas

    # The embedder runs numpy in its own threads; OpenBLAS's spinning thread pool on top of that
    # (one per worker process) starved the CPUs: lag p99 1.5 s -> 0.2 s with one BLAS thread.
    limit_blas(settings.blas_threads)

    if not settings.redis_url:
        print(
            "voice-gateway sleeptime needs VG_REDIS_URL (without Redis the gateway runs "
            "sleeptime in-process)",
            file=sys.stderr,
        )
        return 2
    if args.concurrency < 1:
        print("--concurrency must be at least 1", file=sys.stderr)
        return 2
    consumer = args.consumer or f"{socket.gethostname()}-{os.getpid()}"
    return await run_worker(settings, consumer, args.concurrency)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voice-gateway", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the gateway (HTTP + WebSockets)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument(
        "--workers",
        type=int,
        help="gateway processes sharing the port, about one per core (default VG_WORKERS, 1); "
        "more than one needs VG_REDIS_URL",
    )
    s.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # a worker
    sub.add_parser("migrate", help="bring the database schema up to date")
    st = sub.add_parser("sleeptime", help="run a sleeptime memory worker (needs VG_REDIS_URL)")
    st.add_argument(
        "--consumer", help="stable consumer name, unique per worker (default: host-pid)"
    )
    st.add_argument("--concurrency", type=int, default=4, help="agents processed in parallel")
    u = sub.add_parser("users", help="manage users and their API keys")
    usub = u.add_subparsers(dest="users_cmd", required=True)
    uc = usub.add_parser("create", help="create a user and print its API key once")
    uc.add_argument("name")
    _limit_options(uc)
    ul = usub.add_parser("limits", help="set (or, without options, show) a user's limits")
    ul.add_argument("user_id")
    _limit_options(ul)
    a = sub.add_parser("agents", help="list or create agents")
    asub = a.add_subparsers(dest="agents_cmd", required=True)
    asub.add_parser("list")
    ac = asub.add_parser("create")
    ac.add_argument("name")
    ac.add_argument("--persona", default="I am a friendly voice assistant. I keep answers short.")
    ac.add_argument("--model")
    ac.add_argument("--greeting")
    c = sub.add_parser("call", help="play a WAV file to an agent as a caller; print the reply")
    c.add_argument("agent", help="agent id or name")
    c.add_argument("wav", help="16-bit PCM WAV, 8-48 kHz (stereo is mixed down)")
    c.add_argument("--url", help="gateway base URL (default http://VG_HOST:VG_PORT)")
    c.add_argument("--out", default="reply.wav", help="where to save the reply audio")
    c.add_argument("--rate", type=int, default=16000, help="reply audio sample rate")
    c.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the reply")
    c.add_argument(
        "--webrtc", action="store_true", help="call over WebRTC (aiortc) instead of the socket"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = Settings()
    setup_logging(settings.log_level, settings.log_format, settings.secrets())
    if args.cmd == "serve":
        return _serve(args, settings)
    if args.cmd == "migrate":
        return asyncio.run(_migrate(settings))
    if args.cmd == "users":
        return asyncio.run(_users(args, settings))
    if args.cmd == "agents":
        return asyncio.run(_agents(args, settings))
    if args.cmd == "sleeptime":
        return asyncio.run(_sleeptime(args, settings))
    if args.cmd == "call":
        from voice_gateway import call_client

        args.url = args.url or f"http://{settings.host}:{settings.port}"
        return call_client.run(args, settings.api_key)
    return 2


if __name__ == "__main__":
    sys.exit(main())
