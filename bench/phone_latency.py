"""Phone-path voice-to-voice latency at 8 kHz, against the browser path at 16 kHz (baseline),
both measured in the same run on the same gateway.

The gateway runs as `voice-gateway serve` in its own process with local STT (whisper tiny.en),
espeak-ng TTS, and the loopback fake OpenAI server of the tests as its LLM (instant replies).
- phone: Twilio's side of a call (tests/support/phone.py): the signed webhook, then a Media
  Stream sending espeak-ng speech as base64 mu-law every 20 ms, as Twilio does.
- browser: the voice socket with the same sentences as 16 kHz PCM16.
voice_to_voice = the caller's last frame of speech sent -> the first reply audio received (it
includes the endpointing silence, STT, the LLM, TTS and, on the phone, mu-law + resampling).
Also reported: the word error rate of what STT heard (8 kHz phone vs 16 kHz browser). Both
paths run with `vad` (espeak-ng's voice never fades, so `smart` would hold each phone turn
1.6 s).
`--speech real`: phone calls only, reading the 13 real recordings of bench/turn_taking.py
(each twice, its own room tone before and after it, as a line carries), once on a gateway
with `VG_TURN_DETECTION=vad` and once with `smart`: the caller's voice-to-voice under each
policy, in the same run (pass: `smart`'s p50 below `vad`'s).

Run: .venv/bin/python bench/phone_latency.py [--quick] [--speech real]
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
from _voice import load

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.phone import TOKEN, TwilioCall, call_form, parse_twiml, sign
from tests.support.real_speech import MISSING, background, clips, speech_span
from tests.support.servers import ServerThread, free_port
from tests.support.speech import frames, rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient
from voice_gateway.audio import resample_whole

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


Clips = list[tuple[np.ndarray, float]]


def recordings() -> tuple[Clips, list[str]]:
    """The real recordings at 8 kHz with 300 ms of their room tone before and 2 s after (a
    `smart` wait of up to 1.6 s happens in it), and the time after their last sound; and what
    each says ("" where the package has no transcript)."""
    out: Clips = []
    found = clips()
    for clip in found:
        _, last = speech_span(clip.pcm)
        pcm = np.concatenate([background(clip.pcm, 300), clip.pcm, background(clip.pcm, 2000)])
        pcm8 = np.frombuffer(resample_whole(pcm.tobytes(), 16000, 8000), dtype="<i2")
        out.append((pcm8, len(pcm) / 16000 - (0.3 + last * 0.02)))
    return out, [c.text for c in found]


def start_server(
    db: Path, llm_url: str, turn_detection: str = "vad"
) -> tuple[subprocess.Popen[bytes], str]:
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
        "VG_TURN_DETECTION": turn_detection,  # vad for espeak-ng (see above)
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


async def real_calls(url: str, llm: FakeLLM, said: Clips) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as http:
        agent = (await http.post("/v1/agents/", json={"model": "openai/fake"})).json()["id"]
    got = await phone_turns(url, agent, said, llm)
    return {k: v[1:] for k, v in got.items()}  # the first turn warms up


def real(quick: bool) -> dict[str, Any]:
    said, texts = recordings()
    if not said:
        return {"skipped": MISSING}
    said, texts = (said[:3], texts[:3]) if quick else (said + said, texts + texts)
    said = [said[-1], *said]  # a warm-up turn
    known = [i for i, t in enumerate(texts) if t]  # the recordings with a transcript
    llm = FakeLLM(lambda body: Reply(text=REPLY))
    llm_srv = ServerThread(llm.app).start()
    out: dict[str, Any] = {}
    try:
        for policy in ("vad", "smart"):
            with tempfile.TemporaryDirectory() as tmp:
                proc, url = start_server(Path(tmp) / "vg.db", f"{llm_srv.url}/v1", policy)
                try:
                    got = asyncio.run(real_calls(url, llm, said))
                finally:
                    proc.terminate()
                    proc.wait(30)
            v2v, heard = got["v2v"], got["heard"]
            out[policy] = {
                **summary(v2v),
                "per_turn_ms": [round(v) for v in v2v],
                # the words the agent got, against the package's transcripts (digits count
                # as errors where whisper writes "10" for "ten": the same for both policies)
                "stt_wer": mean_wer([texts[i] for i in known], [heard[i] for i in known]),
                "heard": heard,
            }
    finally:
        llm_srv.stop()
    vad, smart = float(out["vad"]["p50_ms"]), float(out["smart"]["p50_ms"])
    out["ratio_smart_vs_vad"] = {
        "p50": ratio(smart, vad),
        "p95": ratio(float(out["smart"]["p95_ms"]), float(out["vad"]["p95_ms"])),
    }
    out["pass_rule"] = "the caller's voice-to-voice p50 with smart below vad's"
    out["passed"] = smart < vad
    return out


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--speech", default="espeak", choices=("espeak", "real"))
    args = p.parse_args()
    if args.speech == "real":
        emit("phone_latency_real", {"quick": args.quick, **real(args.quick), **load()})
        return
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
