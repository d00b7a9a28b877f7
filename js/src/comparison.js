/**
 * Method comparison view (front end of interp_widgets.widgets.ComparisonWidget): one token row per
 * method, synchronised hover/focus across rows, per-method or shared colour scale, and the pairwise
 * agreement table computed in Python.
 *
 * Traits read: tokens, spaces_before, special_mask, scores (n_methods × n_tokens), methods, signed,
 * target_label, agreement, agreement_by, shared_scale, encoding, high_contrast, error. Written back:
 * hovered_token, selected_token, shared_scale.
 *
 * @example
 *   import widget from "./comparison.js";
 *   widget.render({model, el});
 */
import "./comparison.css";
import { maxMagnitude } from "./lib/aggregate.js";
import { decodeArray } from "./lib/codec.js";
import { h } from "./lib/dom.js";
import { guardedRender } from "./lib/errors.js";
import { createExportMenu } from "./lib/export.js";
import { formatScore } from "./lib/format.js";
import { createLegend } from "./lib/legend.js";
import { paintToken } from "./lib/paint.js";
import { displayToken, quoteToken } from "./lib/text.js";
import { detectTheme, watchTheme } from "./lib/theme.js";
import { createTooltip } from "./lib/tooltip.js";

const TRAITS = ["tokens", "spaces_before", "special_mask", "scores", "methods", "signed", "target_label", "agreement", "shared_scale", "encoding", "high_contrast"];

function readComparison(model) {
  const tokens = model.get("tokens") ?? [];
  const methods = model.get("methods") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const scores = decodeArray(model.get("scores"));
  if (scores.shape[0] !== methods.length || scores.shape[1] !== n) {
    throw new RangeError(`scores have shape [${scores.shape.join(", ")}], expected [${methods.length} methods, ${n} tokens]`);
  }
  const special = decodeArray(model.get("special_mask")).values;
  const visible = Array.from({ length: n }, (_, i) => i).filter((i) => special[i] === 0);
  const signed = model.get("signed") ?? [];
  return { n, tokens, methods, visible, signed: methods.map((_, m) => signed[m] !== false), spaces: model.get("spaces_before") ?? [],
    row: (m) => scores.values.subarray(m * n, (m + 1) * n) }; // prettier-ignore
}

const numberText = (value, digits = 3) => (value === null || value === undefined ? "n/a" : value.toFixed(digits));

