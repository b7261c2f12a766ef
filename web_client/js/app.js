// The page: agent picker, call controls, keyboard, and the test-visible state on window.vg.

import { Api } from "./api.js";
import { Call } from "./call.js";
import * as alerts from "./ui/alerts.js";
import { CallerPanel } from "./ui/caller.js";
import { ConversationLog } from "./ui/log.js";
import { LatencyPanel } from "./ui/metrics.js";
import { MemoryPanel } from "./ui/memory.js";
import { webrtcSupported } from "./webrtc.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const DEFAULT_PERSONA = "I am a friendly, concise assistant with a long-term memory.";

// Everything a test (or a curious person in the console) may want to read.
const vg = {
  state: "idle", // idle | connecting | live | reconnecting | failed
  transport: null, // webrtc | websocket: of the current call
  ready: false, // the first agent list request has finished (loaded or failed)
  agents: null, // how many agents the list shows (null until loaded)
  agentId: null,
  caller: null, // the caller id this page calls as (localStorage "vg.caller")
  identityId: null, // that caller's identity on the agent (null: none yet, or not listed)
  callerNote: "", // "" | "new" | "unsupported" (GET /v1/identities/ 404) | "error"
  conversations: [], // the caller's conversation ids on the agent
  conversationsNote: "", // "" | "unsupported" (GET /v1/conversations/ 404) | "error"
  callerLoading: false, // the caller's identity and conversations are being fetched
  conversationId: null,
  sessionId: null,
  mic: "off", // off | on | denied | missing | busy | unsupported | failed
  muted: false,
  ptt: false,
  talking: false,
  framesSent: 0,
  silentFrames: 0, // frames sent as digital silence (muted, or push-to-talk not held)
  bytesSent: 0,
  bytesReceived: 0,
  bytesPlayed: 0,
  framesDropped: 0,
  playedAfterClear: 0,
  underruns: 0,
  connects: 0,
  reconnects: 0,
  items: {},
  clears: [],
  cancelled: [],
  events: [],
  errors: [],
  transcripts: [],
  replies: [],
  metrics: [],
  memoryUpdates: [],
  clientTools: [], // client tool calls this page ran: {name, status}
  approvals: [], // approval requests shown: {callId, name, prompt}
  ended: null, // the last session.ended reason
  transfers: [], // transfer.requested events: {target, mode, summary}
  blocks: {},
  callerBlocks: {},
  statusLog: [],
};
window.vg = vg;

const api = new Api(() => $("api-key").value.trim());
const ui = {
  log: new ConversationLog($("log")),
  memory: new MemoryPanel({ agent: $("blocks"), caller: $("caller-blocks") }, api, vg),
  latency: new LatencyPanel($("latency"), $("sparkline")),
  onState: renderState,
  onMic: (status, message) => {
    $("mic-note").textContent = message;
    if (vg.state === "live") renderState("live", {});
    if (status !== "on" && status !== "off") $("text-input").focus();
  },
  onLevel: (rms) => {
    const pct = Math.min(100, Math.max(0, (20 * Math.log10(rms + 1e-6) + 60) * (100 / 60)));
    $("meter-bar").style.width = `${pct.toFixed(0)}%`;
  },
  onHeard: (speaking) => {
    if (vg.mic === "on") $("mic-note").textContent = speaking ? "Hearing you…" : "Listening.";
  },
  onLive: () => loadCaller(), // a first call makes the caller's identity and blocks
};
const callerPanel = new CallerPanel(
  {
    input: $("caller-input"),
    list: $("caller-list"),
    current: $("caller-current"),
    note: $("caller-note"),
    select: $("conversation-select"),
    convNote: $("conversation-note"),
  },
  api,
  vg,
  callerChanged,
);
const call = new Call(api, ui, vg);
vg.send = (raw) => call.conn.sendRaw(raw); // test hook: send a raw text frame
vg.rtcStats = () => call.rtc.stats(); // test hook: WebRTC stats of the reply audio
let resumeId = null; // the conversation to continue after an unplanned end

