/**
 * Grid maths of the lens view (layers × positions): indexing the flat (lens, layer, position, k) arrays, the columns
 * in view, the cell under the pointer and the colour intensity of a cell. No DOM here, so vitest checks it directly.
 *
 * @example
 *   const layout = gridLayout({ layers: 30, positions: 1000 });
 *   visibleColumns(layout, 0, 800); // {start: 0, end: 14}: (800 - 120) / 56 rounded up, plus one
 *   cellAt(layout, 130, 20, 0);     // {layer: 29, position: 0}
 */

/** Cell and margin sizes in CSS pixels. */
export const CELL = { width: 56, height: 18, left: 120, top: 4, bottom: 22 };

/**
 * @param {{layers: number, positions: number}} size
 * @returns {{layers: number, positions: number, fullWidth: number, fullHeight: number} & typeof CELL}
 */
export function gridLayout({ layers, positions }, cell = CELL) {
  return {
    ...cell,
    layers,
    positions,
    fullWidth: cell.left + positions * cell.width,
    fullHeight: cell.top + layers * cell.height + cell.bottom,
  };
}

/** Flat index into a C-order array of `shape` (trailing dims omitted count as 0). */
export function flatIndex(shape, ...index) {
  let flat = 0;
  for (let d = 0; d < shape.length; d += 1) flat = flat * shape[d] + (index[d] ?? 0);
  return flat;
}

/** Position columns `[start, end)` visible when the grid is scrolled by `scrollLeft` in a viewport `viewWidth` wide. */
export function visibleColumns(layout, scrollLeft, viewWidth) {
  const start = Math.min(layout.positions, Math.floor(Math.max(0, scrollLeft) / layout.width));
  const fit = Math.ceil(Math.max(0, viewWidth - layout.left) / layout.width) + 1;
  return { start, end: Math.min(layout.positions, start + fit) };
}

/** Row of layer `l` (the last layer is drawn on top). */
export function rowOfLayer(layout, layer) {
  return layout.layers - 1 - layer;
}

/**
 * The cell at canvas point (x, y), for a canvas that draws position columns from `start` (the first column in view),
 * with the layer labels fixed on the left. Returns null off the grid.
 */
export function cellAt(layout, x, y, start) {
  if (x < layout.left || y < layout.top) return null;
  const column = Math.floor((x - layout.left) / layout.width);
  const row = Math.floor((y - layout.top) / layout.height);
  const position = start + column;
  if (row >= layout.layers || position >= layout.positions || column < 0) return null;
  return { layer: layout.layers - 1 - row, position };
}

/** Colour intensity of a rank: 1 at rank 1, falling with log(rank) to 0 at the vocabulary size; NaN for no target. */
export function rankIntensity(rank, vocabSize) {
  if (!(rank > 0)) return NaN;
  return Math.max(0, 1 - Math.log(rank) / Math.log(Math.max(2, vocabSize)));
}

/**
 * The colour intensity in [0, 1] (NaN: none) of one cell.
 * @param {{topProbs: Float32Array, targetProbs: Float32Array, targetRanks: Int32Array, dims: {L: number, T: number, K: number, M: number}, vocabSize: number}} data
 * @param {{lens: number, layer: number, position: number, colourBy: string, target: number}} cell
 */
export function cellValue(data, { lens, layer, position, colourBy, target }) {
  const { L, T, K, M } = data.dims;
  if (colourBy === "top1_prob") return data.topProbs[((lens * L + layer) * T + position) * K];
  const at = ((lens * L + layer) * T + position) * M + target;
  if (colourBy === "target_prob") return data.targetProbs[at];
  return rankIntensity(data.targetRanks[at], data.vocabSize);
}

/** White → blue for an intensity in [0, 1]; grey for NaN. Returns [r, g, b]. */
export function intensityRgb(value, theme = "light") {
  if (Number.isNaN(value)) return theme === "dark" ? [60, 60, 60] : [238, 238, 238];
  const v = Math.min(1, Math.max(0, value));
  const base = theme === "dark" ? [30, 30, 30] : [255, 255, 255];
  const ink = theme === "dark" ? [88, 166, 255] : [33, 102, 172];
  return base.map((b, i) => Math.round(b + (ink[i] - b) * v));
}

/** Probability and rank of `targets` across the layers at one position: [{target, probs: number[], ranks: number[]}]. */
export function trajectories(data, lens, position, targets) {
  const { L, T, M } = data.dims;
  return targets.map((target) => {
    const probs = [];
    const ranks = [];
    for (let l = 0; l < L; l += 1) {
      const at = ((lens * L + l) * T + position) * M + target;
      probs.push(data.targetProbs[at]);
      ranks.push(data.targetRanks[at]);
    }
    return { target, probs, ranks };
  });
}
