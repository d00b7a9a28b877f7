/**
 * Canvas painting of one monitor panel: axes with ticks, shaded x ranges (the fit window), bands, lines
 * (M4-decimated to the pixel grid) and a crosshair; and a layer × step heatmap. Drawing only — the caller
 * owns the DOM, the data store and the interaction state.
 *
 * @example
 *   const frame = paintLines(ctx, {width: 600, height: 170, xDomain: [0, 1000], yKind: "log", lines, bands});
 *   frame.x.value(mouseX); // step under the mouse
 */
import { BandDecimator, M4Decimator, logTicks, lowerBound, makeScale, niceTicks } from "./plot_math.js";

export const MARGIN = { left: 54, right: 10, top: 8, bottom: 20 };

/** Short tick label: 1.2k, 3e-4, 0.25. */
export function tickLabel(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e4 && a < 1e6 && Number.isInteger(v)) return `${Number((v / 1e3).toPrecision(3))}k`;
  if (a >= 1e-3 && a < 1e6) return String(Number(v.toPrecision(3)));
  return v.toExponential(0);
}

/** Row range [start, end) that covers x in [x0, x1] plus one row either side (lines reach the edges). */
export function visibleRange(x, n, x0, x1) {
  const start = Math.max(0, lowerBound(x, n, x0) - 1);
  const end = Math.min(n, lowerBound(x, n, x1) + 1);
  return [start, Math.max(start, end)];
}

