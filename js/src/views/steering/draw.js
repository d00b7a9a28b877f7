/**
 * Steering view, draw: the scale toggles' state, the dose-response chart (SVG: the metric's mean with a ± spread
 * band, and the damage, against the scale; hidden scales hollow) and the generation columns (the unsteered run,
 * then each shown scale, changed tokens marked). Token text only goes into textContent.
 *
 * @example
 *   draw(ctx, REREAD);
 */
import { h } from "../../lib/dom.js";
import { svgNamespace } from "../../lib/export.js";
import { displayToken, quoteToken } from "../../lib/text.js";
import { REREAD } from "../../lib/view.js";

/** Indices of the scales shown: all but the hidden ones (out-of-range indices ignored). */
export function shownScales(hidden, S) {
  const off = new Set(hidden ?? []);
  return Array.from({ length: S }, (_, k) => k).filter((k) => !off.has(k));
}

/** A scale as short text: "2", "-0.5". */
export const scaleText = (s) => String(Number(s.toPrecision(4)));

/**
 * The geometry of one chart panel: `points` ({k, x, y} per finite value, in scale order), `band` (the polygon of
 * mean ± spread, or "" without a spread) and the value range `[lo, hi]`, for a box {x, y, width, height}.
 */
export function panelGeometry(scales, values, spread, box) {
  const ks = scales.map((_, k) => k).filter((k) => Number.isFinite(values[k]));
  if (ks.length === 0) return { points: [], band: "", lo: NaN, hi: NaN };
  const sd = (k) => (spread && Number.isFinite(spread[k]) ? spread[k] : 0);
  let lo = Math.min(...ks.map((k) => values[k] - sd(k)));
  let hi = Math.max(...ks.map((k) => values[k] + sd(k)));
  if (!(hi > lo)) hi = lo + 1;
  let sLo = Math.min(...scales);
  let sHi = Math.max(...scales);
  if (!(sHi > sLo)) sHi = sLo + 1;
  const xOf = (s) => box.x + ((s - sLo) / (sHi - sLo)) * box.width;
  const yOf = (v) => box.y + (1 - (v - lo) / (hi - lo)) * box.height;
  const order = [...ks].sort((a, b) => scales[a] - scales[b]);
  const points = order.map((k) => ({ k, x: xOf(scales[k]), y: yOf(values[k]) }));
  const band = spread
    ? [...order.map((k) => `${xOf(scales[k]).toFixed(1)},${yOf(values[k] + sd(k)).toFixed(1)}`),
       ...[...order].reverse().map((k) => `${xOf(scales[k]).toFixed(1)},${yOf(values[k] - sd(k)).toFixed(1)}`)].join(" ")
    : ""; // prettier-ignore
  return { points, band, lo, hi };
}

function paintChart(ctx, shown) {
  const { data, parts, doc } = ctx;
  const ns = svgNamespace(doc);
  const add = (parent, tag, attrs, text) => {
    const node = doc.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    parent.append(node);
    return node;
  };
  const W = 300, H = 170, left = 46, top = 22, bottom = 26; // prettier-ignore
  const svg = doc.createElementNS(ns, "svg");
  svg.setAttribute("width", String(2 * W + 20));
  svg.setAttribute("height", String(H));
  svg.setAttribute("class", "iw-steer-chart");
  svg.setAttribute("role", "img");
  const visible = new Set(shown);
  const panels = [
    ["metric", data.metricName ? `${data.metricName} (mean \u00b1 spread)` : "no metric", data.metricMean, data.metricSpread, "iw-steer-metric"],
    ["damage", `damage: KL(unsteered \u2016 steered), ${data.damageTokens} tokens`, data.damage, null, "iw-steer-damage"],
  ]; // prettier-ignore
  const summary = [];
  panels.forEach(([name, title, values, spread, cls], p) => {
    const g = add(svg, "g", { transform: `translate(${p * (W + 20)},0)`, "data-panel": name });
    const box = { x: left, y: top, width: W - left - 10, height: H - top - bottom };
    add(g, "text", { x: 0, y: 12 }, title);
    add(g, "rect", { x: box.x, y: box.y, width: box.width, height: box.height, class: "iw-steer-axis" });
    const geo = panelGeometry(data.scales, values, spread, box);
    if (geo.points.length === 0) {
      add(g, "text", { x: box.x + 8, y: box.y + 20 }, "not computed");
      return;
    }
    add(g, "text", { x: box.x - 4, y: box.y + 8, "text-anchor": "end" }, geo.hi.toPrecision(3));
    add(g, "text", { x: box.x - 4, y: box.y + box.height, "text-anchor": "end" }, geo.lo.toPrecision(3));
    if (geo.band) add(g, "polygon", { points: geo.band, class: "iw-steer-band" });
    add(g, "polyline", {
      points: geo.points.map((pt) => `${pt.x.toFixed(1)},${pt.y.toFixed(1)}`).join(" "),
      class: cls,
    });
    for (const pt of geo.points) {
      const circle = add(g, "circle", { cx: pt.x.toFixed(1), cy: pt.y.toFixed(1), r: 3.5, "data-scale": pt.k, class: visible.has(pt.k) ? "" : "iw-steer-hidden" });
      const sd = spread && Number.isFinite(spread[pt.k]) ? ` \u00b1 ${spread[pt.k].toPrecision(3)}` : "";
      add(circle, "title", {}, `scale ${scaleText(data.scales[pt.k])}: ${values[pt.k].toPrecision(4)}${sd}`);
      add(g, "text", { x: pt.x, y: H - 8, "text-anchor": "middle" }, scaleText(data.scales[pt.k]));
    } // prettier-ignore
    summary.push(`${name} from ${geo.lo.toPrecision(3)} to ${geo.hi.toPrecision(3)}`);
  });
  svg.setAttribute("aria-label", `Dose-response at ${data.layer}: ${summary.join("; ")}`);
  parts.chartBox.replaceChildren(svg);
}

function column(title, tokens, changed, promptTokens) {
  const text = h("div", { class: "iw-steer-text" }, [
    h("span", { class: "iw-steer-prompt" }, promptTokens.join("")),
    ...tokens.map((token, i) => h("span", changed && changed[i] ? { class: "iw-steer-changed", title: `changed: ${quoteToken(token)}` } : {}, displayToken(token))),
  ]); // prettier-ignore
  return h("div", { class: "iw-steer-column", "data-column": title }, [h("h4", {}, title), text]);
}

export function draw(ctx, level) {
  const { model, data, parts, theme } = ctx;
  const { root, toggles, caption } = parts;
  root.dataset.iwTheme = theme;
  if (level >= REREAD) {
    toggles.replaceChildren(
      ...data.scales.map((s, k) => h("button", { type: "button", "data-scale": String(k), "aria-pressed": "true" }, `scale ${scaleText(s)}`)),
    ); // prettier-ignore
  }
  const shown = shownScales(model.get("hidden_scales"), data.S);
  for (const button of toggles.querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(shown.includes(Number(button.dataset.scale))));
  }
  caption.textContent = `Steering at ${data.layer} (${data.positions === "all" ? "prompt and generated tokens" : "generated tokens"} steered) \u00b7 ${data.scaleMeaning} \u00b7 ${shown.length} of ${data.S} scales shown \u00b7 marked: tokens that differ from the unsteered run`; // prettier-ignore
  paintChart(ctx, shown);
  parts.columns.replaceChildren(
    column("unsteered", data.unsteered, null, data.promptTokens),
    ...shown.map((k) => column(`scale ${scaleText(data.scales[k])}`, data.steered[k], data.changed[k], data.promptTokens)),
  ); // prettier-ignore
}
