"""Hypothesis strategies for the two voice sockets: frames labelled with their category (for
the counts printed at the end), well-formed, malformed, wrong-typed, truncated, oversized,
binary-for-text and text-for-binary, in any order."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.support.speech import silence, speak
from voice_gateway.audio import ulaw_encode


@dataclass(frozen=True)
class Big:
    """A large frame, built when sent (keeps Hypothesis' reports short)."""

    unit: str | bytes
    n: int
    prefix: str = ""
    suffix: str = ""
    closer: str = ""  # repeated n times before the suffix (closing brackets)

    def __repr__(self) -> str:
        head = self.prefix[:40] + repr(self.unit[:8])
        return f"Big({head}... x{self.n}, {len(self.build())} bytes)"

    def build(self) -> str | bytes:
        if isinstance(self.unit, bytes):
            return self.unit * self.n
        return self.prefix + self.unit * self.n + self.closer * self.n + self.suffix


Frame = tuple[str, "str | bytes | Big"]  # (category, frame)


def wire(frame: str | bytes | Big) -> str | bytes:
    return frame.build() if isinstance(frame, Big) else frame


# text, often with lone surrogates (sent as JSON \\udXXX escapes: still valid UTF-8), NULs,
# quotes, bidi controls and the like
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
odd_strings = st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u202e", "'\"\\%_", "\n\r\t", " "])
texts = st.one_of(
    st.text(max_size=40),
    st.lists(surrogates | st.characters(), min_size=1, max_size=12).map("".join),
    odd_strings,
)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=8,
)


def _dump(obj: Any) -> str:
    return json.dumps(obj)  # ensure_ascii: surrogates become escapes


