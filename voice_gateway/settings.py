"""Configuration from the environment (prefix VG_). The only module that reads the env, with
its base class voice_gateway/provider_keys.py (the LLM providers besides OpenAI).

Every field's `description` is its entry in docs/configuration.md
(`python -m voice_gateway.config_docs --write` regenerates that page)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict
from sqlalchemy.engine import make_url

from voice_gateway.provider_keys import ProviderKeys, env_field
from voice_gateway.turns.config import Detection, setting_field

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


class Settings(ProviderKeys):
    """Every knob of the gateway. Defaults give an embedded, offline server on loopback."""

    model_config = SettingsConfigDict(env_prefix="VG_", env_file=None, extra="ignore")

    host: str = Field(
        "127.0.0.1", description="Address to listen on (not loopback: needs an API key)."
    )
    port: int = Field(8283, description="TCP port of the HTTP and WebSocket server.")
    database_url: str = Field(
        "sqlite+aiosqlite:///./data/voice-gateway.db",
        description="SQLAlchemy URL of the database: SQLite (embedded) or "
        "`postgresql://user@host/db` for several gateways.",
    )
    redis_url: str | None = Field(
        None, description="Redis for the transcript stream, notifications, call slots, workers."
    )
    redis_max_connections: int = Field(
        100, ge=4, le=10_000, description="Redis connections per process; then commands wait."
    )
    run_owner_ttl_s: float = Field(
        15.0,
        ge=1.0,
        le=600.0,
        description="A background run's owner key lives this long unrenewed.",
    )
    api_key: str | None = Field(
        None,
        description="Admin bearer key. Unset: the API is open, and only on a loopback "
        "address. Per-user keys: `voice-gateway users create NAME`.",
    )
    session_secret: str | None = Field(
        None, description="HMAC secret of voice session tokens. Unset: derived from the API key."
    )
    public_url: str | None = Field(
        None, description="The public URL behind a proxy (Twilio signatures, own origin)."
    )
    log_level: str = Field("INFO", description="Log level of the `voice_gateway` loggers.")
    log_format: Literal["text", "json"] = Field(
        "text", description="`json`: one structured record per line, with the call id."
    )

    # Providers
    stt: str = Field(
        "whisper", description="Speech-to-text: `whisper` (local), `deepgram`, `openai`."
    )
    tts: str = Field(
        "espeak", description="Text-to-speech: `espeak`, `piper`, `openai`, `deepgram`."
    )
    vad: str = Field("webrtc", description="Voice activity detection: `webrtc` or `silero`.")
    vad_mode: int = Field(3, ge=0, le=3, description="webrtcvad aggressiveness.")
    default_model: str | None = Field(
        None, description="New agents' model. Unset: `openai/gpt-4o-mini` or `scripted/demo`."
    )
    default_embedding: str = Field(
        "local/all-minilm-l6-v2", description="Embedding handle of new agents."
    )
    openai_api_key: str | None = Field(
        None,
        validation_alias=AliasChoices("OPENAI_API_KEY", "VG_OPENAI_API_KEY"),
        description="Key of the OpenAI-compatible endpoint (`openai/<model>` handles, "
        "OpenAI STT and TTS).",
    )
    openai_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("OPENAI_BASE_URL", "VG_OPENAI_BASE_URL"),
        description="Any OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp, SGLang). "
        "Unset: OpenAI's.",
    )
    deepgram_api_key: str | None = Field(
        None,
        validation_alias=AliasChoices("DEEPGRAM_API_KEY", "VG_DEEPGRAM_API_KEY"),
        description="Deepgram key (speech-to-text and Aura text-to-speech).",
    )
    deepgram_base_url: str | None = Field(
        None, description="Deepgram's endpoint; tests point the SDK at a loopback server."
    )
    twilio_auth_token: str | None = env_field(
        "TWILIO_AUTH_TOKEN",
        "Twilio auth token: the signature check of Twilio's requests, and (with "
        "`TWILIO_ACCOUNT_SID`) the password of Twilio's REST API for outbound calls and "
        "hang-ups. `VG_TWILIO_AUTH_TOKEN` is accepted too.",
    )
    twilio_account_sid: str | None = env_field(
        "TWILIO_ACCOUNT_SID",
        "Twilio account SID (`AC...`): with the auth token, enables outbound calls "
        "(`POST /v1/agents/{id}/calls`) and hang-ups over Twilio's REST API.",
    )
    twilio_api_url: str | None = Field(
        None,
        description="Base URL of Twilio's REST API, e.g. `https://api.dublin.ie1.twilio.com` "
        "for a regional edge; tests point the `twilio` SDK at a loopback server. Unset: "
        "`https://api.twilio.com`.",
    )
    dial_out_allowlist: str | None = Field(
        None,
        description="Comma-separated E.164 prefixes outbound calls may dial (e.g. "
        "`+1555,+44`); a number outside them is refused with 403. Unset: any number (only "
        "an authenticated operator places calls).",
    )

    # Voice pipeline
    voice: bool = Field(
        True,
        description="Load STT, TTS and VAD at start and serve calls (false: the text API only).",
    )
    # Turn-taking: the fields of voice_gateway/turns/config.py `TurnConfig` (default, bounds
    # and description there; a call's own options are held to the same bounds)
    endpoint_silence_ms: int = setting_field("silence_ms")
    min_speech_ms: int = setting_field("min_speech_ms")
    turn_detection: Detection = setting_field("detection")
    turn_min_silence_ms: int = setting_field("min_silence_ms")
    turn_max_silence_ms: int = setting_field("max_silence_ms")
    turn_threshold: float = setting_field("threshold")
    turn_workers: int = setting_field("model_workers")
    turn_budget_ms: int = setting_field("budget_ms")
    turn_text_wait_ms: int = setting_field("text_wait_ms")
    turn_defer_model: bool = setting_field("defer_model")
    turn_fade_db: float = setting_field("fade_db")
    turn_sentence_ms: int | None = setting_field("sentence_ms")
    turn_window: bool = setting_field("model_window")
    backchannels: str = Field(
        "mm-hmm,mhm,mm,hmm,uh-huh,uh huh,yeah,yep,yes,okay,ok,right,sure,got it,i see,alright,"
        "all right,uh,um,oh,ah,cool,great,nice,exactly,true",
        description="Comma-separated phrases that never interrupt a reply when the caller says "
        "only them over it (acknowledgements, not turns).",
    )
    barge_in_check_ms: int = Field(
        360,
        ge=100,
        le=2000,
        description="Speech over a reply this long is transcribed and judged (echo, "
        "backchannel or a real interruption) before the reply is cancelled.",
    )
    barge_in_max_ms: int = Field(
        1000, ge=200, le=5000, description="Speech over a reply this long always cancels it."
    )
    echo_cancellation: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Server-side echo cancellation (WebRTC AEC3) of the reply in the "
        "caller's audio; auto: on for phone calls. A call may set `echo_cancellation`.",
    )
    idle_timeout_s: float = Field(
        60.0, description="A call with no audio this long is closed (1001)."
    )
    recording_retention_days: float = Field(
        30.0, gt=0, description="Call recordings are deleted this many days after the call."
    )
    stt_workers: int = Field(2, ge=1, le=16, description="Local whisper: decodes at once.")
    stt_threads: int = Field(1, ge=1, le=16, description="Local whisper: threads per decode.")
    blas_threads: int = Field(
        1, ge=0, le=64, description="numpy's BLAS threads per process; 0: one per core."
    )
    stt_partials: bool = Field(
        False, description="Local whisper: send partial transcripts (~every 700 ms of speech)."
    )
    # Provider options, one meaning each (checked against the vendor's published list at
    # start: voice_gateway/provider_check.py)
    espeak_voice: str | None = Field(
        None,
        description="espeak-ng voice: a name, language or file from `espeak-ng --voices`, "
        "optionally `+variant`. Unset: `en-us` (or the deprecated `VG_TTS_VOICE`).",
    )
    piper_voice: str = Field(
        "joe-us",
        description="The bundled Piper voice, or the path of a Piper `.onnx` voice (its "
        "`.onnx.json` beside it).",
    )
    openai_tts_voice: str | None = Field(None, description="OpenAI speech voice. Unset: alloy.")
    openai_tts_model: str = Field("gpt-4o-mini-tts", description="OpenAI speech model.")
    openai_stt_model: str = Field(
        "gpt-4o-mini-transcribe", description="OpenAI transcription model."
    )
    openai_stt_base_url: str | None = Field(
        None,
        description="OpenAI transcription endpoint, so speech-to-text can go elsewhere than "
        "the LLM. Unset: `OPENAI_BASE_URL`.",
    )
    deepgram_stt_model: str = Field("nova-3", description="Deepgram listen model.")
    deepgram_tts_voice: str = Field("aura-2-thalia-en", description="Deepgram Aura voice.")
    tts_voice: str | None = Field(
        None,
        description="Deprecated (a warning at start): use `VG_ESPEAK_VOICE`. The espeak "
        "voice, and an OpenAI voice unless it starts with `en`.",
    )
    session_token_ttl_s: int = Field(300, description="Lifetime of a voice session token.")
    ice_servers: str | None = Field(
        None,
        description="WebRTC STUN/TURN servers, also given to clients (docs/webrtc.md). "
        "Unset: none, no public server is asked; host candidates only.",
    )
    webrtc_host_addresses: str | None = Field(
        None,
        description="Addresses WebRTC host candidates bind (`127.0.0.1` for loopback-only "
        "hosts). Unset: every interface.",
    )
    webrtc_udp_ports: str | None = Field(
        None,
        description="WebRTC UDP port range `LOW-HIGH`, for firewalls. Unset: ephemeral ports.",
    )

    # Agent loop
    max_steps: int = Field(6, description="Model calls per agent request, at most.")
    context_token_budget: int = Field(
        6000, description="Tokens of in-context messages before older ones are summarized."
    )
    llm_timeout_s: float = Field(
        60.0, description="Text API: wait for the model's first (and each next) chunk."
    )

    # Custom tools: each call runs in a sandboxed process (docs/rest_api.md, "Custom tools")
    tool_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Custom tools: wall clock per call."
    )
    tool_cpu_s: int = Field(5, ge=1, le=600, description="Custom tools: CPU seconds per call.")
    tool_memory_mb: int = Field(
        256, ge=64, le=65536, description="Custom tools: address space per call (RLIMIT_AS)."
    )
    tool_max_output_bytes: int = Field(
        64_000, ge=1000, description="Custom tools: stdout and stderr, each."
    )
    tool_return_char_limit: int = Field(
        50_000, ge=100, le=1_000_000, description="A longer tool return is cut, with a note."
    )
    tool_max_concurrent: int = Field(
        4, ge=1, le=256, description="Sandboxed custom-tool calls at once per process."
    )
    tool_namespaces: bool = Field(
        True, description="Run custom tools in network/mount namespaces where the OS allows."
    )
    sandbox_allow_weak: bool = Field(
        False,
        description="Without namespaces custom tools are refused (start log, 403 on "
        "creation, tool error on call); true: run them with the remaining layers (SECURITY.md).",
    )
    mcp_timeout_s: float = Field(
        8.0, gt=0, le=600, description="MCP servers: time-out of a tool call or listing."
    )
    mcp_connect_timeout_s: float = Field(
        8.0, gt=0, le=600, description="MCP servers: time-out of opening a session."
    )
    secrets_key: str | None = Field(
        None,
        description="Key of secrets stored encrypted at rest (MCP tokens, headers, env). "
        "Unset: the key file's (VG_SECRETS_KEY_FILE).",
    )
    secrets_key_file: Path | None = Field(
        None,
        description="File holding the secrets key when VG_SECRETS_KEY is unset: made on the "
        "first start (owner-only), read on later ones; an unreadable or corrupt file stops "
        "the start. Unset: secrets.key in the data directory (docs/operations.md)",
    )
    mcp_stdio_dirs: str = Field(
        "",
        description="Directories, separated by ':', that stdio MCP servers may read "
        "(read-only) besides the "
        "system and Python runtime directories, e.g. where a server's script and its "
        "packages live; a server whose command or script lies outside them is refused with "
        "a 422 naming the path (docs/tools.md)",
    )

    # Provider faults: time-outs and fallbacks (docs/operations.md, "Provider faults")
    llm_voice_timeout_s: float = Field(
        8.0, gt=0, description="Voice turns: wait for the model's first (and each next) chunk."
    )
    stt_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Wait for an utterance's final transcript; then an apology and an "
        "`error` event.",
    )
    tts_timeout_s: float = Field(
        10.0, gt=0, description="Wait for a sentence's first (and each next) audio chunk."
    )
    stt_fallback: str | None = Field(
        None,
        description="A second STT used when the first fails before any output, e.g. "
        "`VG_STT=deepgram`, `VG_STT_FALLBACK=whisper`.",
    )
    tts_fallback: str | None = Field(
        None,
        description="A second TTS used when the first fails before any output, e.g. "
        "`VG_TTS=openai`, `VG_TTS_FALLBACK=espeak`.",
    )
    llm_fallback: str | None = Field(
        None,
        description="A model handle answering when an agent's model fails before any "
        "output, e.g. `openai/gpt-4o-mini`.",
    )
    fallback_cooldown_s: float = Field(
        30.0, ge=0, description="After a failure, skip the primary provider this long."
    )

    # Sleeptime / bus
    sleeptime_every_turns: int = Field(
        5, description="Run the sleeptime agent every N user turns (and when a call ends)."
    )
    sleeptime_model: str | None = Field(
        None, description="Model handle for memory rewriting. Unset: the agent's own."
    )
    transcripts_maxlen: int = Field(
        100_000, description="Approximate length of the Redis stream `vg:transcripts`."
    )
    claim_idle_ms: int = Field(
        30_000, description="A worker reclaims another's entry pending this long (XAUTOCLAIM)."
    )
    max_deliveries: int = Field(
        5, description="Deliveries of a transcript entry before it goes to the dead stream."
    )
    sleeptime_test_delay_s: float = Field(
        0.0, description="Tests only: stall each memory rewrite before its commit."
    )

    # Scheduled messages (voice_gateway/scheduler.py, docs/rest_api.md)
    schedule_tick_s: float = Field(
        1.0, ge=0, le=60, description="How often to look for due scheduled messages; 0: never."
    )
    schedule_cron_seconds: bool = Field(
        False, description="Cron expressions take an optional leading seconds field."
    )

    # Call webhooks (voice_gateway/webhooks.py, docs/call_reports.md)
    call_webhook_url: str | None = Field(None, description="Gets each call's `call.ended` POST.")
    call_webhook_secret: str | None = Field(None, description="Its HMAC-SHA256 signing key.")
    call_webhook_attempts: int = Field(8, ge=1, le=50, description="Attempts, then dropped.")
    call_webhook_timeout_s: float = Field(10.0, gt=0, le=120, description="Wait per attempt.")
    call_webhook_backoff_s: float = Field(
        2.0, ge=0, le=600, description="First retry's pause; it doubles, with jitter."
    )

    # HTTP limits
    max_body_bytes: int = Field(1_000_000, description="Request body; beyond: 413.")
    max_file_bytes: int = Field(
        20_000_000, ge=1, description="One upload to a folder; beyond: 413."
    )
    max_header_bytes: int = Field(
        16_384,
        ge=1024,
        description="Request line plus headers; beyond: 431 and the connection closed, by "
        "the HTTP server before any route.",
    )
    drain_timeout_s: float = Field(
        10.0,
        ge=0,
        validation_alias=AliasChoices("VG_DRAIN_TIMEOUT_S", "VG_SHUTDOWN_GRACE_S"),
        description="On SIGTERM browser calls finish their turn and reconnect elsewhere "
        "(1012); phone calls go on until they end or this runs out. Keep the service "
        "manager's stop timeout (compose `stop_grace_period`) 10 s above it.",
    )
    ws_fast_path: bool = Field(
        True,
        description="Our fast path for plain data frames on uvicorn's websockets-sansio "
        'protocol (docs/operations.md, "WebSocket server"); false: uvicorn\'s as it ships.',
    )
    gc_full_every: int = Field(
        10, ge=1, description="A full garbage collection after this many middle-generation ones."
    )
    gc_young_every: int = Field(
        5000, ge=1, description="Allocations between young collections (CPython's default: 700)."
    )

    # Rate limits and quotas per identity (docs/operations.md, "Rate limits and quotas")
    rate_limit_rps: float = Field(
        100.0, ge=0, description="REST requests/s per identity; over it: 429. 0: off."
    )
    rate_limit_burst: int | None = Field(
        None, ge=1, description="Burst of REST requests per identity. Unset: two seconds' worth."
    )
    max_concurrent_calls: int = Field(
        1000, ge=0, description="Live calls per identity (more: close 4429); 0: no limit."
    )
    call_minutes_per_day: float = Field(
        0.0, ge=0, description="Call minutes per identity and UTC day (out: 4429); 0: no limit."
    )
    call_lease_s: float = Field(
        30.0, gt=0, description="With Redis, a call slot's lease (refreshed every third of it)."
    )
    quota_flush_s: float = Field(
        10.0, gt=0, description="How often call seconds are added up into the quota."
    )
    allowed_origins: str | None = Field(
        None,
        description="Browser origins allowed on the sockets and REST: comma list, "
        "`https://*.example.com` patterns, `*` = any. Unset: own origin + loopback.",
    )

    # Admission control per process (voice_gateway/capacity.py, docs/operations.md)
    process_max_calls: int = Field(
        500, ge=0, description="Live calls per process; more are refused (1013, 503). 0: no limit."
    )
    admit_max_lag_ms: float = Field(
        200.0, ge=0, description="Smoothed event-loop lag that refuses new calls (1013); 0: off."
    )
    workers: int = Field(
        1, ge=1, le=64, description="Processes sharing the port (more than 1 needs Redis)."
    )

    def secrets(self) -> list[str]:
        """Configured secrets, for the log redaction filter."""
        values = (
            self.api_key,
            self.session_secret,
            self.secrets_key,
            self.openai_api_key,
            self.deepgram_api_key,
            self.twilio_auth_token,
            self.call_webhook_secret,
            *(p.api_key for p in self.llm_providers().values()),
        )
        return [v for v in values if v]

    @property
    def espeak_voice_name(self) -> str:
        return self.espeak_voice or self.tts_voice or "en-us"

    @property
    def openai_tts_voice_name(self) -> str:
        # the deprecated VG_TTS_VOICE as before: an "en..." (espeak) name means alloy
        legacy = self.tts_voice if self.tts_voice and not self.tts_voice.startswith("en") else None
        return self.openai_tts_voice or legacy or "alloy"

    @property
    def openai_stt_url(self) -> str | None:
        return self.openai_stt_base_url or self.openai_base_url

    @cached_property
    def data_dir(self) -> Path:
        """The SQLite database's directory; ./data with a database server."""
        url = make_url(self.database_url)
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            return Path(url.database).parent
        return Path("./data")

    @property
    def mcp_stdio_paths(self) -> list[str]:
        """VG_MCP_STDIO_DIRS as absolute, resolved paths."""
        return [str(Path(p).resolve()) for p in self.mcp_stdio_dirs.split(":") if p.strip()]

    @property
    def secrets_key_path(self) -> Path:
        return self.secrets_key_file or self.data_dir / "secrets.key"

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    def check_bind_safety(self) -> None:
        """Refuse to serve an unauthenticated API on a non-loopback address."""
        if not self.api_key and not self.is_loopback:
            raise SystemExit(
                f"refusing to bind to {self.host} without VG_API_KEY: set VG_API_KEY or "
                "bind to 127.0.0.1"
            )
