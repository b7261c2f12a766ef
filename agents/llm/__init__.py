"""LLM providers by model handle `provider/model` (agents/llm/providers.py: Letta's providers,
and `scripted/demo`), each optionally backed by a fallback model handle (VG_LLM_FALLBACK, see
agents/llm/fallback.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest, ToolCallDelta, Usage
from agents.llm.fallback import FallbackLLM
from agents.llm.providers import PROVIDERS, ProviderEndpoint, endpoint_url, parse_handle
from agents.llm.scripted import ScriptedProvider

log = logging.getLogger(__name__)
SCRIPTED_HANDLE = "scripted/demo"
KNOWN_MODEL_HANDLES = [f"{p}/<model>" for p in PROVIDERS if p != "scripted"] + [SCRIPTED_HANDLE]


class LLMRegistry:
    """Resolves an agent's `model` handle to a provider instance and the vendor model name.
    `openai/` is always accepted (the SDK's default endpoint); the other providers only when
    configured (`providers`: from voice_gateway/settings.py)."""

    def __init__(
        self,
        *,
        openai_api_key: str | None = None,
        openai_base_url: str | None = None,
        timeout_s: float = 60.0,
        fallback: str | None = None,
        providers: Mapping[str, ProviderEndpoint] | None = None,
    ) -> None:
        self.openai_api_key = openai_api_key
        self.openai_base_url = openai_base_url
        self.timeout_s = timeout_s
        self.endpoints: dict[str, ProviderEndpoint] = {
            k: v for k, v in (providers or {}).items() if k in PROVIDERS
        }
        if self.openai_configured:
            self.endpoints["openai"] = ProviderEndpoint(openai_api_key, openai_base_url)
        self.endpoints["scripted"] = ProviderEndpoint()
        if fallback:
            self.validate(fallback)
        self.fallback = fallback or None  # a model handle tried when a model fails
        self._providers: dict[str, LLMProvider] = {}
        self._wrapped: dict[tuple[int, int], FallbackLLM] = {}
        self.overrides: dict[str, LLMProvider] = {}

    @property
    def openai_configured(self) -> bool:
        return bool(self.openai_api_key or self.openai_base_url)

    def configured(self) -> list[str]:
        """The providers whose handles work now, in Letta's order."""
        return [p for p in PROVIDERS if p in self.endpoints]

    def default_handle(self) -> str:
        return "openai/gpt-4o-mini" if self.openai_configured else SCRIPTED_HANDLE

    def validate(self, handle: str) -> None:
        """ValueError if `handle` is malformed or its provider is not configured here."""
        spec, _ = parse_handle(handle)
        if spec.name not in self.endpoints and spec.name != "openai":
            raise ValueError(
                f"model provider '{spec.name}' is not configured on this server (set "
                f"{spec.env}); configured providers: {', '.join(self.configured())}"
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
            self._providers[provider] = self.build(provider)
        return self._providers[provider], model

    def build(self, provider: str) -> LLMProvider:
        """A new client of a configured provider (the vendor module on the LLM base class)."""
        spec = PROVIDERS[provider]
        if spec.wire == "scripted":
            return ScriptedProvider(timeout_s=self.timeout_s)
        ep = self.endpoints.get(provider, ProviderEndpoint())
        url = endpoint_url(spec, ep.base_url)
        if spec.wire == "anthropic":
            from agents.llm.anthropic import AnthropicProvider

            return AnthropicProvider(api_key=ep.api_key, base_url=url, timeout_s=self.timeout_s)
        from agents.llm.openai import OpenAIProvider

        return OpenAIProvider(
            api_key=ep.api_key, base_url=url, timeout_s=self.timeout_s, name=provider
        )

    async def available(self, timeout_s: float = 5.0) -> dict[str, list[str]]:
        """The model names each configured provider offers now (its model list endpoint); a
        provider that does not answer in time lists none (logged)."""

        async def one(name: str) -> list[str]:
            try:
                provider = self._resolve(f"{name}/models")[0]
                async with asyncio.timeout(timeout_s):
                    return sorted(await provider.models())
            except Exception as exc:  # one provider down must not hide the others
                log.warning("cannot list the models of %s: %s: %s", name, type(exc).__name__, exc)
                return []

        names = self.configured()
        found = await asyncio.gather(*(one(n) for n in names))
        return dict(zip(names, found, strict=True))

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
    "PROVIDERS",
    "SCRIPTED_HANDLE",
    "FallbackLLM",
    "LLMChunk",
    "LLMError",
    "LLMProvider",
    "LLMRegistry",
    "LLMRequest",
    "ProviderEndpoint",
    "ToolCallDelta",
    "Usage",
]
