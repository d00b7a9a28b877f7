/**
 * Generation attribution view (front end of interp_widgets.widgets.GenerationWidget).
 *
 * Synced traits: the GenerationModel typedef below; the fields marked "written" are also set by the view.
 * Hovering a generated token previews its sources; clicking or Enter selects it.
 * The heatmap is a canvas: rows are generated tokens, columns all tokens, hover shows the value.
 * At word or sentence granularity every token carries its unit's summed score. An encoder–decoder result
 * (source_mask has a true entry) shows the source and the target sides apart, each with its own units.
 * A contrastive result (foil_tokens non-empty) also shows one chip per step with the generated token, its foil,
 * both probabilities and ln(p/p'); its signed scores explain the difference (orange: towards the generated token,
 * blue: towards the foil).
 *
 * @example
 *   import widget from "./generation.js";
 *   widget.render({model, el});
 */

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Synced traits of GenerationWidget: its data (GenerationData, generated in lib/view_traits.js) and its view
 * state (GenerationState).
 * @typedef {import("./lib/view_traits.js").GenerationData & GenerationState} GenerationModel
 */
/**
 * View state of GenerationWidget (and its bases TokenScoresWidget, InterpWidget).
 * @typedef {object} GenerationState
 * @property {"token" | "word" | "sentence"} granularity  Each token shows its unit's summed score (written).
 * @property {boolean} shared_scale  One colour scale for all steps (written).
 * @property {"colour" | "underline"} encoding
 * @property {boolean} high_contrast
 * @property {"text" | "heatmap"} view  Coloured tokens or the canvas of all steps (written).
 * @property {number} selected_step  Generated token whose sources are coloured (written).
 * @property {number} selected_token  Prompt token clicked, -1: none (read and written: a click toggles it).
 * @property {number} hovered_token  Token under the pointer, -1: none (written).
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import "./generation.css";
import { buildUnits, contentMaxMagnitude, ranksByMagnitude, roleStarts } from "./lib/aggregate.js";
import { decodeArray, hasArray } from "./lib/codec.js";
import { scoreRgb, rgbString } from "./lib/colour.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { fillTableIdle, granularitySelect } from "./lib/controls.js";
import { createExportMenu } from "./lib/export.js";
import { formatProbability, formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken, renderTokenRun } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";
import { viewKit } from "./lib/view.js";
import { GENERATION_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";

/** Traits whose change only redraws. @type {(keyof GenerationModel)[]} */
const VIEW_TRAITS = ["selected_step", "shared_scale", "encoding", "high_contrast", "view", "granularity"];
const CELL_HEIGHT = 16;
const LABEL_WIDTH = 120;
const RANK_CACHE = 64;

/**
 * Read and check the synced data.
 * @param {AnyModel<GenerationModel>} model
 */
export function readGeneration(model) {
  const tokens = model.get("tokens") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const spaces = model.get("spaces_before") ?? [];
  if (spaces.length !== n) throw new RangeError(`spaces_before has ${spaces.length} entries for ${n} tokens`);
  const scores = decodeArray(model.get("scores"));
  const steps = model.get("step_tokens") ?? [];
  if (scores.shape.length !== 2 || scores.shape[1] !== n || scores.shape[0] !== steps.length) {
    throw new RangeError(
      `scores have shape [${scores.shape.join(", ")}], expected [${steps.length} generated tokens, ${n} tokens]`,
    );
  }
  const special = decodeArray(model.get("special_mask")).values;
  const generated = decodeArray(model.get("generated_mask")).values;
  if (special.length !== n || generated.length !== n)
    throw new RangeError(`special_mask and generated_mask need ${n} entries`);
  // payloads from before turns existed have none: the prompt and reply are then one turn without a role
  const turnIds = hasArray(model.get("turn_ids")) ? decodeArray(model.get("turn_ids")).values : null;
  if (turnIds && turnIds.length !== n) throw new RangeError(`turn_ids has ${turnIds.length} entries for ${n} tokens`);
  const stepAt = new Int32Array(n).fill(-1); // generation step of each token, -1 for the prompt
  steps.forEach((index, step) => {
    if (!(index >= 0 && index < n) || generated[index] === 0)
      throw new RangeError(`step token ${index} is not a generated token`);
    stepAt[index] = step;
  });
  // optional per-token arrays (absent in version-2 data): token granularity, one side
  const optional = (name, fallback) => {
    const payload = model.get(name);
    if (!payload || !payload.shape) return fallback;
    const values = decodeArray(payload).values;
    if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
    return values;
  };
  const wordIds = optional(
    "word_ids",
    Int32Array.from({ length: n }, (_, i) => i),
  );
  const sentenceIds = optional("sentence_ids", new Int32Array(n));
  const source = optional("source_mask", new Uint8Array(n));
  const foils = model.get("foil_tokens") ?? [];
  if (foils.length !== 0 && foils.length !== steps.length)
    throw new RangeError(`foil_tokens has ${foils.length} entries for ${steps.length} generated tokens`);
  return {
    n, tokens, spaces, special, generated, steps, stepAt, foils, turnIds, wordIds, sentenceIds, source,
    sides: source.some((v) => v !== 0),
    roles: model.get("turn_roles") ?? [],
    scores: scores.values,
    probs: model.get("step_probs") ?? [],
    foilProbs: model.get("foil_probs") ?? [],
    contrast: model.get("contrast") ?? "",
    method: model.get("method") ?? "",
    meaning: model.get("score_meaning") ?? "",
    signed: model.get("signed") !== false,
  }; // prettier-ignore
}