function yExtent(parts, log) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const { values, count } of parts) {
    for (let i = 0; i < count; i += 1) {
      const v = values[i];
      if (log && !(v > 0)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (!(hi >= lo)) return log ? [0.1, 10] : [0, 1];
  if (log) {
    const pad = hi > lo ? (hi / lo) ** 0.05 : 2;
    return [lo / pad, hi * pad];
  }
  const pad = hi > lo ? (hi - lo) * 0.05 : Math.abs(hi) * 0.1 || 1;
  return [lo - pad, hi + pad];
}

/**
 * Decimate a line panel's lines and bands to its pixel grid and fit the y domain. A line or band may carry the
 * `decimator` returned for it last time: while the x domain, width and scale stay the same it only reads the
 * rows appended since (streaming costs O(new rows)); when only the span doubled it is widened in O(pixels);
 * otherwise a new one starts.
 * @param {object} spec  width, xDomain, yKind, lines: [{x, y, n, colour, dash?, decimator?}],
 *   bands: [{x, lo, hi, n, colour, decimator?}]
 */
export function prepareLines({ width, xDomain, yKind, lines = [], bands = [] }) {
  const log = yKind === "log";
  const plotWidth = Math.max(1, width - MARGIN.left - MARGIN.right);
  const pixels = Math.max(1, Math.round(plotWidth));
  const [x0, x1] = xDomain;
  // same grid: continue; same x0 and width but twice the span (follow mode): widen; otherwise start anew
  const reuse = (cached, Type) => {
    const fits = cached && cached.x0 === x0 && cached.width === pixels && cached.positiveOnly === log;
    if (fits && cached.x1 === x1) return cached;
    if (fits && x1 - x0 === 2 * (cached.x1 - cached.x0)) return Type.widen(cached, x1);
    return new Type(x0, x1, pixels, { positiveOnly: log });
  };
  const decimatedLines = lines.map((line) => {
    const [start, end] = visibleRange(line.x, line.n, x0, x1);
    const decimator = reuse(line.decimator, M4Decimator);
    return { line, decimator, points: decimator.extend(line.x, line.y, start, end).result() };
  });
  const decimatedBands = bands.map((band) => {
    const [start, end] = visibleRange(band.x, band.n, x0, x1);
    const decimator = reuse(band.decimator, BandDecimator);
    return { band, decimator, area: decimator.extend(band.x, band.lo, band.hi, start, end) };
  });
  const parts = [
    ...decimatedLines.map(({ points }) => ({ values: points.ys, count: points.count })),
    ...decimatedBands.flatMap(({ area }) => [
      { values: area.lo, count: area.count },
      { values: area.hi, count: area.count },
    ]),
  ];
  const drawn = decimatedLines.reduce((sum, { points }) => sum + points.count, 0);
  return { decimatedLines, decimatedBands, yDomain: yExtent(parts, log), drawn };
}

/**
 * Paint a line panel and return its scales and how many decimated points were drawn.
 * @param {CanvasRenderingContext2D | null} ctx  null (no canvas, e.g. jsdom) computes without painting
 * @param {object} spec
 *   width, height (CSS px); xDomain [x0, x1]; yKind "linear" | "log";
 *   lines: [{x, y, n, colour, dash?}]; bands: [{x, lo, hi, n, colour}]; shades: [[x0, x1]];
 *   reference?: number (dashed horizontal line); cursor?: x value; colours: {fg, muted, grid, shade}
 * @param {object} [prepared]  a `prepareLines(spec)` result to reuse
 */
export function paintLines(ctx, spec, prepared = prepareLines(spec)) {
  const { width, height, xDomain, yKind, shades = [], colours } = spec;
  const log = yKind === "log";
  const plotWidth = Math.max(1, width - MARGIN.left - MARGIN.right);
  const { decimatedLines, decimatedBands, yDomain, drawn } = prepared;
  const x = makeScale("linear", xDomain, [MARGIN.left, MARGIN.left + plotWidth]);
  const y = makeScale(log ? "log" : "linear", yDomain, [height - MARGIN.bottom, MARGIN.top]);
  const frame = { x, y, yDomain, drawn };
  if (!ctx) return frame;

  ctx.clearRect(0, 0, width, height);
  ctx.save();
  ctx.beginPath();
  ctx.rect(MARGIN.left, MARGIN.top, plotWidth, height - MARGIN.top - MARGIN.bottom);
  ctx.clip();
  ctx.fillStyle = colours.shade;
  for (const [a, b] of shades) {
    const left = Math.max(MARGIN.left, x.px(a));
    const right = Math.min(MARGIN.left + plotWidth, x.px(b));
    if (right >= left) ctx.fillRect(left, MARGIN.top, Math.max(1, right - left), height - MARGIN.top - MARGIN.bottom);
  }
  for (const { band, area } of decimatedBands) {
    if (area.count === 0) continue;
    ctx.beginPath();
    for (let i = 0; i < area.count; i += 1) ctx.lineTo(x.px(area.xs[i]), y.px(area.hi[i]));
    for (let i = area.count - 1; i >= 0; i -= 1) ctx.lineTo(x.px(area.xs[i]), y.px(area.lo[i]));
    ctx.closePath();
    ctx.globalAlpha = 0.16;
    ctx.fillStyle = band.colour;
    ctx.fill();
    ctx.globalAlpha = 1;
  }
  if (spec.reference !== undefined && spec.reference !== null && (!log || spec.reference > 0)) {
    ctx.strokeStyle = colours.muted;
    ctx.setLineDash([4, 4]);
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(MARGIN.left, y.px(spec.reference));
    ctx.lineTo(MARGIN.left + plotWidth, y.px(spec.reference));
    ctx.stroke();
  }
  for (const { line, points } of decimatedLines) {
    ctx.strokeStyle = line.colour;
    ctx.lineWidth = line.width ?? 1.5;
    ctx.setLineDash(line.dash ?? []);
    ctx.beginPath();
    for (let i = 0; i < points.count; i += 1) {
      const px = x.px(points.xs[i]);
      const py = y.px(points.ys[i]);
      if (i === 0) ctx.moveTo(px, py);
      else ctx.lineTo(px, py);
    }
    if (points.count === 1) ctx.arc(x.px(points.xs[0]), y.px(points.ys[0]), 1.5, 0, 2 * Math.PI);
    ctx.stroke();
  }
  ctx.setLineDash([]);
  if (spec.cursor !== undefined && spec.cursor !== null) {
    ctx.strokeStyle = colours.muted;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(Math.round(x.px(spec.cursor)) + 0.5, MARGIN.top);
    ctx.lineTo(Math.round(x.px(spec.cursor)) + 0.5, height - MARGIN.bottom);
    ctx.stroke();
  }
  ctx.restore();
  paintAxes(ctx, spec, x, y, log ? logTicks(...yDomain) : niceTicks(...yDomain, 4));
  return frame;
}

function paintAxes(ctx, spec, x, y, yTicks) {
  const { width, height, colours } = spec;
  ctx.font = "10px system-ui, sans-serif";
  ctx.lineWidth = 1;
  ctx.strokeStyle = colours.grid;
  ctx.fillStyle = colours.muted;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const v of yTicks) {
    const py = Math.round(y.px(v)) + 0.5;
    if (py < MARGIN.top - 1 || py > height - MARGIN.bottom + 1) continue;
    ctx.beginPath();
    ctx.moveTo(MARGIN.left, py);
    ctx.lineTo(width - MARGIN.right, py);
    ctx.stroke();
    ctx.fillText(tickLabel(v), MARGIN.left - 4, py);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const v of niceTicks(...x.domain, Math.max(2, Math.floor((width - MARGIN.left) / 90)))) {
    const px = x.px(v);
    if (px < MARGIN.left - 1 || px > width - MARGIN.right + 1) continue;
    ctx.fillText(tickLabel(v), px, height - MARGIN.bottom + 4);
  }
  ctx.strokeStyle = colours.muted;
  ctx.beginPath();
  ctx.moveTo(MARGIN.left + 0.5, MARGIN.top);
  ctx.lineTo(MARGIN.left + 0.5, height - MARGIN.bottom + 0.5);
  ctx.lineTo(width - MARGIN.right, height - MARGIN.bottom + 0.5);
  ctx.stroke();
}

/**
 * Diverging colour of log10(ratio) scaled by `maxAbs`: blue below 1 (proxy under the controls), red above.
 * @returns {string} css rgb()
 */
export function ratioColour(logRatio, maxAbs, neutral = [247, 247, 247]) {
  const t = Math.max(-1, Math.min(1, logRatio / (maxAbs || 1)));
  const end = t < 0 ? [33, 102, 172] : [178, 24, 43];
  const k = Math.abs(t);
  const mix = neutral.map((c, i) => Math.round(c + (end[i] - c) * k));
  return `rgb(${mix[0]}, ${mix[1]}, ${mix[2]})`;
}

/**
 * Layer × step heatmap of a positive ratio, one row per entry of `rows` ({label, x, y, n}). Each pixel column
 * shows the mean log10 ratio of the row's values inside it, or, where none was logged, the value in force
 * (the last one before). Colour is log10(ratio) on a symmetric scale, quantised to 41 levels.
 * @returns {{x: object, rowHeight: number, maxAbs: number, cells: number}}
 */
export function paintHeatmap(ctx, { width, height, xDomain, rows, colours, neutral }) {
  const plotWidth = Math.max(1, width - MARGIN.left - MARGIN.right);
  const pixels = Math.max(1, Math.round(plotWidth));
  const x = makeScale("linear", xDomain, [MARGIN.left, MARGIN.left + plotWidth]);
  const rowHeight = rows.length ? (height - MARGIN.top - MARGIN.bottom) / rows.length : 0;
  const [x0, x1] = xDomain;
  const span = x1 - x0 || 1;
  let maxAbs = 0;
  let cellCount = 0;
  const grids = rows.map((row) => {
    const sums = new Float64Array(pixels);
    const counts = new Uint32Array(pixels);
    let [start, end] = visibleRange(row.x, row.n, x0, x1);
    while (start > 0 && !(row.y[start] > 0)) start -= 1; // the value in force at the left edge
    let carried = NaN;
    const lastX = row.n ? row.x[row.n - 1] : x0;
    for (let i = start; i < end; i += 1) {
      const v = row.y[i];
      if (!(v > 0)) continue;
      const c = Math.floor(((row.x[i] - x0) / span) * pixels);
      if (c < 0) carried = Math.log10(v);
      else if (c < pixels) {
        sums[c] += Math.log10(v);
        counts[c] += 1;
      }
    }
    const grid = new Float64Array(pixels).fill(NaN);
    const lastColumn = Math.min(pixels - 1, Math.floor(((lastX - x0) / span) * pixels));
    for (let c = 0; c <= lastColumn; c += 1) {
      if (counts[c]) carried = sums[c] / counts[c];
      grid[c] = carried;
      if (carried === carried) {
        maxAbs = Math.max(maxAbs, Math.abs(carried));
        cellCount += 1;
      }
    }
    return grid;
  });
  const frame = { x, rowHeight, maxAbs, cells: cellCount };
  if (!ctx) return frame;
  ctx.clearRect(0, 0, width, height);
  const palette = new Map();
  const colourOf = (level) => {
    if (!palette.has(level)) palette.set(level, ratioColour(level / 20, 1, neutral));
    return palette.get(level);
  };
  grids.forEach((grid, r) => {
    const top = MARGIN.top + r * rowHeight;
    let runStart = 0;
    let runLevel = null;
    const level = (v) => (v === v ? Math.round((v / (maxAbs || 1)) * 20) : null);
    for (let c = 0; c <= pixels; c += 1) {
      const next = c < pixels ? level(grid[c]) : undefined;
      if (next === runLevel && c < pixels) continue;
      if (runLevel !== null && c > runStart) {
        ctx.fillStyle = colourOf(runLevel);
        ctx.fillRect(
          MARGIN.left + (runStart * plotWidth) / pixels,
          top,
          ((c - runStart) * plotWidth) / pixels,
          Math.max(1, rowHeight - 1),
        );
      }
      runStart = c;
      runLevel = next ?? null;
    }
  });
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillStyle = colours.muted;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  rows.forEach((row, r) => {
    const label = row.label.length > 9 ? `…${row.label.slice(-8)}` : row.label;
    ctx.fillText(label, MARGIN.left - 4, MARGIN.top + (r + 0.5) * rowHeight);
  });
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const v of niceTicks(...xDomain, Math.max(2, Math.floor((width - MARGIN.left) / 90)))) {
    const px = x.px(v);
    if (px >= MARGIN.left - 1 && px <= width - MARGIN.right + 1)
      ctx.fillText(tickLabel(v), px, height - MARGIN.bottom + 4);
  }
  return frame;
}
