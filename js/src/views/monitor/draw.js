/**
 * Training monitor, draw: every shown panel (lines with bands and fit-window shading, or a per-layer heatmap) from
 * the column store, the readouts at the cursor and the status line; at most once per animation frame. Keeps in
 * `ctx.state`, besides what build.js keeps there (hidden layers and panels, scales, smoothing, zoom, cursor):
 * `smoothCache` (EMA columns, extended incrementally), `decimators` (per panel line, between frames), `fitCache`,
 * `follow` (the follow-mode domain), `colours` and `maxDrawMs`.
 *
 * @example
 *   draw(ctx);
 */
import { formatScore } from "../../lib/format.js";
import { MARGIN, paintHeatmap, paintLines, prepareLines } from "../../lib/plot_canvas.js";
import { EmaState, lowerBound, runsOf } from "../../lib/plot_math.js";

export const PALETTE = [
  "#1f77b4",
  "#d62728",
  "#2ca02c",
  "#9467bd",
  "#ff7f0e",
  "#17becf",
  "#8c564b",
  "#e377c2",
  "#7f7f7f",
  "#bcbd22",
];
const PANEL_HEIGHT = 170;
const HEATMAP_ROW = 18;

/** Format a value for readouts. */
function fmt(v) {
  return Number.isFinite(v) ? formatScore(v, { digits: 4 }) : "–";
}

/**
 * Index of the finite value of `y` nearest to row `i` among rows whose x lies within `tolerance` of
 * `target`, or -1.
 */
export function nearestFinite(x, y, n, i, target, tolerance) {
  for (let d = 0; d < n; d += 1) {
    const left = i - d;
    const right = i + d;
    const leftIn = left >= 0 && Math.abs(x[left] - target) <= tolerance;
    const rightIn = right < n && Math.abs(x[right] - target) <= tolerance;
    if (!leftIn && !rightIn) return -1;
    if (leftIn && y[left] === y[left]) return left;
    if (rightIn && y[right] === y[right]) return right;
  }
  return -1;
}

/** Colours of the canvases, read from the CSS variables of the theme. */
export function cssColours(root) {
  const style = root.ownerDocument.defaultView?.getComputedStyle?.(root);
  const read = (name, fallback) => style?.getPropertyValue(name)?.trim() || fallback;
  const dark = root.dataset.iwTheme === "dark";
  return {
    fg: read("--iw-fg", dark ? "#e6edf3" : "#1f2328"),
    muted: read("--iw-fg-muted", dark ? "#9da7b3" : "#57606a"),
    grid: dark ? "rgba(255,255,255,0.08)" : "rgba(0,0,0,0.07)",
    shade: dark ? "rgba(255,200,80,0.12)" : "rgba(255,170,0,0.13)",
    neutral: dark ? [60, 60, 64] : [247, 247, 247],
  };
}

export const layers = (ctx) => ctx.model.get("layers") ?? [];
export const layerColour = (ctx, layer) => PALETTE[Math.max(0, layers(ctx).indexOf(layer)) % PALETTE.length];
export const visibleLayers = (ctx) => layers(ctx).filter((layer) => !ctx.state.hiddenLayers.has(layer));
export const xLabel = (ctx) => ctx.model.get("x_label") || "step";

/** Column of `name`, smoothed when smoothing is on (extended incrementally: EMA of old rows never changes). */
const series = (ctx, name) => {
  const column = ctx.state.store.column(name);
  if (!column || ctx.state.smoothing === 0) return column;
  let cached = ctx.state.smoothCache.get(name);
  if (
    !cached ||
    cached.epoch !== ctx.state.store.epoch ||
    cached.weight !== ctx.state.smoothing ||
    cached.values.length < ctx.state.store.n
  ) {
    const values = new Float32Array(Math.max(ctx.state.store.n, cached?.values.length ?? 0, 64) * 2);
    if (cached && cached.epoch === ctx.state.store.epoch && cached.weight === ctx.state.smoothing)
      values.set(cached.values.subarray(0, cached.n));
    else
      cached = {
        epoch: ctx.state.store.epoch,
        weight: ctx.state.smoothing,
        n: 0,
        ema: new EmaState(ctx.state.smoothing),
      };
    cached = { ...cached, values };
    ctx.state.smoothCache.set(name, cached);
  }
  for (let i = cached.n; i < ctx.state.store.n; i += 1) cached.values[i] = cached.ema.next(column[i]);
  cached.n = ctx.state.store.n;
  return cached.values;
};

