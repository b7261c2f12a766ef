// The page's audio: one AudioContext with two AudioWorklets, microphone capture (PCM16 16 kHz,
// 20 ms frames) and reply playback through a jitter buffer.

const CAPTURE_URL = new URL("./worklets/capture.js", import.meta.url);
const PLAYBACK_URL = new URL("./worklets/playback.js", import.meta.url);

export const INPUT_RATE = 16000;

export class MicError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind; // "denied" | "missing" | "busy" | "unsupported" | "failed"
  }
}

function micError(err) {
  const name = err && err.name;
  if (name === "NotAllowedError" || name === "SecurityError" || name === "PermissionDeniedError") {
    return new MicError("denied", "Microphone access was denied.");
  }
  if (name === "NotFoundError" || name === "OverconstrainedError") {
    return new MicError("missing", "No microphone was found.");
  }
  if (name === "NotReadableError" || name === "AbortError") {
    return new MicError("busy", "The microphone is in use by another program or could not start.");
  }
  return new MicError("failed", `The microphone could not be opened (${name || err}).`);
}

export class AudioEngine {
  /** hooks: onFrame(ArrayBuffer pcm16, rms), onPlayed({id, samples, done}),
   *  onCleared(droppedSamples), onUnderrun() */
  constructor(hooks) {
    this.hooks = hooks;
    this.ctx = null;
    this.player = null;
    this.mic = null; // {stream, source, node, sink}
  }

  get sampleRate() {
    return this.ctx ? this.ctx.sampleRate : 48000;
  }

  /** Create the context and both worklets (call from a click: autoplay rules). */
  async init() {
    if (this.ctx) {
      if (this.ctx.state === "suspended") await this.ctx.resume();
      return;
    }
    const Ctx = window.AudioContext || window.webkitAudioContext;
    if (!Ctx || !window.AudioWorkletNode) {
      throw new MicError("unsupported", "This browser lacks AudioWorklet support.");
    }
    const ctx = new Ctx({ latencyHint: "interactive" });
    await ctx.audioWorklet.addModule(CAPTURE_URL);
    await ctx.audioWorklet.addModule(PLAYBACK_URL);
    const player = new AudioWorkletNode(ctx, "vg-playback", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { prebufferMs: 60 },
    });
    player.port.onmessage = (e) => this.fromPlayer(e.data);
    player.connect(ctx.destination);
    this.ctx = ctx;
    this.player = player;
    if (ctx.state === "suspended") await ctx.resume();
  }

  fromPlayer(m) {
    if (m.type === "played") this.hooks.onPlayed(m);
    else if (m.type === "cleared") this.hooks.onCleared(m.dropped);
    else if (m.type === "underrun") this.hooks.onUnderrun();
  }

  /** Open the microphone; throws MicError. `processing`: echo cancellation etc. */
  async openMic(processing) {
    if (this.mic) return;
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new MicError(
        "unsupported",
        "This page cannot use a microphone here (browsers allow it only on https or localhost).",
      );
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: {
          channelCount: 1,
          echoCancellation: processing,
          noiseSuppression: processing,
          autoGainControl: processing,
        },
      });
    } catch (err) {
      throw micError(err);
    }
    try {
      this.mic = this.wire(stream);
    } catch (err) {
      for (const track of stream.getTracks()) track.stop();
      throw new MicError("failed", `The microphone could not be connected (${err.message}).`);
    }
  }

  wire(stream) {
    const ctx = this.ctx;
    const source = ctx.createMediaStreamSource(stream);
    const node = new AudioWorkletNode(ctx, "vg-capture", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: "explicit",
      channelInterpretation: "speakers",
      processorOptions: { targetRate: INPUT_RATE, frameMs: 20 },
    });
    node.port.onmessage = (e) => this.hooks.onFrame(e.data.pcm, e.data.rms);
    // a worklet runs only while connected to the destination: go through a silent gain
    const sink = ctx.createGain();
    sink.gain.value = 0;
    source.connect(node).connect(sink).connect(ctx.destination);
    return { stream, source, node, sink };
  }

  closeMic() {
    const mic = this.mic;
    if (!mic) return;
    this.mic = null;
    mic.node.port.onmessage = null;
    mic.source.disconnect();
    mic.node.disconnect();
    mic.sink.disconnect();
    for (const track of mic.stream.getTracks()) track.stop();
  }

  startItem(id, rate) {
    this.player?.port.postMessage({ type: "item", id, rate });
  }

  push(id, pcm) {
    this.player?.port.postMessage({ type: "push", id, pcm }, [pcm]);
  }

  endItem(id) {
    this.player?.port.postMessage({ type: "end", id });
  }

  clear() {
    this.player?.port.postMessage({ type: "clear" });
  }

  async close() {
    this.closeMic();
    const ctx = this.ctx;
    this.ctx = null;
    this.player = null;
    if (ctx) await ctx.close();
  }
}
