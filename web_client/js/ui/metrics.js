// Per-turn latency from `turn.metrics`, and a sparkline of voice-to-voice over recent turns.

const SVG = "http://www.w3.org/2000/svg";
const KEEP = 20;

function fmt(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`;
}

export class LatencyPanel {
  constructor(list, svg) {
    this.list = list;
    this.svg = svg;
    this.history = []; // voice_to_voice_ms of recent turns
  }

  show(m) {
    for (const dd of this.list.querySelectorAll("dd[data-key]")) {
      dd.textContent = fmt(m[dd.dataset.key]);
    }
    if (typeof m.voice_to_voice_ms === "number") {
      this.history.push(m.voice_to_voice_ms);
      if (this.history.length > KEEP) this.history.shift();
      this.draw();
    }
  }

  draw() {
    const svg = this.svg;
    svg.replaceChildren();
    const h = this.history;
    if (!h.length) return;
    const max = Math.max(...h, 1);
    const w = 200;
    const top = 4;
    const height = 36;
    const x = (i) => (h.length === 1 ? w / 2 : (i * (w - 8)) / (h.length - 1) + 4);
    const y = (v) => top + height - (v / max) * (height - top);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", h.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", x(h.length - 1).toFixed(1));
    dot.setAttribute("cy", y(h[h.length - 1]).toFixed(1));
    dot.setAttribute("r", "2.5");
    svg.append(line, dot);
    const latest = fmt(h[h.length - 1]);
    svg.setAttribute(
      "aria-label",
      `Voice-to-voice latency of the last ${h.length} turns; latest ${latest}, highest ${fmt(max)}`,
    );
  }
}
