/**
 * Token highlighter, build: the DOM skeleton (toolbar, token box, legend, caption, screen-reader table) and the
 * handlers of its controls and tokens (hover, focus, keys, click), which write traits with `ctx.save`.
 *
 * @example
 *   const parts = build(ctx); // {root, tokensBox, targetSelect, ...}, appended to ctx.el
 */
import { granularitySelect } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { createTooltip } from "../../lib/tooltip.js";
import { csvRows, describe, markSelection } from "./draw.js";

const KEY_STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
  const root = h("div", { class: "iw-root iw-token-highlight" });
  const targetSelect = h("select", { class: "iw-target-select" });
  const granularityPick = granularitySelect();
  const specialToggle = h("input", { type: "checkbox", class: "iw-special-toggle" });
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const encodingSelect = h("select", { class: "iw-encoding-select" }, [
    h("option", { value: "colour" }, "colour"),
    h("option", { value: "underline" }, "underline + sign"),
  ]);
  const contrastToggle = h("input", { type: "checkbox", class: "iw-contrast-toggle" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("label", {}, ["Class ", targetSelect]),
    h("label", {}, ["Granularity ", granularityPick]),
    h("label", {}, [specialToggle, " special tokens"]),
    h("label", { title: "One colour scale for all classes instead of one per class" }, [sharedToggle, " shared scale"]),
    h("label", {}, ["Encoding ", encodingSelect]),
    h("label", {}, [contrastToggle, " high contrast"]),
  ]);
  const tokensBox = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal" });
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  const table = h("table");
  const tableBox = h("div", { class: "iw-sr-only iw-sr-table" }, table);
  root.append(toolbar, tokensBox, legendSlot, caption, tableBox);
  el.append(root);
  const tooltip = createTooltip(root);
  state.focusToken = -1; // token index that owns the roving tabindex
  ctx.onCleanup(() => {
    state.rendering?.cancel();
    state.tableFill?.cancel();
  });

  function spanOf(event) {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    return span && tokensBox.contains(span) ? span : null;
  }

  function showTip(span) {
    tooltip.show(span, describe(ctx, Number(span.dataset.unit)));
  }

  function focusUnit(u) {
    const { view, rendering } = state;
    const next = rendering.ensure(Math.min(Math.max(u, 0), view.units.length - 1));
    for (const span of tokensBox.querySelectorAll('.iw-token[tabindex="0"]')) span.tabIndex = -1;
    next.tabIndex = 0;
    state.focusToken = view.units[Number(next.dataset.unit)][0];
    next.focus();
  }

  function toggleSelection(u) {
    const unit = state.view.units[u];
    save({ selected_token: unit.includes(model.get("selected_token")) ? -1 : unit[0] });
  }

  const onKeyDown = safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const u = Number(span.dataset.unit);
    if (event.key in KEY_STEPS) focusUnit(u + KEY_STEPS[event.key]);
    else if (event.key === "Home") focusUnit(0);
    else if (event.key === "End") focusUnit(state.view.units.length - 1);
    else if (event.key === "Enter" || event.key === " ") toggleSelection(u);
    else if (event.key === "Escape") tooltip.hide();
    else return;
    event.preventDefault();
  });
  const onMouseOver = safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    showTip(span);
    save({ hovered_token: state.view.units[Number(span.dataset.unit)][0] });
  });
  const onMouseLeave = safely(() => {
    tooltip.hide();
    save({ hovered_token: -1 });
  });
  const onFocusIn = safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    state.focusToken = state.view.units[Number(span.dataset.unit)][0];
    showTip(span);
  });
  const onFocusOut = safely((event) => {
    if (!tokensBox.contains(event.relatedTarget)) tooltip.hide();
  });
  const onClick = safely((event) => {
    const span = spanOf(event);
    if (span) toggleSelection(Number(span.dataset.unit));
  });
  const tokenHandlers = {
    keydown: onKeyDown,
    mouseover: onMouseOver,
    mouseleave: onMouseLeave,
    focusin: onFocusIn,
    focusout: onFocusOut,
    click: onClick,
  };
  for (const [type, handler] of Object.entries(tokenHandlers)) tokensBox.addEventListener(type, handler);
  /** A control's change writes its trait (`write` saves it). */
  const onChange = (control, write) => control.addEventListener("change", safely(write));
  onChange(targetSelect, () => save({ selected_target: Number(targetSelect.value) }));
  onChange(granularityPick, () => save({ granularity: granularityPick.value }));
  onChange(specialToggle, () => save({ show_special_tokens: specialToggle.checked }));
  onChange(sharedToggle, () => save({ shared_scale: sharedToggle.checked }));
  onChange(encodingSelect, () => save({ encoding: encodingSelect.value }));
  onChange(contrastToggle, () => save({ high_contrast: contrastToggle.checked }));
  toolbar.append(
    createExportMenu({
      name: "token-attribution",
      root,
      rows: () => csvRows(ctx),
      prepare: () => state.rendering.finish(),
      title: () => `${ctx.data.method || "attribution"}: class ${ctx.data.labels[state.view.target]}`,
      reportError,
    }),
  );
  // a selection moves aria-selected only (no repaint)
  ctx.listen("change:selected_token", () => state.view && markSelection(ctx));

  return {
    root,
    targetSelect,
    granularityPick,
    specialToggle,
    sharedToggle,
    encodingSelect,
    contrastToggle,
    tokensBox,
    legendSlot,
    caption,
    table,
    tooltip,
  };
}
