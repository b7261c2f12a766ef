// The memory panel: the agent's core memory blocks, refreshed on `memory.updated`.

export class MemoryPanel {
  /** state: the page's test-visible state (state.blocks[label] = {value, version}) */
  constructor(container, api, state) {
    this.box = container;
    this.api = api;
    this.state = state;
    this.agentId = null;
    this.nodes = new Map(); // label -> section
  }

  async load(agentId) {
    this.agentId = agentId;
    this.nodes.clear();
    this.state.blocks = {};
    this.box.replaceChildren();
    if (!agentId) return;
    const blocks = await this.api.blocks(agentId);
    if (agentId !== this.agentId) return;
    for (const b of blocks) this.render(b, false);
  }

  /** A block changed on the server (e.g. the sleeptime worker rewrote it). */
  async updated(label, version) {
    const known = this.state.blocks[label];
    if (known && known.version >= version) return;
    const agentId = this.agentId;
    const block = await this.api.block(agentId, label);
    if (agentId !== this.agentId) return;
    this.render(block, true);
  }

  render(b, changed) {
    let node = this.nodes.get(b.label);
    if (!node) {
      node = document.createElement("section");
      node.className = "block";
      node.dataset.label = b.label;
      const head = document.createElement("header");
      const h = document.createElement("h3");
      h.textContent = b.label;
      const v = document.createElement("span");
      v.className = "version";
      head.append(h, v);
      const pre = document.createElement("pre");
      node.append(head, pre);
      this.box.append(node);
      this.nodes.set(b.label, node);
    }
    const known = this.state.blocks[b.label];
    if (known && known.version > b.version) return; // a newer version is already shown
    this.state.blocks[b.label] = { value: b.value, version: b.version };
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
