"""Real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) against a live voice
gateway (local whisper, espeak-ng TTS, the loopback fake LLM), with a fake microphone that plays
an espeak-ng WAV."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.async_api import Browser, Page, Playwright, async_playwright

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import FakeLLM, default_responder
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak, write_wav

CHROMIUM = Path("/usr/bin/chromium")
MIC_RATE = 48000  # the WAV's rate; Chrome's fake device plays it into a 44.1/48 kHz context
WAIT_MS = 60_000  # generous upper bounds for waits, never timing assertions

BASE_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--allow-loopback-in-peer-connection",  # WebRTC host candidates on 127.0.0.1
]

browser_only = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="browser tests need Debian's chromium at /usr/bin/chromium (apt install chromium)",
    ),
]


def mic_wav(path: Path, *parts: str | int) -> Path:
    """A 16-bit mono WAV for the fake microphone: str parts are spoken (espeak-ng), int parts
    are milliseconds of silence."""
    pcm = [speak(p, MIC_RATE) if isinstance(p, str) else silence(p, MIC_RATE) for p in parts]
    write_wav(str(path), np.concatenate(pcm), MIC_RATE)
    return path


@dataclass
class BrowserPage:
    """A page of the web client, its console and JS errors, and its `window.vg` test hooks."""

    page: Page
    console: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    async def vg(self, expr: str = "") -> Any:
        return await self.page.evaluate(f"() => window.vg{expr}")

    async def wait(self, predicate: str, timeout_ms: int = WAIT_MS) -> None:
        """Wait until the JS expression over `vg` holds (e.g. "vg.state === 'live'")."""
        try:
            await self.page.wait_for_function(
                f"() => {{ const vg = window.vg; return Boolean(vg && ({predicate})); }}",
                timeout=timeout_ms,
            )
        except Exception:
            print("vg state:", json.dumps(await self.vg(), default=str)[:4000])
            raise

    async def create_agent(self, name: str, **fields: str) -> str:
        """Create an agent with the page's form (`fields`: persona, greeting... by input id
        `new-<field>`) and wait until the page has switched to it: the page already shows
        another agent when the gateway has any, so `vg.agentId` alone proves nothing."""
        page = self.page
        await self.wait("vg.agents !== null")
        if not await page.locator("#create-details").evaluate("d => d.open"):
            await page.click("#create-details summary")
        await page.fill("#new-name", name)
        for key, value in fields.items():
            await page.fill(f"#new-{key}", value)
        await page.click("#create-form button[type=submit]")
        selected = "document.querySelector('#agent-select option:checked')"
        await self.wait(
            f"{selected} && {selected}.text.startsWith({json.dumps(name + ' · ')})"
            f" && vg.agentId === {selected}.value && vg.blocks.human"
        )
        return str(await self.vg(".agentId"))

    async def text(self, selector: str) -> str:
        return (await self.page.locator(selector).inner_text()).strip()

    def dump(self) -> None:
        for line in self.console:
            print("console:", line)
        for err in self.page_errors:
            print("page error:", err)


@asynccontextmanager
async def open_page(
    pw: Playwright,
    url: str,
    wav: Path | None = None,
    *,
    grant_mic: bool = True,
    loop: bool = False,
) -> AsyncIterator[BrowserPage]:
    """Launch Chromium (a fresh one: the fake-mic file is a launch flag) and open `url`.
    The microphone plays `wav` once (or over and over: `loop`); grant_mic=False: microphone
    permission prompts are denied."""
    flags = list(BASE_FLAGS)
    flags.append("--use-fake-ui-for-media-stream" if grant_mic else "--deny-permission-prompts")
    if wav is not None:
        flags.append(f"--use-file-for-fake-audio-capture={wav}{'' if loop else '%noloop'}")
    browser: Browser = await pw.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=flags
    )
    try:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await context.new_page()
        bp = BrowserPage(page)
        page.on("console", lambda m: bp.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: bp.page_errors.append(str(e)))
        await page.goto(url)
        await page.wait_for_function("() => window.vg && window.vg.ready", timeout=WAIT_MS)
        try:
            yield bp
        finally:
            bp.dump()
        assert bp.page_errors == [], bp.page_errors  # no uncaught JS errors in the page
    finally:
        await browser.close()


@pytest.fixture(scope="module")
async def pw() -> AsyncIterator[Playwright]:
    async with async_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VoiceGateway]:
    llm = FakeLLM()
    llm_srv = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("browser") / "vg.db"
    try:
        with (
            running_gateway(
                f"sqlite+aiosqlite:///{db}",
                voice=True,
                openai_base_url=f"{llm_srv.url}/v1",
                openai_api_key="test",
                idle_timeout_s=30.0,
                webrtc_host_addresses="127.0.0.1",  # WebRTC media on loopback only
                sleeptime_model="scripted/demo",  # memory rewriting never takes queued replies
                sleeptime_every_turns=1,  # so the memory panel changes within one test
            ) as srv,
            httpx.Client(base_url=srv.url, timeout=30) as http,
        ):
            yield VoiceGateway(srv, llm, http)
    finally:
        llm_srv.stop()


@pytest.fixture
def bg(browser_stack: VoiceGateway) -> VoiceGateway:
    browser_stack.llm.queue.clear()
    browser_stack.llm.requests.clear()
    browser_stack.llm.responder = default_responder
    return browser_stack
