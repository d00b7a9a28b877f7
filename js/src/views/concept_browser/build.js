/**
 * Concept browser, build: the toolbar (search, sort, dead filter, label-score filter, pager), the concept list and the detail pane,
 * and their handlers (a search / sort / filter change goes back to page 0; click, Enter or the arrows select a
 * concept; a token of the input text selects it; hover shows a token's value).
 *
 * @example
 *   const parts = build(ctx);
 */
import { createPager } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { formatScore } from "../../lib/format.js";
import { quoteToken } from "../../lib/text.js";
import { createTooltip } from "../../lib/tooltip.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save } = ctx;
  const root = h("div", { class: "iw-root iw-concepts" });
  const searchBox = h("input", {
    type: "search",
    class: "iw-concept-search",
    placeholder: "label or token",
    "aria-label": "Search concepts by label or top token",
  });
  const sortSelect = h("select", { class: "iw-sort-select" });
  const orderToggle = h("input", { type: "checkbox", class: "iw-descending-toggle" });
  const deadToggle = h("input", { type: "checkbox", class: "iw-dead-toggle" });
  const scoreFilter = h("input", {
    type: "number",
    class: "iw-score-filter",
    min: 0,
    max: 1,
    step: 0.05,
    "aria-label": "Keep labels whose detection and fuzzing scores are both at least this (0: all)",
  });
  const scoreLabel = h("label", { class: "iw-score-filter-label" }, ["label scores \u2265 ", scoreFilter]);
  const pager = createPager();
  const { prev, next } = pager;
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Search ", searchBox]),
    h("label", {}, ["Sort ", sortSelect]),
    h("label", {}, [orderToggle, " descending"]),
    h("label", {}, [deadToggle, " hide dead"]),
    scoreLabel,
    pager.element,
  ]);
  const list = h("ol", { class: "iw-concept-list", role: "listbox", "aria-label": "Concepts" });
  const detail = h("section", { class: "iw-concept-detail", "aria-live": "polite" });
  const summary = h("div", { class: "iw-caption iw-concept-summary" });
  root.append(summary, toolbar, h("div", { class: "iw-concept-panes" }, [list, detail]));
  el.append(root);
  const tooltip = createTooltip(root);
  Object.assign(state, { busyTimer: null, focusAfterDraw: null, impMax: null });
  ctx.onCleanup(() => clearTimeout(state.busyTimer));

  const resetPage = (changes) => save({ ...changes, page: 0 });
  searchBox.addEventListener(
    "input",
    safely(() => resetPage({ search: searchBox.value })),
  );
  sortSelect.addEventListener(
    "change",
    safely(() => resetPage({ sort_by: sortSelect.value })),
  );
  orderToggle.addEventListener(
    "change",
    safely(() => resetPage({ descending: orderToggle.checked })),
  );
  deadToggle.addEventListener(
    "change",
    safely(() => resetPage({ hide_dead: deadToggle.checked })),
  );
  scoreFilter.addEventListener(
    "change",
    safely(() => {
      const value = Number(scoreFilter.value);
      resetPage({ min_label_score: Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0 });
    }),
  );
  prev.addEventListener(
    "click",
    safely(() => save({ page: Math.max(0, model.get("page") - 1) })),
  );
  next.addEventListener(
    "click",
    safely(() => save({ page: model.get("page") + 1 })),
  );
  const closest = (event, selector) => (event.target instanceof Element ? event.target.closest(selector) : null);
  const select = (c) => save({ selected_concept: c, selected_token: -1 });
  list.addEventListener("click", safely((event) => {
    const item = closest(event, ".iw-concept");
    if (item) select(Number(item.dataset.concept));
  })); // prettier-ignore
  list.addEventListener("keydown", safely((event) => {
    const item = closest(event, ".iw-concept");
    if (!item) return;
    const move = { ArrowDown: item.nextElementSibling, ArrowUp: item.previousElementSibling, Home: list.firstElementChild, End: list.lastElementChild }[event.key];
    if (event.key === "Enter" || event.key === " ") select(Number(item.dataset.concept));
    else if (move !== undefined) {
      if (move?.dataset.concept !== undefined) {
        state.focusAfterDraw = Number(move.dataset.concept);
        select(state.focusAfterDraw);
      }
    } else if (event.key === "PageDown" && !next.disabled) next.click();
    else if (event.key === "PageUp" && !prev.disabled) prev.click();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  detail.addEventListener("click", safely((event) => {
    const token = closest(event, ".iw-text-token");
    if (token) save({ selected_token: Number(token.dataset.token) });
    const goto = closest(event, ".iw-goto-concept");
    if (goto) select(Number(goto.dataset.concept));
  })); // prettier-ignore
  detail.addEventListener("keydown", safely((event) => {
    const token = closest(event, ".iw-text-token");
    if (!token || (event.key !== "Enter" && event.key !== " ")) return;
    save({ selected_token: Number(token.dataset.token) });
    event.preventDefault();
  })); // prettier-ignore
  const describe = safely((event) => {
    const span = closest(event, ".iw-token");
    if (!span || span === tooltip.target) return;
    const value = span.dataset.value !== undefined ? Number(span.dataset.value) : null;
    tooltip.show(span, [
      ["token", quoteToken(span.textContent)],
      ...(value === null ? [] : [[span.dataset.kind ?? "activation", formatScore(value, { digits: 6 })]]),
    ]);
  });
  detail.addEventListener("mouseover", describe);
  detail.addEventListener("focusin", describe);
  detail.addEventListener("mouseleave", () => tooltip.hide());
  return {
    root,
    summary,
    searchBox,
    sortSelect,
    orderToggle,
    deadToggle,
    scoreFilter,
    scoreLabel,
    pager,
    list,
    detail,
  };
}
