"""Phone calls per process with local whisper, `smart` next to `vad`, both in the same run
(the capacity measure bench/turn_capacity.py takes on the 16 kHz socket).

Two gateway processes (uvicorn + uvloop, as `voice-gateway serve`), one per policy: local
whisper tiny.en (int8, the defaults), the real webrtcvad, `vad` (400 ms of silence) or `smart`,
echo cancellation on (the phone's default), the real agent loop
and SQLite, instant LLM and TTS (so STT and turn detection are what differ). Each call is
Twilio's side of a Media Stream (tests/support/phone.py: the signed webhook, then `connected`,
`start` and base64 mu-law `media` every 20 ms), reading one real recording (`--speech
real:<clip>`, tests/support/real_speech.py) once per `--cycle`, resampled to 8 kHz, with its
own room tone between turns; each call starts at its own point of the room tone, so no call
opens mid-sentence and the turns of a level are spread over the cycle.

Per turn: reply latency = the recording's last sound sent -> the first reply `media` received
(the caller's own measure: it holds the end of turn, STT, mu-law and resampling). A turn with no
reply media within 2.5 s of its last sound (`smart` waits up to 1.6 s) is unanswered.
Calibration: one call on each idle gateway (`--calibrate` turns), its reply latency p50.
Verdict (one budget for both policies, as turn_capacity's `same_budget`): a level passes when
its reply latency p99 is under `vad`'s idle p50 + 100 ms, no turn is unanswered, every call ran
to the end and the load generator kept to its schedule (its tick lateness p99 < 20 ms).
Result: the largest level each policy holds and smart / vad (target >= 0.75), with the CPU per
turn split into STT, turn detection and the rest (bench/_cpu_split.py) and what ended the turns.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from _capacity import capacity_gateways
from _common import emit, parser, ratio, summary
from _concurrency_rules import turn_metrics
from _voice import load
from turn_capacity import _pooled, turn_ends
from voice_concurrency import settle

from tests.support.phone import TOKEN, TwilioCall, call_form, parse_twiml, pcm_to_ulaw, sign
from tests.support.real_speech import MISSING, background, clips, speech_span
from voice_gateway.audio import resample_whole

POLICIES = ("vad", "smart")
TARGET = 0.75
DEADLINE_S = 2.5  # last sound -> first reply media, or the turn is unanswered
END_ROOM_S = 1.8  # the line's room tone after a turn's last sound it needs to end (smart: 1.6)
BUDGET_OVER_IDLE_MS = 100.0


@dataclass(frozen=True)
class PhonePattern:
    """A call's cycle as Twilio media payloads (base64 mu-law, 20 ms each); `last`: the frame
    of the recording's last sound; `speech`: frames of the recording (the rest is room tone)."""

    payloads: list[str]
    last: int
    speech: int


def phone_pattern(name: str, cycle_s: float) -> PhonePattern:
    found = {c.name: c.pcm for c in clips()}
    if name not in found:
        raise SystemExit(MISSING if not found else f"no recording {name}: {sorted(found)}")
    pcm = found[name]
    frames = int(cycle_s * 50)
    if frames <= len(pcm) // 320 + 50:
        raise SystemExit(f"the recording does not fit a {cycle_s} s cycle")
    cycle = np.concatenate([pcm, np.resize(background(pcm, 20), frames * 320 - len(pcm))])
    ulaw = pcm_to_ulaw(np.frombuffer(resample_whole(cycle.tobytes(), 16000, 8000), "<i2"))
    payloads = [base64.b64encode(ulaw[i * 160 : (i + 1) * 160]).decode() for i in range(frames)]
    return PhonePattern(payloads, speech_span(pcm)[1] - 1, len(pcm) // 320)


@dataclass
class LoadPhone(TwilioCall):
    """A TwilioCall whose line plays the pattern from `offset` for `ticks` frames from `t0`,
    noting when each turn's last sound was sent and how late each tick was."""

    pattern: PhonePattern | None = None
    offset: int = 0
    ticks: int = 0
    t0: float = 0.0
    last_sent: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)
    done_at: float = 0.0

    async def _line(self) -> None:
        assert self.pattern is not None
        payloads, n = self.pattern.payloads, len(self.pattern.payloads)
        for k in range(self.ticks):
            delay = self.t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.late_ms.append(max(0.0, -delay) * 1000)
            idx = (self.offset + k) % n
            await self.send(self.media_message(payloads[idx]))
            if idx == self.pattern.last:
                self.last_sent.append(time.monotonic())
        self.done_at = time.monotonic()

    def replies(self, until: float) -> list[float | None]:
        """Per turn whose verdict is in before `until` and whose line went on long enough after
        its last sound for any policy to end it (END_ROOM_S): last sound -> first reply media
        (ms). A turn too close to the line's end is left out: the silence that would end it
        is never sent, and counting it unanswered would fail a level on the line's end
        (10 `vad` calls: 2 of 50 turns)."""
        media = [r.at for r in self.received if r.msg.get("event") == "media"]
        out: list[float | None] = []
        for at in self.last_sent:
            if at + DEADLINE_S > until or at + END_ROOM_S > self.done_at:
                continue
            first = next((m for m in media if m >= at), None)
            ok = first is not None and first - at <= DEADLINE_S
            out.append((first - at) * 1000 if ok and first is not None else None)
        return out


