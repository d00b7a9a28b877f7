/**
 * Symmetric diverging colour scale (blue = negative, orange = positive), colour-blind safe, centred on
 * zero. `max` (the largest |score| on display) maps to the strongest colour. Each theme has its own
 * neutral midpoint so near-zero tokens blend into light and dark backgrounds; the text colour is chosen
 * per token for the higher WCAG contrast.
 *
 * The light palette is mirrored in interp_widgets/widgets/_colour.py for the static HTML fallback.
 *
 * @example
 *   const {background, color} = scoreColours(0.4, 0.8, "light");
 *   span.style.backgroundColor = background;
 */

/** Stops at t = 0, 0.5, 1 for each sign, as [r, g, b]. */
export const PALETTES = {
  light: {
    mid: [247, 247, 247],
    negative: [
      [146, 197, 222],
      [33, 102, 172],
    ],
    positive: [
      [253, 184, 99],
      [230, 97, 1],
    ],
  },
  dark: {
    mid: [52, 52, 52],
    negative: [
      [33, 92, 150],
      [86, 164, 222],
    ],
    positive: [
      [150, 72, 8],
      [245, 146, 44],
    ],
  },
};

const DARK_TEXT = [0, 0, 0];
const LIGHT_TEXT = [255, 255, 255];

/** @param {number[]} rgb */
export function rgbString(rgb) {
  return `rgb(${rgb[0]}, ${rgb[1]}, ${rgb[2]})`;
}

function mix(a, b, t) {
  return a.map((v, i) => Math.round(v + (b[i] - v) * t));
}

/** WCAG relative luminance of an sRGB colour. */
export function luminance(rgb) {
  const [r, g, b] = rgb.map((v) => {
    const c = v / 255;
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** WCAG contrast ratio between two colours. */
export function contrast(a, b) {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

/**
 * Background colour for `score` on a symmetric scale of half-width `max` or, when `signed` is false
 * (magnitudes such as a gradient norm), on the sequential neutral → orange scale from 0 to `max`.
 * `boost` (high-contrast mode) lifts small magnitudes (t → √t) so they stand out from the background.
 * @param {number} score
 * @param {number} max  largest |score| on display; 0 gives the neutral colour
 * @param {"light" | "dark"} theme
 * @param {{signed?: boolean, boost?: boolean}} [options]
 * @returns {number[]} [r, g, b]
 */
export function scoreRgb(score, max, theme = "light", { signed = true, boost = false } = {}) {
  const palette = PALETTES[theme];
  if (!signed) score = Math.max(score, 0);
  let t = max > 0 ? Math.min(Math.abs(score) / max, 1) : 0;
  if (boost) t = Math.sqrt(t);
  const [half, full] = score < 0 ? palette.negative : palette.positive;
  return t <= 0.5 ? mix(palette.mid, half, t * 2) : mix(half, full, (t - 0.5) * 2);
}

/** Dark or light text, whichever contrasts more with `background`. */
export function textRgbFor(background) {
  return contrast(background, DARK_TEXT) >= contrast(background, LIGHT_TEXT) ? DARK_TEXT : LIGHT_TEXT;
}

/**
 * CSS colours (background and text) for one score.
 * @returns {{background: string, color: string}}
 */
export function scoreColours(score, max, theme = "light", options = {}) {
  const background = scoreRgb(score, max, theme, options);
  // A scale has a few hundred distinct 8-bit colours: their strings and text colour are made once (a hover
  // recolours hundreds of tokens). Keyed by the exact RGB, so a hit is the same answer.
  const key = (background[0] << 16) | (background[1] << 8) | background[2];
  let colours = COLOURS.get(key);
  if (colours === undefined) {
    if (COLOURS.size >= COLOURS_KEPT) COLOURS.clear();
    colours = Object.freeze({ background: rgbString(background), color: rgbString(textRgbFor(background)) });
    COLOURS.set(key, colours);
  }
  return colours;
}
const COLOURS = new Map();
const COLOURS_KEPT = 4096;

/** CSS linear-gradient from −max to +max (signed) or from 0 to max (unsigned), for legends. */
export function legendGradient(theme = "light", signed = true) {
  const p = PALETTES[theme];
  const positive = [p.mid, p.positive[0], p.positive[1]];
  const stops = signed ? [p.negative[1], p.negative[0], ...positive] : positive;
  return `linear-gradient(to right, ${stops.map(rgbString).join(", ")})`;
}
