/**
 * Generation attribution, draw: the token run coloured by the sources of one generated token, the heatmap
 * (generated tokens x source tokens), the contrastive pairs, the legend, status, caption and screen-reader table.
 * Keeps in `ctx.state`: `visible` (token index of each span, hidden special tokens left out), `shown` (what the
 * spans are painted with), `shownStep` (step whose sources are coloured: selected, or previewed on hover),
 * `rendering` (the token run), `tableFill`, `layout` (heatmap geometry), `rankCache`, `focusIndex`.
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { contentMaxMagnitude, ranksByMagnitude, roleStarts } from "../../lib/aggregate.js";
import { rgbString, scoreRgb } from "../../lib/colour.js";
import { fillTableIdle } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { formatProbability, formatScore } from "../../lib/format.js";
import { createLegend } from "../../lib/legend.js";
import { paintToken, renderTokenRun } from "../../lib/paint.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { logRatio, unitRow } from "./read.js";

const CELL_HEIGHT = 16;
const LABEL_WIDTH = 120;
const RANK_CACHE = 64;

/**
 * Which heatmap cell is at canvas pixel (x, y): {step, token} or null outside the grid.
 * @param {{cellWidth: number, steps: number, tokens: number}} layout
 */
export function heatmapCell(x, y, layout) {
  const token = Math.floor((x - LABEL_WIDTH) / layout.cellWidth);
  const step = Math.floor(y / CELL_HEIGHT);
  if (x < LABEL_WIDTH || token < 0 || token >= layout.tokens || step < 0 || step >= layout.steps) return null;
  return { step, token };
}

/** Ranks of one row by |score|, for the last RANK_CACHE rows (a hover re-sorts no row twice). */
function ranksOf({ model, state }, step, values) {
  const key = `${model.get("granularity") || "token"}:${step}`;
  let hit = state.rankCache.get(key);
  if (!hit) {
    hit = { ranks: ranksByMagnitude(values), ranked: values.filter((v) => !Number.isNaN(v)).length };
    state.rankCache.set(key, hit);
    if (state.rankCache.size > RANK_CACHE) state.rankCache.delete(state.rankCache.keys().next().value);
  }
  return hit;
}
const tokenRow = (data, step) => data.scores.subarray(step * data.n, (step + 1) * data.n);
/** The scores for generated token `step`, at the granularity on display. */
export const row = ({ model, data }, step) => unitRow(data, tokenRow(data, step), model.get("granularity") || "token");
const paintOptions = ({ model, data, theme }) => ({
  theme,
  signed: data.signed,
  encoding: model.get("encoding") || "colour",
  boost: Boolean(model.get("high_contrast")),
});
// the colour scale is set by content tokens only, never by the (hidden) template and role-marker tokens
function scaleMax(ctx, step) {
  const { model, data } = ctx;
  if (!model.get("shared_scale")) return contentMaxMagnitude(row(ctx, step), data.special);
  return Math.max(...data.steps.map((_, s) => contentMaxMagnitude(row(ctx, s), data.special)));
}
export const scoreText = (data, value) =>
  Number.isNaN(value) ? "not visible to this generated token" : formatScore(value, { digits: 6, sign: data.signed });
export const probText = (data, step) =>
  Number.isFinite(data.probs[step]) ? formatProbability(data.probs[step]) : "unknown";
export const foilProbText = (data, step) =>
  Number.isFinite(data.foilProbs[step]) ? formatProbability(data.foilProbs[step]) : "unknown";
export const contrastive = (data) => data.foils.length > 0;
/** " rather than "foil" (p = …)" for a contrastive step, "" otherwise. */
const ratherThan = (data, step) =>
  contrastive(data) ? ` rather than ${quoteToken(data.foils[step])} (p = ${foilProbText(data, step)})` : "";
const ratioText = (data, step) => {
  const r = logRatio(data.probs[step], data.foilProbs[step]);
  return r === null ? "" : `ln(p/p\u2032) = ${formatScore(r, { digits: 3, sign: true })}`;
};

/** The chips of a contrastive result: one per step, "token vs foil", probabilities, ln(p/p'); a click selects. */
function buildPairs({ data, parts }) {
  const { pairsBox } = parts;
  pairsBox.hidden = !contrastive(data);
  if (!contrastive(data)) return pairsBox.replaceChildren();
  const chips = data.steps.map((index, s) =>
    h("button", { type: "button", class: "iw-pair", "data-step": s, "aria-pressed": "false", title: `${quoteToken(data.tokens[index])} (p = ${probText(data, s)}) rather than ${quoteToken(data.foils[s])} (p = ${foilProbText(data, s)})` }, [
      h("span", { class: "iw-pair-target" }, displayToken(data.tokens[index])),
      h("span", { class: "iw-pair-vs" }, " vs "),
      h("span", { class: "iw-pair-foil" }, displayToken(data.foils[s])),
      h("span", { class: "iw-pair-ratio" }, ratioText(data, s)),
    ]),
  ); // prettier-ignore
  const shown = data.contrast.length > 60 ? `${data.contrast.slice(0, 59)}\u2026` : data.contrast;
  const note = data.signed
    ? "orange pushes towards the generated token, blue towards the foil"
    : "scores are unsigned magnitudes";
  pairsBox.replaceChildren(
    h(
      "div",
      { class: "iw-contrast-title" },
      `Why each generated token rather than its foil (foil continuation ${quoteToken(shown)}): ${note}`,
    ),
    h("div", { class: "iw-pairs" }, chips),
  );
}