async def open_call(url: str, agent_id: str, sid: str, **kw: Any) -> LoadPhone:
    hook = f"{url}/v1/telephony/twilio/voice?agent_id={agent_id}"
    form = {**call_form(sid), "From": f"+1415{random.randrange(10**7):07d}"}
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(hook, data=form, headers={"X-Twilio-Signature": sign(hook, form)})
    resp.raise_for_status()
    twiml = parse_twiml(resp.text)
    return await LoadPhone(twiml.stream_url, sid, twiml.parameters, **kw).connect()


async def run_calls(gw: Any, agent_id: str, n: int, seconds: float, pat: PhonePattern) -> Any:
    """`n` phone calls streaming for `seconds` (the gateway's CPU window is exactly that)."""
    rnd = random.Random(n)
    tone = range(pat.speech, len(pat.payloads))  # each starts in room tone, at its own point
    t0 = time.monotonic() + 2.0 + 0.05 * n
    calls = [
        await open_call(
            gw.url,
            agent_id,
            f"CA{i:032x}",
            pattern=pat,
            offset=rnd.choice(tone),
            ticks=int(seconds * 50),
            t0=t0,
            stream_sid=f"MZ{i:032x}",
        )
        for i in range(n)
    ]
    for c in calls:
        await c.begin()
    ends0 = await asyncio.to_thread(turn_ends, gw.url)
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    await asyncio.to_thread(gw.reset)
    await asyncio.sleep(seconds)
    cpu = await asyncio.to_thread(gw.cpu)
    await asyncio.sleep(DEADLINE_S + 0.5)  # the last turns' replies
    ends = await asyncio.to_thread(turn_ends, gw.url)
    server = await asyncio.to_thread(gw.stats)  # the turns' own turn.metrics, gateway side
    stream_end = max(c.done_at for c in calls)
    lat: list[float] = []
    unanswered = 0
    for c in calls:
        got = c.replies(stream_end + DEADLINE_S)
        lat += [r for r in got if r is not None]
        unanswered += sum(r is None for r in got)
    broken = sum(c.close_code is not None for c in calls)
    for c in calls:
        await c.stop()
    for c in calls:
        try:
            await c.wait_closed(20)
        finally:
            for task in c._tasks:
                task.cancel()
    late = summary([x for c in calls for x in c.late_ms])
    split = cpu.pop("split")
    split["turn_ends"] = {k: v - ends0.get(k, 0) for k, v in ends.items() if v > ends0.get(k, 0)}
    return {
        "calls": n,
        "reply": summary(lat),
        "turns": len(lat) + unanswered,
        "turns_unanswered": unanswered,
        "calls_closed_early": broken,
        "loader_late": late,
        "process_cores": cpu.get("process_cores"),
        "split": split,
        "server_turn_metrics": turn_metrics(server.get("turn_metrics", [])),
    }


def verdict(level: dict[str, Any], budget_ms: float) -> dict[str, Any]:
    p99 = level["reply"].get("p99_ms")
    reasons = []
    if p99 is None or p99 >= budget_ms:
        reasons.append(f"reply p99 {p99} ms >= {budget_ms} ms")
    if level["turns_unanswered"] or not level["turns"]:
        reasons.append(f"{level['turns_unanswered']} of {level['turns']} turns unanswered")
    if level["calls_closed_early"]:
        reasons.append(f"{level['calls_closed_early']} calls closed early")
    behind = level["loader_late"].get("p99_ms", float("inf")) >= 20
    if behind:
        reasons.append(f"load generator behind: p99 {level['loader_late'].get('p99_ms')} ms")
    return {"passed": not reasons, "behind": behind, "fail_reasons": reasons}


