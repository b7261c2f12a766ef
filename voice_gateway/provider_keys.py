"""The LLM providers besides OpenAI, read by Letta's variable names (docs/rest_api.md, "Models
and providers"): a part of `voice_gateway.settings.Settings` (its base class), so
`settings.anthropic_api_key` reads as any other setting. A *_BASE_URL of a cloud vendor
overrides its public endpoint."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agents.llm.providers import ProviderEndpoint


def env_field(name: str, description: str) -> Any:
    """A setting read from another tool's variable name (e.g. ANTHROPIC_API_KEY) or VG_<name>."""
    return Field(None, validation_alias=AliasChoices(name, f"VG_{name}"), description=description)


class ProviderKeys(BaseSettings):
    """Keys and endpoints of the LLM providers besides OpenAI."""

    model_config = SettingsConfigDict(env_prefix="VG_", env_file=None, extra="ignore")

    anthropic_api_key: str | None = env_field(
        "ANTHROPIC_API_KEY", "`anthropic/<model>` handles, through Anthropic's SDK."
    )
    anthropic_base_url: str | None = env_field("ANTHROPIC_BASE_URL", "Anthropic's endpoint.")
    gemini_api_key: str | None = env_field("GEMINI_API_KEY", "`google_ai/<model>` handles.")
    gemini_base_url: str | None = env_field("GEMINI_BASE_URL", "Gemini's endpoint.")
    groq_api_key: str | None = env_field("GROQ_API_KEY", "`groq/<model>` handles.")
    groq_base_url: str | None = env_field("GROQ_BASE_URL", "Groq's endpoint.")
    together_api_key: str | None = env_field("TOGETHER_API_KEY", "`together/<model>` handles.")
    together_base_url: str | None = env_field("TOGETHER_BASE_URL", "Together's endpoint.")
    mistral_api_key: str | None = env_field("MISTRAL_API_KEY", "`mistral/<model>` handles.")
    mistral_base_url: str | None = env_field("MISTRAL_BASE_URL", "Mistral's endpoint.")
    azure_api_key: str | None = env_field(
        "AZURE_API_KEY", "`azure/<deployment>` handles (with `AZURE_BASE_URL`)."
    )
    azure_base_url: str | None = env_field(
        "AZURE_BASE_URL", "The Azure OpenAI resource, `https://<resource>.openai.azure.com`."
    )
    ollama_base_url: str | None = env_field(
        "OLLAMA_BASE_URL", "`ollama/<model>` handles, e.g. `http://localhost:11434`."
    )
    vllm_api_base: str | None = env_field(
        "VLLM_API_BASE", "`vllm/<model>` handles, e.g. `http://localhost:8000`."
    )
    lmstudio_base_url: str | None = env_field(
        "LMSTUDIO_BASE_URL", "`lmstudio/<model>` handles, e.g. `http://localhost:1234`."
    )
    llamacpp_base_url: str | None = env_field(
        "LLAMACPP_BASE_URL", "`llamacpp/<model>` handles, e.g. `http://localhost:8080`."
    )
    sglang_api_base: str | None = env_field(
        "SGLANG_API_BASE", "`sglang/<model>` handles, e.g. `http://localhost:30000`."
    )

    def llm_providers(self) -> dict[str, ProviderEndpoint]:
        """The providers that are configured: a cloud vendor by its key (Azure also by its
        resource URL), a local server by its URL."""
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
