/**
 * One tooltip per view, positioned under the element it describes. Opens on hover and on keyboard
 * focus; the described element points at it with `aria-describedby`.
 *
 * @example
 *   const tip = createTooltip(root);
 *   tip.show(span, [["token", "\"hello\""], ["score", "+0.42"]]);
 *   tip.hide();
 */
import { h, uniqueId } from "./dom.js";

/**
 * @param {HTMLElement} container  positioned ancestor (position: relative) the tooltip lives in
 */
export function createTooltip(container) {
  const node = h("div", { class: "iw-tooltip", role: "tooltip", id: uniqueId("iw-tooltip"), hidden: true });
  container.append(node);
  let target = null;

  return {
    node,
    /**
     * @param {HTMLElement} anchor
     * @param {Array<[string, string]>} rows  label/value pairs, rendered as text
     */
    show(anchor, rows) {
      // measure before writing anything: reading the layout after a write would force a synchronous layout
      const box = container.getBoundingClientRect();
      const at = anchor.getBoundingClientRect();
      if (target && target !== anchor) target.removeAttribute("aria-describedby");
      target = anchor;
      node.replaceChildren(
        ...rows.map(([label, value]) =>
          h("div", { class: "iw-tooltip-row" }, [h("span", { class: "iw-tooltip-label" }, label), value]),
        ),
      );
      node.hidden = false;
      anchor.setAttribute("aria-describedby", node.id);
      node.style.left = `${Math.max(0, at.left - box.left)}px`;
      node.style.top = `${at.bottom - box.top + 4}px`;
    },
    hide() {
      if (target) target.removeAttribute("aria-describedby");
      target = null;
      node.hidden = true;
    },
    get target() {
      return target;
    },
  };
}
