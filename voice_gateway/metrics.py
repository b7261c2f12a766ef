"""Prometheus metrics of one gateway process (`GET /metrics`).

Counters and histograms are updated where things happen (calls, replies, providers); gauges
that describe state (active calls, outbox backlog, stream lag) are read when scraped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
STAGES = ("endpointing", "stt", "llm_ttft", "tts_ttfb", "filler")
__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "Probe"]


class TurnVerdict(Protocol):
    """What decided a turn's end (the end-of-turn detector's Verdict)."""

    @property
    def source(self) -> str: ...  # model | text | fallback

    @property
    def reason(self) -> str: ...  # a fallback's: busy | timeout | late | error


Probe = Callable[["Metrics"], Awaitable[None]]


class Metrics:
    def __init__(self) -> None:
        self.probes: list[Probe] = []
        r = self.registry = CollectorRegistry()
        self.active_calls = Gauge(
            "vg_active_calls", "Voice calls in progress", ["source"], registry=r
        )
        self.calls = Counter("vg_calls_total", "Voice calls accepted", ["source"], registry=r)
        self.turns = Counter("vg_turns_total", "Finished agent turns", ["source"], registry=r)
        self.voice_to_voice = Histogram(
            "vg_voice_to_voice_seconds",
            "End of the caller's speech to the first reply audio frame sent",
            ["source"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "vg_stage_seconds",
            "Per-stage latency of a voice turn",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.barge_ins = Counter("vg_barge_ins_total", "Replies cut off by the caller", registry=r)
        self.turn_ends = Counter(
            "vg_turn_ends_total", "Caller turns ended, by what decided", ["by"], registry=r
        )  # by: silence (the VAD rule) | model | text | fallback
        self.turn_fallbacks = Counter(
            "vg_turn_detector_fallbacks_total",
            "Pauses the end-of-turn model did not decide (the silence rule did)",
            ["reason"],
            registry=r,
        )  # reason: busy (pool full, or whisper's decodes queue) | timeout (over VG_TURN_BUDGET_MS)
        # | late (the model not answered by VG_ENDPOINT_SILENCE_MS of silence) | error
        self.speech_ignored = Counter(
            "vg_speech_ignored_total",
            "Speech during a reply that did not cancel it",
            ["reason"],
            registry=r,
        )  # reason: backchannel | echo
        self.echo_frames = Counter(
            "vg_echo_cancelled_seconds_total",
            "Caller audio run through the echo canceller while reply audio played",
            registry=r,
        )
        self.filler_plays = Counter(
            "vg_filler_plays_total", "Spoken fillers", ["kind"], registry=r
        )  # kind: pre_exec_msg | cached
        self.provider_errors = Counter(
            "vg_provider_errors_total", "Provider failures", ["kind", "provider"], registry=r
        )  # kind: stt | tts | llm
        self.outbox_depth = Gauge(
            "vg_outbox_depth", "Finished turns not yet on the transcript bus", registry=r
        )
        self.outbox_age = Gauge(
            "vg_outbox_oldest_age_seconds", "Age of the oldest unpublished turn", registry=r
        )
        self.stream_lag = Gauge(
            "vg_transcript_stream_lag",
            "Entries of vg:transcripts not yet read by workers",
            registry=r,
        )
        self.stream_pending = Gauge(
            "vg_transcript_stream_pending",
            "Entries read by workers, not yet acknowledged",
            registry=r,
        )
        self.published = Gauge(
            "vg_outbox_published", "Turns this process moved to the bus", registry=r
        )
        self.provider_served = Gauge(
            "vg_provider_served",
            "With a fallback configured: work done per provider (stt: utterances, tts: "
            "sentences, llm: model calls), primary and fallback",
            ["kind", "provider"],
            registry=r,
        )
        self.rate_limited = Counter(
            "vg_rate_limited_total",
            "Requests and calls refused by rate limits and quotas",
            ["kind"],
            registry=r,
        )  # kind: rest (429) | calls (concurrent calls, 4429) | minutes (call minutes, 4429)
        self.calls_refused = Counter(
            "vg_calls_refused_total",
            "New calls refused because this process is at capacity (close 1013, HTTP 503)",
            ["source", "reason"],
            registry=r,
        )  # source: voice | phone | twilio_webhook | webrtc; reason: slots | lag

    def observe_turn(self, source: str, m: dict[str, Any]) -> None:
        """A voice turn finished: its `turn.metrics` event fields (milliseconds or None)."""
        self.turns.labels(source).inc()
        v2v = m.get("voice_to_voice_ms")
        if v2v is not None:
            self.voice_to_voice.labels(source).observe(v2v / 1000)
        for stage in STAGES:
            value = m.get(f"{stage}_ms")
            if value is not None:
                self.stage.labels(stage).observe(value / 1000)

    def turn_ended(self, verdict: TurnVerdict | None) -> None:
        """A caller's turn ended; `verdict`: the end-of-turn Verdict, None for the VAD rule."""
        self.turn_ends.labels("silence" if verdict is None else verdict.source).inc()
        if verdict is not None and verdict.source == "fallback":
            self.turn_fallbacks.labels(verdict.reason).inc()

    def text_turn(self, stop_reason: str, model: str, source: str = "text") -> None:
        """A turn over the text API or chat completions finished (source "voice" for chat
        completions in voice mode: a platform such as LiveKit speaks it)."""
        self.turns.labels(source).inc()
        if stop_reason == "llm_api_error":
            self.provider_error("llm", model)

    def provider_error(self, kind: str, provider: str) -> None:
        """kind: stt | tts | llm; provider: a provider name or a model handle."""
        self.provider_errors.labels(kind, provider.partition("/")[0]).inc()

    def probe(self, refresh: Probe) -> None:
        """A component's state gauges: `refresh(metrics)` runs on every scrape."""
        self.probes.append(refresh)

    def served(self, kind: str, counts: Mapping[str, int]) -> None:
        """With a fallback configured: work done per provider of one kind (stt, tts, llm)."""
        for provider, n in counts.items():
            self.provider_served.labels(kind, provider).set(n)

    async def render(self) -> bytes:
        """Refresh the state gauges from the components' probes, then the exposition text."""
        for refresh in self.probes:
            try:
                await refresh(self)
            except Exception:  # one component's state missing leaves the others reported
                log.warning("metrics: a probe failed", exc_info=True)
        return generate_latest(self.registry)