const STATUS_TEXT = {
  idle: "Not connected",
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  failed: "Disconnected",
};

function renderState(st, detail) {
  const status = $("status");
  status.dataset.state = st;
  let text = STATUS_TEXT[st];
  if (st === "live") text = vg.mic === "on" || vg.mic === "off" ? "Live" : "Live (text only)";
  if (st === "reconnecting" && detail.attempt) text = `Reconnecting (attempt ${detail.attempt})…`;
  status.textContent = text;
  const active = st !== "idle" && st !== "failed";
  const connect = $("connect");
  connect.textContent = active ? "Disconnect" : "Connect";
  connect.classList.toggle("danger", active);
  if (!active && vg.conversationId && detail.code !== 1000) resumeId = vg.conversationId;
  if (st === "live") resumeId = null;
  updateComposer();
}

function updateComposer() {
  const usable = Boolean($("agent-select").value);
  $("text-input").disabled = !usable;
  $("send").disabled = !usable;
}

// ----- agents -----

async function loadAgents(selectId) {
  const select = $("agent-select");
  let agents;
  try {
    agents = await api.listAgents();
  } catch (err) {
    select.replaceChildren(new Option("Could not load agents", ""));
    alerts.show({ key: "agents", text: `Agents: ${err.message}`, actions: [{ label: "Retry", run: () => loadAgents() }] });
    updateComposer();
    return;
  }
  alerts.dismiss("agents");
  vg.agents = agents.length;
  select.replaceChildren(...agents.map((a) => new Option(`${a.name} · ${a.id.slice(-6)}`, a.id)));
  if (!agents.length) {
    select.append(new Option("No agents yet: create one below", ""));
    $("create-details").open = true;
  }
  const wanted = selectId || params.get("agent") || localStorage.getItem("vg.agent");
  if (wanted && agents.some((a) => a.id === wanted)) select.value = wanted;
  await agentChanged();
}

function agentChanged() {
  const id = $("agent-select").value;
  if (id) localStorage.setItem("vg.agent", id);
  if (call.active && id !== vg.agentId) {
    call.disconnect();
    ui.log.clear();
  }
  resumeId = null;
  vg.agentId = id || null;
  updateComposer();
  ui.memory.load(id || null).catch((err) => alerts.show({ text: `Memory: ${err.message}` }));
  return loadCaller();
}

/** The caller's identity, conversations and own blocks on the selected agent. */
async function loadCaller() {
  const agentId = vg.agentId;
  try {
    const identity = await callerPanel.load(agentId);
    if (agentId !== vg.agentId) return;
    await ui.memory.loadOwn(agentId, identity ? identity.block_ids || [] : []);
  } catch (err) {
    alerts.show({ key: "caller", text: `Caller memory: ${err.message}` });
  }
}

function callerChanged() {
  if (call.active) {
    call.disconnect();
    ui.log.clear();
  }
  resumeId = null;
  vg.conversationId = null;
  loadCaller();
}

async function createAgent(e) {
  e.preventDefault();
  const form = e.target;
  const name = form.elements.name.value.trim();
  const persona = form.elements.persona.value.trim() || DEFAULT_PERSONA;
  const model = form.elements.model.value.trim();
  const greeting = form.elements.greeting.value.trim();
  form.querySelector("button").disabled = true;
  try {
    const agent = await api.createAgent({ name, persona, model, greeting });
    form.reset();
    $("create-details").open = false;
    await loadAgents(agent.id);
    alerts.show({ kind: "info", text: `Created agent “${agent.name}”. Press Connect to talk to it.`, timeoutMs: 6000 });
  } catch (err) {
    alerts.show({ text: `Could not create the agent: ${err.message}` });
  } finally {
    form.querySelector("button").disabled = false;
  }
}

// ----- call controls -----

