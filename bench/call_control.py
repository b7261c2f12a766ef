"""Call control over the real Twilio wire: how soon the gateway acts on Twilio's REST API once
the audio before the action has played, what placing an outbound call costs on our side, and
how many phone calls a process holds with call recording on next to off.

The gateway runs in its own process (bench/_voice.py `start_gateway`: espeak-ng TTS, the
loopback fake OpenAI server of the tests as its LLM, the official `twilio` SDK pointed at the
loopback REST stand-in of tests/support/fake_twilio_api.py, which notes when each request
arrived). Each call is Twilio's side of a Media Stream (tests/support/phone.py: the signed
webhook, media every 20 ms, each `mark` echoed once the audio before it has played in real
time); the caller presses '#' (a turn of its own) and the scripted model answers with a tool.
- end_call: the goodbye's last mark echoed (Twilio has played it, to its trailing silence)
  -> the request completing the call (`calls(sid).update(status="completed")`).
- transfer_call (cold): the announcement's last mark echoed -> the `<Dial>` update request;
  and the model's reply (announcement + tool call, sent at once) leaving the fake LLM -> the
  same request (it holds the announcement's playback).
- outbound: `POST /v1/agents/{id}/calls` sent -> the stand-in's `calls.create` request, and the
  route's whole time (request sent -> 201 read).
- recording: bench/_recording_load.py (phone_capacity's load, recording off and on).
One warm-up call of each kind is not counted. Pass: hang-up and Dial p99 < 250 ms after the last
mark, outbound overhead p99 < 250 ms, recording on holds >= 0.9x the calls of recording off.

Run: .venv/bin/python bench/call_control.py [--quick] [--calls N] [--levels 24,40]
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import emit, parser, summary
from _recording_load import recording_capacity
from _voice import GatewayProcess, load, start_gateway

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.fake_twilio_api import FakeTwilioApi, Recorded
from tests.support.phone import TOKEN, TwilioCall, call_form, parse_twiml, sign
from tests.support.servers import ServerThread
from voice_gateway.audio import ulaw_decode

ACCOUNT = "AC" + "7" * 32
OURS = "+15005550006"
DESK = "+15551230000"
GOODBYE = "Thank you for calling. Goodbye and have a lovely day."
ANNOUNCE = "I am transferring you to the front desk now."
AFTER_AUDIO_P99_MS = 250.0  # last mark echoed -> the REST request
OUTBOUND_P99_MS = 250.0  # POST /calls -> calls.create at Twilio


def last_loud_mark(call: TwilioCall, until: float) -> str | None:
    """The last mark sent before `until` that follows media with sound (not kept-up silence):
    media and its mark alternate on the stream."""
    name, loud = None, False
    for r in call.received:
        if r.at >= until:
            break
        if r.msg.get("event") == "media":
            pcm = ulaw_decode(base64.b64decode(r.msg["media"]["payload"]))
            loud = bool(np.abs(pcm.astype(np.int32)).max(initial=0) > 1000)
        elif r.msg.get("event") == "mark" and loud:
            name = r.msg["mark"]["name"]
    return name


async def one_call(gw: GatewayProcess, api: FakeTwilioApi, agent_id: str, sid: str) -> TwilioCall:
    """A call that came in, its stream up, the caller pressing '#'; returns once it closed."""
    api.inbound(sid, call_form(sid)["From"], OURS)
    hook = f"{gw.url}/v1/telephony/twilio/voice?agent_id={agent_id}"
    form = call_form(sid)
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(hook, data=form, headers={"X-Twilio-Signature": sign(hook, form)})
    resp.raise_for_status()
    twiml = parse_twiml(resp.text)
    call = await TwilioCall(twiml.stream_url, sid, twiml.parameters).connect()
    await call.begin()
    await call.dtmf("#")
    if await call.wait_closed(60) != 1000:
        raise RuntimeError(f"call {sid} closed {call.close_code}")
    for task in call._tasks:
        task.cancel()
    return call


def after_audio(call: TwilioCall, req: Recorded) -> float:
    """ms from the reply's last mark echoed before the REST request (Twilio has played the
    reply that far, its trailing silence too) to the request; the reply is the one of the last
    mark with sound before it."""
    loud = last_loud_mark(call, req.at)
    item = (loud or "").rpartition(":")[0]
    played = [at for at, n in call.echoed if at < req.at and n.rpartition(":")[0] == item]
    if loud is None or loud not in {n for at, n in call.echoed if at < req.at}:
        raise RuntimeError("the audio before the REST request was not played back first")
    return (req.at - max(played)) * 1000


Check = Callable[[Recorded], bool]


def hangs_up(req: Recorded) -> bool:
    return req.form == {"Status": ["completed"]}


async def controlled(
    gw: GatewayProcess,
    api: FakeTwilioApi,
    llm: FakeLLM,
    agent_id: str,
    reply: Reply,
    check: Check,
    n: int,
    tag: str,
) -> dict[str, list[float]]:
    """`n` calls (+1 warm-up) each answered by `reply`; per call the ms from the audio's last
    mark echoed, and from the model's reply leaving the fake LLM, to the REST update."""
    marks, tool = [], []
    for i in range(n + 1):
        sid = f"CA{tag}{i:030x}"
        llm.push(reply)
        call = await one_call(gw, api, agent_id, sid)
        reqs = api.of("POST", f"/Calls/{sid}.json")
        if len(reqs) != 1 or not check(reqs[0]):
            raise RuntimeError(f"call {sid}: unexpected REST requests {[r.form for r in reqs]}")
        if i:  # the first call warms up
            marks.append(after_audio(call, reqs[0]))
            tool.append((reqs[0].at - llm.first_chunk_at[-1]) * 1000)
    return {"marks": marks, "tool": tool}


