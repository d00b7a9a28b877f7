/**
 * The maths of the attention view, free of DOM: float16 decoding, pinned top-k heads made dense, head
 * combination, the hover/lock focus state machine, canvas cell lookup and the model-view grid layout.
 *
 * @example
 *   const values = float16ToFloat32(new Uint16Array(buffer));  // a head sent by the kernel
 *   const state = nextFocus({focus: -1, locked: false}, {type: "click", token: 3}); // {focus: 3, locked: true}
 */

let HALF = null;

/** The float32 value of every float16 bit pattern (65,536 entries, built once). */
function halfTable() {
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (let bits = 0; bits < 65536; bits += 1) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f;
    const fraction = bits & 0x3ff;
    let value;
    if (exponent === 0) value = fraction * 2 ** -24;
    else if (exponent === 31) value = fraction ? NaN : Infinity;
    else value = (1 + fraction / 1024) * 2 ** (exponent - 15);
    HALF[bits] = sign * value;
  }
  return HALF;
}

/**
 * IEEE float16 (little-endian bit patterns) to float32: the browser's native Float16Array conversion where it
 * exists (Chromium 135+, Firefox 129+, Safari 18.2+), else a lookup table of all 65,536 patterns.
 * @param {Uint16Array} bits
 * @returns {Float32Array}
 * @example float16ToFloat32(Uint16Array.of(0x3c00, 0x3800)) // Float32Array [1, 0.5]
 */
export function float16ToFloat32(bits) {
  if (typeof Float16Array === "function")
    return new Float32Array(new Float16Array(bits.buffer, bits.byteOffset, bits.length));
  return float16ToFloat32ByTable(bits);
}

/**
 * float16ToFloat32 through the lookup table (the fallback without a native Float16Array, as in Node 20, where the
 * unit tests run it).
 * @param {Uint16Array} bits
 * @returns {Float32Array}
 */
function float16ToFloat32ByTable(bits) {
  const table = halfTable();
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i += 1) out[i] = table[bits[i]];
  return out;
}

/**
 * Bytes (a DataView / ArrayBuffer / typed array, any byteOffset) of float16 values as float32.
 * @param {ArrayBuffer | ArrayBufferView} data
 */
export function decodeFloat16(data) {
  const bytes = ArrayBuffer.isView(data)
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : new Uint8Array(data);
  const aligned = bytes.byteOffset % 2 === 0 ? bytes : bytes.slice();
  return float16ToFloat32(new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.byteLength >> 1));
}

/**
 * A pinned head (top-k keys per query) as a dense (queries × keys) matrix, zero where weights were dropped.
 * @param {ArrayLike<number>} keys  (pinned, queries, k) key indices
 * @param {ArrayLike<number>} weights  (pinned, queries, k) weights
 * @param {number} p  which pinned head
 * @param {number} tq @param {number} k @param {number} tk
 * @example denseFromTopK([1, 0], [0.7, 0.9], 0, 2, 1, 2) // Float32Array [0, 0.7, 0.9, 0]
 */
export function denseFromTopK(keys, weights, p, tq, k, tk) {
  const out = new Float32Array(tq * tk);
  const base = p * tq * k;
  for (let q = 0; q < tq; q += 1) {
    for (let j = 0; j < k; j += 1) out[q * tk + keys[base + q * k + j]] = weights[base + q * k + j];
  }
  return out;
}

/**
 * Several heads combined cell by cell: "mean" or "max".
 * @param {Float32Array[]} matrices
 * @param {"mean" | "max"} how
 * @example combineHeads([Float32Array.of(0, 1), Float32Array.of(1, 1)], "mean") // Float32Array [0.5, 1]
 */
export function combineHeads(matrices, how = "mean") {
  if (matrices.length === 1) return matrices[0];
  const out = new Float32Array(matrices[0].length);
  for (const m of matrices) {
    for (let i = 0; i < out.length; i += 1)
      out[i] = how === "max" ? Math.max(out[i], m[i]) : out[i] + m[i] / matrices.length;
  }
  return out;
}

/**
 * The hover / click-to-lock focus: hover focuses a token unless the focus is locked; a click locks it on that
 * token, a click on the locked token (or Escape) unlocks it; leaving the tokens drops an unlocked focus.
 * @param {{focus: number, locked: boolean}} state
 * @param {{type: "hover" | "leave" | "click" | "escape", token?: number}} action
 * @returns {{focus: number, locked: boolean}}
 * @example nextFocus({focus: 3, locked: true}, {type: "click", token: 3}) // {focus: 3, locked: false}
 */
export function nextFocus(state, action) {
  switch (action.type) {
    case "hover":
      return state.locked ? state : { focus: action.token, locked: false };
    case "leave":
      return state.locked ? state : { focus: -1, locked: false };
    case "click":
      if (state.locked && state.focus === action.token) return { focus: action.token, locked: false };
      return { focus: action.token, locked: true };
    case "escape":
      return { focus: state.locked ? state.focus : -1, locked: false };
    default:
      return state;
  }
}

