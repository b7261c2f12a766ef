// The caller panel: who this page calls as (a caller key), that caller's
// conversations with the agent (pick one to resume), and where the caller's own blocks come
// from (GET /v1/identities/ -> block ids -> GET /v1/blocks/{id}, shown by the memory panel).

const KEY = "vg.caller";
const RECENT = "vg.callers"; // caller ids typed on this browser, newest first
export const MAX_CALLER = 128; // the server's limit (memory/identities.py MAX_CALLER_KEY)

/** A caller id for this browser: made once, then kept in localStorage. */
export function storedCaller() {
  let key = localStorage.getItem(KEY);
  if (!key || checkCaller(key)) {
    const bytes = crypto.getRandomValues(new Uint8Array(6)); // also on plain-http origins
    key = `web-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
    localStorage.setItem(KEY, key);
  }
  return key;
}

/** "" if the server would take `key` as a caller key, else why not (as the server says). */
export function checkCaller(key) {
  if (!key.trim()) return "The caller id must not be empty.";
  if (key.length > MAX_CALLER) return `The caller id is ${key.length} characters; at most ${MAX_CALLER}.`;
  if (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(key)) return "The caller id must not contain control characters.";
  return "";
}

function recent() {
  try {
    const list = JSON.parse(localStorage.getItem(RECENT) || "[]");
    return Array.isArray(list) ? list.filter((k) => typeof k === "string" && !checkCaller(k)) : [];
  } catch {
    return [];
  }
}

const when = (iso) => {
  const d = iso ? new Date(iso) : null;
  return d && !Number.isNaN(d.getTime()) ? d.toLocaleString() : "";
};

export class CallerPanel {
  /** els: {input, list (a select of ids used before), current, note, select, convNote}; state: window.vg;
   *  onChange(caller): the caller id changed (the page ends a call in progress) */
  constructor(els, api, state, onChange) {
    this.els = els;
    this.api = api;
    this.s = state;
    this.onChange = onChange;
    this.agentId = null;
    this.linked = null; // a conversation id from the page's URL (?conversation=)
    this.callerNote = ""; // the note about the caller once loaded (bad input notes aside)
  }

  init(fromUrl, conversationFromUrl) {
    const key = fromUrl && !checkCaller(fromUrl) ? fromUrl.trim() : storedCaller();
    this.set(key, false);
    this.linked = conversationFromUrl || null;
    this.els.input.addEventListener("change", () => this.typed());
    this.els.list.addEventListener("change", () => {
      const key = this.els.list.value;
      if (key && key !== this.s.caller) this.set(key, true);
    });
    this.els.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.typed();
      }
    });
  }

  get caller() {
    return this.s.caller;
  }

  /** The conversation to resume, or null: the server opens the caller's open conversation. */
  get conversation() {
    return this.els.select.value || null;
  }

  /** The input's value, on Enter or when it loses focus. */
  typed() {
    const key = this.els.input.value.trim();
    const why = checkCaller(key);
    this.els.input.setCustomValidity(why);
    if (why) {
      this.els.note.textContent = why;
      this.els.input.reportValidity();
    } else if (key !== this.s.caller) {
      this.set(key, true);
    } else {
      this.notes(this.callerNote, this.els.convNote.textContent); // what was there before
    }
  }

  set(key, changed) {
    this.s.caller = key;
    this.s.identityId = null;
    this.els.input.value = key;
    this.els.input.setCustomValidity("");
    this.els.current.textContent = key;
    localStorage.setItem(KEY, key);
    const keys = [key, ...recent().filter((k) => k !== key)].slice(0, 10);
    localStorage.setItem(RECENT, JSON.stringify(keys));
    this.renderChoices(keys);
    if (changed) {
      this.linked = null;
      this.onChange(key);
    }
  }

  renderChoices(keys) {
    const pick = new Option(`Callers used on this browser (${keys.length})`, "");
    this.els.list.replaceChildren(pick, ...keys.map((k) => new Option(k, k)));
    this.els.list.value = "";
  }

  /** The caller's identity on the agent (null if none yet) and their conversations. The
   *  notes change only once the answers are in: no layout shift while they load. */
  async load(agentId) {
    this.agentId = agentId;
    const caller = this.s.caller;
    this.s.callerLoading = true;
    try {
      if (!agentId) {
        this.s.conversations = [];
        this.notes("", "");
        this.renderConversations([]);
        return null;
      }
      const [identity, conversations] = await Promise.all([
        this.loadIdentity(agentId, caller),
        this.loadConversations(agentId),
      ]);
      if (agentId !== this.agentId || caller !== this.s.caller) return null; // changed meanwhile
      this.s.identityId = identity.value ? identity.value.id : null;
      const mine = identity.value
        ? conversations.value.filter((c) => c.identity_id === identity.value.id)
        : [];
      this.s.conversations = mine.map((c) => c.id);
      const none = !mine.length && !conversations.note ? "No conversations yet: the first call starts one." : "";
      this.notes(identity.note, conversations.note || none);
      this.renderConversations(mine);
      return identity.value;
    } finally {
      if (agentId === this.agentId && caller === this.s.caller) this.s.callerLoading = false;
    }
  }

  notes(caller, conversations) {
    this.callerNote = caller;
    if (this.els.note.textContent !== caller) this.els.note.textContent = caller;
    if (this.els.convNote.textContent !== conversations) this.els.convNote.textContent = conversations;
  }

  async loadIdentity(agentId, caller) {
    try {
      const identity = await this.api.identity(agentId, caller);
      this.s.callerNote = identity ? "" : "new";
      const note = identity ? "" : "The agent has not met this caller yet: it will on the first call.";
      return { value: identity, note };
    } catch (err) {
      this.s.callerNote = err.status === 404 ? "unsupported" : "error";
      const note =
        err.status === 404
          ? "This server does not list callers (GET /v1/identities/ answered 404): the caller's own blocks cannot be shown. Calls still use this caller id."
          : `Could not load this caller: ${err.message}`;
      return { value: null, note };
    }
  }

  async loadConversations(agentId) {
    try {
      const list = await this.api.conversations(agentId);
      this.s.conversationsNote = "";
      return { value: Array.isArray(list) ? list : [], note: "" };
    } catch (err) {
      this.s.conversationsNote = err.status === 404 ? "unsupported" : "error";
      const note =
        err.status === 404
          ? "This server does not list conversations (GET /v1/conversations/ answered 404): a call continues your open conversation."
          : `Could not load the conversations: ${err.message}`;
      return { value: [], note };
    }
  }

  renderConversations(mine) {
    const select = this.els.select;
    const keep = select.value || this.linked;
    const options = [new Option("Your open conversation (or a new one)", "")];
    for (const c of mine) {
      const summary = (c.summary || "").replace(/\s+/g, " ").trim();
      const head = summary ? `${summary.slice(0, 40)}${summary.length > 40 ? "…" : ""}` : c.id.slice(-8);
      const at = when(c.last_message_at || c.updated_at || c.created_at);
      const label = `${head}${at ? ` · ${at}` : ""}${c.id === this.s.conversationId ? " (this call)" : ""}`;
      const opt = new Option(label, c.id);
      opt.dataset.conversation = c.id;
      options.push(opt);
    }
    if (this.linked && !mine.some((c) => c.id === this.linked)) {
      options.push(new Option(`${this.linked} (from the link)`, this.linked));
    }
    select.replaceChildren(...options);
    if (keep && [...select.options].some((o) => o.value === keep)) select.value = keep;
  }
}
