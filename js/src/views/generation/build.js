/**
 * Generation attribution, build: the toolbar (view, granularity, shared scale), the pairs box, the token box, the
 * heatmap canvas, legend, caption and screen-reader table, and their handlers (hovering a generated token previews
 * the colours of its sources, a click selects it; arrows move between tokens, or between heatmap rows).
 *
 * @example
 *   const parts = build(ctx);
 */
import { granularitySelect } from "../../lib/controls.js";
import { h } from "../../lib/dom.js";
import { createExportMenu } from "../../lib/export.js";
import { quoteToken } from "../../lib/text.js";
import { createTooltip } from "../../lib/tooltip.js";
import { colour, contrastive, foilProbText, heatmapCell, probText, row, scoreText } from "./draw.js";

const KEY_STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, state, safely, save, reportError } = ctx;
  const root = h("div", { class: "iw-root iw-generation" });
  const viewButtons = ["text", "heatmap"].map((v) =>
    h(
      "button",
      { type: "button", class: "iw-button", "data-view": v, "aria-pressed": "false" },
      v === "text" ? "Tokens" : "Heatmap",
    ),
  );
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const granularityPick = granularitySelect();
  const toolbar = h("div", { class: "iw-toolbar" }, [
    h("span", { role: "group", "aria-label": "View" }, viewButtons),
    h("label", {}, ["Granularity ", granularityPick]),
    h("label", { title: "One colour scale for all generated tokens instead of one per token" }, [
      sharedToggle,
      " shared scale",
    ]),
  ]);
  const status = h("div", { class: "iw-generation-status", "aria-live": "polite" });
  const pairsBox = h("div", { class: "iw-contrast", role: "group", "aria-label": "Generated tokens and their foils" });
  const tokensBox = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal" });
  const canvas = h("canvas", { class: "iw-heatmap", role: "img", tabindex: 0 });
  const heatmapBox = h("div", { class: "iw-heatmap-box" }, canvas);
  const legendSlot = h("div", { class: "iw-legend-slot" });
  const caption = h("div", { class: "iw-caption" });
  const table = h("table");
  const tableBox = h("div", { class: "iw-sr-only iw-sr-table" }, table);
  root.append(toolbar, status, pairsBox, tokensBox, heatmapBox, legendSlot, caption, tableBox);
  el.append(root);
  const tooltip = createTooltip(root);
  Object.assign(state, {
    visible: [],
    shown: null,
    shownStep: 0,
    focusIndex: -1,
    rendering: null,
    tableFill: null,
    layout: null,
    rankCache: new Map(), // granularity:step -> {ranks, ranked}
  });
  ctx.onCleanup(() => {
    state.rendering?.cancel();
    state.tableFill?.cancel();
  });

  const spanOf = (event) => {
    const span = event.target instanceof Element ? event.target.closest(".iw-token") : null;
    return span && tokensBox.contains(span) ? span : null;
  };
  const describe = (i, about = state.shownStep) => {
    const rows = [["token", quoteToken(ctx.data.tokens[i])]];
    const step = ctx.data.stepAt[i];
    if (step >= 0) rows.push(["probability", probText(ctx.data, step)]);
    if (step >= 0 && contrastive(ctx.data))
      rows.push(["foil", `${quoteToken(ctx.data.foils[step])} (p = ${foilProbText(ctx.data, step)})`]);
    const versus = contrastive(ctx.data) ? ` vs ${quoteToken(ctx.data.foils[about])}` : "";
    rows.push([
      `→ ${quoteToken(ctx.data.tokens[ctx.data.steps[about]])}${versus}`,
      scoreText(ctx.data, row(ctx, about)[i]),
    ]);
    return rows;
  };
  const activate = (i) => {
    const step = ctx.data.stepAt[i];
    if (step >= 0) save({ selected_step: step });
    else save({ selected_token: model.get("selected_token") === i ? -1 : i });
  };
  const focusAt = (position) => {
    const next = state.rendering.ensure(Math.min(Math.max(position, 0), state.visible.length - 1));
    for (const span of tokensBox.querySelectorAll('.iw-token[tabindex="0"]')) span.tabIndex = -1;
    next.tabIndex = 0;
    state.focusIndex = Number(next.dataset.index);
    next.focus();
  };
  tokensBox.addEventListener("keydown", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const position = Number(span.dataset.unit);
    if (event.key in KEY_STEPS) focusAt(position + KEY_STEPS[event.key]);
    else if (event.key === "Home") focusAt(0);
    else if (event.key === "End") focusAt(Infinity);
    else if (event.key === "Enter" || event.key === " ") activate(Number(span.dataset.index));
    else if (event.key === "Escape") tooltip.hide();
    else return;
    event.preventDefault();
  })); // prettier-ignore
  tokensBox.addEventListener("mouseover", safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    const i = Number(span.dataset.index);
    const step = ctx.data.stepAt[i];
    // the tooltip measures the layout first, while it is clean; restyling after it forces no synchronous layout
    tooltip.show(span, describe(i, step >= 0 ? step : state.shownStep));
    if (step >= 0 && step !== state.shownStep) colour(ctx, step); // preview this generated token's sources
    save({ hovered_token: i });
  })); // prettier-ignore
  tokensBox.addEventListener("mouseleave", safely(() => {
    tooltip.hide();
    if (state.shownStep !== model.get("selected_step")) colour(ctx, model.get("selected_step"));
    save({ hovered_token: -1 });
  })); // prettier-ignore
  tokensBox.addEventListener("focusin", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    state.focusIndex = Number(span.dataset.index);
    tooltip.show(span, describe(state.focusIndex));
  })); // prettier-ignore
  tokensBox.addEventListener("focusout", safely((event) => {
    if (!tokensBox.contains(event.relatedTarget)) tooltip.hide();
  })); // prettier-ignore
  tokensBox.addEventListener("click", safely((event) => {
    const span = spanOf(event);
    if (span) activate(Number(span.dataset.index));
  })); // prettier-ignore
  const cellFromEvent = (event) => {
    const box = canvas.getBoundingClientRect();
    const scaleX = box.width ? canvas.width / box.width : 1;
    const scaleY = box.height ? canvas.height / box.height : 1;
    return (
      state.layout && heatmapCell((event.clientX - box.left) * scaleX, (event.clientY - box.top) * scaleY, state.layout)
    );
  };
  canvas.addEventListener("mousemove", safely((event) => {
    const cell = cellFromEvent(event);
    if (!cell) return tooltip.hide();
    const target = ctx.data.tokens[ctx.data.steps[cell.step]];
    tooltip.show(canvas, [
      ["source", `${quoteToken(ctx.data.tokens[cell.token])} (#${cell.token})`],
      ["generated", `${quoteToken(target)} (p = ${probText(ctx.data, cell.step)})`],
      ...(contrastive(ctx.data) ? [["foil", `${quoteToken(ctx.data.foils[cell.step])} (p = ${foilProbText(ctx.data, cell.step)})`]] : []),
      ["score", scoreText(ctx.data, row(ctx, cell.step)[cell.token])],
    ]);
    canvas.dataset.hoverStep = String(cell.step);
    canvas.dataset.hoverToken = String(cell.token);
  })); // prettier-ignore
  canvas.addEventListener("mouseleave", () => tooltip.hide());
  canvas.addEventListener("click", safely((event) => {
    const cell = cellFromEvent(event);
    if (cell) save({ selected_step: cell.step });
  })); // prettier-ignore
  canvas.addEventListener("keydown", safely((event) => {
    const step = model.get("selected_step") + ({ ArrowDown: 1, ArrowUp: -1 }[event.key] ?? 0);
    if (step === model.get("selected_step") || step < 0 || step >= ctx.data.steps.length) return;
    save({ selected_step: step });
    event.preventDefault();
  })); // prettier-ignore
  viewButtons.forEach((b) =>
    b.addEventListener(
      "click",
      safely(() => save({ view: b.dataset.view })),
    ),
  );
  pairsBox.addEventListener("click", safely((event) => {
    const chip = event.target instanceof Element ? event.target.closest(".iw-pair") : null;
    if (chip) save({ selected_step: Number(chip.dataset.step) });
  })); // prettier-ignore
  sharedToggle.addEventListener(
    "change",
    safely(() => save({ shared_scale: sharedToggle.checked })),
  );
  granularityPick.addEventListener(
    "change",
    safely(() => save({ granularity: granularityPick.value })),
  );
  const csvRows = () => {
    const foil = (s) => (contrastive(ctx.data) ? [ctx.data.foils[s], ctx.data.foilProbs[s] ?? ""] : []);
    return [
      [
        "generated_step",
        "generated_token",
        "probability",
        ...(contrastive(ctx.data) ? ["foil", "foil_probability"] : []),
        ...ctx.data.tokens.map((t, i) => `${i}:${t}`),
      ],
      ...ctx.data.steps.map((index, s) => [
        s,
        ctx.data.tokens[index],
        ctx.data.probs[s] ?? "",
        ...foil(s),
        ...row(ctx, s),
      ]),
    ];
  };
  toolbar.append(
    createExportMenu({
      name: "generation-attribution",
      root,
      rows: csvRows,
      prepare: () => state.rendering.finish(),
      title: () => `${ctx.data.method || "attribution"}: generation`,
      reportError,
    }),
  );

  return {
    root,
    viewButtons,
    sharedToggle,
    granularityPick,
    status,
    pairsBox,
    tokensBox,
    canvas,
    heatmapBox,
    legendSlot,
    caption,
    table,
  };
}
