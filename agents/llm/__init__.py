"""LLM providers by model handle: `openai/<model>` or `scripted/demo`."""

from __future__ import annotations

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest, ToolCallDelta, Usage
from agents.llm.scripted import ScriptedProvider

SCRIPTED_HANDLE = "scripted/demo"
KNOWN_MODEL_HANDLES = ["openai/<model>", SCRIPTED_HANDLE]


class LLMRegistry:
    """Resolves an agent's `model` handle to a provider instance and the vendor model name."""

    def __init__(
        self,
        *,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.openai_api_key = openai_api_key
        self.openai_base_url = openai_base_url
        self.timeout_s = timeout_s
        self._providers: dict[str, LLMProvider] = {}
        self.overrides: dict[str, LLMProvider] = {}

    @property
    def openai_configured(self) -> bool:
        return bool(self.openai_api_key or self.openai_base_url)

    def default_handle(self) -> str:
        return "openai/gpt-4o-mini" if self.openai_configured else SCRIPTED_HANDLE

    @staticmethod
    def validate(handle: str) -> None:
        provider, sep, model = handle.partition("/")
        if not sep or not model or provider not in ("openai", "scripted"):
            raise ValueError(
                f"unknown model handle {handle!r}; known: {', '.join(KNOWN_MODEL_HANDLES)}"
            )

    def resolve(self, handle: str) -> tuple[LLMProvider, str]:
        self.validate(handle)
        provider, _, model = handle.partition("/")
        if provider in self.overrides:
            return self.overrides[provider], model
        if provider not in self._providers:
            if provider == "scripted":
                self._providers[provider] = ScriptedProvider(timeout_s=self.timeout_s)
            else:
                from agents.llm.openai import OpenAIProvider

                self._providers[provider] = OpenAIProvider(
                    api_key=self.openai_api_key,
                    base_url=self.openai_base_url,
                    timeout_s=self.timeout_s,
                )
        return self._providers[provider], model

    def warmup(self) -> None:
        """Import and build the OpenAI client now (~0.7 s) rather than on the first turn."""
        if self.openai_configured:
            provider, _ = self.resolve("openai/warmup")
            _ = provider.client.chat.completions  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        for p in self._providers.values():
            await p.aclose()


__all__ = [
    "KNOWN_MODEL_HANDLES",
    "SCRIPTED_HANDLE",
    "LLMChunk",
    "LLMError",
    "LLMProvider",
    "LLMRegistry",
    "LLMRequest",
    "ToolCallDelta",
    "Usage",
]