/** Decimators kept between frames, per panel line (see prepareLines); dropped when the history is replaced. */
const withDecimator = (ctx, key, item) => {
  const id = `${ctx.state.store.epoch}|${ctx.state.smoothing}|${key}`;
  const cached = ctx.state.decimators.get(key);
  item.decimator = cached?.id === id ? cached.decimator : null;
  item.cacheKey = key;
  item.cacheId = id;
  return item;
};
const keepDecimators = (ctx, prepared) => {
  for (const { line, decimator } of prepared.decimatedLines)
    ctx.state.decimators.set(line.cacheKey, { id: line.cacheId, decimator });
  for (const { band, decimator } of prepared.decimatedBands)
    ctx.state.decimators.set(band.cacheKey, { id: band.cacheId, decimator });
};

/** Follow mode shows every step on [first x, first x + 2^k]: the span doubles when the steps outgrow it, so the
 * decimators are widened in O(pixels) instead of re-reading every row (see prepareLines). */
const followDomain = (ctx) => {
  if (ctx.state.store.n === 0) return [0, 1];
  const first = ctx.state.store.x[0];
  const last = ctx.state.store.x[ctx.state.store.n - 1];
  const current = ctx.state.follow;
  if (!current || current[0] !== first || last > current[1] || current[2] !== ctx.state.store.epoch) {
    let span = current && current[0] === first && current[2] === ctx.state.store.epoch ? current[1] - first : 1;
    while (first + span < last) span *= 2;
    ctx.state.follow = [first, first + span, ctx.state.store.epoch];
  }
  return ctx.state.follow.slice(0, 2);
};
export const domain = (ctx) => ctx.state.xDomain ?? followDomain(ctx);

/** The fit windows (x ranges where the proxy was being fitted), per store version. */
const fitWindows = (ctx) => {
  if (ctx.state.fitCache.version === ctx.state.store.version) return ctx.state.fitCache.windows;
  const fitting = ctx.state.store.column("fitting");
  const windows = fitting
    ? runsOf(fitting, ctx.state.store.n).map(([a, b]) => [
        ctx.state.store.x[a],
        ctx.state.store.x[Math.min(b + 1, ctx.state.store.n - 1)],
      ])
    : [];
  ctx.state.fitCache = { version: ctx.state.store.version, windows };
  return windows;
};

/** Lines and bands of a line panel: per-layer metric (+ band, + dashed companions) and global series. */
function panelData(ctx, config) {
  const lines = [];
  const bands = [];
  const rows = [];
  const layered = config.metric ? visibleLayers(ctx) : [];
  for (const layer of layered) {
    const colour = layerColour(ctx, layer);
    const y = series(ctx, `${config.metric}|${layer}`);
    if (y)
      lines.push(
        withDecimator(ctx, `${config.id}:${config.metric}|${layer}`, {
          x: ctx.state.store.x,
          y,
          n: ctx.state.store.n,
          colour,
          label: layer,
        }),
      );
    for (const companion of config.dashed ?? []) {
      const c = series(ctx, `${companion}|${layer}`);
      if (c)
        lines.push(
          withDecimator(ctx, `${config.id}:${companion}|${layer}`, {
            x: ctx.state.store.x,
            y: c,
            n: ctx.state.store.n,
            colour,
            dash: [3, 3],
            width: 1,
            label: `${layer} ${companion}`,
          }),
        );
    }
    if (config.band?.length === 2) {
      const lo = ctx.state.store.column(`${config.band[0]}|${layer}`);
      const hi = ctx.state.store.column(`${config.band[1]}|${layer}`);
      if (lo && hi)
        bands.push(
          withDecimator(ctx, `${config.id}:band|${layer}`, {
            x: ctx.state.store.x,
            lo,
            hi,
            n: ctx.state.store.n,
            colour,
            label: layer,
          }),
        );
    }
  }
  (config.series ?? []).forEach((name, k) => {
    const y = series(ctx, name);
    const colour = config.metric ? ctx.state.colours.fg : PALETTE[k % PALETTE.length];
    if (y)
      lines.push(
        withDecimator(ctx, `${config.id}:${name}`, {
          x: ctx.state.store.x,
          y,
          n: ctx.state.store.n,
          colour,
          label: name,
        }),
      );
  });
  return { lines, bands, rows };
}