/** Paint one token span for the step on display (`state.shown`, set by colour()). */
function paintSpan({ data, state }, span, i) {
  const { values, max, ranks, ranked, options, target } = state.shown;
  paintToken(span, values[i], max, options);
  span.classList.toggle("iw-unseen", Number.isNaN(values[i]));
  span.classList.toggle("iw-source-of", i === target);
  const genStep = data.stepAt[i];
  const prob = genStep >= 0 ? `, generated with probability ${probText(data, genStep)}` : "";
  const rank = ranks[i] > 0 ? `, rank ${ranks[i]} of ${ranked}` : "";
  span.setAttribute(
    "aria-label",
    `${quoteToken(data.tokens[i])}${prob}, attribution to ${quoteToken(data.tokens[target])}${ratherThan(data, state.shownStep)}: ${scoreText(data, values[i])}${rank}`,
  );
}

/** Build the token run (spans are made and painted block by block, see renderTokenRun). */
function buildRun(ctx) {
  const { data, parts, state } = ctx;
  const visible = data.tokens.map((_, i) => i).filter((i) => !(data.special[i] && !data.generated[i]));
  state.visible = visible;
  const starts = roleStarts(
    visible.map((i) => [i]),
    data.turnIds,
    data.special,
    data.roles,
  );
  const make = (u, parent, atBlockStart) => {
    const i = visible[u];
    const sideStart = data.sides && (u === 0 || data.source[visible[u - 1]] !== data.source[i]);
    if (sideStart) {
      if (u > 0) parent.append(h("br"));
      parent.append(h("span", { class: "iw-side-label", "data-side": data.source[i] ? "source" : "target" }, data.source[i] ? "source" : "target"));
    }
    let gap = sideStart || (atBlockStart && u > 0) ? data.spaces[i].replace(/^\r?\n/, "") : data.spaces[i];
    if (starts.has(u)) {
      // a chat turn starts: its role's label on a line of its own (the template's markers are folded away)
      parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
      gap = gap.replace(/^(\r?\n)+/, "");
    }
    if (gap) parent.append(gap);
    const step = data.stepAt[i];
    const span = h("span", { class: step >= 0 ? "iw-token iw-generated" : "iw-token", role: "option", tabindex: -1, "data-index": i, "data-unit": u }, displayToken(data.tokens[i]));
    if (step >= 0) span.dataset.prob = probText(data, step);
    paintSpan(ctx, span, i);
    parent.append(span);
    return span;
  }; // prettier-ignore
  const breakRank = (u) =>
    starts.has(u) || data.spaces[visible[u]].includes("\n") || data.tokens[visible[u - 1]].endsWith("\n") ? 2 : 0;
  state.rendering?.cancel();
  state.rendering = renderTokenRun(parts.tokensBox, { count: visible.length, build: make, breakRank });
}

/** Colour the sources of generated token `step` (built spans now, the others as they are built). */
export function colour(ctx, step) {
  const { model, data, parts, state, theme } = ctx;
  state.shownStep = step;
  const values = row(ctx, step);
  const max = scaleMax(ctx, step);
  const { ranks, ranked } = ranksOf(ctx, step, values);
  const options = paintOptions(ctx);
  const target = data.steps[step];
  state.shown = { values, max, ranks, ranked, options, target };
  state.rendering?.repaint((span, u) => paintSpan(ctx, span, state.visible[u])); // what is in view now, the rest later
  parts.status.textContent = `Sources of generated token ${step + 1} of ${data.steps.length}: ${quoteToken(data.tokens[target])} (p = ${probText(data, step)})${ratherThan(data, step)}`;
  const versus = contrastive(data) ? ` rather than ${quoteToken(data.foils[step])}` : "";
  parts.legendSlot.replaceChildren(
    createLegend(
      max,
      theme,
      `attribution to ${quoteToken(data.tokens[target])}${versus}${model.get("shared_scale") ? ", shared scale" : ""}`,
      {
        signed: data.signed,
        encoding: options.encoding,
      },
    ),
  );
  fillTable(ctx, step, values, ranks, ranked);
}

/** The screen-reader table: every source token's score for generated token `step`, rows in idle time. */
function fillTable({ data, parts, state }, step, values, ranks, ranked) {
  state.tableFill?.cancel();
  state.tableFill = fillTableIdle(parts.table, {
    caption: `Attribution of each source token to generated token ${quoteToken(data.tokens[data.steps[step]])}${contrastive(data) ? ` rather than its foil ${quoteToken(data.foils[step])}` : ""}`,
    header: ["token", "score", "rank"],
    count: data.n,
    row: (i) => [data.tokens[i], scoreText(data, values[i]), ranks[i] > 0 ? `${ranks[i]} of ${ranked}` : ""],
  });
}

