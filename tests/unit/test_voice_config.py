"""What a call reads of the gateway's settings (pipeline/services.py `VoiceConfig`, built once
at start by voice.py `voice_config`): nothing under voice_gateway/pipeline reads the settings,
and a call's parts are created with the call (VoiceSession.__init__) or together when it starts
(`CallParts`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from voice_gateway.pipeline.overlap import phrase_set
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.voice import voice_config

PIPELINE = Path(__file__).parents[2] / "voice_gateway" / "pipeline"


def test_the_config_carries_the_settings_a_call_reads() -> None:
    s = Settings(
        idle_timeout_s=7.0,
        llm_voice_timeout_s=11.0,
        barge_in_check_ms=420,
        barge_in_max_ms=1500,
        backchannels="Mm-hmm, yeah okay",
        vad_mode=1,
        echo_cancellation="auto",
        endpoint_silence_ms=700,
    )
    c = voice_config(s)
    assert (c.idle_timeout_s, c.llm_timeout_s, c.vad_mode) == (7.0, 11.0, 1)
    assert (c.barge_in_check_ms, c.barge_in_max_ms) == (420, 1500)
    assert c.backchannels == phrase_set("Mm-hmm, yeah okay") and "yeah okay" in c.backchannels
    phone, complaints = c.turn_options("phone", {})
    assert phone.echo and not complaints and phone.config == TurnConfig.from_settings(s)
    web, complaints = c.turn_options("voice", {"turn_silence_ms": 300})
    assert not web.echo and web.config.silence_ms == 300 and not complaints
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.idle_timeout_s = 1.0  # type: ignore[misc]
    assert dataclasses.replace(c, idle_timeout_s=1.0).idle_timeout_s == 1.0


def test_nothing_in_the_pipeline_imports_the_settings() -> None:
    for path in PIPELINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "voice_gateway.settings", path.name
            elif isinstance(node, ast.Import):
                assert all(a.name != "voice_gateway.settings" for a in node.names), path.name


def test_every_attribute_of_a_call_is_created_with_it() -> None:
    tree = ast.parse((PIPELINE / "session.py").read_text())
    (session,) = (c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "VoiceSession")
    created: set[str] = set()
    later: dict[str, str] = {}
    for method in session.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(method):
            targets = node.targets if isinstance(node, ast.Assign) else []
            targets += [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self":
                        if method.name == "__init__":
                            created.add(t.attr)
                        else:
                            later.setdefault(t.attr, method.name)
    assert {a: m for a, m in later.items() if a not in created} == {}
    assert "_parts" in created