function drawPanel(ctx, panel, xDomain, shades, available) {
  const { canvas, config } = panel;
  const width = Math.max(240, Math.floor(available || 600));
  const height = panel.heatmap
    ? MARGIN.top + MARGIN.bottom + HEATMAP_ROW * Math.max(1, visibleLayers(ctx).length)
    : PANEL_HEIGHT;
  const ratio = ctx.doc.defaultView?.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
  }
  const g2 = canvas.getContext?.("2d") ?? null;
  g2?.setTransform(ratio, 0, 0, ratio, 0, 0);
  if (panel.heatmap) {
    const rows = visibleLayers(ctx)
      .map((layer) => ({
        label: layer,
        x: ctx.state.store.x,
        y: ctx.state.store.column(`${config.metric}|${layer}`),
        n: ctx.state.store.n,
      }))
      .filter((row) => row.y);
    panel.rows = rows;
    panel.frame = paintHeatmap(g2, {
      width,
      height,
      xDomain,
      rows,
      colours: ctx.state.colours,
      neutral: ctx.state.colours.neutral,
    });
    return 0; // data-iw-points counts line points only
  }
  const scale = ctx.state.scales.get(config.id) ?? (config.scale === "log" ? "log" : "linear");
  const { lines, bands } = panelData(ctx, config);
  panel.lines = lines;
  panel.bands = bands;
  const spec = {
    width,
    height,
    xDomain,
    yKind: scale,
    lines,
    bands,
    shades,
    reference: config.reference,
    cursor: ctx.state.cursor,
    colours: ctx.state.colours,
  };
  const prepared = prepareLines(spec);
  keepDecimators(ctx, prepared);
  panel.frame = paintLines(g2, spec, prepared);
  return panel.frame.drawn;
}

function readoutText(ctx, panel) {
  if (ctx.state.cursor === null || !panel.frame || ctx.state.store.n === 0) return "\u00a0";
  const i = Math.min(ctx.state.store.n - 1, lowerBound(ctx.state.store.x, ctx.state.store.n, ctx.state.cursor));
  const previous =
    i > 0 && Math.abs(ctx.state.store.x[i - 1] - ctx.state.cursor) < Math.abs(ctx.state.store.x[i] - ctx.state.cursor)
      ? i - 1
      : i;
  const tolerance = Math.abs(panel.frame.x.value(MARGIN.left + 8) - panel.frame.x.value(MARGIN.left));
  const texts = [`${xLabel(ctx)} ${fmt(ctx.state.store.x[previous])}`];
  if (panel.heatmap) {
    for (const row of panel.rows ?? []) {
      let j = previous;
      while (j > 0 && !(row.y[j] > 0)) j -= 1;
      texts.push(`${row.label}: ${row.y[j] > 0 ? fmt(row.y[j]) : "–"}`);
    }
    return texts.join("   ");
  }
  for (const line of panel.lines ?? []) {
    const j = nearestFinite(ctx.state.store.x, line.y, ctx.state.store.n, previous, ctx.state.cursor, tolerance);
    if (j < 0) continue;
    let text = `${line.label}: ${fmt(line.y[j])}`;
    const band = (panel.bands ?? []).find((b) => b.label === line.label && !line.dash);
    if (band && band.lo[j] === band.lo[j]) text += ` [${fmt(band.lo[j])}, ${fmt(band.hi[j])}]`;
    texts.push(text);
  }
  return texts.join("   ");
}

/**
 * Paint every shown panel, its readout and the status line.
 * @param {import("../../lib/view.js").ViewContext} ctx
 */
export function draw(ctx) {
  const started = performance.now();
  const title = ctx.model.get("title") || "Training monitor";
  if (ctx.parts.titleNode.textContent !== title) ctx.parts.titleNode.textContent = title;
  const xDomain = domain(ctx);
  const shades = fitWindows(ctx);
  let drawn = 0;
  for (const panel of ctx.state.panels) panel.node.hidden = ctx.state.hiddenPanels.has(panel.config.id);
  const shown = ctx.state.panels.filter((panel) => !panel.node.hidden);
  const widths = shown.map((panel) => panel.node.clientWidth); // one layout read before any write
  shown.forEach((panel, k) => {
    drawn += drawPanel(ctx, panel, xDomain, shades, widths[k]);
  });
  for (const panel of shown) {
    const text = readoutText(ctx, panel);
    if (panel.readout.textContent !== text) panel.readout.textContent = text;
  }
  const last = ctx.state.store.n ? ctx.state.store.x[ctx.state.store.n - 1] : null;
  ctx.parts.status.textContent = ctx.state.store.n
    ? `${xLabel(ctx)} ${fmt(last)} · ${ctx.state.store.n} logged`
    : "waiting for the first logged step…";
  ctx.parts.resetButton.disabled = ctx.state.xDomain === null;
  const elapsed = performance.now() - started;
  ctx.state.maxDrawMs = Math.max(ctx.state.maxDrawMs, elapsed);
  ctx.parts.root.dataset.iwRows = String(ctx.state.store.n);
  ctx.parts.root.dataset.iwPoints = String(drawn);
  ctx.parts.root.dataset.iwDrawMs = elapsed.toFixed(2);
  ctx.parts.root.dataset.iwDrawMaxMs = ctx.state.maxDrawMs.toFixed(2);
}

/** A theme change: the root's theme and the canvas colours read again (then the redraw). */
export function onTheme(ctx) {
  ctx.parts.root.dataset.iwTheme = ctx.theme;
  ctx.state.colours = cssColours(ctx.parts.root);
}