def _mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base`, or with one field dropped, retyped, or an extra field added."""
    keys = [k for k in base if k != "type"] or ["type"]
    drop = st.sampled_from(keys).map(lambda k: {x: v for x, v in base.items() if x != k})
    retype = st.tuples(st.sampled_from(keys), json_values).map(lambda kv: {**base, kv[0]: kv[1]})
    extra = st.tuples(texts, json_values).map(lambda kv: {**base, kv[0]: kv[1]})
    return st.just(base) | drop | retype | extra


# ---- the browser socket ---------------------------------------------------------------------

rates = st.sampled_from([8000, 16000, 24000, 48000]) | st.integers(-1, 100_000) | json_values
audio_formats = st.fixed_dictionaries(
    {},
    optional={"encoding": st.sampled_from(["pcm16", "opus"]) | json_values, "sample_rate": rates},
)
# one short utterance and its trailing silence in one frame: a whole spoken turn
SPEECH_16K = np.concatenate([speak("Hello there."), silence(700)]).astype("<i2").tobytes()
SPEECH_ULAW = base64.b64encode(
    ulaw_encode(np.concatenate([speak("Hello there.", 8000), silence(700, 8000)]))
).decode()
LONG = ["y" * 8000, "y" * 8001, "\u00e9" * 8000 + "!"]  # at, over the 8000-character limit
VALID_START = _dump({"type": "session.start"})
browser_events = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("session.start")},
        optional={
            "input_audio": audio_formats | json_values,
            "output_audio": audio_formats | json_values,
            "conversation_id": st.none() | texts | st.text(max_size=80),
        },
    ),
    st.builds(lambda t: {"type": "input_text", "text": t}, st.text(min_size=1, max_size=30)),
    st.builds(lambda t: {"type": "input_text", "text": t}, texts | st.sampled_from(LONG)).flatmap(
        _mutated
    ),
    st.builds(
        lambda i, p: {"type": "audio.played", "item_id": i, "played_ms": p},
        texts,
        st.integers(-5, 2**70),
    ).flatmap(_mutated),
    st.just({"type": "response.cancel"}).flatmap(_mutated),
    st.just({"type": "session.end"}),
    st.builds(lambda t: {"type": t}, json_values),  # unknown or wrong-typed type
    json_values,  # not even an object with a type
)


def deep_json(prefix: str) -> st.SearchStrategy[Frame]:
    """JSON nested deeper than any parser recurses (or just deep), closed or not."""
    return st.tuples(st.integers(50, 100_000), st.sampled_from(["[", '{"a":']), st.booleans()).map(
        lambda t: (
            "deep_json",
            Big(t[1], t[0], prefix, "}" if prefix else "", ("]" if t[1] == "[" else "}") * t[2]),
        )
    )


def huge_number(prefix: str) -> st.SearchStrategy[Frame]:
    """A JSON number of thousands of digits (Python refuses ints over 4300 digits)."""
    return st.sampled_from([20, 4300, 4301, 6000]).map(
        lambda n: ("huge_number", Big("7", n, prefix, "}"))
    )


def _truncated(text: str) -> st.SearchStrategy[str]:
    return st.integers(0, max(0, len(text) - 1)).map(lambda n: text[:n])


browser_frames: st.SearchStrategy[Frame] = st.one_of(
    browser_events.map(lambda e: ("event", _dump(e))),
    browser_events.map(_dump).flatmap(_truncated).map(lambda t: ("truncated", t)),
    st.text(max_size=200).map(lambda t: ("garbage_text", t)),
    browser_events.map(lambda e: ("json_as_binary", _dump(e).encode())),
    st.binary(max_size=2048).map(lambda b: ("binary", b)),
    st.integers(1, 40).map(lambda n: ("audio", Big(bytes(640), n))),
    st.just(("speech", Big(SPEECH_16K, 1))),
    st.sampled_from([65537, 70_000, 131_072]).map(lambda n: ("oversized_binary", Big(b"\0", n))),
    st.integers(70_000, 200_000).map(lambda n: ("oversized_text", Big("x", n))),
    deep_json("") | deep_json('{"type": "input_text", "text": '),
    huge_number('{"type": "audio.played", "item_id": "x", "played_ms": '),
)
browser_sequences = st.tuples(st.booleans(), st.lists(browser_frames, min_size=1, max_size=8)).map(
    lambda p: ([("event", VALID_START)] if p[0] else []) + p[1]
)


# ---- Twilio Media Streams -------------------------------------------------------------------

MULAW = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
BAD_FORMATS = st.one_of(
    st.fixed_dictionaries({"encoding": json_values, "sampleRate": st.just(8000)}).filter(
        lambda f: f["encoding"] != "audio/x-mulaw"
    ),
    st.fixed_dictionaries({"encoding": st.just("audio/x-mulaw"), "sampleRate": json_values}).filter(
        lambda f: str(f["sampleRate"]) != "8000"
    ),
    st.just({**MULAW, "channels": 2}),
    json_values.filter(lambda v: not isinstance(v, dict)),
)


def twilio_start(fmt: Any, params: Any, call_sid: Any = "CAfuzz") -> str:
    start = {"streamSid": "MZfuzz", "callSid": call_sid, "accountSid": "ACfuzz"}
    start.update({"tracks": ["inbound"], "mediaFormat": fmt, "customParameters": params})
    return _dump({"event": "start", "sequenceNumber": "1", "start": start, "streamSid": "MZfuzz"})


def twilio_starts(agent_id: str) -> st.SearchStrategy[Frame]:
    """Start messages labelled with what they must lead to: a call, or a named close."""
    no_agent = st.sampled_from([{}, {"agent_id": ""}]) | json_values.filter(
        lambda v: not isinstance(v, dict) or not v
    )
    unknown = (texts.filter(bool) | st.integers()).filter(lambda a: str(a) != agent_id)
    return st.one_of(
        st.just(("start_valid", twilio_start(MULAW, {"agent_id": agent_id}))),
        json_values.map(
            lambda sid: ("start_valid", twilio_start(MULAW, {"agent_id": agent_id}, sid))
        ),
        BAD_FORMATS.map(lambda f: ("start_bad_format", twilio_start(f, {"agent_id": agent_id}))),
        no_agent.map(lambda p: ("start_no_agent", twilio_start(MULAW, p))),
        unknown.map(lambda a: ("start_unknown_agent", twilio_start(MULAW, {"agent_id": a}))),
        json_values.filter(lambda v: not isinstance(v, dict)).map(
            lambda v: ("start_bad_format", _dump({"event": "start", "start": v}))
        ),
    )


def _media(payload: Any) -> dict[str, Any]:
    return {
        "event": "media",
        "streamSid": "MZfuzz",
        "media": {"track": "inbound", "payload": payload},
    }


b64 = st.binary(max_size=4000).map(lambda b: base64.b64encode(b).decode())
other_events = texts.filter(lambda e: e not in ("start", "stop"))
twilio_messages = st.one_of(
    st.just({"event": "connected", "protocol": "Call", "version": "1.0.0"}),
    (b64 | texts | json_values).map(_media).flatmap(_mutated),
    st.builds(
        lambda d: {"event": "dtmf", "dtmf": {"digit": d}},
        st.sampled_from("0123456789*#") | json_values,
    ),
    st.builds(lambda n: {"event": "mark", "mark": {"name": n}}, texts | json_values),
    st.builds(lambda e, v: {"event": e, "x": v}, other_events | json_values, json_values),
    json_values,
).filter(lambda m: not (isinstance(m, dict) and m.get("event") in ("start", "stop")))


def twilio_frames(agent_id: str) -> st.SearchStrategy[Frame]:
    return st.one_of(
        twilio_starts(agent_id),
        st.just(("stop", _dump({"event": "stop", "streamSid": "MZfuzz"}))),
        twilio_messages.map(lambda m: ("message", _dump(m))),
        st.just(("speech", Big(SPEECH_ULAW, 1, _dump(_media(""))[:-3], '"}}'))),
        twilio_messages.map(_dump).flatmap(_truncated).map(lambda t: ("truncated", t)),
        st.text(max_size=200).map(lambda t: ("garbage_text", t)),
        st.binary(max_size=2048).map(lambda b: ("binary", b)),
        deep_json("") | deep_json('{"event": "media", "media": '),
        huge_number('{"event": "dtmf", "sequenceNumber": '),
        st.integers(100_000, 300_000).map(
            lambda n: ("oversized_media", Big("A", n, _dump(_media(""))[:-3], '"}}'))
        ),
    )


def twilio_sequences(agent_id: str) -> st.SearchStrategy[list[Frame]]:
    valid = ("start_valid", twilio_start(MULAW, {"agent_id": agent_id}))
    return st.tuples(st.booleans(), st.lists(twilio_frames(agent_id), min_size=1, max_size=8)).map(
        lambda p: ([valid] if p[0] else []) + p[1]
    )