/**
 * The scores of one row as drawn at `granularity`: each token gets its unit's sum (NaN when the whole unit is).
 * @param {{wordIds: ArrayLike<number>, sentenceIds: ArrayLike<number>, turnIds?: ArrayLike<number> | null,
 *          special: ArrayLike<number>}} data
 * @param {ArrayLike<number>} values  one row of token scores
 * @param {"token" | "word" | "sentence"} granularity
 * @returns {ArrayLike<number>}
 */
export function unitRow(data, values, granularity) {
  if (granularity === "token" || !granularity) return values;
  const units = buildUnits({
    granularity,
    wordIds: data.wordIds,
    sentenceIds: data.sentenceIds,
    turnIds: data.turnIds ?? undefined,
    specialMask: data.special,
    showSpecial: true,
  });
  const out = new Float64Array(values.length);
  for (const unit of units) {
    let sum = 0;
    let seen = false;
    for (const i of unit) {
      if (Number.isNaN(values[i])) continue;
      sum += values[i];
      seen = true;
    }
    for (const i of unit) out[i] = seen ? sum : Number.NaN;
  }
  return out;
}

/**
 * ln(p / q), log p(target) − log p(foil), or null when a probability is unknown or zero.
 * @param {number | null | undefined} p
 * @param {number | null | undefined} q
 */
export function logRatio(p, q) {
  return Number.isFinite(p) && Number.isFinite(q) && p > 0 && q > 0 ? Math.log(p) - Math.log(q) : null;
}

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