function connect() {
  const id = $("agent-select").value;
  if (!id) {
    alerts.show({ kind: "info", text: "Pick an agent first, or create one.", timeoutMs: 6000 });
    return;
  }
  alerts.dismiss("connection");
  const transport = $("transport").value;
  return call.connect(id, {
    processing: $("aec").checked,
    resume: resumeId || callerPanel.conversation,
    caller: vg.caller,
    transport,
  });
}

function toggleConnect() {
  if (call.active) {
    call.disconnect();
    resumeId = null;
  } else {
    connect();
  }
}

function setPressed(button, on) {
  button.setAttribute("aria-pressed", String(on));
}

function toggleMute() {
  vg.muted = !vg.muted;
  setPressed($("mute"), vg.muted);
  $("mute").textContent = vg.muted ? "Unmute" : "Mute";
}

function togglePtt() {
  vg.ptt = !vg.ptt;
  setPressed($("ptt-mode"), vg.ptt);
  $("talk").hidden = !vg.ptt;
  $("talk-hint").hidden = !vg.ptt;
  talk(false);
  if (vg.ptt) $("talk").focus(); // Space on the toggle would switch it off again
}

function talk(on) {
  vg.talking = on && vg.ptt;
  $("talk").classList.toggle("active", vg.talking);
  $("talk").textContent = vg.talking ? "Talking… release to send" : "Hold to talk";
}

function sendText(e) {
  e.preventDefault();
  const input = $("text-input");
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  if (!call.sendText(text) && !call.active) connect();
}

const typing = (t) => t instanceof HTMLElement && t.matches("input, textarea, select, [contenteditable]");

function keydown(e) {
  if (e.code === "Space" && vg.ptt && !e.repeat && (e.target === $("talk") || !typing(e.target) && !(e.target instanceof HTMLButtonElement))) {
    e.preventDefault();
    talk(true);
  } else if (e.key === "Escape" && vg.state === "live") {
    call.cancelReply();
  }
}

function keyup(e) {
  if (e.code === "Space" && vg.talking) {
    e.preventDefault();
    talk(false);
  }
}

function init() {
  const key = sessionStorage.getItem("vg.apiKey");
  if (key) $("api-key").value = key;
  $("api-key").addEventListener("change", (e) => {
    sessionStorage.setItem("vg.apiKey", e.target.value.trim());
    loadAgents();
  });
  $("settings-form").addEventListener("submit", (e) => e.preventDefault());
  if (params.get("aec") === "0") $("aec").checked = false;
  callerPanel.init(params.get("caller"), params.get("conversation"));
  // WebRTC when the browser has it (UDP, Opus, its own echo canceller), else the voice socket
  const rtcOption = $("transport").querySelector("option[value=webrtc]");
  rtcOption.disabled = !webrtcSupported();
  const wanted = params.get("transport") || localStorage.getItem("vg.transport");
  $("transport").value = wanted === "websocket" || !webrtcSupported() ? "websocket" : "webrtc";
  $("transport").addEventListener("change", (e) => localStorage.setItem("vg.transport", e.target.value));
  $("agent-select").addEventListener("change", agentChanged);
  $("refresh-agents").addEventListener("click", () => loadAgents($("agent-select").value));
  $("create-form").addEventListener("submit", createAgent);
  $("connect").addEventListener("click", toggleConnect);
  $("mute").addEventListener("click", toggleMute);
  $("ptt-mode").addEventListener("click", togglePtt);
  const talkButton = $("talk");
  talkButton.addEventListener("pointerdown", () => talk(true));
  for (const ev of ["pointerup", "pointerleave", "pointercancel", "blur"]) {
    talkButton.addEventListener(ev, () => talk(false));
  }
  $("text-form").addEventListener("submit", sendText);
  document.addEventListener("keydown", keydown);
  document.addEventListener("keyup", keyup);
  window.addEventListener("pagehide", () => call.active && call.disconnect());
  renderState("idle", {});
  loadAgents().finally(() => (vg.ready = true));
}

init();
