"""Which calls are recorded, where their files live and when they go.

A call is recorded when it asks to be (`record`: true or false in the browser's
`session.start`; `record: true` in an outbound call's `POST /v1/agents/{id}/calls`), else when
its agent's `metadata.recording.enabled` is true (a Letta client keeps `metadata` as it is).
The agent's `metadata.recording.consent_message` is spoken first, before the greeting. The
file is `recordings/<agent id>/<call id>.wav` in the data directory; its path goes on the call
record when the call ends. A sweep every SWEEP_EVERY_S deletes recordings older than
VG_RECORDING_RETENTION_DAYS (and clears the path); erasing a caller deletes theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory.calls import CallStore
from memory.ids import new_id, utcnow
from memory.models import AgentData
from voice_gateway.pipeline.reply import UserTurn
from voice_gateway.pipeline.transport import StartInfo, Transport
from voice_gateway.pipeline.utterance import Utterance
from voice_gateway.recording import CallRecording
from voice_gateway.settings import Settings

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)
SWEEP_EVERY_S = 3600.0


class RecordingConfig(BaseModel):
    """An agent's `metadata.recording`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    enabled: bool = False
    consent_message: str | None = Field(None, min_length=1, max_length=1000)


class RecordedSession(Protocol):
    """What deciding on a call's recording reads of the call (VoiceSession)."""

    agent: AgentData
    transport: Transport
    turns: asyncio.Queue[UserTurn | Utterance]  # what the call says and answers, in order


def recordings_dir(settings: Settings) -> Path:
    return settings.data_dir / "recordings"


def _agent_config(agent: AgentData) -> tuple[RecordingConfig, str | None]:
    """The agent's recording settings, and the complaint if they are not valid."""
    try:
        return RecordingConfig.model_validate(agent.metadata.get("recording") or {}), None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        problem = f"{where}: {err['msg']}" if where else err["msg"]
        return RecordingConfig(), f"the agent's metadata.recording is invalid ({problem})"


async def open_recording(
    gw: Gateway, call: RecordedSession, info: StartInfo
) -> CallRecording | None:
    """The call's recording, started, its consent message queued (the call's first words);
    None if the call is not recorded. A bad setting is an `invalid_option` error event, and
    the call goes on. Never raises."""
    try:
        rec = await _open(gw, call, info)
    except Exception:
        log.exception("call not recorded")
        return None
    if rec is not None and rec.consent:
        call.turns.put_nowait(UserTurn(rec.consent, new_id("turn"), greeting=True))
    return rec


async def _open(gw: Gateway, call: RecordedSession, info: StartInfo) -> CallRecording | None:
    record_id = gw.calls.record_of(call)
    config, complaint = _agent_config(call.agent)
    if complaint is not None:
        await call.transport.error("invalid_option", f"{complaint}; it is ignored")
    wanted = info.extra.get("record")
    if wanted is not None and not isinstance(wanted, bool):
        await call.transport.error(
            "invalid_option", "record must be true or false; using the agent's setting"
        )
        wanted = None
    if wanted is None and record_id is not None:  # an outbound call's `record: true`
        stored = (await CallStore(gw.memory.db).get(record_id)).options.get("record")
        wanted = True if stored is True else None  # (false is its default: not a refusal)
    if not (config.enabled if wanted is None else wanted):
        return None
    if record_id is None:
        log.warning("call not recorded: it has no call record")
        return None
    path = recordings_dir(gw.settings) / call.agent.id / f"{record_id}.wav"
    rates = (info.input_rate, info.output_rate)
    log.info("call %s is recorded at %d Hz", record_id, info.input_rate)
    return CallRecording(path, rates, record_id, config.consent_message)


async def close_recording(gw: Gateway, rec: CallRecording | None) -> None:
    """End the file and put its path on the call record; never raises."""
    if rec is None:
        return
    try:
        await asyncio.to_thread(rec.close)
        if not rec.failed:
            await CallStore(gw.memory.db).set_recording(rec.record_id, str(rec.path))
    except Exception:
        log.exception("recording %s not stored", rec.record_id)


async def remove(store: CallStore, found: list[tuple[str, str]]) -> int:
    """Delete these recordings' files and clear their paths; how many there were."""
    for call_id, path in found:
        await asyncio.to_thread(Path(path).unlink, missing_ok=True)
        await store.set_recording(call_id, None)
    return len(found)


async def erase_recordings(
    gw: Gateway, agent_ids: list[str], caller: str | None, conversation_ids: list[str]
) -> int:
    """A caller's erasure: the recordings of their calls (by key or conversation) go."""
    store = CallStore(gw.memory.db)
    found = await store.recordings(
        agent_ids=agent_ids, caller=caller, conversation_ids=conversation_ids
    )
    return await remove(store, found)


async def sweep(gw: Gateway, at: datetime | None = None) -> int:
    """Delete the recordings past retention as of `at` (now), and files that no record names
    by their age; how many."""
    keep = timedelta(days=gw.settings.recording_retention_days)
    before = (at or utcnow()) - keep
    store = CallStore(gw.memory.db)
    removed = await remove(store, await store.recordings(before=before))
    root = recordings_dir(gw.settings)
    removed += await asyncio.to_thread(_old_files, root, before.timestamp())
    if removed:
        log.info("recordings past retention deleted: %d", removed)
    return removed


def _old_files(root: Path, before: float) -> int:
    n = 0
    for path in root.glob("*/*.wav") if root.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < before:
                path.unlink()
                n += 1
    return n


class RecordingSweep:
    """The periodic retention sweep of a gateway process."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self._task: asyncio.Task[None] | None = None

    def start(self) -> RecordingSweep:
        self._task = asyncio.create_task(self._run(), name="recording-sweep")
        return self

    async def aclose(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await sweep(self.gw)
            except Exception:
                log.exception("recording sweep failed")
            await asyncio.sleep(SWEEP_EVERY_S)
