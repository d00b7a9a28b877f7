/**
 * Method comparison, draw: one token row per method, the legends and the agreement table, from the read state
 * and the UI traits. Keeps `ctx.state.view` ({units, sums (per method), runs (token run per method), granularity,
 * linked (unit)}) for the handlers of build.js.
 *
 * @example
 *   draw(ctx, REDRAW);
 */
import { buildUnits, maxMagnitude, roleStarts, unitScores, unitText } from "../../lib/aggregate.js";
import { GRANULARITIES, textTable } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { formatScore } from "../../lib/format.js";
import { createLegend } from "../../lib/legend.js";
import { paintToken, renderTokenRun } from "../../lib/paint.js";
import { displayToken, quoteToken } from "../../lib/text.js";

const numberText = (value, digits = 3) => (value === null || value === undefined ? "n/a" : value.toFixed(digits));

export const scoreText = (data, m, value) =>
  Number.isNaN(value) ? "not seen" : formatScore(value, { digits: 4, sign: data.signed[m] });
export const textOf = (data, unit) => unitText(unit, data.tokens, data.spaces);

/** Outline, in every row, the unit holding token `index` (-1: none). */
export function linkHover({ state }, index) {
  const { view } = state;
  const u = index < 0 ? -1 : view.units.findIndex((unit) => unit.includes(index));
  if (u === view.linked) return;
  for (const run of view.runs) {
    run.span(view.linked)?.classList.remove("iw-linked");
    run.span(u)?.classList.add("iw-linked");
  }
  view.linked = u;
}

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function draw(ctx) {
  const { model, data, parts, state, theme } = ctx;
  const { root, sharedToggle, granularity, heading, rowsBox, agreementBox } = parts;
  const shared = Boolean(model.get("shared_scale"));
  const encoding = model.get("encoding") || "colour";
  const boost = Boolean(model.get("high_contrast"));
  const chosen = model.get("granularity") || "token";
  const units = buildUnits({ granularity: chosen, showSpecial: false, ...data });
  // a chat conversation: each turn's first unit is preceded by its role's label, in every method's row
  const starts = roleStarts(units, data.turnIds, data.specialMask, data.roles);
  const roleNote = (u) => (starts.has(u) ? `${starts.get(u)} turn: ` : "");
  const sums = data.methods.map((_, m) => unitScores(units, data.scores, m, data.n));
  const sharedMax = Math.max(...sums.map(maxMagnitude));
  root.dataset.iwTheme = theme;
  root.classList.toggle("iw-high-contrast", boost);
  sharedToggle.checked = shared;
  const choices = data.roles.length || chosen === "turn" ? [...GRANULARITIES, "turn"] : GRANULARITIES;
  if (granularity.options.length !== choices.length)
    granularity.replaceChildren(...choices.map((g) => h("option", { value: g }, g)));
  granularity.value = chosen;
  const per = chosen === "token" ? "" : ` \u00b7 sum per ${chosen}`;
  heading.textContent = `${data.methods.length} methods explaining ${quoteToken(model.get("target_label") ?? "")}${shared ? " \u00b7 shared scale" : " \u00b7 scale per method"}${per}`;
  for (const run of state.view?.runs ?? []) run.cancel();
  const view = { units, sums, runs: [], granularity: chosen, linked: -1 };
  state.view = view;
  rowsBox.replaceChildren(
    ...data.methods.map((method, m) => {
      const max = shared ? sharedMax : maxMagnitude(sums[m]);
      const box = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal", "aria-label": `${method}: ${chosen}s coloured by attribution`, "data-method": m });
      // Long inputs are drawn block by block (see renderTokenRun); spans are made as their block is built.
      const build = (u, parent, atBlockStart) => {
        const unit = units[u];
        let gap = atBlockStart ? data.spaces[unit[0]].replace(/^\r?\n/, "") : data.spaces[unit[0]];
        if (starts.has(u)) {
          // a chat turn starts: its role's label on a line of its own (the template's markers are hidden)
          parent.append(h("span", { class: "iw-role", "aria-hidden": "true" }, starts.get(u)));
          gap = gap.replace(/^(\r?\n)+/, "");
        }
        if (u > 0 && gap) parent.append(gap);
        const text = textOf(data, unit);
        const span = h("span", { class: u === view.linked ? "iw-token iw-linked" : "iw-token", role: "option", tabindex: m === 0 && u === 0 ? 0 : -1, "data-unit": u, "data-index": unit[0], "aria-label": `${roleNote(u)}${quoteToken(text)}, ${method} score ${scoreText(data, m, sums[m][u])}` }, displayToken(text));
        paintToken(span, sums[m][u], max, { theme, signed: data.signed[m], encoding, boost });
        parent.append(span);
        return span;
      };
      view.runs.push(renderTokenRun(box, { count: units.length, build, breakRank: (u) => (starts.has(u) ? 2 : 0) }));
      return h("div", { class: "iw-method-row" }, [
        h("div", { class: "iw-method-name" }, method),
        box,
        createLegend(max, theme, chosen === "token" ? method : `${method} (sum per ${chosen})`, { signed: data.signed[m], encoding }),
      ]);
    }),
  ); // prettier-ignore
  const rows = model.get("agreements")?.[chosen] ?? [];
  const k = rows[0]?.k;
  agreementBox.replaceChildren(
    textTable(
      ["method A", "method B", "Spearman \u03c1", `top-${k ?? "k"} overlap`],
      rows.map((r) => [r.a, r.b, numberText(r.spearman), numberText(r.top_k_overlap, 2)]),
      { caption: `Pairwise agreement over ${chosen}s (${model.get("agreement_by") || "magnitude"} ranks)` },
    ),
  );
  linkHover(ctx, model.get("hovered_token"));
}
