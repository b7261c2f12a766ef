// The memory panel: the agent-wide core memory blocks (shared by every caller; a caller-scoped
// block such as `human` appears here as the template new callers start from) next to the
// caller's own blocks, each refreshed on `memory.updated`.

export class MemoryPanel {
  /** boxes: {agent, caller} containers; state: the page's test-visible state:
   *  state.blocks[label] = {value, version} (agent-wide),
   *  state.callerBlocks[label] = {id, value, version} (the caller's own) */
  constructor(boxes, api, state) {
    this.boxes = boxes;
    this.api = api;
    this.state = state;
    this.agentId = null;
    this.nodes = { agent: new Map(), caller: new Map() }; // label -> section
    this.ownIds = new Map(); // label -> block id of the caller's own copy
  }

  async load(agentId) {
    this.agentId = agentId;
    this.nodes.agent.clear();
    this.state.blocks = {};
    this.boxes.agent.replaceChildren();
    if (!agentId) {
      this.loadOwn(null, []);
      return;
    }
    const blocks = await this.api.blocks(agentId);
    if (agentId !== this.agentId) return;
    for (const b of blocks) this.render("agent", b, false);
    this.markTemplates();
  }

  /** The caller's own blocks: `blockIds` from the caller's Letta Identity (empty: no
   *  identity yet, or the server cannot tell). */
  async loadOwn(agentId, blockIds) {
    this.nodes.caller.clear();
    this.ownIds.clear();
    this.state.callerBlocks = {};
    this.boxes.caller.replaceChildren();
    if (!agentId || !blockIds.length) {
      this.markTemplates();
      return;
    }
    const blocks = await Promise.all(blockIds.map((id) => this.api.blockById(id)));
    if (agentId !== this.agentId) return;
    for (const b of blocks) {
      this.ownIds.set(b.label, b.id);
      this.render("caller", b, false);
    }
    this.markTemplates();
  }

  /** A block changed on the server (the sleeptime worker rewrote it, an operator edited it).
   *  The event names a label: refresh the caller's own block of that label, else the agent's. */
  async updated(label, version) {
    const agentId = this.agentId;
    const own = this.ownIds.get(label);
    if (own) {
      const known = this.state.callerBlocks[label];
      if (known && known.version >= version) return;
      const block = await this.api.blockById(own);
      if (agentId === this.agentId) this.render("caller", block, true);
      return;
    }
    const known = this.state.blocks[label];
    if (known && known.version >= version) return;
    const block = await this.api.block(agentId, label);
    if (agentId === this.agentId) this.render("agent", block, true);
  }

  /** Agent-wide blocks the caller has an own copy of are templates for new callers. */
  markTemplates() {
    for (const [label, node] of this.nodes.agent) {
      const template = this.ownIds.has(label) || node.dataset.scope === "caller";
      node.classList.toggle("template", template);
      node.querySelector(".scope").textContent = template ? "template for new callers" : "";
    }
  }

  render(group, b, changed) {
    const nodes = this.nodes[group];
    const store = group === "agent" ? this.state.blocks : this.state.callerBlocks;
    let node = nodes.get(b.label);
    if (!node) {
      node = document.createElement("section");
      node.className = "block";
      node.dataset.label = b.label;
      node.dataset.scope = group === "caller" || b.scope === "caller" ? "caller" : "agent";
      const head = document.createElement("header");
      const h = document.createElement("h3");
      h.textContent = b.label;
      const scope = document.createElement("span");
      scope.className = "scope";
      const v = document.createElement("span");
      v.className = "version";
      head.append(h, scope, v);
      const pre = document.createElement("pre");
      node.append(head, pre);
      this.boxes[group].append(node);
      nodes.set(b.label, node);
    }
    const known = store[b.label];
    if (known && known.version > b.version) return; // a newer version is already shown
    store[b.label] = { id: b.id, value: b.value, version: b.version };
    node.querySelector("pre").textContent = b.value;
    const limit = b.limit ? ` · ${b.value.length}/${b.limit} chars` : "";
    node.querySelector(".version").textContent = `${changed ? "updated · " : ""}v${b.version}${limit}`;
    if (changed) {
      node.classList.remove("updated");
      void node.offsetWidth; // restart the highlight animation
      node.classList.add("updated");
    }
  }
}
