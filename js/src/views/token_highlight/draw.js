/**
 * Token highlighter, draw: paint the tokens, legend, caption and controls from the read state and the UI traits.
 * Keeps what the handlers of build.js need in `ctx.state`: `view` ({units, sums, ranks, ranked, target, roleOf,
 * selectedUnit}), `rendering` (the token run, see lib/paint.js renderTokenRun), `tableFill`, `focusToken`.
 *
 * @example
 *   draw(ctx, REREAD); // after read(model): refills the class list, then paints
 */
import {
  buildUnits,
  contentMaxMagnitude,
  ranksByMagnitude,
  roleStarts,
  unitScores,
  unitText,
} from "../../lib/aggregate.js";
import { GRANULARITIES, fillTableIdle } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { formatProbability, formatScore } from "../../lib/format.js";
import { createLegend } from "../../lib/legend.js";
import { paintToken, renderTokenRun } from "../../lib/paint.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";
import { unitOfToken } from "./read.js";

const scoreText = (score) =>
  Number.isNaN(score) ? "none (this class does not see it)" : formatScore(score, { digits: 6, sign: true });
const rankText = (rank, count) => (rank > 0 ? `${rank} of ${count} by |score|` : "unranked");
const textOf = (data, unit) => unitText(unit, data.tokens, data.spaces);

/** The granularity choices: "turn" for a chat conversation (a plain text is one turn) or when it is set. */
function fillGranularities({ data, parts }, granularity) {
  const choices = data.roles.length || granularity === "turn" ? [...GRANULARITIES, "turn"] : GRANULARITIES;
  if (parts.granularityPick.options.length === choices.length) return;
  parts.granularityPick.replaceChildren(...choices.map((g) => h("option", { value: g }, g)));
}

function fillTargets({ data, parts }) {
  parts.targetSelect.replaceChildren(
    ...data.labels.map((label, i) => {
      const p = data.probs[i];
      const text = Number.isFinite(p) ? `${label} (${formatProbability(p)})` : label;
      return h("option", { value: i }, text);
    }),
  );
}

/** Tooltip rows of unit `u`. */
export function describe({ model, data, state }, u) {
  const { view } = state;
  const unit = view.units[u];
  const granularity = model.get("granularity");
  const rows = [
    [granularity, quoteToken(textOf(data, unit))],
    ...(view.roleOf(u) ? [["turn", view.roleOf(u)]] : []),
    ["score", scoreText(view.sums[u])],
    ["rank", rankText(view.ranks[u], view.ranked)],
    ["class", data.labels[view.target]],
  ];
  if (unit.length > 1) rows.push(["sum of", `${unit.length} tokens`]);
  return rows;
}

/** Rows of the CSV export: one per unit shown, a column per class. */
export function csvRows({ model, data, state }) {
  const units = state.view.units;
  const header = ["position", model.get("granularity"), "start_token", ...data.labels];
  const perTarget = data.labels.map((_, t) => unitScores(units, data.scores, t, data.n));
  return [header, ...units.map((unit, u) => [u, textOf(data, unit), unit[0], ...perTarget.map((row) => row[u])])];
}