def line(policy: str, level: dict[str, Any]) -> dict[str, Any]:
    s = level["split"]
    return {
        "policy": policy,
        "calls": level["calls"],
        "passed": level["passed"],
        "reply_p50_ms": level["reply"].get("p50_ms"),
        "reply_p99_ms": level["reply"].get("p99_ms"),
        "turns": level["turns"],
        "unanswered": level["turns_unanswered"],
        "cpu_ms_per_turn": s["cpu_ms_per_turn"],
        "turn_ends": s["turn_ends"],
        "server": {
            k: level["server_turn_metrics"][k].get("p50_ms")
            for k in ("end_of_turn_ms", "stt_ms", "voice_to_voice_ms")
        },
        "loader_late_p99_ms": level["loader_late"].get("p99_ms"),
        "fail_reasons": level["fail_reasons"],
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="", help="comma-separated call counts")
    p.add_argument("--seconds", type=float, default=0.0, help="streaming time per level")
    p.add_argument("--cycle", type=float, default=6.0, help="seconds per turn per call")
    p.add_argument("--speech", default="real:003", help="real:<recording>")
    p.add_argument("--calibrate", type=int, default=6, help="idle turns for the budget")
    args = p.parse_args()
    if not args.speech.startswith("real:"):
        raise SystemExit("--speech takes real:<recording> (espeak-ng never fades: smart waits)")
    levels = [int(x) for x in args.levels.split(",") if x.isdigit()] or (
        [2] if args.quick else [8, 16, 24, 32, 48]
    )
    seconds = args.seconds or (12.0 if args.quick else 30.0)
    pat = phone_pattern(args.speech[5:], args.cycle)
    calib: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        gws = capacity_gateways(tmp, POLICIES, "phone_capacity", twilio_auth_token=TOKEN)
        try:
            agents = {policy: gw.agent(name="phone-line") for policy, gw in gws.items()}
            for policy, gw in gws.items():
                settle(list(gws.values()))
                idle = (args.calibrate + 1) * args.cycle
                level = asyncio.run(run_calls(gw, agents[policy], 1, idle, pat))
                keep = ("reply", "server_turn_metrics", "split")
                calib[policy] = {k: level[k] for k in keep}
                print(json.dumps({policy: calib[policy]}), file=sys.stderr)
            budget = float(calib["vad"]["reply"].get("p50_ms", 0.0)) + BUDGET_OVER_IDLE_MS
            done: set[str] = set()
            for k, n in enumerate(levels):
                for policy in POLICIES if k % 2 == 0 else POLICIES[::-1]:
                    if policy in done:
                        continue
                    for _attempt in range(2):  # a level the loader fell behind on runs again
                        settle(list(gws.values()))
                        level = asyncio.run(run_calls(gws[policy], agents[policy], n, seconds, pat))
                        level.update(verdict(level, budget))
                        if not level["behind"]:
                            break
                    out.append({"policy": policy, **level})
                    print(json.dumps(line(policy, level)), file=sys.stderr)
                    if not level["passed"]:
                        done.add(policy)
        finally:
            for gw in gws.values():
                gw.stop()
    held = {
        policy: max(
            (lv["calls"] for lv in out if lv["policy"] == policy and lv["passed"]), default=0
        )
        for policy in POLICIES
    }
    emit(
        "phone_capacity",
        {
            "quick": args.quick,
            "speech": args.speech,
            "turn_cycle_s": args.cycle,
            "seconds_per_level": seconds,
            "levels_run": levels,
            "stt": "whisper tiny.en, int8, the defaults; Twilio Media Streams, 8 kHz mu-law",
            "calibration": calib,
            "budget_ms": round(budget, 1),
            "rule": "reply p99 (last sound -> first reply media) < vad's idle p50 + 100 ms, no "
            "turn unanswered (2.5 s), every call to the end, load generator p99 lateness < 20 ms",
            "max_calls_passing": held,
            "smart_vs_vad": {
                "ratio": ratio(held["smart"], held["vad"]),
                "target": f"smart's largest level >= {TARGET} x vad's",
                "met": held["smart"] >= TARGET * held["vad"] > 0,
            },
            "cpu_per_turn": {
                policy: _pooled([lv["split"] for lv in out if lv["policy"] == policy])
                for policy in POLICIES
            },
            "table": [line(lv["policy"], lv) for lv in out],
            "levels": out,
            **load(),
        },
    )


if __name__ == "__main__":
    main()
