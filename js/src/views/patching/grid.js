/**
 * Grid maths of the patching view: which cells a panel's heatmap shows (positions for a residual or sublayer point,
 * heads at one position for a per-head point), the flat index of a cell, its numbers and stored top-5, the colour
 * scale and the keyboard moves. No DOM here, so vitest checks it directly. The canvas geometry (columns in view,
 * cell under the pointer) is the lens view's (`lib/lens_grid.js`).
 *
 * @example
 *   const columns = panelColumns(panel, -1); // {count, labels, position}
 *   const cell = cellAt(panel, 0, 3, -1);    // {layer: 0, unit: 0, position: 3}
 */

/** Cell and margin sizes of a heatmap, in CSS pixels. */
export const PATCHING_CELL = { width: 44, height: 16, left: 96, top: 4, bottom: 22 };

/**
 * The columns of a panel's grid: its positions when it has one unit, else its units at one position
 * (`unitPosition`, clamped; -1 or out of range: the last position).
 * @returns {{count: number, labels: string[], position: number}}  position -1: the columns are the positions
 */
export function panelColumns(panel, unitPosition) {
  if (panel.U === 1) return { count: panel.P, labels: panel.positions, position: -1 };
  const position = unitPosition >= 0 && unitPosition < panel.P ? unitPosition : panel.P - 1;
  return { count: panel.U, labels: panel.units, position };
}

/** The cell {layer, unit, position} at grid row `layer` and column `column`. */
export function cellAt(panel, layer, column, unitPosition) {
  const { position } = panelColumns(panel, unitPosition);
  return position < 0 ? { layer, unit: 0, position: column } : { layer, unit: column, position };
}

/** The grid column of a cell (its position, or its unit). */
export function columnOf(panel, cell) {
  return panel.U === 1 ? cell.position : cell.unit;
}

/** Index of a cell in its panel's C-order (layers, units, positions) block. */
export function flatCell(panel, { layer, unit, position }) {
  return (layer * panel.U + unit) * panel.P + position;
}

/** The normalised value, raw metric and spread of a cell. */
export function cellNumbers(data, panel, cell) {
  const at = panel.cellStart + flatCell(panel, cell);
  return { value: data.values[at], raw: data.raw[at], spread: data.spread[at] };
}

/** The stored top-5 of a cell's patched run, [{text, prob}], or null when the view holds none for its panel. */
export function storedTop(data, panel, cell) {
  if (panel.topStart < 0) return null;
  const row = panel.topStart + flatCell(panel, cell);
  const out = [];
  for (let k = 0; k < data.K; k += 1) {
    const index = data.topVocab[row * data.K + k];
    out.push({ text: index >= 0 ? (data.vocab[index] ?? "?") : "", prob: data.topProbs[row * data.K + k] });
  }
  return out;
}

/** Largest finite |value| of `values[start:end]` (at least `floor`; 1 when all are 0). */
export function maxAbs(values, start, end, floor = 0) {
  let max = floor;
  for (let i = start; i < end; i += 1) {
    const v = Math.abs(values[i]);
    if (v > max && Number.isFinite(v)) max = v;
  }
  return max > 0 ? max : 1;
}

/**
 * The cell a key moves to from grid cell {layer, column} in a grid of L layers × C columns (the last layer is drawn
 * on top, so ArrowUp goes to the next layer); null for a key that does not move.
 */
export function moveCell({ layer, column }, key, L, C) {
  const clamp = (v, n) => Math.min(n - 1, Math.max(0, v));
  if (key === "ArrowUp") return { layer: clamp(layer + 1, L), column };
  if (key === "ArrowDown") return { layer: clamp(layer - 1, L), column };
  if (key === "ArrowLeft") return { layer, column: clamp(column - 1, C) };
  if (key === "ArrowRight") return { layer, column: clamp(column + 1, C) };
  if (key === "Home") return { layer, column: 0 };
  if (key === "End") return { layer, column: C - 1 };
  return null;
}

/** The CSV of every cell of every panel (header row first). */
export function csvRows(data) {
  const rows = [["result", "point", "layer", "unit", "position", "token", "value", "raw", "spread"]];
  for (const panel of data.panels) {
    for (let l = 0; l < panel.L; l += 1)
      for (let u = 0; u < panel.U; u += 1)
        for (let p = 0; p < panel.P; p += 1) {
          const n = cellNumbers(data, panel, { layer: l, unit: u, position: p });
          rows.push([data.results[panel.result]?.label ?? "", panel.point, panel.layers[l], panel.units[u], p,
            panel.positions[p], n.value, n.raw, n.spread]); // prettier-ignore
        }
  }
  return rows;
}
