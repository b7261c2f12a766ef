// AudioWorklet processor "vg-playback": plays reply audio (PCM16 mono) through a small jitter
// buffer. Messages in:
//   {type:"item", id, rate}     a reply item starts (audio at `rate`, resampled if needed)
//   {type:"push", id, pcm}      PCM16 LE samples (ArrayBuffer) of that item
//   {type:"end", id}            no more audio for the item (play out what is buffered)
//   {type:"clear"}              drop everything now (barge-in)
// Messages out:
//   {type:"played", id, samples, done}  output samples of `id` played so far (~every 50 ms)
//   {type:"cleared", dropped}           output samples discarded by a clear
//   {type:"underrun"}                   an item's audio ran dry, then more of it came

class Playback extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = Math.round((sampleRate * (opts.prebufferMs || 60)) / 1000);
    this.reportEvery = Math.round(sampleRate / 20);
    this.sinceReport = 0;
    this.queue = []; // {id, data: Float32Array at sampleRate, off}
    this.buffered = 0;
    this.playing = false;
    this.items = new Map(); // id -> {rate, ended, played, dirty, starved, pos, prev}
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(m) {
    if (m.type === "item") {
      this.items.set(m.id, {
        rate: m.rate, ended: false, played: 0, dirty: false, starved: false, pos: 1, prev: 0,
      });
    } else if (m.type === "push") {
      const it = this.items.get(m.id);
      if (!it || it.ended) return;
      const data = this.convert(it, new Int16Array(m.pcm));
      if (data.length === 0) return;
      if (it.starved) {
        it.starved = false;
        this.port.postMessage({ type: "underrun" });
      }
      this.queue.push({ id: m.id, data, off: 0 });
      this.buffered += data.length;
    } else if (m.type === "end") {
      const it = this.items.get(m.id);
      if (!it) return;
      it.ended = true;
      if (!this.queue.some((c) => c.id === m.id)) this.finish(m.id, it);
    } else if (m.type === "clear") {
      this.report();
      const dropped = this.buffered;
      this.queue = [];
      this.buffered = 0;
      this.playing = false;
      this.items.clear();
      this.port.postMessage({ type: "cleared", dropped });
    }
  }

  convert(it, pcm) {
    // PCM16 at it.rate -> Float32 at sampleRate (linear interpolation across chunk edges)
    if (it.rate === sampleRate) {
      const out = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
      return out;
    }
    const step = it.rate / sampleRate;
    const n = pcm.length; // source index j maps to pcm[j - 1]; index 0 is the previous sample
    const at = (j) => (j === 0 ? it.prev : pcm[j - 1] / 32768);
    const out = [];
    while (it.pos < n) {
      const j = Math.floor(it.pos);
      const f = it.pos - j;
      out.push(at(j) + (at(j + 1) - at(j)) * f);
      it.pos += step;
    }
    it.pos -= n;
    if (n) it.prev = pcm[n - 1] / 32768;
    return Float32Array.from(out);
  }

  finish(id, it) {
    this.port.postMessage({ type: "played", id, samples: it.played, done: true });
    this.items.delete(id);
  }

  report() {
    for (const [id, it] of this.items) {
      if (!it.dirty) continue;
      it.dirty = false;
      this.port.postMessage({ type: "played", id, samples: it.played, done: false });
    }
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const ch0 = out[0];
    const frames = ch0.length;
    if (!this.playing && this.queue.length) {
      const tail = this.items.get(this.queue[this.queue.length - 1].id);
      this.playing = this.buffered >= this.prebuffer || (tail !== undefined && tail.ended);
    }
    let i = 0;
    while (this.playing && i < frames && this.queue.length) {
      const c = this.queue[0];
      const take = Math.min(frames - i, c.data.length - c.off);
      ch0.set(c.data.subarray(c.off, c.off + take), i);
      c.off += take;
      i += take;
      this.buffered -= take;
      const it = this.items.get(c.id);
      if (it) {
        it.played += take;
        it.dirty = true;
      }
      if (c.off >= c.data.length) {
        this.queue.shift();
        const more = this.queue.length && this.queue[0].id === c.id;
        if (it && it.ended && !more) this.finish(c.id, it);
      }
    }
    if (this.playing && this.queue.length === 0) {
      this.playing = false; // re-buffer before playing again
      for (const it of this.items.values()) if (!it.ended) it.starved = true;
    }
    ch0.fill(0, i);
    for (let c = 1; c < out.length; c++) out[c].set(ch0);
    this.sinceReport += frames;
    if (this.sinceReport >= this.reportEvery) {
      this.sinceReport = 0;
      this.report();
    }
    return true;
  }
}

registerProcessor("vg-playback", Playback);
