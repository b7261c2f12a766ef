// The conversation: user transcripts (partial grey, final black), agent text as it streams,
// filler phrases, compact tool calls, interruptions and notes.

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function compactArgs(raw) {
  let args = raw;
  if (typeof raw === "string") {
    try {
      args = JSON.parse(raw);
    } catch {
      return raw.length > 60 ? `${raw.slice(0, 57)}…` : raw;
    }
  }
  if (!args || typeof args !== "object") return String(args ?? "");
  const parts = Object.entries(args).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  const text = parts.join(", ");
  return text.length > 60 ? `${text.slice(0, 57)}…` : text;
}

export class ConversationLog {
  constructor(list) {
    this.list = list;
    this.pending = null; // the grey partial-transcript line
    this.agents = new Map(); // item_id -> {li, body}
  }

  atBottom() {
    return this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 80;
  }

  add(li) {
    const stick = this.atBottom();
    this.list.append(li);
    if (stick) this.list.scrollTop = this.list.scrollHeight;
    return li;
  }

  userLine(text, partial) {
    const li = el("li", `msg user${partial ? " partial" : ""}`);
    li.append(el("span", "who", partial ? "You (listening…)" : "You"), el("span", "text", text));
    return li;
  }

  partial(text) {
    if (this.pending) {
      this.pending.querySelector(".text").textContent = text;
      return;
    }
    this.pending = this.add(this.userLine(text, true));
  }

  userFinal(turnId, text) {
    const li = this.userLine(text, false);
    li.dataset.turn = turnId;
    if (this.pending) {
      this.pending.replaceWith(li);
      this.pending = null;
    } else {
      this.add(li);
    }
  }

  dropPartial() {
    if (this.pending) this.pending.remove();
    this.pending = null;
  }

  agent(itemId) {
    let entry = this.agents.get(itemId);
    if (!entry) {
      const li = el("li", "msg agent streaming");
      li.dataset.item = itemId;
      const body = el("div", "body");
      li.append(el("span", "who", "Agent"), body);
      this.add(li);
      entry = { li, body };
      this.agents.set(itemId, entry);
    }
    return entry;
  }

  agentDelta(itemId, text) {
    const { body } = this.agent(itemId);
    const stick = this.atBottom();
    let last = body.lastElementChild;
    if (!last || !last.classList.contains("text")) last = body.appendChild(el("span", "text", ""));
    last.textContent += text;
    if (stick) this.list.scrollTop = this.list.scrollHeight;
  }

  agentDone(itemId, text) {
    const entry = this.agents.get(itemId);
    if (!entry) return;
    if (text && !entry.body.querySelector(".text")) entry.body.append(el("span", "text", text));
  }

  filler(itemId, text) {
    this.agent(itemId).body.append(el("span", "filler", text));
  }

  toolCall(itemId, name, args) {
    const chip = el("span", "tool", `${name}(${compactArgs(args)})`);
    chip.dataset.name = name;
    chip.title = typeof args === "string" ? args : JSON.stringify(args);
    this.agent(itemId).body.append(chip);
  }

  toolResult(itemId, name, ok) {
    const chips = [...this.agent(itemId).body.querySelectorAll(".tool")];
    const chip = chips.reverse().find((c) => c.dataset.name === name && !c.dataset.done);
    if (!chip) return;
    chip.dataset.done = "1";
    chip.classList.add(ok ? "ok" : "failed");
  }

  finished(itemId) {
    this.agents.get(itemId)?.li.classList.remove("streaming");
  }

  cancelled(itemId, reason, playedMs) {
    const entry = this.agents.get(itemId);
    if (!entry) return;
    entry.li.classList.remove("streaming");
    entry.li.classList.add("interrupted");
    const why = reason === "barge_in" ? "interrupted by you" : reason === "client" ? "stopped" : "cut off";
    entry.li.querySelector(".who").append(el("span", "tag", `${why} after ${(playedMs / 1000).toFixed(1)} s`));
  }

  note(text) {
    this.add(el("li", "note", text));
  }

  clear() {
    this.list.replaceChildren();
    this.pending = null;
    this.agents.clear();
  }
}
