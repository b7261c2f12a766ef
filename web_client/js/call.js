// One call with an agent: the voice socket, the microphone, reply playback, and the server
// events (docs/voice_socket.md) rendered into the conversation, memory and latency panels.

import { AudioEngine, MicError } from "./audio.js";
import { VoiceConnection } from "./voice.js";
import { RtcConnection } from "./webrtc.js";
import * as alerts from "./ui/alerts.js";
import { approvalRequest, toolCall } from "./client_tools.js";

const PLAYED_EVERY_MS = 250; // how often audio.played is sent while a reply plays
// session.ended reasons (docs/voice_socket.md) as the conversation shows them
const ENDED = {
  agent_ended: "The agent ended the call.",
  caller_ended: "You ended the call.",
};

export class Call {
  /** ui: {log, memory, latency, onState(state, detail), onMic(status, message), onLevel(rms),
   *  onHeard(bool), onLive(detail)}; state: the page's test-visible state object (window.vg) */
  constructor(api, ui, state) {
    this.api = api;
    this.ui = ui;
    this.s = state;
    this.audioItem = null; // the reply item whose binary frames are arriving
    this.lastPlayedSent = new Map(); // item_id -> time audio.played was last sent
    this.pendingText = [];
    this.micTried = false;
    this.processing = true;
    this.engine = new AudioEngine({
      onFrame: (pcm, rms) => this.frame(pcm, rms),
      onPlayed: (m) => this.played(m),
      onCleared: (dropped) => this.cleared(dropped),
      onUnderrun: () => (this.s.underruns += 1),
    });
    this.socket = new VoiceConnection(api, {
      onEvent: (ev) => this.event(ev),
      onAudio: (buf) => this.audio(buf),
      onStatus: (st, detail) => this.status(st, detail),
    });
    this.rtc = new RtcConnection(api, {
      onEvent: (ev) => this.event(ev),
      onStatus: (st, detail) => this.status(st, detail),
    });
    this.conn = this.socket; // the transport of the current call (connect() picks it)
  }

  get active() {
    return this.s.state !== "idle" && this.s.state !== "failed";
  }

  /** A call to `agentId` as `caller` (bound into the session token), resuming the
   *  conversation `resume` (one of the caller's) or the caller's open one, over `transport`. */
  async connect(agentId, { processing, resume = null, caller = "", transport = "websocket" }) {
    this.conn = transport === "webrtc" ? this.rtc : this.socket;
    this.s.transport = transport;
    this.processing = processing;
    this.micTried = false;
    this.s.agentId = agentId;
    this.s.state = "connecting";
    this.ui.onState("connecting", {});
    try {
      await this.engine.init(); // context + worklets before the socket and the microphone
    } catch (err) {
      this.s.state = "failed";
      this.ui.onState("failed", { message: `Audio could not start: ${err.message}` });
      alerts.show({ key: "connection", text: `Audio could not start: ${err.message}` });
      return;
    }
    this.ui.memory.load(agentId).catch((err) => alerts.show({ text: `Memory: ${err.message}` }));
    await this.conn.open(agentId, { outputRate: this.engine.sampleRate, conversationId: resume, caller });
  }

  disconnect() {
    this.conn.close();
    this.engine.closeMic();
    this.engine.clear();
    this.audioItem = null;
    this.s.mic = "off";
    this.ui.onMic("off", "The microphone is off.");
  }

  status(st, detail) {
    this.s.state = st;
    this.s.statusLog.push({ state: st, code: detail.code ?? null });
    if (st === "live") {
      alerts.dismiss("connection");
      this.s.conversationId = detail.conversationId;
      if (detail.resumed) {
        this.s.reconnects += 1;
        this.ui.log.note("Reconnected: the conversation continues.");
        this.ui.memory.load(this.s.agentId).catch(() => {});
      }
      if (this.ui.onLive) this.ui.onLive(detail);
      if (!this.micTried) this.openMic();
      for (const text of this.pendingText.splice(0)) this.sendText(text);
    } else if (st === "reconnecting" && detail.reason) {
      this.stopPlayback();
      alerts.show({
        key: "connection",
        kind: "info",
        text: `Connection lost: ${detail.reason}. Reconnecting (attempt ${detail.attempt})…`,
      });
    } else if (st === "idle" || st === "failed") {
      this.stopPlayback();
      this.engine.closeMic();
      if (this.s.mic === "on") this.s.mic = "off";
      if (detail.message && detail.code !== undefined && detail.code !== 1000) {
        alerts.show({ key: "connection", kind: st === "failed" ? "error" : "info", text: detail.message });
      } else if (st === "failed") {
        alerts.show({ key: "connection", text: detail.message });
      }
    }
    this.ui.onState(st, detail);
  }

  async openMic() {
    this.micTried = true;
    try {
      await this.engine.openMic(this.processing);
      if (this.conn === this.rtc) this.rtc.useMic(this.engine.mic.stream);
      this.s.mic = "on";
      alerts.dismiss("mic");
      this.ui.onMic("on", "Listening. Speak any time; you can interrupt the agent.");
    } catch (err) {
      const kind = err instanceof MicError ? err.kind : "failed";
      this.s.mic = kind;
      const how =
        kind === "denied"
          ? " Allow it for this site (the microphone icon in the address bar) and press Retry."
          : "";
      alerts.show({
        key: "mic",
        kind: "info",
        text: `${err.message} The agent cannot hear you, but you can type your messages in the box below.${how}`,
        actions: [{ label: "Retry microphone", run: () => this.openMic() }],
      });
      this.ui.onMic(kind, "Microphone unavailable: type your messages instead.");
    }
  }