def outbound(gw: GatewayProcess, api: FakeTwilioApi, agent_id: str, n: int) -> dict[str, Any]:
    created, total = [], []
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        for i in range(n + 1):
            before = len(api.of("POST", "/Calls.json"))
            t0 = time.monotonic()
            resp = http.post(f"/v1/agents/{agent_id}/calls", json={"to": DESK, "from": OURS})
            t1 = time.monotonic()
            if resp.status_code != 201:
                raise RuntimeError(f"outbound call refused: {resp.status_code} {resp.text}")
            (create,) = api.of("POST", "/Calls.json")[before:]
            if i:
                created.append((create.at - t0) * 1000)
                total.append((t1 - t0) * 1000)
            http.delete(f"/v1/calls/{resp.json()['id']}").raise_for_status()
    return {"to_calls_create": summary(created), "route_total": summary(total)}


def control(tmp: str, n: int) -> dict[str, Any]:
    api = FakeTwilioApi(ACCOUNT, TOKEN)
    api_srv = ServerThread(api.app).start()
    llm = FakeLLM(lambda body: Reply(text="Okay."))
    llm_srv = ServerThread(llm.app).start()
    gw = start_gateway(
        f"sqlite+aiosqlite:///{Path(tmp) / 'control.db'}",
        log_name="call_control",
        stt="instant-mute",  # the turns are '#' presses: no speech to hear
        openai_base_url=f"{llm_srv.url}/v1",
        openai_api_key="test",
        twilio_auth_token=TOKEN,
        twilio_account_sid=ACCOUNT,
        twilio_api_url=api_srv.url,
        sleeptime_model="scripted/demo",
    )
    try:
        desk = gw.agent(model="openai/fake", name="desk", transfer_targets={"front desk": DESK})
        end = Reply(text=GOODBYE, tool_calls=[ToolCallSpec("end_call", {"reason": "done"})])
        hung = asyncio.run(
            controlled(
                gw, api, llm, desk, end, lambda r: r.form == {"Status": ["completed"]}, n, "e"
            )
        )
        cold = ToolCallSpec("transfer_call", {"target": "front desk", "summary": "A refund."})
        dial = f"<Dial>{DESK}</Dial></Response>"
        moved = asyncio.run(
            controlled(
                gw,
                api,
                llm,
                desk,
                Reply(text=ANNOUNCE, tool_calls=[cold]),
                lambda r: r.form.get("Twiml", [""])[0].endswith(dial),
                n,
                "f",
            )
        )
        placed = outbound(gw, api, desk, n)
    finally:
        gw.stop()
        llm_srv.stop()
        api_srv.stop()
    return {
        "end_call": {"goodbye_end_to_hang_up": summary(hung["marks"])},
        "transfer_call_cold": {
            "announcement_end_to_dial": summary(moved["marks"]),
            "tool_call_to_dial": summary(moved["tool"]),
        },
        "outbound": placed,
    }


def verdicts(out: dict[str, Any]) -> dict[str, bool]:
    def p99(d: dict[str, Any]) -> float:
        return float(d.get("p99_ms", float("inf")))

    return {
        "end_call": p99(out["end_call"]["goodbye_end_to_hang_up"]) < AFTER_AUDIO_P99_MS,
        "transfer": p99(out["transfer_call_cold"]["announcement_end_to_dial"]) < AFTER_AUDIO_P99_MS,
        "outbound": p99(out["outbound"]["to_calls_create"]) < OUTBOUND_P99_MS,
        "recording": bool(out["recording"]["met"]),
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--calls", type=int, default=0, help="calls per call-control measure")
    p.add_argument("--levels", default="", help="comma-separated call counts (recording)")
    p.add_argument("--seconds", type=float, default=0.0, help="streaming time per level")
    p.add_argument("--cycle", type=float, default=6.0, help="seconds per turn per call")
    args = p.parse_args()
    n = args.calls or (3 if args.quick else 20)
    levels = [int(x) for x in args.levels.split(",") if x.isdigit()] or (
        [2] if args.quick else [24, 40]
    )
    seconds = args.seconds or (10.0 if args.quick else 24.0)
    with tempfile.TemporaryDirectory() as tmp:
        out = control(tmp, n)
        out["recording"] = recording_capacity(
            tmp, levels, seconds, args.cycle, 1 if args.quick else 3
        )
    passed = verdicts(out)
    emit(
        "call_control",
        {
            "quick": args.quick,
            "calls_per_measure": n,
            "stack": "espeak-ng TTS, loopback fake LLM (instant), loopback Twilio REST stand-in; "
            "recording: whisper tiny.en, instant LLM and TTS, vad",
            **out,
            "rules": {
                "end_call": "goodbye's last mark echoed -> hang-up p99 < "
                f"{AFTER_AUDIO_P99_MS:.0f} ms",
                "transfer": "announcement's last mark echoed -> <Dial> update p99 < "
                f"{AFTER_AUDIO_P99_MS:.0f} ms",
                "outbound": f"POST /calls -> calls.create p99 < {OUTBOUND_P99_MS:.0f} ms",
                "recording": out["recording"]["target"],
            },
            "passed": passed,
            "all_passed": all(passed.values()),
            **load(),
        },
    )


if __name__ == "__main__":
    main()
