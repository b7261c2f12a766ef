"""Phone-path voice-to-voice latency at 8 kHz, against the browser path at 16 kHz (baseline),
both measured in the same run on the same gateway.

The gateway runs as `voice-gateway serve` in its own process with local STT (whisper tiny.en),
espeak-ng TTS, and the loopback fake OpenAI server of the tests as its LLM (instant replies).
- phone: Twilio's side of a call (tests/support/phone.py): the signed webhook, then a Media
  Stream sending espeak-ng speech as base64 mu-law every 20 ms, as Twilio does.
- browser: the voice socket with the same sentences as 16 kHz PCM16.
voice_to_voice = the caller's last frame of speech sent -> the first reply audio received (it
includes the endpointing silence, STT, the LLM, TTS and, on the phone, mu-law + resampling).
Also reported: the word error rate of what STT heard (8 kHz phone vs 16 kHz browser).

Run: .venv/bin/python bench/phone_latency.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import ROOT, emit, parser, ratio, summary

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.phone import TOKEN, TwilioCall, call_form, parse_twiml, sign
from tests.support.servers import ServerThread, free_port
from tests.support.speech import frames, rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient

SENTENCES = [
    "Hello, could you tell me what time the shop opens tomorrow morning?",
    "I would like to book a table for two people on Friday evening.",
    "Can you remind me what I ordered the last time I called?",
    "Please read me the weather forecast for the weekend.",
]
REPLY = "Sure, I can help with that."


def speech(text: str, rate: int) -> tuple[np.ndarray, float]:
    """espeak-ng speech, and the length of its trailing silence in seconds (the clip is sent
    whole: cutting it changes what whisper hears; the end of speech is its last loud frame)."""
    pcm = speak(text, rate)
    loud = [i for i, f in enumerate(frames(pcm, rate)) if rms_dbfs(np.frombuffer(f, "<i2")) > -45]
    return pcm, len(pcm) / rate - (loud[-1] + 1) * 0.02


def start_server(db: Path, llm_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "VG_PORT": str(port),
        "VG_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "OPENAI_BASE_URL": llm_url,
        "OPENAI_API_KEY": "test",
        "VG_TWILIO_AUTH_TOKEN": TOKEN,
        "VG_SLEEPTIME_MODEL": "scripted/demo",
        "VG_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        # the codec path against the browser's, one policy for both: espeak-ng's voice never
        # fades, so `smart` (the phone's default) would hold every phone turn 1.6 s
        "VG_TURN_DETECTION": "vad",
    }
    proc = subprocess.Popen([sys.executable, "-m", "voice_gateway.cli", "serve"], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/health/", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("the gateway exited during start-up")
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("the gateway did not start")


Clips = list[tuple[np.ndarray, float]]


async def phone_turns(url: str, agent_id: str, clips: Clips, llm: FakeLLM) -> dict:
    hook = f"{url}/v1/telephony/twilio/voice?agent_id={agent_id}"
    form = call_form("CA" + "b" * 32)
    async with httpx.AsyncClient() as http:
        resp = await http.post(hook, data=form, headers={"X-Twilio-Signature": sign(hook, form)})
    resp.raise_for_status()
    twiml = parse_twiml(resp.text)
    call = await TwilioCall(twiml.stream_url, form["CallSid"], twiml.parameters).connect()
    await call.begin()
    await asyncio.sleep(0.5)  # the line carries silence before the caller speaks
    v2v, heard = [], []
    for clip, tail_s in clips:
        n = len(llm.requests)
        end = await call.say(clip) - tail_s  # the last frame of speech was sent then
        first = await call.wait_media(since=end, timeout=60)
        v2v.append((first - end) * 1000)
        await call.wait_quiet(0.5)
        heard.append(llm.requests[n]["messages"][-1]["content"] if len(llm.requests) > n else "")
    await call.stop()
    await call.wait_closed()
    return {"v2v": v2v, "heard": heard}


async def browser_turns(url: str, agent_id: str, clips: Clips, llm: FakeLLM) -> dict:
    ws = url.replace("http://", "ws://") + f"/v1/agents/{agent_id}/voice"
    c = await VoiceClient(ws).connect()
    await c.start(16000, 16000)
    v2v, heard = [], []
    for clip, tail_s in clips:
        n, done = len(llm.requests), len(c.of_type("response.done"))
        await c.stream(clip, 16000)
        end = time.monotonic() - tail_s  # the last frame of speech was sent then
        await c.stream(silence(900), 16000)
        await c.wait_for("response.done", timeout=60, count=done + 1)
        first = next(at for at, _ in c.audio_frames if at >= end)
        v2v.append((first - end) * 1000)
        heard.append(llm.requests[n]["messages"][-1]["content"] if len(llm.requests) > n else "")
        await asyncio.sleep(0.3)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    return {"v2v": v2v, "heard": heard}


def mean_wer(said: list[str], heard: list[str]) -> float:
    return round(float(np.mean([wer(s, h) for s, h in zip(said, heard, strict=True)])), 3)


async def run(url: str, llm: FakeLLM, turns: int, warmup: int) -> dict[str, Any]:
    said = [SENTENCES[i % len(SENTENCES)] for i in range(warmup + turns)]
    async with httpx.AsyncClient(base_url=url) as http:
        agent = (await http.post("/v1/agents/", json={"model": "openai/fake"})).json()["id"]
    phone = await phone_turns(url, agent, [speech(s, 8000) for s in said], llm)
    browser = await browser_turns(url, agent, [speech(s, 16000) for s in said], llm)
    p, b = phone["v2v"][warmup:], browser["v2v"][warmup:]
    ps, bs = summary(p), summary(b)
    return {
        "phone_8k": ps,
        "browser_16k_baseline": bs,
        "ratio_phone_vs_browser": {
            "p50": ratio(float(ps["p50_ms"]), float(bs["p50_ms"])),
            "p95": ratio(float(ps["p95_ms"]), float(bs["p95_ms"])),
        },
        "per_turn_ms": {"phone_8k": [round(v) for v in p], "browser_16k": [round(v) for v in b]},
        "heard_phone": phone["heard"][warmup:],
        "stt_wer": {
            "phone_8k": mean_wer(said[warmup:], phone["heard"][warmup:]),
            "browser_16k": mean_wer(said[warmup:], browser["heard"][warmup:]),
        },
    }


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns, warmup = (3, 1) if args.quick else (12, 1)
    llm = FakeLLM(lambda body: Reply(text=REPLY))
    llm_srv = ServerThread(llm.app).start()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "vg.db", f"{llm_srv.url}/v1")
        try:
            result = asyncio.run(run(url, llm, turns, warmup))
        finally:
            proc.terminate()
            proc.wait(30)
            llm_srv.stop()
    emit(
        "phone_latency",
        {
            "stack": "whisper tiny.en (local), espeak-ng, loopback fake LLM (instant)",
            "turns": turns,
            "quick": args.quick,
            **result,
        },
    )


if __name__ == "__main__":
    main()