function drawHeatmap(ctx) {
  const { model, data, parts, state, el, doc, theme } = ctx;
  const { canvas, root } = parts;
  const width = Math.max(320, (el.clientWidth || 800) - 8);
  const cellWidth = Math.max(1, Math.min(18, Math.floor((width - LABEL_WIDTH) / data.n)));
  state.layout = { cellWidth, steps: data.steps.length, tokens: data.n };
  canvas.width = LABEL_WIDTH + cellWidth * data.n;
  canvas.height = CELL_HEIGHT * data.steps.length;
  canvas.setAttribute(
    "aria-label",
    `Heatmap of ${data.steps.length} generated tokens (rows) by ${data.n} source tokens (columns); selected row ${state.shownStep + 1}`,
  );
  const g2 = canvas.getContext?.("2d");
  if (!g2) return; // no canvas support (e.g. a test DOM): the table alternative still lists the values
  const shared = model.get("shared_scale");
  const globalMax = shared ? scaleMax(ctx, 0) : 0;
  const fg = doc.defaultView.getComputedStyle(root).color || "#000";
  g2.clearRect(0, 0, canvas.width, canvas.height);
  g2.font = "11px ui-monospace, monospace";
  g2.textBaseline = "middle";
  data.steps.forEach((index, s) => {
    const values = row(ctx, s);
    const max = shared ? globalMax : contentMaxMagnitude(values, data.special);
    g2.fillStyle = fg;
    const label = contrastive(data)
      ? `${displayToken(data.tokens[index]).slice(0, 7)} vs ${displayToken(data.foils[s]).slice(0, 7)}`
      : displayToken(data.tokens[index]).slice(0, 14);
    g2.fillText(label, 2, s * CELL_HEIGHT + CELL_HEIGHT / 2, LABEL_WIDTH - 6);
    for (let i = 0; i < data.n; i += 1) {
      const v = values[i];
      g2.fillStyle = Number.isNaN(v)
        ? "rgba(127,127,127,0.15)"
        : rgbString(scoreRgb(v, max, theme, { signed: data.signed }));
      g2.fillRect(LABEL_WIDTH + i * cellWidth, s * CELL_HEIGHT, cellWidth, CELL_HEIGHT - 1);
    }
  });
  if (data.sides) {
    const boundary = Array.prototype.findIndex.call(data.source, (v) => v === 0);
    if (boundary > 0) {
      g2.fillStyle = fg;
      g2.fillRect(LABEL_WIDTH + boundary * cellWidth - 1, 0, 2, canvas.height); // source | target
    }
  }
  const selected = model.get("selected_step");
  g2.strokeStyle = fg;
  g2.lineWidth = 2;
  g2.strokeRect(LABEL_WIDTH, selected * CELL_HEIGHT + 1, cellWidth * data.n, CELL_HEIGHT - 2);
}

/**
 * Paint from the state; on REREAD (new data) the rank cache and pairs are rebuilt and the token run is rebuilt
 * once the colours are known.
 * @param {import("../../lib/view.js").ViewContext} ctx
 */
export function draw(ctx, level) {
  const { model, data, parts, state, theme } = ctx;
  const { root, viewButtons, sharedToggle, granularityPick, tokensBox, heatmapBox, pairsBox, caption } = parts;
  if (level >= REREAD) {
    state.rankCache.clear();
    buildPairs(ctx);
    state.rendering?.cancel();
    state.rendering = null;
  }
  const step = model.get("selected_step");
  if (!(step >= 0 && step < data.steps.length))
    throw new RangeError(`selected_step ${step} is out of range for ${data.steps.length} generated tokens`);
  const view = model.get("view") === "heatmap" ? "heatmap" : "text";
  root.dataset.iwTheme = theme;
  root.classList.toggle("iw-high-contrast", Boolean(model.get("high_contrast")));
  viewButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.view === view)));
  sharedToggle.checked = Boolean(model.get("shared_scale"));
  granularityPick.value = model.get("granularity") || "token";
  tokensBox.hidden = view !== "text";
  heatmapBox.hidden = view !== "heatmap";
  colour(ctx, step);
  for (const chip of pairsBox.querySelectorAll(".iw-pair"))
    chip.setAttribute("aria-pressed", String(Number(chip.dataset.step) === step));
  if (!state.rendering) buildRun(ctx);
  if (view === "heatmap") drawHeatmap(ctx);
  caption.textContent = [data.method && `method: ${data.method}`, data.meaning && `score: ${data.meaning}`]
    .filter(Boolean)
    .join(" \u00b7 ");
  const focusSpan = state.rendering.ensure(Math.max(0, state.visible.indexOf(state.focusIndex)));
  if (focusSpan) focusSpan.tabIndex = 0;
}
