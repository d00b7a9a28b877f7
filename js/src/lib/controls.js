/**
 * Toolbar controls and list plumbing shared by the views: the granularity selector, a pager, paging
 * arithmetic, index sorting and simple tables. All text goes in through the DOM (never parsed as HTML).
 *
 * @example
 *   const pager = createPager();
 *   toolbar.append(pager.element);
 *   const { page, pages, items } = pageOf(order, model.get("page"), 10);
 *   pager.update(page, pages, `${order.length} examples`);
 */
import { h } from "./dom.js";
import { idleLoop } from "./paint.js";

export const GRANULARITIES = ["token", "word", "sentence"];

/** `<select>` of token / word / sentence (class iw-granularity-select). */
export function granularitySelect() {
  return h(
    "select",
    { class: "iw-granularity-select" },
    GRANULARITIES.map((g) => h("option", { value: g }, g)),
  );
}

/**
 * Previous / next buttons around a live "page i of n" label.
 * @returns {{element: HTMLElement, prev: HTMLButtonElement, next: HTMLButtonElement,
 *            update: (page: number, pages: number, note: string) => void}}
 */
export function createPager() {
  const prev = h("button", { type: "button", class: "iw-button iw-prev", "aria-label": "Previous page" }, "\u2039");
  const next = h("button", { type: "button", class: "iw-button iw-next", "aria-label": "Next page" }, "\u203a");
  const label = h("span", { class: "iw-page-label", "aria-live": "polite" });
  return {
    element: h("span", { class: "iw-pager" }, [prev, label, next]),
    prev,
    next,
    update(page, pages, note) {
      prev.disabled = page <= 0;
      next.disabled = page >= pages - 1;
      label.textContent = ` page ${page + 1} of ${pages} (${note}) `;
    },
  };
}

/**
 * The page of `order` to show: `page` clamped to the pages there are (at least one).
 * @template T
 * @param {T[]} order
 * @returns {{page: number, pages: number, items: T[]}}
 * @example pageOf([5, 6, 7], 9, 2) // {page: 1, pages: 2, items: [7]}
 */
export function pageOf(order, page, pageSize) {
  const size = Math.max(1, pageSize ?? 10);
  const pages = Math.max(1, Math.ceil(order.length / size));
  const shown = Math.min(Math.max(page ?? 0, 0), pages - 1);
  return { page: shown, pages, items: order.slice(shown * size, (shown + 1) * size) };
}

/** Rank of each distinct label in sorted order (a numeric sort key for labels). */
export function labelRanks(labels) {
  return new Map([...new Set(labels)].sort().map((label, r) => [label, r]));
}

/**
 * Sort indices by `key(i)` (descending if asked); NaN keys go last, ties keep index order. Sorts in place.
 * @param {number[]} indices
 * @param {(i: number) => number} key
 * @example sortIndices([0, 1, 2], (i) => [2, NaN, 1][i], false) // [2, 0, 1]
 */
export function sortIndices(indices, key, descending) {
  const sign = descending ? -1 : 1;
  return indices.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    if (Number.isNaN(x) !== Number.isNaN(y)) return Number.isNaN(x) ? 1 : -1;
    return (Number.isNaN(x) || x === y ? 0 : sign * (x < y ? -1 : 1)) || a - b;
  });
}

/**
 * A table with a header row and text cells.
 * @param {string[]} header
 * @param {Array<Array<string | number>>} rows
 * @param {{caption?: string, class?: string}} [options]
 */
export function textTable(header, rows, { caption, class: className = "iw-table" } = {}) {
  return h("table", { class: className }, [
    ...(caption ? [h("caption", {}, caption)] : []),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        header.map((text) => h("th", { scope: "col" }, String(text))),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {},
          row.map((text) => h("td", {}, String(text))),
        ),
      ),
    ),
  ]);
}

/**
 * Fill `table` with a caption, a header and `count` rows of text cells (`row(k)`), the rows in idle time
 * (a token view's screen-reader table can have 10k rows). Returns the loop; cancel it before refilling.
 * @param {HTMLTableElement} table
 * @param {{caption: string, header: string[], count: number, row: (k: number) => Array<string | number>}} options
 * @returns {{cancel: () => void}}
 */
export function fillTableIdle(table, { caption, header, count, row }) {
  const doc = table.ownerDocument;
  const body = h("tbody");
  table.replaceChildren(
    h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        header.map((text) => h("th", { scope: "col" }, text)),
      ),
    ),
    body,
  );
  let k = 0;
  return idleLoop(doc.defaultView, (budget) => {
    const fragment = doc.createDocumentFragment();
    for (const end = Math.min(count, k + 250); k < end || (k < count && budget() > 4); k += 1) {
      fragment.append(
        h(
          "tr",
          {},
          row(k).map((text) => h("td", {}, String(text))),
        ),
      );
    }
    body.append(fragment);
    return k < count;
  });
}
