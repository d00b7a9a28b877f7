/**
 * Numeric legend for the symmetric diverging scale: a gradient bar labelled −max, 0, +max.
 *
 * @example root.append(createLegend(0.82, "light", "attribution"));
 */
import { legendGradient } from "./colour.js";
import { h } from "./dom.js";
import { formatScore } from "./format.js";

/**
 * @param {number} max  half-width of the scale (largest |score| on display)
 * @param {"light" | "dark"} theme
 * @param {string} title  what the numbers are
 */
export function createLegend(max, theme, title) {
  const bar = h("div", { class: "iw-legend-bar", "aria-hidden": "true" });
  bar.style.backgroundImage = legendGradient(theme);
  const labels = h("div", { class: "iw-legend-labels" }, [
    h("span", {}, formatScore(-max)),
    h("span", {}, "0"),
    h("span", {}, formatScore(max, { sign: true })),
  ]);
  return h(
    "div",
    {
      class: "iw-legend",
      role: "img",
      "aria-label": `${title}: colour scale from ${formatScore(-max)} (blue) through 0 to ${formatScore(max, { sign: true })} (orange)`,
    },
    [h("div", { class: "iw-legend-title" }, title), bar, labels],
  );
}
