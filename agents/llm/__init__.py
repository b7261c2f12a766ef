"""LLM providers by model handle: `openai/<model>` or `scripted/demo`, each optionally backed
by a fallback model handle (VG_LLM_FALLBACK, see agents/llm/fallback.py)."""

from __future__ import annotations

from collections import Counter

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest, ToolCallDelta, Usage
from agents.llm.fallback import FallbackLLM
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
        fallback: str | None = None,
    ) -> None:
        self.openai_api_key = openai_api_key
        self.openai_base_url = openai_base_url
        self.timeout_s = timeout_s
        if fallback:
            self.validate(fallback)
        self.fallback = fallback or None  # a model handle tried when a model fails
        self._providers: dict[str, LLMProvider] = {}
        self._wrapped: dict[tuple[int, int], FallbackLLM] = {}
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
        """The provider for `handle` (wrapped with the fallback model, if one is configured
        and `handle` is not the fallback itself) and the vendor model name."""
        provider, model = self._resolve(handle)
        if self.fallback is None or handle == self.fallback:
            return provider, model
        backup, backup_model = self._resolve(self.fallback)
        key = (id(provider), id(backup))
        if key not in self._wrapped:
            self._wrapped[key] = FallbackLLM(provider, backup, backup_model, self.fallback)
        return self._wrapped[key], model

    def _resolve(self, handle: str) -> tuple[LLMProvider, str]:
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

    def served(self) -> Counter[str]:
        """Model calls answered per provider by the fallback wrappers (primary or fallback)."""
        total: Counter[str] = Counter()
        for wrapper in self._wrapped.values():
            total.update(wrapper.served)
        return total

    def warmup(self) -> None:
        """Import and build the OpenAI client now (~0.7 s) rather than on the first turn."""
        if self.openai_configured:
            provider, _ = self._resolve("openai/warmup")
            _ = provider.client.chat.completions  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        for p in self._providers.values():
            await p.aclose()


__all__ = [
    "KNOWN_MODEL_HANDLES",
    "SCRIPTED_HANDLE",
    "FallbackLLM",
    "LLMChunk",
    "LLMError",
    "LLMProvider",
    "LLMRegistry",
    "LLMRequest",
    "ToolCallDelta",
    "Usage",
]
