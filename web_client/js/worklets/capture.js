// AudioWorklet processor "vg-capture": microphone -> PCM16 mono at the target rate (16 kHz)
// in 20 ms frames. When the AudioContext runs at another rate (44.1/48 kHz), the input is
// low-pass filtered (windowed sinc, cutoff 0.45 x target rate) and resampled here.
// Posts {pcm: ArrayBuffer (Int16 LE), rms: number} per frame to the main thread.

function lowpass(taps, cutoff) {
  // cutoff as a fraction of the input rate (0..0.5); Blackman window; unity DC gain
  const h = new Float32Array(taps);
  const mid = (taps - 1) / 2;
  let sum = 0;
  for (let i = 0; i < taps; i++) {
    const x = i - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const a = (2 * Math.PI * i) / (taps - 1);
    h[i] = sinc * (0.42 - 0.5 * Math.cos(a) + 0.08 * Math.cos(2 * a));
    sum += h[i];
  }
  for (let i = 0; i < taps; i++) h[i] /= sum;
  return h;
}

class Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    const target = opts.targetRate || 16000;
    this.step = sampleRate / target; // input samples per output sample
    this.direct = Math.abs(this.step - 1) < 1e-9;
    this.h = this.direct ? null : lowpass(95, 0.45 / this.step);
    this.buf = new Float32Array(8192); // pending input (filter history included)
    this.len = 0;
    this.pos = 0; // position of the next output sample in `buf` (fractional)
    this.frameSize = Math.round((target * (opts.frameMs || 20)) / 1000);
    this.frame = new Int16Array(this.frameSize);
    this.n = 0;
    this.energy = 0;
  }

  emit(s) {
    const v = s < -1 ? -1 : s > 1 ? 1 : s;
    this.frame[this.n++] = v < 0 ? v * 32768 : v * 32767;
    this.energy += v * v;
    if (this.n === this.frameSize) {
      const rms = Math.sqrt(this.energy / this.frameSize);
      this.port.postMessage({ pcm: this.frame.buffer, rms }, [this.frame.buffer]);
      this.frame = new Int16Array(this.frameSize);
      this.n = 0;
      this.energy = 0;
    }
  }

  filtered(i) {
    const h = this.h;
    const b = this.buf;
    let acc = 0;
    for (let k = 0; k < h.length; k++) acc += h[k] * b[i + k];
    return acc;
  }

  resample(input) {
    if (this.len + input.length > this.buf.length) {
      const bigger = new Float32Array((this.len + input.length) * 2);
      bigger.set(this.buf.subarray(0, this.len));
      this.buf = bigger;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
    const last = this.len - this.h.length - 1; // highest start index with a full window + 1
    while (this.pos <= last) {
      const i = Math.floor(this.pos);
      const f = this.pos - i;
      const y0 = this.filtered(i);
      this.emit(f === 0 ? y0 : y0 + (this.filtered(i + 1) - y0) * f);
      this.pos += this.step;
    }
    const drop = Math.floor(this.pos);
    if (drop > 0) {
      this.buf.copyWithin(0, drop, this.len);
      this.len -= drop;
      this.pos -= drop;
    }
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true; // nothing connected yet
    let mono = channels[0];
    if (channels.length > 1) {
      mono = new Float32Array(mono.length);
      for (const ch of channels) for (let i = 0; i < ch.length; i++) mono[i] += ch[i] / channels.length;
    }
    if (this.direct) {
      for (let i = 0; i < mono.length; i++) this.emit(mono[i]);
    } else {
      this.resample(mono);
    }
    return true;
  }
}

registerProcessor("vg-capture", Capture);
