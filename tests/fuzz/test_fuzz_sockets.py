"""Property-based fuzzing of the browser voice socket and the Twilio media socket, each against
one live gateway (tests/fuzz/conftest.py). Sequences of malformed, wrong-typed, truncated,
oversized and out-of-order frames; after every example the server must have answered each bad
frame (an `error` event on the browser socket) and closed with the expected named code within
a bounded time (never 1011, never a hang), and a fresh connection must still work. At the end
no call or call task may be left, and the counts tried are printed."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.fuzz.conftest import Live
from tests.fuzz.socket_strategies import (
    MULAW,
    VALID_START,
    Frame,
    browser_sequences,
    twilio_sequences,
    twilio_start,
    wire,
)
from voice_gateway.protocol.browser import (
    MAX_BINARY_FRAME,
    ProtocolError,
    SessionEnd,
    SessionStart,
    parse_client_event,
)

WAIT_S = 20.0  # every example must be over (closed by the server) within this
TRIED: dict[str, Counter[str]] = {"browser": Counter(), "twilio": Counter()}  # frames sent
ANSWERS: dict[str, Counter[str]] = {"browser": Counter(), "twilio": Counter()}  # what came back
EXAMPLES = int(os.environ.get("VG_FUZZ_EXAMPLES", "400"))  # per socket; more for a deep run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, report_multiple_bugs=False)
TWILIO_CLOSE = {
    "start_bad_format": 1003,
    "start_no_agent": 1008,
    "start_unknown_agent": 4404,
}


def _exchange(url: str, frames: list[str | bytes]) -> tuple[list[dict[str, Any]], int | None]:
    """Send the frames (until the server closes), then read until it closes: (the JSON
    events received, the server's close code). Binary frames received are counted as
    {"binary": n}. A watchdog bounds the whole exchange, sends included (a server that
    stops reading would block a send)."""
    events: list[dict[str, Any]] = []
    with connect(url, max_size=None, compression=None, open_timeout=10, close_timeout=5) as ws:
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            with contextlib.suppress(OSError):
                ws.socket.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(WAIT_S, expire)
        watchdog.start()
        try:
            for frame in frames:
                try:
                    ws.send(frame)
                except (ConnectionClosed, OSError):
                    break
            while True:
                try:
                    msg = ws.recv(timeout=WAIT_S)
                except (TimeoutError, ConnectionClosed, OSError):
                    break
                if isinstance(msg, bytes):
                    events.append({"binary": len(msg)})
                    continue
                event = json.loads(msg)
                assert isinstance(event, dict), msg
                events.append(event)
        finally:
            watchdog.cancel()
        assert not fired.is_set(), f"no close within {WAIT_S}s (a hang); got {events[-5:]}"
        return events, _code(ws)


def _code(ws: ClientConnection) -> int | None:
    rcvd = ws.protocol.close_rcvd
    return rcvd.code if rcvd is not None else None


# ---- browser --------------------------------------------------------------------------------


def browser_model(frames: list[Frame]) -> tuple[int, int, bool]:
    """(non-fatal errors due, close code, started) for this sequence followed by the probe (a
    valid session.start, then session.end), as docs/voice_socket.md says."""
    started, errors = False, 0
    for _, item in [*frames, ("probe", VALID_START), ("probe", '{"type":"session.end"}')]:
        frame = wire(item)
        if isinstance(frame, bytes):
            if len(frame) > MAX_BINARY_FRAME:
                return errors, 1009, started
            errors += not started or len(frame) % 2
            continue
        try:
            event = parse_client_event(frame)
        except ProtocolError:
            errors += 1
            continue
        if isinstance(event, SessionStart):
            if not started and event.conversation_id:
                # an id this gateway never issued: conversation_not_found (fatal), 4404
                return errors, 4404, False
            errors += started
            started = True
        elif not started:
            errors += 1
        elif isinstance(event, SessionEnd):
            return errors, 1000, started
    raise AssertionError("the probe always ends the session")


@FUZZ
@given(frames=browser_sequences)
def test_browser_socket_fuzz(live: Live, frames: list[Frame]) -> None:
    TRIED["browser"]["examples"] += 1
    TRIED["browser"].update(kind for kind, _ in frames)
    url = f"{live.server.ws_url}/v1/agents/{live.agent_id}/voice"
    probe: list[str | bytes] = [VALID_START, '{"type":"session.end"}']
    events, code = _exchange(url, [wire(f) for _, f in frames] + probe)
    due, expected_code, started = browser_model(frames)
    ANSWERS["browser"][f"close {code}"] += 1
    ANSWERS["browser"]["audio frames"] += sum("binary" in e for e in events)
    ANSWERS["browser"].update(
        f"{e['type']} {e.get('code', '')}".strip() for e in events if "type" in e
    )
    assert code == expected_code, (code, events)
    errors = [e for e in events if e.get("type") == "error"]
    for e in errors:
        assert isinstance(e["code"], str) and isinstance(e["message"], str), e
        assert e["fatal"] is (e["code"] in ("frame_too_large", "conversation_not_found")), e
    assert sum(not e["fatal"] for e in errors) == due, (due, errors)
    assert sum(e.get("type") == "session.started" for e in events) == started
    assert all(isinstance(e.get("type"), str) or "binary" in e for e in events), events
    _browser_still_works(live)


def _browser_still_works(live: Live) -> None:
    url = f"{live.server.ws_url}/v1/agents/{live.agent_id}/voice"
    events, code = _exchange(url, [VALID_START, '{"type":"session.end"}'])
    assert code == 1000 and [e["type"] for e in events] == ["session.started", "session.ended"], (
        code,
        events,
    )


# ---- Twilio ---------------------------------------------------------------------------------


def twilio_model(frames: list[Frame]) -> int:
    """The close code due: the first start decides (a call, or a named close); a stop ends
    the call (1000); anything else is dropped. The probe is a stop."""
    for kind, _ in [*frames, ("stop", "")]:
        if kind == "stop":
            return 1000
        if kind in TWILIO_CLOSE:
            return TWILIO_CLOSE[kind]
        if kind == "start_valid":
            return 1000  # in a call only a stop (or ours) ends it
    raise AssertionError("unreachable")


@FUZZ
@given(data=st.data())
def test_twilio_socket_fuzz(live: Live, data: st.DataObject) -> None:
    frames = data.draw(twilio_sequences(live.agent_id))
    TRIED["twilio"]["examples"] += 1
    TRIED["twilio"].update(kind for kind, _ in frames)
    url = f"{live.server.ws_url}/v1/telephony/twilio/media"
    events, code = _exchange(url, [wire(f) for _, f in frames] + ['{"event":"stop"}'])
    ANSWERS["twilio"][f"close {code}"] += 1
    ANSWERS["twilio"].update(str(e.get("event")) for e in events)
    assert code == twilio_model(frames), (code, [k for k, _ in frames], events[-3:])
    for e in events:  # what the gateway sends Twilio: media, mark, clear (JSON text only)
        assert e.get("event") in ("media", "mark", "clear") and e.get("streamSid") == "MZfuzz", e
    valid = twilio_start(MULAW, {"agent_id": live.agent_id})
    events, code = _exchange(url, [valid, '{"event":"stop"}'])
    assert code == 1000  # a fresh stream still works


DEEP = "[" * 100_000
HUGE = '{"type": "audio.played", "item_id": "x", "played_ms": ' + "7" * 4301 + "}"


def test_fuzz_findings_stay_fixed(live: Live) -> None:
    """What the fuzzers found (each crashed the socket with no close frame before the fix):
    JSON nested beyond Python's recursion limit, a number of over 4300 digits (both sockets),
    and lone surrogates (\\ud800 escapes) in Twilio's start message, which SQLite cannot
    store or look up."""
    for frame in (DEEP, HUGE):
        with pytest.raises(ProtocolError) as info:
            parse_client_event(frame)
        assert info.value.code == "invalid_json"
    url = f"{live.server.ws_url}/v1/agents/{live.agent_id}/voice"
    events, code = _exchange(url, [VALID_START, DEEP, HUGE, '{"type":"session.end"}'])
    assert code == 1000 and [e.get("code") for e in events if e["type"] == "error"] == [
        "invalid_json",
        "invalid_json",
    ]
    url = f"{live.server.ws_url}/v1/telephony/twilio/media"
    stop = '{"event": "stop"}'
    start = twilio_start(MULAW, {"agent_id": live.agent_id})
    assert _exchange(url, [DEEP, HUGE.replace("audio.played", "media"), start, stop])[1] == 1000
    assert _exchange(url, [twilio_start(MULAW, {"agent_id": "\ud800"}), stop])[1] == 4404
    odd_call = twilio_start(MULAW, {"agent_id": live.agent_id, "x\udfff": "\ud800"}, "\udc00")
    assert _exchange(url, [odd_call, stop])[1] == 1000


def test_no_call_left_and_counts(live: Live) -> None:
    deadline = time.monotonic() + 10
    while (live.live_calls() or live.call_tasks()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live.live_calls() == 0, list(live.gw.calls)
    assert live.call_tasks() == 0
    for name, counts in TRIED.items():
        frames = sum(n for k, n in counts.items() if k != "examples")
        print(f"\nfuzz {name} socket: {counts['examples']} examples, {frames} frames:")
        for kind, n in sorted(counts.items()):
            if kind != "examples":
                print(f"  sent {kind:28} {n}")
        for kind, n in sorted(ANSWERS[name].items()):
            print(f"  got  {kind:28} {n}")
    assert TRIED["browser"]["examples"] and TRIED["twilio"]["examples"]
