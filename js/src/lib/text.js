/**
 * Presentation of untrusted token text. Nothing here produces HTML: results go into textContent.
 *
 * @example displayToken("\n") // "↵"
 * @example quoteToken("a\"b") // "\"a\\\"b\""
 */

const WHITESPACE_MARKERS = { " ": "\u00b7", "\n": "\u21b5", "\r": "\u240d", "\t": "\u2192" };

/**
 * Text to draw for a token: whitespace-only tokens get visible markers (a newline keeps its line
 * break after the marker), an empty token shows "∅".
 * @param {string} text
 * @returns {string}
 */
export function displayToken(text) {
  if (text === "") return "\u2205";
  if (text.trim() !== "") return text;
  return Array.from(text, (ch) => (ch === "\n" ? "\u21b5\n" : (WHITESPACE_MARKERS[ch] ?? "\u00b7"))).join("");
}

/** The token as a quoted string literal with escapes, for tooltips and ARIA labels. */
export function quoteToken(text) {
  return JSON.stringify(text);
}