  frame(pcm, rms) {
    this.ui.onLevel(rms);
    if (!this.conn.live) return;
    const silent = this.s.muted || (this.s.ptt && !this.s.talking);
    // muted: digital silence keeps the turn detector's clock running (it ends the turn)
    const out = silent ? new ArrayBuffer(pcm.byteLength) : pcm;
    if (this.conn.sendAudio(out, silent)) {
      this.s.framesSent += 1;
      if (silent) this.s.silentFrames += 1;
      this.s.bytesSent += out.byteLength;
    }
  }

  sendText(text) {
    if (this.conn.send({ type: "input_text", text })) return true;
    this.pendingText.push(text);
    return false;
  }

  cancelReply() {
    this.conn.send({ type: "response.cancel" });
  }

  audio(buf) {
    this.s.bytesReceived += buf.byteLength;
    const item = this.audioItem && this.s.items[this.audioItem];
    if (!item) {
      this.s.framesDropped += 1; // after audio.clear, before the next item starts
      return;
    }
    item.bytesReceived += buf.byteLength;
    this.engine.push(this.audioItem, buf);
  }

  played({ id, samples, done }) {
    const item = this.s.items[id];
    if (!item) return;
    const ms = (samples * 1000) / this.engine.sampleRate;
    if (item.clearedAt !== null) this.s.playedAfterClear += Math.max(0, ms - item.playedMs);
    const bytes = Math.round(((ms - item.playedMs) * item.rate) / 1000) * 2;
    this.s.bytesPlayed += Math.max(0, bytes);
    item.playedMs = ms;
    item.done = item.done || done;
    const now = performance.now();
    if (done || now - (this.lastPlayedSent.get(id) || 0) >= PLAYED_EVERY_MS) {
      this.lastPlayedSent.set(id, now);
      this.conn.send({ type: "audio.played", item_id: id, played_ms: Math.round(ms) });
    }
  }

  cleared(dropped) {
    const droppedMs = (dropped * 1000) / this.engine.sampleRate;
    for (const item of Object.values(this.s.items)) {
      if (!item.done && item.clearedAt === null) item.clearedAt = item.playedMs;
    }
    this.s.clears.push({ droppedMs });
  }

  stopPlayback() {
    this.engine.clear();
    this.audioItem = null;
    this.ui.log.dropPartial();
    for (const li of document.querySelectorAll(".msg.agent.streaming")) li.classList.remove("streaming");
  }

  event(ev) {
    const s = this.s;
    s.events.push(ev.type);
    if (s.events.length > 2000) s.events.splice(0, 1000);
    const log = this.ui.log;
    switch (ev.type) {
      case "session.started":
        s.sessionId = ev.session_id;
        s.connects += 1;
        break;
      case "speech.started":
        this.ui.onHeard(true);
        break;
      case "speech.stopped":
        this.ui.onHeard(false);
        break;
      case "transcript.partial":
        log.partial(ev.text);
        break;
      case "transcript.final":
        s.transcripts.push(ev.text);
        log.userFinal(ev.turn_id, ev.text);
        break;
      case "response.started":
        log.dropPartial();
        log.agent(ev.item_id);
        break;
      case "response.text.delta":
        log.agentDelta(ev.item_id, ev.text);
        break;
      case "response.text.done":
        s.replies.push(ev.text);
        log.agentDone(ev.item_id, ev.text);
        break;
      case "response.filler":
        log.filler(ev.item_id, ev.text);
        break;
      case "response.tool_call":
        log.toolCall(ev.item_id, ev.name, ev.arguments);
        break;
      case "response.tool_result":
        log.toolResult(ev.item_id, ev.name, ev.ok);
        break;
      case "response.audio.started":
        this.audioItem = ev.item_id;
        s.items[ev.item_id] = { rate: ev.sample_rate, bytesReceived: 0, playedMs: 0, done: false, clearedAt: null };
        this.engine.startItem(ev.item_id, ev.sample_rate);
        break;
      case "response.audio.done":
        if (s.items[ev.item_id]) s.items[ev.item_id].durationMs = ev.duration_ms;
        this.engine.endItem(ev.item_id);
        if (this.audioItem === ev.item_id) this.audioItem = null;
        break;
      case "audio.clear":
        this.engine.clear();
        this.audioItem = null;
        break;
      case "response.cancelled":
        s.cancelled.push({ item: ev.item_id, reason: ev.reason, playedMs: ev.played_ms });
        log.cancelled(ev.item_id, ev.reason, ev.played_ms);
        break;
      case "response.done":
        log.finished(ev.item_id);
        break;
      case "turn.metrics":
        s.metrics.push(ev);
        this.ui.latency.show(ev);
        break;
      case "tool.call":
        toolCall(ev, (e) => this.conn.send(e), s);
        break;
      case "approval.request":
        approvalRequest(ev, (e) => this.conn.send(e), s);
        break;
      case "memory.updated":
        s.memoryUpdates.push({ label: ev.label, version: ev.version });
        this.ui.memory.updated(ev.label, ev.version).catch(() => {});
        break;
      case "session.ended":
        s.ended = ev.reason;
        log.note(ENDED[ev.reason] ?? `The call ended (${ev.reason}).`);
        break;
      case "transfer.requested":
        s.transfers.push({ target: ev.target, mode: ev.mode, summary: ev.summary });
        log.note(`The agent asks to put you through to ${ev.target} (${ev.mode} transfer).`);
        alerts.show({
          kind: "info",
          text: `Transfer to ${ev.target} requested${ev.summary ? `: ${ev.summary}` : "."}`,
          timeoutMs: 15000,
        });
        break;
      case "error":
        s.errors.push(ev);
        alerts.show({
          key: ev.fatal ? "connection" : undefined,
          text: `Server error (${ev.code}): ${ev.message}`,
          timeoutMs: ev.fatal ? 0 : 15000,
        });
        break;
      default:
        break;
    }
  }
}