/** @param {{model: AnyModel<GenerationModel>, el: HTMLElement, reportError: (error: unknown) => void}} props */
function renderGeneration({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const { safely, save, coalesce } = viewKit(model, reportError);
  const root = h("div", { class: "iw-root iw-generation" });
  const viewButtons = ["text", "heatmap"].map((v) =>
    h(
      "button",
      { type: "button", class: "iw-button", "data-view": v, "aria-pressed": "false" },
      v === "text" ? "Tokens" : "Heatmap",
    ),
  );
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const granularityPick = granularitySelect();
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("span", { role: "group", "aria-label": "View" }, viewButtons),
    h("label", {}, ["Granularity ", granularityPick]),
    h("label", { title: "One colour scale for all generated tokens instead of one per token" }, [
      sharedToggle,
      " shared scale",
    ]),
  ]);
  const status = h("div", { class: "iw-generation-status", "aria-live": "polite" });
  const pairsBox = h("div", { class: "iw-contrast", role: "group", "aria-label": "Generated tokens and their foils" });
  const tokensBox = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal" });
  const canvas = h("canvas", { class: "iw-heatmap", role: "img", tabindex: 0 });
  const heatmapBox = h("div", { class: "iw-heatmap-box" }, canvas);
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  const table = h("table");
  const tableBox = h("div", { class: "iw-sr-only iw-sr-table" }, table);
  root.append(toolbar, status, pairsBox, tokensBox, heatmapBox, legendSlot, caption, tableBox);
  el.append(root);
  const tooltip = createTooltip(root);

  let theme = detectTheme(doc);
  let data = null;
  let visible = []; // token index of each span, in order (hidden special tokens left out)
  let shown = null; // what the spans are painted with: {values, max, ranks, ranked, options, target}
  let shownStep = 0; // step whose sources are coloured (selected, or previewed on hover)
  let focusIndex = -1;
  let rendering = null;
  let tableFill = null; // the screen-reader table being filled in idle time
  let layout = null;

  const stepOf = (index) => data.stepAt[index];
  const rankCache = new Map(); // granularity:step -> {ranks, ranked}, the last RANK_CACHE rows (a hover re-sorts no row twice)
  const ranksOf = (step, values) => {
    const key = `${model.get("granularity") || "token"}:${step}`;
    let hit = rankCache.get(key);
    if (!hit) {
      hit = { ranks: ranksByMagnitude(values), ranked: values.filter((v) => !Number.isNaN(v)).length };
      rankCache.set(key, hit);
      if (rankCache.size > RANK_CACHE) rankCache.delete(rankCache.keys().next().value);
    }
    return hit;
  };
  const tokenRow = (step) => data.scores.subarray(step * data.n, (step + 1) * data.n);
  const row = (step) => unitRow(data, tokenRow(step), model.get("granularity") || "token");
  const paintOptions = () => ({
    theme,
    signed: data.signed,
    encoding: model.get("encoding") || "colour",
    boost: Boolean(model.get("high_contrast")),
  });
  // the colour scale is set by content tokens only, never by the (hidden) template and role-marker tokens
  const scaleMax = (step) => {
    if (!model.get("shared_scale")) return contentMaxMagnitude(row(step), data.special);
    return Math.max(...data.steps.map((_, s) => contentMaxMagnitude(row(s), data.special)));
  };
  const scoreText = (value) =>
    Number.isNaN(value) ? "not visible to this generated token" : formatScore(value, { digits: 6, sign: data.signed });
  const probText = (step) => (Number.isFinite(data.probs[step]) ? formatProbability(data.probs[step]) : "unknown");
  const foilProbText = (step) =>
    Number.isFinite(data.foilProbs[step]) ? formatProbability(data.foilProbs[step]) : "unknown";
  const contrastive = () => data.foils.length > 0;
  /** " rather than "foil" (p = …)" for a contrastive step, "" otherwise. */
  const ratherThan = (step) =>
    contrastive() ? ` rather than ${quoteToken(data.foils[step])} (p = ${foilProbText(step)})` : "";
  const ratioText = (step) => {
    const r = logRatio(data.probs[step], data.foilProbs[step]);
    return r === null ? "" : `ln(p/p\u2032) = ${formatScore(r, { digits: 3, sign: true })}`;
  };

  /** The chips of a contrastive result: one per step, "token vs foil", probabilities, ln(p/p'); a click selects. */
  function buildPairs() {
    pairsBox.hidden = !contrastive();
    if (!contrastive()) return pairsBox.replaceChildren();
    const chips = data.steps.map((index, s) =>
      h("button", { type: "button", class: "iw-pair", "data-step": s, "aria-pressed": "false", title: `${quoteToken(data.tokens[index])} (p = ${probText(s)}) rather than ${quoteToken(data.foils[s])} (p = ${foilProbText(s)})` }, [
        h("span", { class: "iw-pair-target" }, displayToken(data.tokens[index])),
        h("span", { class: "iw-pair-vs" }, " vs "),
        h("span", { class: "iw-pair-foil" }, displayToken(data.foils[s])),
        h("span", { class: "iw-pair-ratio" }, ratioText(s)),
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
  /** Paint one token span for the step on display (`shown`, set by colour()). */
  function paintSpan(span, i) {
    const { values, max, ranks, ranked, options, target } = shown;
    paintToken(span, values[i], max, options);
    span.classList.toggle("iw-unseen", Number.isNaN(values[i]));
    span.classList.toggle("iw-source-of", i === target);
    const genStep = stepOf(i);
    const prob = genStep >= 0 ? `, generated with probability ${probText(genStep)}` : "";
    const rank = ranks[i] > 0 ? `, rank ${ranks[i]} of ${ranked}` : "";
    span.setAttribute(
      "aria-label",
      `${quoteToken(data.tokens[i])}${prob}, attribution to ${quoteToken(data.tokens[target])}${ratherThan(shownStep)}: ${scoreText(values[i])}${rank}`,
    );
  }

  /** Build the token run (spans are made and painted block by block, see renderTokenRun). */
  function build() {
    visible = data.tokens.map((_, i) => i).filter((i) => !(data.special[i] && !data.generated[i]));
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
      const step = stepOf(i);
      const span = h("span", { class: step >= 0 ? "iw-token iw-generated" : "iw-token", role: "option", tabindex: -1, "data-index": i, "data-unit": u }, displayToken(data.tokens[i]));
      if (step >= 0) span.dataset.prob = probText(step);
      paintSpan(span, i);
      parent.append(span);
      return span;
    }; // prettier-ignore
    const breakRank = (u) =>
      starts.has(u) || data.spaces[visible[u]].includes("\n") || data.tokens[visible[u - 1]].endsWith("\n") ? 2 : 0;
    rendering?.cancel();
    rendering = renderTokenRun(tokensBox, { count: visible.length, build: make, breakRank });
  }

  /** Colour the sources of generated token `step` (built spans now, the others as they are built). */
  function colour(step) {
    shownStep = step;
    const values = row(step);
    const max = scaleMax(step);
    const { ranks, ranked } = ranksOf(step, values);
    const options = paintOptions();
    const target = data.steps[step];
    shown = { values, max, ranks, ranked, options, target };
    rendering?.repaint((span, u) => paintSpan(span, visible[u])); // what is in view now, the rest later
    status.textContent = `Sources of generated token ${step + 1} of ${data.steps.length}: ${quoteToken(data.tokens[target])} (p = ${probText(step)})${ratherThan(step)}`;
    const versus = contrastive() ? ` rather than ${quoteToken(data.foils[step])}` : "";
    legendSlot.replaceChildren(
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
    fillTable(step, values, ranks, ranked);
  }

  /** The screen-reader table: every source token's score for generated token `step`, rows in idle time. */
  function fillTable(step, values, ranks, ranked) {
    tableFill?.cancel();
    tableFill = fillTableIdle(table, {
      caption: `Attribution of each source token to generated token ${quoteToken(data.tokens[data.steps[step]])}${contrastive() ? ` rather than its foil ${quoteToken(data.foils[step])}` : ""}`,
      header: ["token", "score", "rank"],
      count: data.n,
      row: (i) => [data.tokens[i], scoreText(values[i]), ranks[i] > 0 ? `${ranks[i]} of ${ranked}` : ""],
    });
  }

  function drawHeatmap() {
    const width = Math.max(320, (el.clientWidth || 800) - 8);
    const cellWidth = Math.max(1, Math.min(18, Math.floor((width - LABEL_WIDTH) / data.n)));
    layout = { cellWidth, steps: data.steps.length, tokens: data.n };
    canvas.width = LABEL_WIDTH + cellWidth * data.n;
    canvas.height = CELL_HEIGHT * data.steps.length;
    canvas.setAttribute(
      "aria-label",
      `Heatmap of ${data.steps.length} generated tokens (rows) by ${data.n} source tokens (columns); selected row ${shownStep + 1}`,
    );
    const ctx = canvas.getContext?.("2d");
    if (!ctx) return; // no canvas support (e.g. a test DOM): the table alternative still lists the values
    const shared = model.get("shared_scale");
    const globalMax = shared ? scaleMax(0) : 0;
    const fg = doc.defaultView.getComputedStyle(root).color || "#000";
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = "11px ui-monospace, monospace";
    ctx.textBaseline = "middle";
    data.steps.forEach((index, s) => {
      const values = row(s);
      const max = shared ? globalMax : contentMaxMagnitude(values, data.special);
      ctx.fillStyle = fg;
      const label = contrastive()
        ? `${displayToken(data.tokens[index]).slice(0, 7)} vs ${displayToken(data.foils[s]).slice(0, 7)}`
        : displayToken(data.tokens[index]).slice(0, 14);
      ctx.fillText(label, 2, s * CELL_HEIGHT + CELL_HEIGHT / 2, LABEL_WIDTH - 6);
      for (let i = 0; i < data.n; i += 1) {
        const v = values[i];
        ctx.fillStyle = Number.isNaN(v)
          ? "rgba(127,127,127,0.15)"
          : rgbString(scoreRgb(v, max, theme, { signed: data.signed }));
        ctx.fillRect(LABEL_WIDTH + i * cellWidth, s * CELL_HEIGHT, cellWidth, CELL_HEIGHT - 1);
      }
    });
    if (data.sides) {
      const boundary = Array.prototype.findIndex.call(data.source, (v) => v === 0);
      if (boundary > 0) {
        ctx.fillStyle = fg;
        ctx.fillRect(LABEL_WIDTH + boundary * cellWidth - 1, 0, 2, canvas.height); // source | target
      }
    }
    const selected = model.get("selected_step");
    ctx.strokeStyle = fg;
    ctx.lineWidth = 2;
    ctx.strokeRect(LABEL_WIDTH, selected * CELL_HEIGHT + 1, cellWidth * data.n, CELL_HEIGHT - 2);
  }

  function draw() {
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
    colour(step);
    for (const chip of pairsBox.querySelectorAll(".iw-pair"))
      chip.setAttribute("aria-pressed", String(Number(chip.dataset.step) === step));
    if (!rendering) build();
    if (view === "heatmap") drawHeatmap();
    caption.textContent = [data.method && `method: ${data.method}`, data.meaning && `score: ${data.meaning}`]
      .filter(Boolean)
      .join(" \u00b7 ");
    const focusSpan = rendering.ensure(Math.max(0, visible.indexOf(focusIndex)));
    if (focusSpan) focusSpan.tabIndex = 0;
  }

  let disposed = false;
  // Level 1 = redraw, 2 = re-read data (the run is rebuilt by draw() once the colours are known).
  const request = coalesce((level) => {
    if (disposed) return;
    if (level === 2) {
      data = readGeneration(model);
      rankCache.clear();
      buildPairs();
      rendering?.cancel();
      rendering = null;
    }
    draw();
  });

  const spanOf = (event) => {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    return span && tokensBox.contains(span) ? span : null;
  };
  const describe = (i, about = shownStep) => {
    const rows = [["token", quoteToken(data.tokens[i])]];
    const step = stepOf(i);
    if (step >= 0) rows.push(["probability", probText(step)]);
    if (step >= 0 && contrastive()) rows.push(["foil", `${quoteToken(data.foils[step])} (p = ${foilProbText(step)})`]);
    const versus = contrastive() ? ` vs ${quoteToken(data.foils[about])}` : "";
    rows.push([`→ ${quoteToken(data.tokens[data.steps[about]])}${versus}`, scoreText(row(about)[i])]);
    return rows;
  };
  const activate = (i) => {
    const step = stepOf(i);
    if (step >= 0) save({ selected_step: step });
    else save({ selected_token: model.get("selected_token") === i ? -1 : i });
  };
  const focusAt = (position) => {
    const next = rendering.ensure(Math.min(Math.max(position, 0), visible.length - 1));
    for (const span of tokensBox.querySelectorAll('.iw-token[tabindex="0"]')) span.tabIndex = -1;
    next.tabIndex = 0;
    focusIndex = Number(next.dataset.index);
    next.focus();
  };
  const KEY_STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  tokensBox.addEventListener("keydown", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const position = Number(span.dataset.unit);
    if (event.key in KEY_STEPS) focusAt(position + KEY_STEPS[event.key]);
    else if (event.key === "Home") focusAt(0);
    else if (event.key === "End") focusAt(Infinity);
    else if (event.key === "Enter" || event.key === " ") activate(Number(span.dataset.index));
    else if (event.key === "Escape") tooltip.hide();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  tokensBox.addEventListener("mouseover", safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    const i = Number(span.dataset.index);
    const step = stepOf(i);
    // the tooltip measures the layout first, while it is clean; restyling after it forces no synchronous layout
    tooltip.show(span, describe(i, step >= 0 ? step : shownStep));
    if (step >= 0 && step !== shownStep) colour(step); // preview this generated token's sources
    save({ hovered_token: i });
  })); // prettier-ignore
  tokensBox.addEventListener("mouseleave", safely(() => {
    tooltip.hide();
    if (shownStep !== model.get("selected_step")) colour(model.get("selected_step"));
    save({ hovered_token: -1 });
  })); // prettier-ignore
  tokensBox.addEventListener("focusin", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    focusIndex = Number(span.dataset.index);
    tooltip.show(span, describe(focusIndex));
  })); // prettier-ignore
  tokensBox.addEventListener("focusout", safely((event) => {
    if (!tokensBox.contains(event.relatedTarget)) tooltip.hide();
  })); // prettier-ignore
  tokensBox.addEventListener("click", safely((event) => {
    const span = spanOf(event);
    if (span) activate(Number(span.dataset.index));
  })); // prettier-ignore
  const cellFromEvent = (event) => {
    const box = canvas.getBoundingClientRect();
    const scaleX = box.width ? canvas.width / box.width : 1;
    const scaleY = box.height ? canvas.height / box.height : 1;
    return layout && heatmapCell((event.clientX - box.left) * scaleX, (event.clientY - box.top) * scaleY, layout);
  };
  canvas.addEventListener("mousemove", safely((event) => {
    const cell = cellFromEvent(event);
    if (!cell) return tooltip.hide();
    const target = data.tokens[data.steps[cell.step]];
    tooltip.show(canvas, [
      ["source", `${quoteToken(data.tokens[cell.token])} (#${cell.token})`],
      ["generated", `${quoteToken(target)} (p = ${probText(cell.step)})`],
      ...(contrastive() ? [["foil", `${quoteToken(data.foils[cell.step])} (p = ${foilProbText(cell.step)})`]] : []),
      ["score", scoreText(row(cell.step)[cell.token])],
    ]);
    canvas.dataset.hoverStep = String(cell.step);
    canvas.dataset.hoverToken = String(cell.token);
  })); // prettier-ignore
  canvas.addEventListener("mouseleave", () => tooltip.hide());
  canvas.addEventListener("click", safely((event) => {
    const cell = cellFromEvent(event);
    if (cell) save({ selected_step: cell.step });
  })); // prettier-ignore
  canvas.addEventListener("keydown", safely((event) => {
    const step = model.get("selected_step") + ({ ArrowDown: 1, ArrowUp: -1 }[event.key] ?? 0);
    if (step === model.get("selected_step") || step < 0 || step >= data.steps.length) return;
    save({ selected_step: step });
    event.preventDefault();
  })); // prettier-ignore
  viewButtons.forEach((b) =>
    b.addEventListener(
      "click",
      safely(() => save({ view: b.dataset.view })),
    ),
  );
  pairsBox.addEventListener("click", safely((event) => {
    const chip = event.target instanceof Element ? event.target.closest(".iw-pair") : null;
    if (chip) save({ selected_step: Number(chip.dataset.step) });
  })); // prettier-ignore
  sharedToggle.addEventListener(
    "change",
    safely(() => save({ shared_scale: sharedToggle.checked })),
  );
  granularityPick.addEventListener(
    "change",
    safely(() => save({ granularity: granularityPick.value })),
  );
  const csvRows = () => {
    const foil = (s) => (contrastive() ? [data.foils[s], data.foilProbs[s] ?? ""] : []);
    return [
      [
        "generated_step",
        "generated_token",
        "probability",
        ...(contrastive() ? ["foil", "foil_probability"] : []),
        ...data.tokens.map((t, i) => `${i}:${t}`),
      ],
      ...data.steps.map((index, s) => [s, data.tokens[index], data.probs[s] ?? "", ...foil(s), ...row(s)]),
    ];
  };
  toolbar.append(
    createExportMenu({
      name: "generation-attribution",
      root,
      rows: csvRows,
      prepare: () => rendering.finish(),
      title: () => `${data.method || "attribution"}: generation`,
      reportError,
    }),
  );

  const onData = () => request(2);
  const onView = () => request(1);
  for (const name of DATA_TRAITS) model.on(`change:${name}`, onData);
  for (const name of VIEW_TRAITS) model.on(`change:${name}`, onView);
  const stopWatchingTheme = watchTheme(doc, (next) => {
    theme = next;
    request(1);
  });
  data = readGeneration(model);
  buildPairs();
  draw();
  return () => {
    disposed = true;
    rendering?.cancel();
    tableFill?.cancel();
    for (const name of DATA_TRAITS) model.off(`change:${name}`, onData);
    for (const name of VIEW_TRAITS) model.off(`change:${name}`, onView);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("GenerationWidget", renderGeneration) };
