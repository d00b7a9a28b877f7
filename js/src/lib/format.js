/**
 * Number formatting shared by tooltips, legends and ARIA labels.
 *
 * @example formatScore(-0.000123) // "−0.000123"
 * @example formatScore(0.5, {sign: true}) // "+0.5"
 */

const MINUS = "\u2212";

/**
 * Format a score with `digits` significant digits, a real minus sign and an optional "+".
 * @param {number} value
 * @param {{digits?: number, sign?: boolean}} [options]
 * @returns {string}
 */
export function formatScore(value, { digits = 3, sign = false } = {}) {
  if (!Number.isFinite(value)) return String(value);
  if (value === 0) return "0";
  const magnitude = Math.abs(value);
  const body =
    magnitude >= 1e-3 && magnitude < 1e5
      ? String(Number(magnitude.toPrecision(digits)))
      : magnitude.toExponential(digits - 1).replace(/\.?0+e/, "e");
  if (value < 0) return MINUS + body;
  return sign ? `+${body}` : body;
}

/**
 * Format a probability in [0, 1] as a percentage.
 * @param {number} p
 * @returns {string}
 * @example formatProbability(0.9312) // "93.1%"
 */
export function formatProbability(p) {
  return `${(100 * p).toFixed(1)}%`;
}
