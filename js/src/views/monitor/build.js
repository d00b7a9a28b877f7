/**
 * Training monitor, build: the title and status, the toolbar (layers, smoothing, reset zoom), the panel menu and
 * the panels, and their handlers (drag across a plot to zoom, Shift+drag to pan, double-click or 0 to reset, +/-
 * and the arrows to zoom and pan); the store of the model redraws the view when rows arrive.
 *
 * @example
 *   const parts = build(ctx);
 */
import { h } from "../../lib/dom.js";
import { cssColours, domain, draw, layerColour, layers } from "./draw.js";
import { storeOf } from "./read.js";
import { warmUp } from "./warm_up.js";

/** @param {import("../../lib/view.js").ViewContext} ctx */
export function build(ctx) {
  const { model, el, doc, state } = ctx;
  const store = storeOf(model);
  const root = h("div", { class: "iw-root iw-monitor", "data-iw-theme": ctx.theme });
  const titleNode = h("div", { class: "iw-monitor-title" });
  const status = h("span", { class: "iw-monitor-status", "aria-live": "off" });
  const layerBox = h("span", { class: "iw-monitor-layers", role: "group", "aria-label": "Layers" });
  const smoothing = h("input", {
    type: "range",
    min: 0,
    max: 0.99,
    step: 0.01,
    value: 0,
    class: "iw-monitor-smoothing",
    "aria-label": "Smoothing",
  });
  const smoothingText = h("span", { class: "iw-monitor-smoothing-value" }, "0");
  const resetButton = h(
    "button",
    {
      type: "button",
      class: "iw-button iw-monitor-reset",
      title: "Show all steps and follow new ones (double-click a plot)",
    },
    "Reset zoom",
  );
  const panelBox = h("span", { class: "iw-monitor-panel-toggles", role: "group", "aria-label": "Panels" });
  const toolbar = h("div", { class: "iw-toolbar" }, [
    layerBox,
    h("label", { title: "Exponential moving average weight (0 = raw values)" }, [
      "smoothing ",
      smoothing,
      " ",
      smoothingText,
    ]),
    resetButton,
  ]);
  const panelsNode = h("div", { class: "iw-monitor-panels" });
  const hint = h(
    "div",
    { class: "iw-caption" },
    "Drag across a plot to zoom, Shift+drag to pan, double-click to reset; the shaded x range is the proxy fit window.",
  );
  root.append(
    h("div", { class: "iw-monitor-head" }, [titleNode, status]),
    toolbar,
    h("details", { class: "iw-monitor-panel-menu" }, [h("summary", {}, "Panels"), panelBox]),
    panelsNode,
    hint,
  );
  el.append(root);
  Object.assign(state, {
    store,
    hiddenLayers: new Set(),
    hiddenPanels: new Set(),
    scales: new Map(), // panel id -> "linear" | "log" chosen in this view
    smoothing: 0,
    xDomain: null, // null = follow: all steps, growing with new ones
    follow: null, // [x0, x1, epoch] of the follow-mode domain
    cursor: null,
    drag: null,
    colours: cssColours(root),
    panels: [],
    maxDrawMs: 0,
    smoothCache: new Map(),
    decimators: new Map(),
    fitCache: { version: -1, windows: [] },
  });

  function buildToolbar(ctx) {
    layerBox.replaceChildren(
      ...layers(ctx).map((layer) => {
        const box = h("input", { type: "checkbox", "data-layer": layer });
        box.checked = !state.hiddenLayers.has(layer);
        box.addEventListener("change", () => {
          if (box.checked) state.hiddenLayers.delete(layer);
          else state.hiddenLayers.add(layer);
          ctx.request();
        });
        const swatch = h("span", { class: "iw-monitor-swatch" });
        swatch.style.background = layerColour(ctx, layer);
        return h("label", { class: "iw-monitor-layer", title: layer }, [box, swatch, layer]);
      }),
    );
  }

  function buildPanels(ctx) {
    state.panels = (ctx.model.get("panels") ?? []).map((config) => {
      const heatmap = config.kind === "heatmap";
      const canvas = h("canvas", {
        class: "iw-monitor-canvas",
        tabindex: 0,
        role: "img",
        "aria-label": config.title ?? config.id,
      });
      const readout = h("div", { class: "iw-monitor-readout" }, "\u00a0");
      const scaleSelect = h("select", { class: "iw-monitor-scale", "aria-label": `${config.title} scale` }, [
        h("option", { value: "linear" }, "linear"),
        h("option", { value: "log" }, "log"),
      ]);
      scaleSelect.value = state.scales.get(config.id) ?? (config.scale === "log" ? "log" : "linear");
      scaleSelect.addEventListener("change", () => {
        state.scales.set(config.id, scaleSelect.value);
        ctx.request();
      });
      const header = h("div", { class: "iw-monitor-panel-head" }, [
        h("span", { class: "iw-monitor-panel-title" }, config.title ?? config.id),
        heatmap ? "" : scaleSelect,
      ]);
      const node = h(
        "div",
        { class: `iw-monitor-panel${heatmap ? " iw-monitor-heatmap" : ""}`, "data-panel": config.id },
        [header, canvas, readout],
      );
      const panel = { config, node, canvas, readout, frame: null, heatmap };
      attachInteraction(ctx, panel);
      return panel;
    });
    panelsNode.replaceChildren(...state.panels.map((p) => p.node));
    panelBox.replaceChildren(
      ...state.panels.map(({ config }) => {
        const box = h("input", { type: "checkbox", "data-panel": config.id });
        box.checked = !state.hiddenPanels.has(config.id);
        box.addEventListener("change", () => {
          if (box.checked) state.hiddenPanels.delete(config.id);
          else state.hiddenPanels.add(config.id);
          ctx.request();
        });
        return h("label", {}, [box, config.title ?? config.id]);
      }),
    );
  }

  function zoomTo(ctx, a, b) {
    const [lo, hi] = a < b ? [a, b] : [b, a];
    if (hi - lo <= 0) return;
    state.xDomain = [lo, hi];
    ctx.request();
  }

  function attachInteraction(ctx, panel) {
    const { canvas } = panel;
    const xAt = (event) => {
      if (!panel.frame) return null;
      const box = canvas.getBoundingClientRect();
      return panel.frame.x.value(event.clientX - box.left);
    };
    canvas.addEventListener("mousemove", (event) => {
      const value = xAt(event);
      if (value === null) return;
      const drag = state.drag;
      if (drag && drag.panel === panel && drag.pan) {
        const shift = drag.anchor - value;
        state.xDomain = [drag.domain[0] + shift, drag.domain[1] + shift];
      }
      state.cursor = value;
      ctx.request();
    });
    canvas.addEventListener("mouseleave", () => {
      state.cursor = null;
      ctx.request();
    });
    canvas.addEventListener("mousedown", (event) => {
      const value = xAt(event);
      if (value === null || event.button !== 0) return;
      state.drag = { panel, anchor: value, pan: event.shiftKey, domain: domain(ctx) };
    });
    canvas.addEventListener("mouseup", (event) => {
      const drag = state.drag;
      state.drag = null;
      const value = xAt(event);
      if (!drag || drag.panel !== panel || value === null || drag.pan) return;
      const pixels = Math.abs(panel.frame.x.px(value) - panel.frame.x.px(drag.anchor));
      if (pixels >= 4) zoomTo(ctx, drag.anchor, value);
    });
    canvas.addEventListener("dblclick", () => {
      state.xDomain = null;
      ctx.request();
    });
    canvas.addEventListener("keydown", (event) => {
      const [a, b] = domain(ctx);
      const span = b - a;
      const actions = {
        "+": () => zoomTo(ctx, a + span / 4, b - span / 4),
        "-": () => zoomTo(ctx, a - span / 2, b + span / 2),
        ArrowLeft: () => zoomTo(ctx, a - span / 5, b - span / 5),
        ArrowRight: () => zoomTo(ctx, a + span / 5, b + span / 5),
        0: () => {
          state.xDomain = null;
          ctx.request();
        },
      };
      const action = actions[event.key];
      if (!action) return;
      event.preventDefault();
      action();
    });
  }

  smoothing.addEventListener("input", () => {
    state.smoothing = Number(smoothing.value);
    smoothingText.textContent = smoothing.value;
    ctx.request();
  });
  resetButton.addEventListener("click", () => {
    state.xDomain = null;
    ctx.request();
  });

  smoothing.addEventListener("input", () => {
    state.smoothing = Number(smoothing.value);
    smoothingText.textContent = smoothing.value;
    ctx.request();
  });
  resetButton.addEventListener("click", () => {
    state.xDomain = null;
    ctx.request();
  });

  ctx.listen("change:layers", () => {
    buildToolbar(ctx);
    ctx.request();
  });
  ctx.listen("change:panels", () => {
    buildPanels(ctx);
    ctx.request();
  });
  ctx.onCleanup(store.subscribe(() => ctx.request()));
  const resize = typeof ResizeObserver === "function" ? new ResizeObserver(() => ctx.request()) : null;
  resize?.observe(panelsNode);
  ctx.onCleanup(() => resize?.disconnect());
  buildToolbar(ctx);
  buildPanels(ctx);
  if (!ctx.immediate) {
    setTimeout(() => {
      // after the first paint, once per page
      if (!ctx.disposed) root.dataset.iwWarmUpMs = warmUp(model, doc, { build, draw, schedule: "frame" }).toFixed(1);
    }, 0);
  }
  return { root, titleNode, status, resetButton };
}