/** Move aria-selected to the unit of `selected_token` (no repaint). */
export function markSelection({ model, state }) {
  const { view, rendering } = state;
  const selected = unitOfToken(view.units, model.get("selected_token"));
  rendering.span(view.selectedUnit)?.setAttribute("aria-selected", "false");
  rendering.span(selected)?.setAttribute("aria-selected", "true");
  view.selectedUnit = selected;
}

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function draw(ctx, level) {
  const { model, data, parts, state, doc, theme } = ctx;
  if (level >= REREAD) fillTargets(ctx);
  const { root, targetSelect, granularityPick, specialToggle, sharedToggle, encodingSelect, contrastToggle } = parts;
  const { tokensBox, legendSlot, caption, table, tooltip } = parts;
  const target = model.get("selected_target");
  if (!(target >= 0 && target < data.labels.length)) {
    throw new RangeError(`selected_target ${target} is out of range for ${data.labels.length} classes`);
  }
  const granularity = model.get("granularity");
  const showSpecial = Boolean(model.get("show_special_tokens"));
  const units = buildUnits({ granularity, showSpecial, ...data });
  const sums = unitScores(units, data.scores, target, data.n);
  const ranks = ranksByMagnitude(sums);
  const ranked = sums.filter((value) => !Number.isNaN(value)).length;
  const shared = Boolean(model.get("shared_scale"));
  // the colour scale is set by content units only: shown special (template) tokens are greyed, not counted
  const unitSpecial = units.map((unit) => (data.specialMask[unit[0]] !== 0 ? 1 : 0));
  const max = shared
    ? Math.max(
        ...data.labels.map((_, t) => contentMaxMagnitude(unitScores(units, data.scores, t, data.n), unitSpecial)),
      )
    : contentMaxMagnitude(sums, unitSpecial);
  const paint = {
    theme,
    signed: data.signed,
    encoding: model.get("encoding") || "colour",
    boost: Boolean(model.get("high_contrast")),
  };
  const hadFocus = tokensBox.contains(doc.activeElement);
  tooltip.hide();
  const starts = roleStarts(units, data.turnIds, data.specialMask, data.roles);
  const turnOf = (u) => units[u].map((i) => data.turnIds?.[i] ?? -1).find((t) => t >= 0 && t < data.roles.length);
  const roleOf = (u) => (turnOf(u) === undefined ? "" : data.roles[turnOf(u)]);
  const view = {
    units,
    sums,
    ranks,
    ranked,
    target,
    roleOf,
    selectedUnit: unitOfToken(units, model.get("selected_token")),
  };
  state.view = view;
  const label = (u) =>
    `${starts.has(u) ? `${starts.get(u)} turn: ` : ""}${quoteToken(textOf(data, units[u]))}, score ${scoreText(sums[u])}, rank ${rankText(ranks[u], ranked)}`;
  // Spans are made, painted and labelled block by block (see renderTokenRun), so first paint costs one block.
  const build = (u, parent, atBlockStart) => {
    const unit = units[u];
    const first = unit[0];
    let gap = atBlockStart && u > 0 ? data.spaces[first].replace(/^\r?\n/, "") : data.spaces[first];
    if (starts.has(u)) {
      // a chat turn starts: its role's label, on a line of its own (the template's markers are special tokens)
      parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
      gap = gap.replace(/^(\r?\n)+/, "");
    }
    if (gap) parent.append(gap);
    const special = data.specialMask[first] !== 0;
    const joined =
      granularity === "token" &&
      u > 0 &&
      !special &&
      data.spaces[first] === "" &&
      data.wordIds[first] >= 0 &&
      data.wordIds[first] === data.wordIds[units[u - 1][0]];
    const classes = ["iw-token", special && "iw-special", joined && "iw-join", Number.isNaN(sums[u]) && "iw-unseen"];
    const span = h("span", { class: classes.filter(Boolean).join(" "), role: "option", tabindex: -1, "aria-selected": String(u === view.selectedUnit), "aria-label": label(u), "data-unit": u }, displayToken(textOf(data, unit)));
    paintToken(span, sums[u], max, paint);
    parent.append(span);
    return span;
  }; // prettier-ignore
  const breakRank = (u) => {
    if (starts.has(u)) return 2;
    const first = units[u][0];
    const last = units[u - 1].at(-1);
    if (data.spaces[first].includes("\n") || data.tokens[last].endsWith("\n")) return 2;
    return data.sentenceIds[first] !== data.sentenceIds[last] ? 1 : 0;
  };
  state.rendering?.cancel();
  state.tableFill?.cancel();
  state.rendering = renderTokenRun(tokensBox, { count: units.length, build, breakRank, onDone: () => {
    // The screen-reader table lists every unit; off screen with content-visibility: auto, it is never laid out.
    state.tableFill = fillTableIdle(table, {
      caption: `Attribution per ${granularity} for class ${data.labels[target]} (${units.length} ${granularity}s)`,
      header: [granularity, "score", "rank"],
      count: units.length,
      row: (u) => [textOf(data, units[u]), scoreText(sums[u]), rankText(ranks[u], ranked)],
    });
  } }); // prettier-ignore

  targetSelect.value = String(target);
  fillGranularities(ctx, granularity);
  granularityPick.value = granularity;
  specialToggle.checked = showSpecial;
  sharedToggle.checked = shared;
  encodingSelect.value = paint.encoding;
  contrastToggle.checked = paint.boost;
  root.dataset.iwTheme = theme;
  root.classList.toggle("iw-high-contrast", paint.boost);
  const per = granularity === "token" ? "" : ` (sum per ${granularity})`;
  const scaleNote = shared ? ", scale shared by all classes" : "";
  tokensBox.setAttribute(
    "aria-label",
    `${units.length} ${granularity}s coloured by attribution for class ${data.labels[target]}`,
  );
  legendSlot.replaceChildren(
    createLegend(max, theme, `attribution${per}${scaleNote}`, { signed: data.signed, encoding: paint.encoding }),
  );
  const captionParts = [data.method && `method: ${data.method}`, data.meaning && `score: ${data.meaning}`];
  const delta = data.completeness[target];
  if (Number.isFinite(delta)) captionParts.push(`completeness error: ${formatScore(delta, { digits: 3 })}`);
  caption.textContent = captionParts.filter(Boolean).join(" \u00b7 ");

  const focusSpan = state.rendering.ensure(Math.max(0, unitOfToken(units, state.focusToken)));
  focusSpan.tabIndex = 0;
  if (hadFocus) focusSpan.focus();
}
