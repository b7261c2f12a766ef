"""The two AudioWorklets on their own, in Chromium's OfflineAudioContext (rendered audio time, no
devices): capture resamples 44.1/48 kHz to 16 kHz PCM16 without aliasing; playback resamples,
buffers, reports what it played, and a clear silences it at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
from playwright.async_api import Playwright

from tests.browser.conftest import BrowserPage, browser_only, open_page
from tests.e2e.conftest import VoiceGateway

pytestmark = browser_only

CAPTURE_JS = """
async ([rate, freq]) => {
  const ctx = new OfflineAudioContext(1, rate, rate);  // one second
  await ctx.audioWorklet.addModule("/js/worklets/capture.js");
  const node = new AudioWorkletNode(ctx, "vg-capture", {
    channelCount: 1, channelCountMode: "explicit", processorOptions: { targetRate: 16000 } });
  const frames = [];
  node.port.onmessage = (e) => frames.push(Array.from(new Int16Array(e.data.pcm)));
  const osc = new OscillatorNode(ctx, { frequency: freq });
  osc.connect(new GainNode(ctx, { gain: 0.5 })).connect(node).connect(ctx.destination);
  osc.start();
  await ctx.startRendering();
  for (let i = 0; i < 100 && frames.length < 49; i++) await new Promise((r) => setTimeout(r, 20));
  return { sizes: frames.map((f) => f.length), pcm: frames.flat() };
}
"""

PLAYBACK_JS = """
async ([srcRate, seconds, clearAt]) => {
  const rate = 48000;
  const ctx = new OfflineAudioContext(1, rate, rate);  // one second
  await ctx.audioWorklet.addModule("/js/worklets/playback.js");
  const node = new AudioWorkletNode(ctx, "vg-playback", {
    numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
    processorOptions: { prebufferMs: 60 } });
  const msgs = [];
  node.port.onmessage = (e) => msgs.push(e.data);
  node.connect(ctx.destination);
  const pause = (r) => new Promise((done) => setTimeout(done, r));
  // offline rendering outruns message delivery: post while the render is suspended
  const at = (t, post) => ctx.suspend(t).then(async () => {
    post();
    await pause(100);
    ctx.resume();
  });
  at(256 / rate, () => {
    node.port.postMessage({ type: "item", id: "a", rate: srcRate });
    const chunk = srcRate / 50;
    for (let c = 0; c < seconds * 50; c++) {
      const pcm = new Int16Array(chunk);
      for (let i = 0; i < chunk; i++) {
        pcm[i] = Math.round(16000 * Math.sin((2 * Math.PI * 440 * (c * chunk + i)) / srcRate));
      }
      node.port.postMessage({ type: "push", id: "a", pcm: pcm.buffer }, [pcm.buffer]);
    }
    node.port.postMessage({ type: "end", id: "a" });
  });
  if (clearAt !== null) at(clearAt, () => node.port.postMessage({ type: "clear" }));
  const out = await ctx.startRendering();
  const last = (m) => m.type === "cleared" || (m.type === "played" && m.done);
  for (let i = 0; i < 100 && !msgs.some(last); i++) await pause(20);
  return { out: Array.from(out.getChannelData(0)), msgs };
}
"""


def dominant_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


@pytest.fixture(scope="module")
async def worklet_page(pw: Playwright, browser_stack: VoiceGateway) -> AsyncIterator[BrowserPage]:
    async with open_page(pw, f"{browser_stack.server.url}/") as bp:
        yield bp


@pytest.mark.parametrize("rate", [48000, 44100, 16000])
async def test_capture_makes_16k_frames_of_the_input(worklet_page: BrowserPage, rate: int) -> None:
    got = await worklet_page.page.evaluate(CAPTURE_JS, [rate, 1000])
    assert set(got["sizes"]) == {320}  # 20 ms frames at 16 kHz
    pcm = np.array(got["pcm"], dtype=np.float64)
    assert abs(len(pcm) - 16000) <= 2 * 320  # one second in, one second out (filter delay)
    body = pcm[800:-800]
    assert abs(dominant_hz(body, 16000) - 1000) < 5
    expected = 0.5 / np.sqrt(2) * 32767
    assert abs(rms(body) - expected) / expected < 0.02  # unity gain in the passband


@pytest.mark.parametrize("rate", [48000, 44100])
async def test_capture_filters_what_16k_cannot_carry(worklet_page: BrowserPage, rate: int) -> None:
    # a 10 kHz tone would alias to 6 kHz at 16 kHz; the low-pass filter removes it first
    got = await worklet_page.page.evaluate(CAPTURE_JS, [rate, 10000])
    body = np.array(got["pcm"], dtype=np.float64)[800:-800]
    level = 20 * np.log10(max(rms(body), 1e-3) / (0.5 / np.sqrt(2) * 32767))
    assert level < -50, level


@pytest.mark.parametrize("src_rate", [48000, 24000])
async def test_playback_plays_an_item_and_reports_it(
    worklet_page: BrowserPage, src_rate: int
) -> None:
    got = await worklet_page.page.evaluate(PLAYBACK_JS, [src_rate, 0.5, None])
    out = np.array(got["out"])
    done = [m for m in got["msgs"] if m["type"] == "played" and m["done"]]
    assert len(done) == 1 and done[0]["id"] == "a"
    assert abs(done[0]["samples"] - 24000) <= 4  # 0.5 s at the context's 48 kHz
    sound = np.flatnonzero(np.abs(out) > 1e-4)
    assert abs(len(out[sound[0] : sound[-1] + 1]) - 24000) <= 4 + 128
    assert abs(dominant_hz(out[sound[0] : sound[-1]], 48000) - 440) < 5
    assert abs(rms(out[sound[0] : sound[-1]]) - 16000 / 32768 / np.sqrt(2)) < 0.01
    assert not any(m["type"] == "underrun" for m in got["msgs"])


async def test_playback_clear_stops_audio_at_once(worklet_page: BrowserPage) -> None:
    got = await worklet_page.page.evaluate(PLAYBACK_JS, [48000, 1.0, 0.25])
    out = np.array(got["out"])
    cleared = [m for m in got["msgs"] if m["type"] == "cleared"]
    assert len(cleared) == 1
    assert 0.6 * 48000 < cleared[0]["dropped"] < 0.8 * 48000  # the unplayed ~0.75 s
    assert rms(out[int(0.01 * 48000) : int(0.24 * 48000)]) > 0.2  # playing before the clear
    assert np.all(out[int(0.25 * 48000) + 128 :] == 0)  # silent from the next quantum on
    played = [m["samples"] for m in got["msgs"] if m["type"] == "played"]
    assert played and max(played) <= int(0.25 * 48000) + 128
