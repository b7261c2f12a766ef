"""Deepgram live transcription (deepgram-sdk 7.x `listen.v1.connect`, optional extra).

One socket per call, opened when the call starts and kept across utterances (KeepAlive while
the caller is quiet). Our VAD decides where an utterance ends: `finish()` sends Finalize and
waits until Deepgram's final results cover all the audio sent (a `from_finalize` result, or
finals whose end reaches the cut). Interim results become partial transcripts; Deepgram's own
endpointing (speech_final), UtteranceEnd and SpeechStarted events are counted for metrics.

A single sender task owns the socket, so the audio path never waits on the network: `push()`
only queues. If the socket drops, the sender re-opens it and re-sends the audio of every
utterance not yet transcribed (results arrive on a fresh timeline), then carries on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from voice_gateway.stt.base import PartialCallback, STTError, STTProvider, STTStream
from voice_gateway.tts.deepgram import deepgram_client

log = logging.getLogger(__name__)
BYTES_PER_S = 32000  # 16 kHz PCM16 mono


@dataclass(slots=True)
class _Closing:
    """An utterance that ended (our VAD) and waits for its final transcript."""

    audio: bytes
    finals: list[str]
    cut: float | None = None  # its end on the current connection's audio timeline
    done: asyncio.Event = field(default_factory=asyncio.Event)
    error: STTError | None = None


_FINALIZE, _RECONNECT = object(), object()


class DeepgramStream(STTStream):
    provider = "deepgram"

    def __init__(self, stt: DeepgramSTT, on_partial: PartialCallback | None) -> None:
        super().__init__()
        self.stt, self.on_partial = stt, on_partial
        self._q: asyncio.Queue[object] = asyncio.Queue()
        self._cm: Any = None
        self._conn: Any = None
        self._receiver: asyncio.Task[None] | None = None
        self._sent_s = 0.0  # audio seconds sent on this connection
        self._final_end = 0.0  # where its latest final result ends
        self._utt = bytearray()  # audio of the utterance in progress
        self._current: list[str] = []  # its final results so far
        self._closings: list[_Closing] = []
        self._has_audio = False
        self._retry_at = 0.0
        self._backoff = 0.2
        self._fatal: STTError | None = None
        self.connections = self.reconnects = self.vendor_speech_started = self.utterance_ends = 0
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    # ---- the caller's side -------------------------------------------------------------------

    async def push(self, pcm16_16k: bytes) -> None:
        self.push_now(pcm16_16k)

    def push_now(self, pcm16_16k: bytes) -> bool:
        self._has_audio = True
        self._q.put_nowait(pcm16_16k)
        return True

    async def _finish(self) -> str:
        if not self._has_audio:
            return ""
        self._has_audio = False
        closing = _Closing(b"", [])
        self._q.put_nowait((_FINALIZE, closing))
        try:
            await asyncio.wait_for(closing.done.wait(), self.stt.finalize_wait_s)
        except TimeoutError as exc:
            if not closing.finals:
                msg = "no final transcript after Finalize"
                raise STTError(self.provider, msg, retryable=True) from exc
            log.warning("deepgram: no from_finalize result; using the finals received")
        finally:
            with contextlib.suppress(ValueError):
                self._closings.remove(closing)
        if closing.error is not None:
            raise closing.error
        return " ".join(closing.finals)

    async def reset(self) -> None:
        self._has_audio = False
        self._q.put_nowait((_FINALIZE, None))  # drop the utterance without waiting

    async def aclose(self) -> None:
        self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.send_close_stream()
        await self._drop()

    # ---- the sender task: owns the socket ----------------------------------------------------

    async def _send_loop(self) -> None:
        await self._connect()
        while True:
            if self._q.empty():
                try:
                    async with asyncio.timeout(self.stt.keepalive_s):
                        item = await self._q.get()
                except TimeoutError:
                    if self._conn is not None:
                        with contextlib.suppress(Exception):
                            await self._conn.send_keep_alive()
                    continue
            else:
                item = self._q.get_nowait()
            if isinstance(item, bytes):
                self._utt += item
                if self._conn is None or not await self._send(item):
                    await self._connect()  # re-sends the utterance, this frame included
            elif item is _RECONNECT:
                if self._conn is None and self._closings:
                    await self._connect(attempts=3)
            else:
                assert isinstance(item, tuple)
                await self._begin_closing(item[1])

    async def _begin_closing(self, closing: _Closing | None) -> None:
        audio, finals = bytes(self._utt), self._current
        self._utt, self._current = bytearray(), []
        if closing is None:  # reset(): forget the utterance
            return
        closing.audio, closing.finals = audio, finals
        self._closings.append(closing)
        if self._conn is None:
            await self._connect(attempts=3)  # re-sends this utterance and finalizes it
        else:
            closing.cut = self._sent_s
            if self._final_end >= closing.cut - 0.02:  # endpointing already finalized it all
                closing.done.set()
            if not await self._finalize():
                await self._connect(attempts=3)

    async def _send(self, pcm: bytes) -> bool:
        try:
            await self._conn.send_media(pcm)
        except Exception as exc:
            log.warning("deepgram: send failed (%s); reconnecting", exc)
            self._conn = None
            return False
        self._sent_s += len(pcm) / BYTES_PER_S
        return True

    async def _finalize(self) -> bool:
        try:
            await self._conn.send_finalize()
        except Exception:
            self._conn = None
            return False
        return True

    async def _connect(self, attempts: int = 1) -> None:
        """(Re)open the socket; re-send what is not transcribed yet. Failures are recorded on
        the waiting utterances (never raised: the audio path must keep going)."""
        if self._fatal is not None:
            return self._fail(self._fatal)
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self._backoff)
            if time.monotonic() < self._retry_at and attempt == 0 and attempts == 1:
                return None
            try:
                await self._open()
                break
            except STTError as exc:
                if not exc.retryable:
                    self._fatal = exc
                    return self._fail(exc)
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, 5.0)
                if attempt == attempts - 1:
                    return self._fail(exc) if self._closings else None
        self._backoff = 0.2
        for c in self._closings:  # utterances that ended but were not transcribed
            if c.done.is_set():
                continue
            c.finals = []
            c.cut = self._sent_s + len(c.audio) / BYTES_PER_S
            if c.audio and not await self._send(c.audio):
                return None
            if not await self._finalize():
                return None
        if self._utt:
            await self._send(bytes(self._utt))
        return None

    def _fail(self, exc: STTError) -> None:
        for c in self._closings:
            if not c.done.is_set():
                c.error = exc
                c.done.set()

    async def _open(self) -> None:
        from deepgram.core.api_error import ApiError

        await self._drop()
        try:
            cm = self.stt.client.listen.v1.connect(**self.stt.params)
            async with asyncio.timeout(self.stt.connect_timeout_s):
                conn = await cm.__aenter__()
        except ApiError as exc:
            fatal = exc.status_code in (401, 403)
            what = "rejected the API key" if fatal else "refused the connection"
            raise STTError(
                self.provider, f"{what} (HTTP {exc.status_code})", retryable=not fatal
            ) from exc
        except Exception as exc:
            raise STTError(self.provider, f"cannot connect: {exc}", retryable=True) from exc
        if self.connections:
            self.reconnects += 1
        self.connections += 1
        self._cm, self._conn, self._sent_s, self._final_end = cm, conn, 0.0, 0.0
        self._current = []
        self._receiver = asyncio.get_running_loop().create_task(self._receive(conn))

    async def _drop(self) -> None:
        task, self._receiver = self._receiver, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        cm, self._cm, self._conn = self._cm, None, None
        if cm is not None:
            with contextlib.suppress(Exception):
                await cm.__aexit__(None, None, None)

    # ---- the receiver task: one per connection -----------------------------------------------

    async def _receive(self, conn: Any) -> None:
        try:
            while True:
                msg = await conn.recv()
                if conn is not self._conn:
                    return
                await self._on_message(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("deepgram socket dropped: %s", exc)
        if conn is self._conn:
            self._conn = None  # the next frame (or a waiting Finalize) re-opens it
            self._q.put_nowait(_RECONNECT)

    async def _on_message(self, msg: Any) -> None:
        kind = getattr(msg, "type", None)
        if kind == "Results":
            await self._on_results(msg)
        elif kind == "SpeechStarted":
            self.vendor_speech_started += 1
        elif kind == "UtteranceEnd":
            self.utterance_ends += 1
        elif kind == "Error":
            log.warning("deepgram error: %s", getattr(msg, "description", msg))

    async def _on_results(self, msg: Any) -> None:
        alts = msg.channel.alternatives
        text = alts[0].transcript.strip() if alts else ""
        start, end = float(msg.start), float(msg.start) + float(msg.duration)
        closing = next((c for c in self._closings if c.cut is not None and start < c.cut), None)
        if not msg.is_final:
            if closing is None and text and self.on_partial is not None:
                await self.on_partial(" ".join([*self._current, text]))
            return
        self._final_end = max(self._final_end, end)
        if closing is None:
            if text:
                self._current.append(text)
            return
        if text:
            closing.finals.append(text)
        assert closing.cut is not None
        if msg.from_finalize or end >= closing.cut - 0.02:
            closing.done.set()


class DeepgramSTT(STTProvider):
    name = "deepgram"
    streaming = True

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        model: str = "nova-3",
        endpointing_ms: int = 300,
        utterance_end_ms: int = 1000,
    ) -> None:
        if not api_key:
            raise ValueError("VG_STT=deepgram needs DEEPGRAM_API_KEY")
        self.client = deepgram_client(api_key, base_url)
        self.params: dict[str, Any] = {
            "model": model,
            "encoding": "linear16",
            "sample_rate": "16000",
            "channels": "1",
            "interim_results": "true",
            "endpointing": str(endpointing_ms),
            "utterance_end_ms": str(utterance_end_ms),
            "vad_events": "true",
            "smart_format": "true",
        }
        self.keepalive_s = 5.0  # Deepgram closes a socket after ~10 s without data
        self.finalize_wait_s = 5.0
        self.connect_timeout_s = 5.0

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return DeepgramStream(self, on_partial)
