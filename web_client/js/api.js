// The gateway's REST API (docs/rest_api.md), as much of it as this page needs.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status; // 0: the server did not answer
  }
}

export class Api {
  /** getKey(): the API key to send as a Bearer token, or "" */
  constructor(getKey) {
    this.getKey = getKey;
  }

  async request(method, path, body) {
    const headers = { Accept: "application/json" };
    const key = this.getKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch {
      throw new ApiError(0, "The server did not answer.");
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!resp.ok) {
      let detail = data && data.detail !== undefined ? data.detail : text || resp.statusText;
      if (typeof detail !== "string") detail = JSON.stringify(detail);
      if (resp.status === 401) detail += " (set the API key under Settings)";
      throw new ApiError(resp.status, `${resp.status}: ${detail}`);
    }
    return data;
  }

  listAgents() {
    return this.request("GET", "/v1/agents/?limit=200&order=desc");
  }

  createAgent({ name, persona, model, greeting }) {
    const body = {
      name,
      memory_blocks: [
        { label: "persona", value: persona },
        { label: "human", value: "" },
      ],
    };
    if (model) body.model = model;
    if (greeting) body.greeting = greeting;
    return this.request("POST", "/v1/agents/", body);
  }

  blocks(agentId) {
    return this.request("GET", `/v1/agents/${encodeURIComponent(agentId)}/core-memory/blocks`);
  }

  block(agentId, label) {
    const a = encodeURIComponent(agentId);
    return this.request("GET", `/v1/agents/${a}/core-memory/blocks/${encodeURIComponent(label)}`);
  }

  /** Blocks by id (GET /v1/blocks/{id}): a caller's own copy of a caller-scoped block. */
  blockById(blockId) {
    return this.request("GET", `/v1/blocks/${encodeURIComponent(blockId)}`);
  }

  /** The agent's conversations, newest first (Letta Conversation objects; ours carry
   *  `identity_id`, the caller whose conversation it is). */
  conversations(agentId) {
    const a = encodeURIComponent(agentId);
    return this.request("GET", `/v1/conversations/?agent_id=${a}&limit=50&order=desc`);
  }

  /** The caller's identity on the agent (Letta Identity: id, identifier_key, block_ids, ...),
   *  or null when the agent has not met this caller yet. */
  async identity(agentId, caller) {
    const q = `agent_id=${encodeURIComponent(agentId)}&identifier_key=${encodeURIComponent(caller)}`;
    const found = await this.request("GET", `/v1/identities/?${q}`);
    return (found || []).find((i) => i.identifier_key === caller) || null;
  }

  /** A short-lived token for the voice socket, and the socket URL for this page's origin.
   *  `caller` (your app's user id) is bound into the token: the call is that caller's. */
  async voiceUrl(agentId, caller = "") {
    const a = encodeURIComponent(agentId);
    const body = caller ? { caller } : undefined;
    const { session_token: token } = await this.request("POST", `/v1/agents/${a}/voice/sessions`, body);
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    return `${scheme}://${location.host}/v1/agents/${a}/voice?session_token=${encodeURIComponent(token)}`;
  }

  /** WebRTC signalling (docs/webrtc.md): the offer's SDP in, {sdp, location, ...} out. */
  webrtcOffer(agentId, sdp) {
    return this.request("POST", `/v1/agents/${encodeURIComponent(agentId)}/webrtc`, { type: "offer", sdp });
  }

  /** Hang up a WebRTC call (DELETE on the URL its answer named). */
  hangUp(location) {
    return this.request("DELETE", location);
  }
}
