// The browser voice socket (docs/voice_socket.md) with automatic reconnect. A reconnect fetches a
// fresh session token and resumes the conversation by sending its conversation_id.

import { CLIENT_TOOLS } from "./client_tools.js";
import { INPUT_RATE } from "./audio.js";

const MAX_ATTEMPTS = 30;
// close codes after which reconnecting would not help (or was not wanted)
const FINAL = {
  1000: "The call ended.",
  1001: "The call ended after a period of inactivity.",
  4401: "The server refused the call: not authorized (check the API key under Settings).",
  4404: "The server does not know this agent (it may have been deleted).",
};
const REASONS = {
  1006: "the connection was lost",
  1005: "the connection was lost",
  1009: "a frame was too large",
  1011: "the server hit an error",
  1012: "the server is restarting",
};

export class VoiceConnection {
  /** hooks: onEvent(event), onAudio(ArrayBuffer), onStatus(state, detail) with state one of
   *  "connecting" | "live" | "reconnecting" | "idle" | "failed" */
  constructor(api, hooks) {
    this.api = api;
    this.hooks = hooks;
    this.ws = null;
    this.live = false;
    this.wanted = false;
    this.attempt = 0;
    this.timer = null;
    this.agentId = null;
    this.conversationId = null;
    this.caller = "";
    this.fatal = null; // the message of the last fatal `error` event (why the server closes)
    this.outputRate = 16000;
  }

  /** Start a call as `caller` (or resume `conversationId`, one of that caller's).
   *  Resolves once the socket is dialled. */
  async open(agentId, { outputRate, conversationId = null, caller = "" }) {
    this.close();
    this.agentId = agentId;
    this.caller = caller;
    this.outputRate = Math.max(8000, Math.min(48000, Math.round(outputRate)));
    this.conversationId = conversationId;
    this.wanted = true;
    this.attempt = 0;
    await this.dial();
  }

  async dial() {
    this.timer = null;
    this.hooks.onStatus(this.attempt ? "reconnecting" : "connecting", { attempt: this.attempt });
    let url;
    try {
      url = await this.api.voiceUrl(this.agentId, this.caller);
    } catch (err) {
      if (!this.wanted) return;
      if (err.status === 0 || err.status >= 500) this.retry("the server did not answer");
      else this.fail(err.message);
      return;
    }
    if (!this.wanted) return;
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      this.fatal = null;
      ws.send(
        JSON.stringify({
          type: "session.start",
          input_audio: { encoding: "pcm16", sample_rate: INPUT_RATE },
          output_audio: { encoding: "pcm16", sample_rate: this.outputRate },
          conversation_id: this.conversationId,
          client_tools: CLIENT_TOOLS,
        }),
      );
    };
    ws.onmessage = (e) => this.message(e.data);
    ws.onclose = (e) => this.closed(ws, e.code, e.reason);
  }

  message(data) {
    if (typeof data !== "string") {
      this.hooks.onAudio(data);
      return;
    }
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (event.type === "error" && event.fatal) this.fatal = `${event.message} (${event.code})`;
    if (event.type === "session.started") {
      const resumed = this.attempt > 0;
      this.conversationId = event.conversation_id;
      this.attempt = 0;
      this.live = true;
      this.hooks.onStatus("live", { resumed, conversationId: event.conversation_id });
    }
    this.hooks.onEvent(event);
  }

  closed(ws, code, reason) {
    if (ws !== this.ws) return; // an older socket
    this.ws = null;
    this.live = false;
    if (!this.wanted) {
      this.hooks.onStatus("idle", { code, message: "Disconnected." });
      return;
    }
    if (code in FINAL) {
      this.wanted = false;
      const message = code >= 4000 && this.fatal ? `The server refused the call: ${this.fatal}` : FINAL[code];
      this.hooks.onStatus(code >= 4000 ? "failed" : "idle", { code, message });
      return;
    }
    this.retry(REASONS[code] || `the connection closed (code ${code}${reason ? `: ${reason}` : ""})`, code);
  }

  retry(reason, code) {
    if (!this.wanted) return;
    this.attempt += 1;
    if (this.attempt > MAX_ATTEMPTS) {
      this.fail(`Gave up reconnecting: ${reason}.`);
      return;
    }
    const delay = Math.min(8000, 400 * 2 ** (this.attempt - 1)) * (0.8 + 0.4 * Math.random());
    this.hooks.onStatus("reconnecting", { attempt: this.attempt, delay, reason, code });
    this.timer = setTimeout(() => this.dial(), delay);
  }

  fail(message) {
    this.wanted = false;
    this.hooks.onStatus("failed", { message });
  }

  send(event) {
    if (this.live && this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(event));
      return true;
    }
    return false;
  }

  /** Send raw text (test hook for bad input). */
  sendRaw(text) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(text);
  }

  sendAudio(pcm) {
    if (this.live && this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(pcm);
      return true;
    }
    return false;
  }

  /** End the call: session.end lets the server store the last turn and close with 1000. */
  close() {
    this.wanted = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const ws = this.ws;
    if (!ws) return;
    if (ws.readyState === WebSocket.OPEN && this.live) {
      ws.send(JSON.stringify({ type: "session.end" }));
      setTimeout(() => ws.readyState === WebSocket.CLOSED || ws.close(1000), 3000);
    } else {
      ws.close(1000);
    }
    this.live = false;
  }
}
