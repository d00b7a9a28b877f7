/**
 * Numeric legend: a gradient bar labelled −max, 0, +max (signed, diverging) or 0, max (unsigned,
 * sequential), or, for the non-colour encoding, a line explaining underline weight and markers.
 *
 * @example root.append(createLegend(0.82, "light", "attribution"));
 * @example root.append(createLegend(0.5, "dark", "saliency", {signed: false}));
 */
import { legendGradient } from "./colour.js";
import { h } from "./dom.js";
import { formatScore } from "./format.js";

/**
 * @param {number} max  half-width of the scale (largest |score| on display)
 * @param {"light" | "dark"} theme
 * @param {string} title  what the numbers are
 */
export function createLegend(max, theme, title, { signed = true, encoding = "colour" } = {}) {
  const low = signed ? formatScore(-max) : "0";
  const high = formatScore(max, { sign: signed });
  if (encoding === "underline") {
    const text = signed
      ? `${title}: underline weight = |score| up to ${formatScore(max)}; + positive, \u2212 negative`
      : `${title}: underline weight = score from 0 to ${high}`;
    return h("div", { class: "iw-legend iw-legend-text", role: "note" }, text);
  }
  const bar = h("div", { class: "iw-legend-bar", "aria-hidden": "true" });
  bar.style.backgroundImage = legendGradient(theme, signed);
  const labels = h(
    "div",
    { class: "iw-legend-labels" },
    signed ? [h("span", {}, low), h("span", {}, "0"), h("span", {}, high)] : [h("span", {}, low), h("span", {}, high)],
  );
  const label = signed
    ? `${title}: colour scale from ${low} (blue) through 0 to ${high} (orange)`
    : `${title}: colour scale from 0 (pale) to ${high} (orange)`;
  return h("div", { class: "iw-legend", role: "img", "aria-label": label }, [
    h("div", { class: "iw-legend-title" }, title),
    bar,
    labels,
  ]);
}
