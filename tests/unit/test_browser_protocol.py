from __future__ import annotations

import pytest

from voice_gateway.pipeline.speech import Segment, heard_text
from voice_gateway.protocol.browser import (
    InputText,
    ProtocolError,
    SessionStart,
    parse_client_event,
)


def test_session_start_defaults_and_rates() -> None:
    ev = parse_client_event('{"type": "session.start"}')
    assert isinstance(ev, SessionStart) and ev.input_audio.sample_rate == 16000
    ev = parse_client_event(
        '{"type":"session.start","input_audio":{"encoding":"pcm16","sample_rate":48000},"output_audio":{"sample_rate":8000}}'
    )
    assert (
        isinstance(ev, SessionStart)
        and ev.input_audio.sample_rate == 48000
        and ev.output_audio.sample_rate == 8000
    )


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "invalid_json"),
        ("[1,2]", "invalid_event"),
        ('{"type": "dance"}', "unknown_type"),
        (
            '{"type":"session.start","input_audio":{"sample_rate":96000}}',
            "unsupported_audio_format",
        ),
        ('{"type":"session.start","input_audio":{"encoding":"opus"}}', "unsupported_audio_format"),
        ('{"type":"input_text","text":""}', "invalid_event"),
        ('{"type":"audio.played","item_id":"x","played_ms":-1}', "invalid_event"),
    ],
)
def test_bad_frames(frame: str, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame)
    assert info.value.code == code


def test_input_text() -> None:
    assert isinstance(parse_client_event('{"type":"input_text","text":"hi"}'), InputText)


def test_heard_text_cuts_at_played_audio() -> None:
    segs = [
        Segment("sentence", "One two three four.", "m1", 0, 1000, True),
        Segment("filler", "Hold on.", None, 1000, 500, True),
        Segment("sentence", "Five six seven eight.", "m2", 1500, 1000, True),
    ]
    assert heard_text(segs, 3000) == {"m1": "One two three four.", "m2": "Five six seven eight."}
    assert heard_text(segs, 500) == {"m1": "One two", "m2": ""}
    assert heard_text(segs, 2000) == {"m1": "One two three four.", "m2": "Five six"}
    assert heard_text(segs, 0) == {"m1": "", "m2": ""}