function renderComparison({ model, el, reportError }) {
  const doc = el.ownerDocument;
  const root = h("div", { class: "iw-root iw-comparison" });
  const sharedToggle = h("input", { type: "checkbox", class: "iw-shared-toggle" });
  const toolbar = h("div", { class: "iw-toolbar" }, [h("label", { title: "One colour scale for all methods" }, [sharedToggle, " shared scale"])]);
  const heading = h("div", { class: "iw-caption" });
  const rowsBox = h("div", { class: "iw-method-rows" });
  const agreementBox = h("div", { class: "iw-agreement" });
  root.append(toolbar, heading, rowsBox, agreementBox);
  el.append(root);
  const tooltip = createTooltip(root);
  let theme = detectTheme(doc);
  let data = null;
  let spansByMethod = [];

  const safely = (fn) => (...args) => {
    try {
      fn(...args);
    } catch (error) {
      reportError(error);
    }
  }; // prettier-ignore
  const save = (name, value) => {
    model.set(name, value);
    model.save_changes();
  };
  const scoreText = (m, value) => (Number.isNaN(value) ? "not seen" : formatScore(value, { digits: 4, sign: data.signed[m] }));

  function draw() {
    data = readComparison(model);
    const shared = Boolean(model.get("shared_scale"));
    const encoding = model.get("encoding") || "colour";
    const boost = Boolean(model.get("high_contrast"));
    const visibleMax = (m) => maxMagnitude(data.visible.map((i) => data.row(m)[i]));
    const sharedMax = Math.max(...data.methods.map((_, m) => visibleMax(m)));
    root.dataset.iwTheme = theme;
    root.classList.toggle("iw-high-contrast", boost);
    sharedToggle.checked = shared;
    heading.textContent = `${data.methods.length} methods explaining ${quoteToken(model.get("target_label") ?? "")}${shared ? " \u00b7 shared scale" : " \u00b7 scale per method"}`;
    spansByMethod = data.methods.map(() => []);
    rowsBox.replaceChildren(
      ...data.methods.map((method, m) => {
        const max = shared ? sharedMax : visibleMax(m);
        const box = h("div", { class: "iw-tokens", role: "listbox", "aria-orientation": "horizontal", "aria-label": `${method}: tokens coloured by attribution`, "data-method": m });
        data.visible.forEach((i, position) => {
          if (position > 0 && data.spaces[i]) box.append(data.spaces[i]);
          const value = data.row(m)[i];
          const span = h("span", { class: "iw-token", role: "option", tabindex: m === 0 && position === 0 ? 0 : -1, "data-index": i, "aria-label": `${quoteToken(data.tokens[i])}, ${method} score ${scoreText(m, value)}` }, displayToken(data.tokens[i]));
          paintToken(span, value, max, { theme, signed: data.signed[m], encoding, boost });
          spansByMethod[m][i] = span;
          box.append(span);
        });
        return h("div", { class: "iw-method-row" }, [
          h("div", { class: "iw-method-name" }, method),
          box,
          createLegend(max, theme, method, { signed: data.signed[m], encoding }),
        ]);
      }),
    );
    const rows = model.get("agreement") ?? [];
    const k = rows[0]?.k;
    agreementBox.replaceChildren(
      h("table", { class: "iw-table" }, [
        h("caption", {}, `Pairwise agreement (${model.get("agreement_by") || "magnitude"} ranks)`),
        h("tr", {}, ["method A", "method B", "Spearman \u03c1", `top-${k ?? "k"} overlap`].map((t) => h("th", { scope: "col" }, t))),
        ...rows.map((r) => h("tr", {}, [h("td", {}, r.a), h("td", {}, r.b), h("td", {}, numberText(r.spearman)), h("td", {}, numberText(r.top_k_overlap, 2))])),
      ]),
    );
    linkHover(model.get("hovered_token"));
  }

  function linkHover(index) {
    for (const spans of spansByMethod) {
      for (const span of spans) span?.classList.toggle("iw-linked", Number(span.dataset.index) === index);
    }
  }

  const spanOf = (event) => (event.target instanceof Element ? event.target.closest(".iw-token") : null);
  const show = (span) => {
    const i = Number(span.dataset.index);
    linkHover(i);
    tooltip.show(span, [["token", quoteToken(data.tokens[i])], ...data.methods.map((method, m) => [method, scoreText(m, data.row(m)[i])])]);
    return i;
  };
  rowsBox.addEventListener("mouseover", safely((event) => {
    const span = spanOf(event);
    if (!span || span === tooltip.target) return;
    save("hovered_token", show(span));
  })); // prettier-ignore
  rowsBox.addEventListener("mouseleave", safely(() => {
    tooltip.hide();
    linkHover(-1);
    save("hovered_token", -1);
  })); // prettier-ignore
  rowsBox.addEventListener("focusin", safely((event) => {
    const span = spanOf(event);
    if (span) show(span);
  })); // prettier-ignore
  rowsBox.addEventListener("focusout", safely((event) => {
    if (!rowsBox.contains(event.relatedTarget)) {
      tooltip.hide();
      linkHover(-1);
    }
  })); // prettier-ignore
  rowsBox.addEventListener("click", safely((event) => {
    const span = spanOf(event);
    if (span) save("selected_token", Number(span.dataset.index));
  })); // prettier-ignore
  rowsBox.addEventListener("keydown", safely((event) => {
    const span = spanOf(event);
    if (!span) return;
    const m = Number(span.closest("[data-method]").dataset.method);
    const position = data.visible.indexOf(Number(span.dataset.index));
    let [nm, np] = [m, position];
    if (event.key === "ArrowRight") np += 1;
    else if (event.key === "ArrowLeft") np -= 1;
    else if (event.key === "ArrowDown") nm += 1; // same token, next method
    else if (event.key === "ArrowUp") nm -= 1;
    else if (event.key === "Enter" || event.key === " ") return save("selected_token", Number(span.dataset.index)), event.preventDefault();
    else if (event.key === "Escape") return tooltip.hide();
    else return;
    event.preventDefault();
    nm = Math.min(Math.max(nm, 0), data.methods.length - 1);
    np = Math.min(Math.max(np, 0), data.visible.length - 1);
    const next = spansByMethod[nm][data.visible[np]];
    span.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  })); // prettier-ignore
  sharedToggle.addEventListener("change", safely(() => save("shared_scale", sharedToggle.checked)));
  const csvRows = () => [["position", "token", ...data.methods], ...data.visible.map((i) => [i, data.tokens[i], ...data.methods.map((_, m) => data.row(m)[i])])];
  toolbar.append(createExportMenu({ name: "method-comparison", root, rows: csvRows, title: () => `Method comparison: ${model.get("target_label")}`, reportError }));

  let pending = false;
  const request = () => {
    if (!pending) queueMicrotask(safely(() => {
      pending = false;
      draw();
    })); // prettier-ignore
    pending = true;
  };
  const onHover = safely(() => linkHover(model.get("hovered_token")));
  for (const name of TRAITS) model.on(`change:${name}`, request);
  model.on("change:hovered_token", onHover);
  const stopWatchingTheme = watchTheme(doc, (next) => {
    theme = next;
    request();
  });
  draw();
  return () => {
    for (const name of TRAITS) model.off(`change:${name}`, request);
    model.off("change:hovered_token", onHover);
    stopWatchingTheme();
  };
}

export default { render: guardedRender("ComparisonWidget", renderComparison) };
