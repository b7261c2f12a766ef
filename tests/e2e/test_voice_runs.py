"""A voice call's turns are runs (Letta's runs API) whose steps carry the turn's latencies."""

from __future__ import annotations

import numpy as np
from letta_client import Letta

from tests.e2e.conftest import VoiceGateway
from tests.integration.test_rest_letta_client import strict
from tests.support.fake_llm import Reply
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient

LATENCIES = ("endpointing_ms", "stt_ms", "llm_ttft_ms", "tts_ttfb_ms", "voice_to_voice_ms")


async def test_voice_turns_are_runs_with_metrics(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Green tea is coming right up.")
    agent_id = vg.agent()
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    heard = []
    for n in (1, 2):
        await c.stream(
            np.concatenate([silence(300), speak("I would like some green tea"), silence(900)]),
            16000,
        )
        heard.append(await c.wait_for("turn.metrics", count=n, timeout=40))
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    turn_ids = [m["turn_id"] for m in heard]

    client = Letta(base_url=vg.server.url, api_key="k", _strict_response_validation=True)
    every = strict(client.runs.list(agent_id=agent_id, order="asc"))
    runs = [r for r in every if r.metadata and r.metadata["source"] != "sleeptime"]
    assert [r.id for r in runs] == turn_ids  # (the call's end may start a sleeptime run)
    for run, metrics in zip(runs, heard, strict=True):
        assert (run.status, run.stop_reason) == ("completed", "end_turn")
        assert run.metadata and run.metadata["source"] == "voice"
        steps = strict(client.runs.steps.list(run.id))
        assert len(steps) == 1 and steps[0].model_handle == "openai/fake"
        got = client.steps.metrics.retrieve(steps[0].id).to_dict()
        assert got["step_ns"] > 0 and got["llm_request_ns"] > 0
        voice = got["voice_metrics"]
        for key in LATENCIES:  # exactly what the caller's client was told
            assert voice[key] == metrics[key] and voice[key] >= 0, (key, voice, metrics)
        said = strict(client.runs.messages.list(run.id, order="asc"))
        assert [m.message_type for m in said] == ["user_message", "assistant_message"]
