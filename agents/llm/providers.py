"""Letta's model providers: the handle prefix, how we talk to it (Anthropic's own SDK, or the
openai SDK for every OpenAI-compatible endpoint), its default endpoint, and the names Letta's
schema uses for it. Where a provider's key or URL comes from is voice_gateway/settings.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    name: str  # the handle prefix: `<name>/<model>`
    wire: Literal["openai", "anthropic", "scripted"]
    env: str  # the variable that configures it (named in errors and docs)
    base_url: str | None = None  # default endpoint (None: the vendor SDK's own)
    provider_type: str = "openai"  # Letta's ProviderType
    endpoint_type: str = "openai"  # Letta's model_endpoint_type
    context_window: int = 128_000
    local: bool = False  # a local server: configured by its URL alone, `/v1` appended


PROVIDERS: dict[str, ProviderSpec] = {
    s.name: s
    for s in (
        ProviderSpec("openai", "openai", "OPENAI_API_KEY", None, "openai", "openai"),
        ProviderSpec(
            "anthropic",
            "anthropic",
            "ANTHROPIC_API_KEY",
            "https://api.anthropic.com",
            "anthropic",
            "anthropic",
            200_000,
        ),
        ProviderSpec(
            "google_ai",
            "openai",
            "GEMINI_API_KEY",
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "google_ai",
            "google_ai",
            1_048_576,
        ),
        ProviderSpec(
            "groq", "openai", "GROQ_API_KEY", "https://api.groq.com/openai/v1", "groq", "groq"
        ),
        ProviderSpec(
            "together",
            "openai",
            "TOGETHER_API_KEY",
            "https://api.together.xyz/v1",
            "together",
            "together",
        ),
        ProviderSpec(
            "mistral",
            "openai",
            "MISTRAL_API_KEY",
            "https://api.mistral.ai/v1",
            "mistral",
            "mistral",
        ),
        ProviderSpec("azure", "openai", "AZURE_API_KEY + AZURE_BASE_URL", None, "azure", "azure"),
        ProviderSpec("ollama", "openai", "OLLAMA_BASE_URL", None, "ollama", "ollama", local=True),
        ProviderSpec("vllm", "openai", "VLLM_API_BASE", None, "vllm", "vllm", local=True),
        ProviderSpec(
            "lmstudio",
            "openai",
            "LMSTUDIO_BASE_URL",
            None,
            "lmstudio_openai",
            "lmstudio",
            local=True,
        ),
        ProviderSpec(
            "llamacpp", "openai", "LLAMACPP_BASE_URL", None, "openai", "llamacpp", local=True
        ),
        ProviderSpec("sglang", "openai", "SGLANG_API_BASE", None, "sglang", "openai", local=True),
        ProviderSpec(
            "scripted", "scripted", "(always available)", None, "openai", "openai", 32_000
        ),
    )
}


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """A configured provider: its key and endpoint (None: the spec's default)."""

    api_key: str | None = None
    base_url: str | None = None


def endpoint_url(spec: ProviderSpec, given: str | None) -> str | None:
    """The base URL the SDK is given: a local server's URL gets `/v1` (as Letta's providers
    take `http://localhost:11434`); Azure's resource URL its OpenAI v1 path."""
    url = given or spec.base_url
    if url is None:
        return None
    url = url.rstrip("/")
    if spec.local and not url.endswith("/v1"):
        return f"{url}/v1"
    if spec.name == "azure" and "/openai" not in url:
        return f"{url}/openai/v1"
    return url


def parse_handle(handle: str) -> tuple[ProviderSpec, str]:
    """(provider, vendor model name) of `provider/model`; ValueError names the known ones."""
    provider, sep, model = handle.partition("/")
    spec = PROVIDERS.get(provider)
    if not sep or not model.strip() or spec is None:
        known = ", ".join(f"{p}/<model>" for p in PROVIDERS if p != "scripted")
        raise ValueError(
            f"unknown model handle {handle!r}: a handle is provider/model with a provider of "
            f"{known}, or scripted/demo"
        )
    return spec, model
