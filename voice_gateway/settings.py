"""Configuration from the environment (prefix VG_). The only module that reads the env."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from agents.llm.providers import ProviderEndpoint

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


def _env(name: str, default: str | None = None) -> Any:
    """A setting read from Letta's own variable name (e.g. ANTHROPIC_API_KEY) or VG_<name>."""
    return Field(default, validation_alias=AliasChoices(name, f"VG_{name}"))


class Settings(BaseSettings):
    """Every knob of the gateway. Defaults give an embedded, offline server on loopback."""

    model_config = SettingsConfigDict(env_prefix="VG_", env_file=None, extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8283
    database_url: str = "sqlite+aiosqlite:///./data/voice-gateway.db"
    redis_url: str | None = None
    redis_max_connections: int = Field(100, ge=4, le=10_000)  # a command waits for a free one
    # a background run's owner key lives this long unrenewed (voice_gateway/run_mirror.py)
    run_owner_ttl_s: float = Field(15.0, ge=1.0, le=600.0)
    api_key: str | None = None
    session_secret: str | None = None
    public_url: str | None = None
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = "text"

    # Providers
    stt: str = "whisper"
    tts: str = "espeak"
    vad: str = "webrtc"
    vad_mode: int = Field(3, ge=0, le=3)
    default_model: str | None = None
    default_embedding: str = "local/all-minilm-l6-v2"
    openai_api_key: str | None = Field(
        None, validation_alias=AliasChoices("OPENAI_API_KEY", "VG_OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("OPENAI_BASE_URL", "VG_OPENAI_BASE_URL")
    )
    deepgram_api_key: str | None = Field(
        None, validation_alias=AliasChoices("DEEPGRAM_API_KEY", "VG_DEEPGRAM_API_KEY")
    )
    deepgram_base_url: str | None = None  # tests point the SDK at a loopback server
    # LLM providers besides OpenAI, by Letta's variable names (docs/rest_api.md, "Models and
    # providers"); a *_BASE_URL of a cloud vendor overrides its public endpoint
    anthropic_api_key: str | None = _env("ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = _env("ANTHROPIC_BASE_URL")
    gemini_api_key: str | None = _env("GEMINI_API_KEY")
    gemini_base_url: str | None = _env("GEMINI_BASE_URL")
    groq_api_key: str | None = _env("GROQ_API_KEY")
    groq_base_url: str | None = _env("GROQ_BASE_URL")
    together_api_key: str | None = _env("TOGETHER_API_KEY")
    together_base_url: str | None = _env("TOGETHER_BASE_URL")
    mistral_api_key: str | None = _env("MISTRAL_API_KEY")
    mistral_base_url: str | None = _env("MISTRAL_BASE_URL")
    azure_api_key: str | None = _env("AZURE_API_KEY")
    azure_base_url: str | None = _env("AZURE_BASE_URL")  # https://<resource>.openai.azure.com
    ollama_base_url: str | None = _env("OLLAMA_BASE_URL")  # http://localhost:11434
    vllm_api_base: str | None = _env("VLLM_API_BASE")  # http://localhost:8000
    lmstudio_base_url: str | None = _env("LMSTUDIO_BASE_URL")  # http://localhost:1234
    llamacpp_base_url: str | None = _env("LLAMACPP_BASE_URL")  # http://localhost:8080
    sglang_api_base: str | None = _env("SGLANG_API_BASE")  # http://localhost:30000
    twilio_auth_token: str | None = None

    # Voice pipeline
    voice: bool = True  # load STT/TTS/VAD at start (False: text API only)
    endpoint_silence_ms: int = 400
    min_speech_ms: int = 200
    # Turn-taking (docs/operations.md "Turn-taking")
    # auto: smart's signals within the silence rule's time: only words that run on hold a turn
    # past it (docs/operations.md "Turn-taking"); vad on every call in stop 47, smart on phone
    # calls in stops 42-46
    turn_detection: Literal["auto", "vad", "smart"] = "auto"
    turn_min_silence_ms: int = Field(200, ge=60, le=2000)  # smart: the pause the model judges
    turn_max_silence_ms: int = Field(1600, ge=200, le=5000)  # smart: longest wait on "not done"
    turn_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    turn_workers: int = Field(2, ge=1, le=16)  # end-of-turn model threads per process
    turn_budget_ms: int = Field(300, ge=20, le=2000)  # a slower verdict falls back to silence
    # smart: how long "done" waits for a transcript being decoded that will be the turn's
    turn_text_wait_ms: int = Field(400, ge=0, le=2000)
    # smart: ... and the model is asked only if that transcript cannot tell (decision.py step 0)
    turn_defer_model: bool = True
    # smart: "done" also needs the voice faded this far (dB) at its last sound; 0 = not asked
    turn_fade_db: float = Field(-21.0, ge=-60.0, le=0.0)
    # a finished sentence in the transcript ends the turn after this silence; 0 = never;
    # unset: never for smart, AUTO_SENTENCE_MS for auto
    turn_sentence_ms: int | None = Field(None, ge=0, le=5000)
    # smart: the model runs on a window cut to the utterance + 2 s (endpoint/window.py), not 8 s
    turn_window: bool = True
    backchannels: str = (
        "mm-hmm,mhm,mm,hmm,uh-huh,uh huh,yeah,yep,yes,okay,ok,right,sure,got it,i see,alright,"
        "all right,uh,um,oh,ah,cool,great,nice,exactly,true"
    )
    barge_in_check_ms: int = Field(360, ge=100, le=2000)  # speech transcribed before cancelling
    barge_in_max_ms: int = Field(1000, ge=200, le=5000)  # speech this long always cancels
    echo_cancellation: Literal["auto", "on", "off"] = "auto"  # auto: on for phone calls
    idle_timeout_s: float = 60.0
    max_call_s: float = 3600.0
    # local whisper: decodes at once (CTranslate2's workers and the decode pool), and threads
    # per decode; two one-thread workers decoded two calls' speech in half the time one
    # two-thread worker took (voice_gateway/stt/whisper.py)
    stt_workers: int = Field(2, ge=1, le=16)
    stt_threads: int = Field(1, ge=1, le=16)
    # numpy's BLAS threads per process; 0: the library's default (one per core, whose idle
    # threads spin after each call: voice_gateway/native_threads.py)
    blas_threads: int = Field(1, ge=0, le=64)
    stt_partials: bool = False
    # Provider options, one meaning each (checked against the vendor's published list at
    # start: voice_gateway/provider_check.py)
    espeak_voice: str | None = None  # unset: en-us (or the deprecated VG_TTS_VOICE)
    piper_voice: str = "joe-us"  # the bundled voice, or the path of a Piper .onnx voice
    openai_tts_voice: str | None = None  # unset: alloy
    openai_tts_model: str = "gpt-4o-mini-tts"
    openai_stt_model: str = "gpt-4o-mini-transcribe"
    openai_stt_base_url: str | None = None  # unset: OPENAI_BASE_URL
    deepgram_stt_model: str = "nova-3"
    deepgram_tts_voice: str = "aura-2-thalia-en"
    tts_voice: str | None = None  # deprecated (one release): VG_ESPEAK_VOICE
    session_token_ttl_s: int = 300
    # WebRTC (docs/webrtc.md): STUN/TURN servers (unset: none, no public server is asked),
    # the addresses host candidates use (unset: every interface), a UDP port range "LOW-HIGH"
    ice_servers: str | None = None
    webrtc_host_addresses: str | None = None
    webrtc_udp_ports: str | None = None

    # Agent loop
    max_steps: int = 6
    context_token_budget: int = 6000
    llm_timeout_s: float = 60.0

    # Custom tools: each call runs in a sandboxed process (docs/rest_api.md, "Custom tools")
    tool_timeout_s: float = Field(10.0, gt=0, le=600)  # wall clock per call
    tool_cpu_s: int = Field(5, ge=1, le=600)  # RLIMIT_CPU
    tool_memory_mb: int = Field(256, ge=64, le=65536)  # RLIMIT_AS
    tool_max_output_bytes: int = Field(64_000, ge=1000)  # stdout and stderr, each
    tool_return_char_limit: int = Field(50_000, ge=100, le=1_000_000)  # longer: cut, with a note
    tool_max_concurrent: int = Field(4, ge=1, le=256)  # sandboxed calls at once
    tool_namespaces: bool = True  # network/mount namespaces where the OS allows
    # Without namespaces custom tools are refused (start log, 403 on creation, tool error on
    # call); 1: run them with the remaining layers anyway (SECURITY.md)
    sandbox_allow_weak: bool = False
    # MCP servers (docs/tools.md): time-out of a tool call / listing, and of opening a session
    mcp_timeout_s: float = Field(8.0, gt=0, le=600)
    mcp_connect_timeout_s: float = Field(8.0, gt=0, le=600)
    # key for secrets stored encrypted at rest (MCP tokens, headers, env); unset: the key file's
    secrets_key: str | None = None
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
    llm_voice_timeout_s: float = Field(8.0, gt=0)  # voice turns: wait for first/next chunk
    stt_timeout_s: float = Field(10.0, gt=0)  # an utterance's final transcript
    tts_timeout_s: float = Field(10.0, gt=0)  # first/next audio chunk of a sentence
    stt_fallback: str | None = None  # e.g. VG_STT=deepgram, VG_STT_FALLBACK=whisper
    tts_fallback: str | None = None  # e.g. VG_TTS=openai, VG_TTS_FALLBACK=espeak
    llm_fallback: str | None = None  # a model handle, e.g. openai/gpt-4o-mini
    fallback_cooldown_s: float = Field(30.0, ge=0)  # skip a failed primary this long

    # Sleeptime / bus
    sleeptime_every_turns: int = 5
    sleeptime_model: str | None = None  # model handle for memory rewriting; unset: the agent's
    transcripts_maxlen: int = 100_000
    claim_idle_ms: int = 30_000
    max_deliveries: int = 5
    sleeptime_test_delay_s: float = 0.0  # tests only: stall each rewrite before its commit

    # Scheduled messages (voice_gateway/scheduler.py, docs/rest_api.md): how often a process
    # looks for due ones (0: this one fires none), and cron's optional leading seconds field
    schedule_tick_s: float = Field(1.0, ge=0, le=60)
    schedule_cron_seconds: bool = False

    # HTTP limits
    max_body_bytes: int = 1_000_000
    max_file_bytes: int = Field(20_000_000, ge=1)  # one upload to a folder; beyond: 413
    max_header_bytes: int = Field(16_384, ge=1024)  # request line + headers; beyond: 431
    # SIGTERM: browser calls finish their turn and reconnect elsewhere; phone calls go on until
    # they end or this runs out (keep it below compose's stop_grace_period; docs/operations.md)
    drain_timeout_s: float = Field(
        10.0, ge=0, validation_alias=AliasChoices("VG_DRAIN_TIMEOUT_S", "VG_SHUTDOWN_GRACE_S")
    )
    # WebSockets: our fast path for plain data frames on uvicorn's websockets-sansio protocol
    # (docs/operations.md, "WebSocket server"); False: uvicorn's protocol as it ships
    ws_fast_path: bool = True
    # A full garbage collection after this many middle-generation ones (10: CPython's default).
    # Each pauses every call; fewer, longer ones hold more garbage (docs/operations.md)
    gc_full_every: int = Field(10, ge=1)
    # Allocations between young collections (CPython's default: 700). Objects that outlive
    # ten of them reach the oldest generation, whose growth brings on a full collection; with
    # 700, a turn's objects (they live ~1-3 s) got there: 5 full collections in 20 s at 400
    # calls, 1 with 5000 (docs/operations.md#garbage-collection)
    gc_young_every: int = Field(5000, ge=1)

    # Rate limits and quotas per identity (docs/operations.md, "Rate limits and quotas")
    rate_limit_rps: float = Field(100.0, ge=0)  # REST requests/s; 0: off
    rate_limit_burst: int | None = Field(None, ge=1)  # unset: two seconds' worth
    max_concurrent_calls: int = Field(1000, ge=0)  # browser + phone calls; 0: no limit
    call_minutes_per_day: float = Field(0.0, ge=0)  # per UTC day; 0: no limit
    call_lease_s: float = Field(30.0, gt=0)  # Redis call-slot lease (refreshed every 1/3)
    quota_flush_s: float = Field(10.0, gt=0)  # call seconds are added up this often
    # Browser origins allowed on the sockets and REST ("*": any); unset: own + loopback
    allowed_origins: str | None = None

    # Admission control per process (voice_gateway/capacity.py, docs/operations.md): past
    # either a new call is refused (close 1013, HTTP 503) instead of slowing the live ones
    process_max_calls: int = Field(500, ge=0)  # live calls in one process; 0: no limit
    # smoothed event-loop lag beyond which new calls are refused (1013); 0: not judged. 200 ms
    # averaged over ~0.5 s means every live call is already late; lower it where the machine is
    # the gateway's alone (30 ms refused calls on a shared 2-core test machine)
    admit_max_lag_ms: float = Field(200.0, ge=0)
    # `voice-gateway serve --workers N`: N processes share the port (N > 1 needs VG_REDIS_URL)
    workers: int = Field(1, ge=1, le=64)

    def secrets(self) -> list[str]:
        """Configured secrets, for the log redaction filter."""
        values = (
            self.api_key,
            self.session_secret,
            self.secrets_key,
            self.openai_api_key,
            self.deepgram_api_key,
            self.twilio_auth_token,
            *(p.api_key for p in self.llm_providers().values()),
        )
        return [v for v in values if v]

    def llm_providers(self) -> dict[str, ProviderEndpoint]:
        """The LLM providers besides OpenAI that are configured: a cloud vendor by its key
        (Azure also by its resource URL), a local server by its URL."""
        keyed = {
            "anthropic": (self.anthropic_api_key, self.anthropic_base_url),
            "google_ai": (self.gemini_api_key, self.gemini_base_url),
            "groq": (self.groq_api_key, self.groq_base_url),
            "together": (self.together_api_key, self.together_base_url),
            "mistral": (self.mistral_api_key, self.mistral_base_url),
        }
        out = {n: ProviderEndpoint(k, url) for n, (k, url) in keyed.items() if k}
        if self.azure_api_key and self.azure_base_url:
            out["azure"] = ProviderEndpoint(self.azure_api_key, self.azure_base_url)
        local = {
            "ollama": self.ollama_base_url,
            "vllm": self.vllm_api_base,
            "lmstudio": self.lmstudio_base_url,
            "llamacpp": self.llamacpp_base_url,
            "sglang": self.sglang_api_base,
        }
        out.update({n: ProviderEndpoint(None, url) for n, url in local.items() if url})
        return out

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
