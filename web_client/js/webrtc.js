// The call over native WebRTC (docs/webrtc.md): the same JSON events as the voice socket on the
// data channel "events", the microphone on an Opus track, the reply on the remote track (played
// by an <audio> element, so the browser's echo canceller knows what it plays). Same hooks and
// methods as VoiceConnection (voice.js), so Call uses either.

const FINAL = {
  1000: "The call ended.",
  1001: "The call ended after a period of inactivity.",
  1012: "The server is restarting: press Connect to call again.",
  4401: "The server refused the call: not authorized (check the API key under Settings).",
  4403: "The server refused the call: this page's origin is not allowed.",
  4404: "The server does not know this agent (it may have been deleted).",
  4429: "The server refused the call: too many calls, or no call minutes left today.",
};
const PLAYED_EVERY_MS = 250;

export const webrtcSupported = () => typeof RTCPeerConnection === "function";

export class RtcConnection {
  /** hooks: onEvent(event), onStatus(state, detail) as VoiceConnection's */
  constructor(api, hooks) {
    this.api = api;
    this.hooks = hooks;
    this.pc = null;
    this.channel = null;
    this.sender = null;
    this.location = null;
    this.live = false;
    this.closeCode = null;
    this.player = null;
    this.playing = null; // {id, startedAt, durationMs} of the reply item being heard
    this.playedTimer = null;
  }

  /** Start a call as `caller` (named in session.start: the page holds the API key or the
   *  gateway is open on loopback), or resume `conversationId`, one of that caller's. */
  async open(agentId, { conversationId = null, caller = "" }) {
    this.close();
    this.closeCode = null;
    this.fatal = null; // the message of the last fatal `error` event (why the server closes)
    this.hooks.onStatus("connecting", { attempt: 0 });
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    this.sender = pc.addTransceiver("audio", { direction: "sendrecv" }).sender;
    const channel = pc.createDataChannel("events");
    this.channel = channel;
    channel.onopen = () =>
      channel.send(
        JSON.stringify({
          type: "session.start",
          conversation_id: conversationId,
          ...(caller ? { caller } : {}),
        }),
      );
    channel.onmessage = (e) => this.message(e.data);
    channel.onclose = () => this.ended(this.closeCode ?? 1005);
    pc.ontrack = (e) => this.play(e.streams[0] || new MediaStream([e.track]));
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") this.ended(1005, "the connection was lost");
    };
    try {
      await pc.setLocalDescription(await pc.createOffer());
      await gathered(pc);
      const answer = await this.api.webrtcOffer(agentId, pc.localDescription.sdp);
      if (this.pc !== pc) return;
      this.location = answer.location;
      await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
    } catch (err) {
      if (this.pc !== pc) return;
      this.teardown();
      this.hooks.onStatus("failed", { message: `The call could not start: ${err.message}` });
    }
  }

  play(stream) {
    if (!this.player) {
      this.player = document.createElement("audio");
      this.player.autoplay = true;
      this.player.dataset.role = "webrtc-reply";
      document.body.append(this.player);
    }
    this.player.srcObject = stream;
    this.player.play().catch(() => {});
  }

  message(data) {
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (event.type === "error" && event.fatal) this.fatal = `${event.message} (${event.code})`;
    switch (event.type) {
      case "session.started":
        this.live = true;
        this.hooks.onStatus("live", { resumed: false, conversationId: event.conversation_id });
        break;
      case "session.closed": // the close code the voice socket would have used
        this.closeCode = event.code;
        this.ended(event.code, event.reason);
        return;
      case "response.audio.started":
        this.playing = { id: event.item_id, startedAt: performance.now(), durationMs: null };
        this.tickPlayed();
        break;
      case "response.audio.done":
        if (this.playing && this.playing.id === event.item_id) this.playing.durationMs = event.duration_ms;
        break;
      case "audio.clear":
        this.reportPlayed();
        this.playing = null;
        break;
      default:
        break;
    }
    this.hooks.onEvent(event);
  }

  /** audio.played from the clock: the reply plays as it arrives (no buffer of our own). */
  tickPlayed() {
    if (this.playedTimer) return;
    this.playedTimer = setInterval(() => this.reportPlayed(), PLAYED_EVERY_MS);
  }

  reportPlayed() {
    const p = this.playing;
    if (!p) {
      clearInterval(this.playedTimer);
      this.playedTimer = null;
      return;
    }
    let ms = performance.now() - p.startedAt;
    const done = p.durationMs !== null && ms >= p.durationMs;
    if (done) ms = p.durationMs;
    this.send({ type: "audio.played", item_id: p.id, played_ms: Math.round(ms) });
    if (done) this.playing = null;
  }

  ended(code, reason) {
    if (!this.pc) return;
    this.teardown();
    // a refusal says why, as on the voice socket (the fatal `error` event came first)
    const message =
      code >= 4000 && this.fatal
        ? `The server refused the call: ${this.fatal}`
        : FINAL[code] || `The call ended (${reason || "the connection was lost"}).`;
    this.hooks.onStatus(code >= 4000 ? "failed" : "idle", { code, message });
  }

  send(event) {
    if (this.channel && this.channel.readyState === "open") {
      this.channel.send(JSON.stringify(event));
      return true;
    }
    return false;
  }

  /** Send raw text on the events channel (test hook for bad input). */
  sendRaw(text) {
    if (this.channel && this.channel.readyState === "open") this.channel.send(text);
  }

  /** The microphone is on the track: a frame is not sent, only muting applies. */
  sendAudio(pcm, silent = false) {
    if (this.micTrack) this.micTrack.enabled = !silent;
    return this.live;
  }

  /** Put the opened microphone on the audio track (no renegotiation needed). */
  useMic(stream) {
    this.micTrack = stream.getAudioTracks()[0] || null;
    if (this.sender && this.micTrack) this.sender.replaceTrack(this.micTrack);
  }

  /** The WebRTC stats of the reply audio (test hook): inbound packets and audio level. */
  async stats() {
    if (!this.pc) return null;
    const out = { packetsReceived: 0, audioLevel: 0, totalAudioEnergy: 0, packetsSent: 0 };
    (await this.pc.getStats()).forEach((r) => {
      if (r.type === "inbound-rtp" && r.kind === "audio") {
        out.packetsReceived = r.packetsReceived;
        out.audioLevel = r.audioLevel ?? 0;
        out.totalAudioEnergy = r.totalAudioEnergy ?? 0;
      } else if (r.type === "outbound-rtp" && r.kind === "audio") {
        out.packetsSent = r.packetsSent;
      }
    });
    return out;
  }

  teardown() {
    const pc = this.pc;
    this.pc = null;
    this.live = false;
    this.playing = null;
    clearInterval(this.playedTimer);
    this.playedTimer = null;
    if (this.player) this.player.srcObject = null;
    if (pc) pc.close();
    this.channel = null;
    this.sender = null;
  }

  /** Hang up: DELETE on the call's URL (the server stores the call), then close. */
  close() {
    const location = this.location;
    this.location = null;
    if (location && this.pc) this.api.hangUp(location).catch(() => {});
    if (this.pc) {
      this.teardown();
      this.hooks.onStatus("idle", { code: 1000, message: "Disconnected." });
    }
  }
}

/** Wait for ICE gathering to finish (the gateway takes no trickled candidates). */
function gathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      if (pc.iceGatheringState !== "complete") return;
      pc.removeEventListener("icegatheringstatechange", done);
      resolve();
    };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, 3000); // a slow interface must not hold the call
  });
}