/**
 * The (query, key) cell under canvas pixel (x, y) of a heatmap drawn `tk` × `tq` cells at `scale` px per cell.
 * @example heatmapCellAt(15, 5, {tq: 4, tk: 4, scale: 10}) // {query: 0, key: 1}
 */
export function heatmapCellAt(x, y, { tq, tk, scale }) {
  const key = Math.floor(x / scale);
  const query = Math.floor(y / scale);
  if (x < 0 || y < 0 || key >= tk || query >= tq) return null;
  return { query, key };
}

/**
 * Layout of the model view: one thumbnail per (layer, head), heads in columns grouped by KV head with a gap
 * between groups, layers in rows, a label column on the left.
 * @param {{layers: number, heads: number, kvHeads: number, cell: number, gap?: number, groupGap?: number, label?: number}} options
 */
export function gridLayout({ layers, heads, kvHeads, cell, gap = 2, groupGap = 8, label = 34 }) {
  const perGroup = Math.max(1, Math.floor(heads / Math.max(1, kvHeads)));
  const x = (head) => label + head * (cell + gap) + Math.floor(head / perGroup) * groupGap;
  const y = (layer) => 14 + layer * (cell + gap);
  return { layers, heads, perGroup, cell, x, y, width: x(heads - 1) + cell + 2, height: y(layers - 1) + cell + 2 };
}

/**
 * The (layer, head) thumbnail under pixel (x, y) of a {@link gridLayout}, or null in the gaps and margins.
 * @example gridCellAt(40, 20, gridLayout({layers: 2, heads: 2, kvHeads: 1, cell: 10})) // {layer: 0, head: 0}
 */
export function gridCellAt(px, py, layout) {
  for (let head = 0; head < layout.heads; head += 1) {
    const x0 = layout.x(head);
    if (px < x0 || px >= x0 + layout.cell) continue;
    for (let layer = 0; layer < layout.layers; layer += 1) {
      const y0 = layout.y(layer);
      if (py >= y0 && py < y0 + layout.cell) return { layer, head };
    }
  }
  return null;
}

/**
 * The lines of a lines view: [query, key, weight] for weights ≥ `threshold`, only the focused query's when
 * `focus` ≥ 0 (else every query's, when there are at most `maxQueries`).
 * @example lineSegments(Float32Array.of(1, 0, 0.4, 0.6), 2, 2, -1, 0.5) // [[0, 0, 1], [1, 1, 0.6]]
 */
export function lineSegments(values, tq, tk, focus, threshold = 0.05, maxQueries = 200) {
  const rows = focus >= 0 ? [focus] : tq <= maxQueries ? Array.from({ length: tq }, (_, q) => q) : [];
  const out = [];
  for (const q of rows) {
    for (let k = 0; k < tk; k += 1) {
      const w = values[q * tk + k];
      if (w >= threshold) out.push([q, k, w]);
    }
  }
  return out;
}

/**
 * A 256-entry RGBA ramp for weights 0..1: pale grey to orange (light theme) or dark grey to orange (dark).
 * @param {"light" | "dark"} theme
 */
export function weightRamp(theme = "light") {
  const from = theme === "dark" ? [32, 33, 36] : [247, 247, 247];
  const to = [230, 97, 1];
  const lut = new Uint8ClampedArray(256 * 4);
  for (let i = 0; i < 256; i += 1) {
    const t = Math.sqrt(i / 255); // small weights stay visible
    for (let c = 0; c < 3; c += 1) lut[4 * i + c] = Math.round(from[c] + (to[c] - from[c]) * t);
    lut[4 * i + 3] = 255;
  }
  return lut;
}

/**
 * Paint `values` (tq × tk, 0..1, scaled by `max`) into RGBA pixels, one pixel per cell.
 * @param {Uint8ClampedArray} pixels  tq * tk * 4
 */
export function paintWeights(pixels, values, max, lut) {
  const scale = max > 0 ? 255 / max : 0;
  if (pixels.byteOffset % 4 === 0 && lut.byteOffset % 4 === 0) {
    // one 32-bit store per pixel: the ramp's RGBA bytes copied as words keep their byte order on any endianness
    const out = new Uint32Array(pixels.buffer, pixels.byteOffset, values.length);
    const ramp = new Uint32Array(lut.buffer, lut.byteOffset, 256);
    for (let i = 0; i < values.length; i += 1) {
      const level = values[i] * scale;
      out[i] = ramp[level >= 255 ? 255 : level > 0 ? level | 0 : 0];
    }
    return;
  }
  for (let i = 0; i < values.length; i += 1) {
    const level = Math.min(255, Math.max(0, (values[i] * scale) | 0)) * 4;
    pixels[4 * i] = lut[level];
    pixels[4 * i + 1] = lut[level + 1];
    pixels[4 * i + 2] = lut[level + 2];
    pixels[4 * i + 3] = 255;
  }
}
