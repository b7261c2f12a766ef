"""`voice-gateway call <agent> <wav>`: play a WAV file to an agent as a caller would, over the
browser voice socket of a running gateway (or over WebRTC with `--webrtc`); print the
transcript, the reply and the turn's metrics, and save the reply audio."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from websockets.asyncio.client import connect


@dataclass
class CallResult:
    transcript: str = ""
    reply: str = ""
    filler: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    audio: bytearray = field(default_factory=bytearray)
    errors: list[dict[str, Any]] = field(default_factory=list)


def read_wav(path: Path) -> tuple[bytes, int]:
    """PCM16 mono bytes and the sample rate (stereo is mixed down)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise SystemExit(f"{path}: need 16-bit PCM, got {8 * w.getsampwidth()}-bit")
        rate, channels = w.getframerate(), w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1).astype("<i2")
    if not 8000 <= rate <= 48000:
        raise SystemExit(f"{path}: sample rate {rate} Hz is outside 8000-48000")
    return data.tobytes(), rate


def write_wav(path: Path, pcm: bytes, rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def resolve_agent(http: httpx.AsyncClient, agent: str) -> str:
    resp = await http.get(f"/v1/agents/{agent}")
    if resp.status_code == 200:
        return agent
    found = (await http.get("/v1/agents/", params={"name": agent})).json()
    if isinstance(found, list) and found:
        return str(found[0]["id"])
    raise SystemExit(f"no agent with id or name {agent!r} on {http.base_url}")


async def _stream(ws: Any, pcm: bytes, rate: int) -> None:
    frame = rate // 50 * 2  # 20 ms
    tail = b"\x00" * (rate * 2 * 3 // 2)  # 1.5 s of silence ends the turn
    audio = pcm + tail
    start = time.monotonic()
    for i, off in enumerate(range(0, len(audio), frame)):
        await ws.send(audio[off : off + frame])
        await asyncio.sleep(max(0.0, start + (i + 1) * 0.02 - time.monotonic()))


async def call(
    base_url: str, agent: str, wav: Path, *, api_key: str | None, out_rate: int, wait_s: float
) -> CallResult:
    pcm, rate = read_wav(wav)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
        agent_id = await resolve_agent(http, agent)
    ws_url = base_url.replace("http", "ws", 1).rstrip("/") + f"/v1/agents/{agent_id}/voice"
    result = CallResult()
    say(f"connecting to {ws_url} ...")
    async with connect(ws_url, additional_headers=headers, max_size=2**20) as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "session.start",
                    "input_audio": {"encoding": "pcm16", "sample_rate": rate},
                    "output_audio": {"encoding": "pcm16", "sample_rate": out_rate},
                }
            )
        )
        say(f"playing {len(pcm) / 2 / rate:.1f} s of audio at {rate} Hz (real time) ...")
        sender = asyncio.create_task(_stream(ws, pcm, rate))
        try:
            await asyncio.wait_for(_receive(ws, result), wait_s)
        finally:
            sender.cancel()
        await ws.send(json.dumps({"type": "session.end"}))
    return result


async def _receive(ws: Any, result: CallResult) -> None:
    async for msg in ws:
        if isinstance(msg, bytes):
            result.audio += msg
        elif _event(json.loads(msg), result):
            return


async def call_webrtc(
    base_url: str, agent: str, wav: Path, *, api_key: str | None, wait_s: float
) -> CallResult:
    """The same call over WebRTC: the WAV on an Opus track, events on the data channel."""
    from voice_gateway.webrtc.client import WebRTCCaller

    pcm, rate = read_wav(wav)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
        agent_id = await resolve_agent(http, agent)
    host = httpx.URL(base_url).host
    pinned = ("127.0.0.1",) if host in ("127.0.0.1", "localhost") else ()  # else every interface
    caller = WebRTCCaller(base_url, agent_id, headers=headers, host_addresses=pinned)
    result = CallResult()
    say(f"offering WebRTC to {base_url}/v1/agents/{agent_id}/webrtc ...")
    try:
        await caller.connect()
        say(f"playing {len(pcm) / 2 / rate:.1f} s of audio at {rate} Hz (real time) ...")
        caller.play(pcm + b"\x00" * (rate * 3), rate)  # 1.5 s of silence ends the turn
        seen = 0
        async with asyncio.timeout(wait_s):
            while not caller.closed:
                for ev in caller.events[seen:]:
                    if _event(ev.event, result):  # the turn is done: let its audio arrive
                        heard = [e["duration_ms"] for e in caller.of_type("response.audio.done")]
                        await asyncio.sleep(sum(heard) / 1000 + 0.5)
                        result.audio = caller.audio
                        return result
                seen = len(caller.events)
                await asyncio.sleep(0.05)
        result.errors.append({"code": "call_ended", "message": "the call ended before the reply"})
        return result
    finally:
        if caller.location is not None:
            await caller.hang_up()
        await caller.close()


def _event(ev: dict[str, Any], result: CallResult) -> bool:
    """Print one server event into `result`; True once the turn is complete."""
    kind = ev.get("type")
    if kind == "transcript.final":
        result.transcript = ev["text"]
        say(f"you said:   {ev['text']}")
    elif kind == "response.filler":
        result.filler.append(ev["text"])
        say(f"(filler)    {ev['text']}")
    elif kind == "response.text.done":
        result.reply = ev["text"]
        say(f"agent said: {ev['text']}")
    elif kind == "error":
        result.errors.append(ev)
        say(f"error:      {ev.get('code')}: {ev.get('message')}")
    elif kind == "turn.metrics" and result.transcript:
        result.metrics = ev
        return True
    return False


def run(args: Any, api_key: str | None) -> int:
    if args.webrtc:
        from voice_gateway.webrtc.client import REPLY_RATE

        args.rate = REPLY_RATE
        coro = call_webrtc(
            args.url, args.agent, Path(args.wav), api_key=api_key, wait_s=args.timeout
        )
    else:
        coro = call(
            args.url,
            args.agent,
            Path(args.wav),
            api_key=api_key,
            out_rate=args.rate,
            wait_s=args.timeout,
        )
    result = asyncio.run(coro)
    out = Path(args.out)
    write_wav(out, bytes(result.audio), args.rate)
    say(f"reply audio: {out} ({len(result.audio) / 2 / args.rate:.1f} s)")
    print(
        json.dumps(
            {
                "transcript": result.transcript,
                "reply": result.reply,
                "filler": result.filler,
                "metrics": result.metrics,
                "errors": result.errors,
                "reply_audio": str(out),
            },
            indent=2,
        )
    )
    return 0 if result.reply and not result.errors else 1
