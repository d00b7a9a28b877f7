/**
 * Tiny DOM builder. Text is only ever assigned through `textContent` and attributes through
 * `setAttribute`, so untrusted strings (token text, labels) are never parsed as HTML.
 *
 * @example
 *   h("span", {class: "iw-token", "aria-label": label}, tokenText)
 */

/**
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined>} [attrs]
 * @param {string | Node | Array<string | Node>} [children]
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of Array.isArray(children) ? children : [children]) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

let counter = 0;

/** A document-unique id with the given prefix (ids must not clash between views). */
export function uniqueId(prefix) {
  counter += 1;
  return `${prefix}-${counter}`;
}
