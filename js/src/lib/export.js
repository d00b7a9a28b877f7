/**
 * Browser-side export of the current view: PNG and SVG pictures, a CSV of the scores and a
 * self-contained static HTML page. Nothing is fetched; files are made from the DOM and downloaded
 * through Blob URLs.
 *
 * The picture is a "scene" read from the laid-out view (boxes with their computed colours, text runs,
 * gradients and canvases) and drawn either as SVG elements or on a canvas. The SVG namespace is read
 * from the browser's own HTML parser, so no URL string is shipped in this bundle.
 *
 * @example
 *   toolbar.append(createExportMenu({name: "tokens", root, csv: () => rows, title: () => "IG"}));
 */
import { h } from "./dom.js";

const SKIP = ".iw-toolbar, .iw-tooltip, .iw-sr-only, .iw-export, [hidden]";

/** The SVG namespace URI, as the HTML parser assigns it to an <svg> element. */
export function svgNamespace(doc = document) {
  const parsed = new doc.defaultView.DOMParser().parseFromString("<svg></svg>", "text/html");
  return parsed.body.firstElementChild.namespaceURI;
}

const TRANSPARENT = new Set(["", "transparent", "rgba(0, 0, 0, 0)"]);

function gradientStops(backgroundImage) {
  const match = /linear-gradient\((.*)\)$/.exec(backgroundImage ?? "");
  if (!match) return null;
  const colours = match[1].match(/rgba?\([^)]*\)|#[0-9a-f]{3,8}/gi);
  return colours && colours.length > 1 ? colours : null;
}

/**
 * Read the laid-out view under `root` into a list of drawable items, in root-relative pixels.
 * @param {HTMLElement} root
 * @returns {{width: number, height: number, background: string, items: object[]}}
 */
export function captureScene(root) {
  const doc = root.ownerDocument;
  const win = doc.defaultView;
  const origin = root.getBoundingClientRect();
  const items = [];
  const rel = (r) => ({ x: r.left - origin.left, y: r.top - origin.top, w: r.width, h: r.height });
  const rootStyle = win.getComputedStyle(root);
  let background = rootStyle.getPropertyValue("--iw-bg").trim() || rootStyle.backgroundColor;
  if (TRANSPARENT.has(background)) background = root.dataset.iwTheme === "dark" ? "#1e1e1e" : "#ffffff";

  const visit = (el) => {
    if (el.matches(SKIP)) return;
    const style = win.getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") return;
    const box = rel(el.getBoundingClientRect());
    if (el instanceof win.HTMLCanvasElement) {
      items.push({ type: "image", ...box, href: el.toDataURL("image/png") });
      return;
    }
    const stops = gradientStops(el.style.backgroundImage);
    if (stops) items.push({ type: "gradient", ...box, stops });
    else if (!TRANSPARENT.has(style.backgroundColor) && box.w > 0) {
      items.push({
        type: "rect",
        ...box,
        fill: style.backgroundColor,
        radius: parseFloat(style.borderTopLeftRadius) || 0,
      });
    }
    const underline = parseFloat(style.borderBottomWidth) || 0;
    if (underline > 0 && style.borderBottomStyle !== "none" && el.classList.contains("iw-token")) {
      items.push({
        type: "rect",
        x: box.x,
        y: box.y + box.h - underline,
        w: box.w,
        h: underline,
        fill: style.borderBottomColor,
        radius: 0,
      });
    }
    for (const child of el.childNodes) {
      if (child.nodeType === 1) visit(child);
      else if (child.nodeType === 3 && child.textContent.trim() !== "") {
        const range = doc.createRange();
        range.selectNodeContents(child);
        const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0);
        const text = child.textContent.replace(/\n/g, "");
        const font = {
          font: style.fontFamily,
          size: parseFloat(style.fontSize) || 14,
          weight: style.fontWeight,
          fill: style.color,
        };
        if (rects.length <= 1) {
          const r = rel(rects[0] ?? el.getBoundingClientRect());
          items.push({ type: "text", text, ...r, ...font });
        } else {
          // a text node wrapped over several lines: share its characters out in proportion to line widths
          const total = rects.reduce((sum, r) => sum + r.width, 0);
          let start = 0;
          rects.forEach((r, k) => {
            const end = k === rects.length - 1 ? text.length : start + Math.round((text.length * r.width) / total);
            items.push({ type: "text", text: text.slice(start, end), ...rel(r), ...font });
            start = end;
          });
        }
        if (el.dataset.iwSign) {
          items.push({
            type: "text",
            text: el.dataset.iwSign,
            ...rel(el.getBoundingClientRect()),
            y: box.y - 8,
            ...font,
            size: font.size * 0.7,
          });
        }
      }
    }
  };
  for (const child of root.children) visit(child);
  return { width: Math.ceil(origin.width), height: Math.ceil(origin.height), background, items };
}

/**
 * The scene as an SVG element (text escaped by the DOM, never parsed).
 * @returns {SVGSVGElement}
 */
export function sceneToSvg(scene, doc = document) {
  const ns = svgNamespace(doc);
  const make = (tag, attrs = {}, text) => {
    const node = doc.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const svg = make("svg", { width: scene.width, height: scene.height, viewBox: `0 0 ${scene.width} ${scene.height}` });
  svg.append(make("rect", { width: scene.width, height: scene.height, fill: scene.background }));
  const defs = make("defs");
  svg.append(defs);
  scene.items.forEach((item, index) => {
    if (item.type === "rect") {
      svg.append(
        make("rect", { x: item.x, y: item.y, width: item.w, height: item.h, rx: item.radius, fill: item.fill }),
      );
    } else if (item.type === "gradient") {
      const id = `iw-gradient-${index}`;
      const gradient = make("linearGradient", { id });
      item.stops.forEach((colour, k) =>
        gradient.append(make("stop", { offset: k / (item.stops.length - 1), "stop-color": colour })),
      );
      defs.append(gradient);
      svg.append(make("rect", { x: item.x, y: item.y, width: item.w, height: item.h, fill: `url(#${id})` }));
    } else if (item.type === "image") {
      svg.append(make("image", { x: item.x, y: item.y, width: item.w, height: item.h, href: item.href }));
    } else if (item.type === "text") {
      svg.append(
        make(
          "text",
          {
            x: item.x,
            y: item.y + item.h * 0.78,
            "font-family": item.font,
            "font-size": item.size,
            "font-weight": item.weight,
            fill: item.fill,
            "xml:space": "preserve",
          },
          item.text,
        ),
      );
    }
  });
  return svg;
}

/** Serialised SVG document text. */
export function sceneToSvgText(scene, doc = document) {
  return new doc.defaultView.XMLSerializer().serializeToString(sceneToSvg(scene, doc));
}

/**
 * Draw the scene on a canvas at `scale` × resolution and resolve with a PNG Blob.
 * @returns {Promise<Blob>}
 */
export async function sceneToPng(scene, doc = document, scale = 2) {
  const canvas = doc.createElement("canvas");
  canvas.width = Math.max(1, Math.round(scene.width * scale));
  canvas.height = Math.max(1, Math.round(scene.height * scale));
  const ctx = canvas.getContext("2d");
  if (!ctx) throw new Error("this browser cannot draw on a canvas, so PNG export is unavailable; use SVG");
  ctx.scale(scale, scale);
  ctx.fillStyle = scene.background;
  ctx.fillRect(0, 0, scene.width, scene.height);
  for (const item of scene.items) {
    if (item.type === "rect") {
      ctx.fillStyle = item.fill;
      ctx.fillRect(item.x, item.y, item.w, item.h);
    } else if (item.type === "gradient") {
      const gradient = ctx.createLinearGradient(item.x, 0, item.x + item.w, 0);
      item.stops.forEach((colour, k) => gradient.addColorStop(k / (item.stops.length - 1), colour));
      ctx.fillStyle = gradient;
      ctx.fillRect(item.x, item.y, item.w, item.h);
    } else if (item.type === "image") {
      const image = new doc.defaultView.Image();
      image.src = item.href;
      await image.decode();
      ctx.drawImage(image, item.x, item.y, item.w, item.h);
    } else if (item.type === "text") {
      ctx.fillStyle = item.fill;
      ctx.font = `${item.weight} ${item.size}px ${item.font}`;
      ctx.fillText(item.text, item.x, item.y + item.h * 0.78);
    }
  }
  return new Promise((resolve, reject) =>
    canvas.toBlob(
      (blob) => (blob ? resolve(blob) : reject(new Error("the canvas could not be encoded as PNG"))),
      "image/png",
    ),
  );
}

/** CSV text (RFC 4180 quoting) from rows of cells. */
export function toCsv(rows) {
  const cell = (value) => {
    const text = typeof value === "number" ? (Number.isNaN(value) ? "" : String(value)) : String(value ?? "");
    return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  };
  return rows.map((row) => row.map(cell).join(",")).join("\r\n") + "\r\n";
}

/**
 * A self-contained static HTML page: title, the view as inline SVG, and the scores as a table.
 * Built with DOM methods, so every string is text, never markup.
 */
export function staticPage(doc, { title, svg, rows }) {
  const page = doc.implementation.createHTMLDocument(title);
  const meta = page.createElement("meta");
  meta.setAttribute("charset", "utf-8");
  page.head.prepend(meta);
  const style = page.createElement("style");
  style.textContent =
    "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1f2328;background:#fff}" +
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #c8ced6;padding:2px 6px;text-align:left}";
  page.head.append(style);
  const heading = page.createElement("h1");
  heading.textContent = title;
  page.body.append(heading, page.importNode(svg, true));
  const table = page.createElement("table");
  rows.forEach((row, r) => {
    const tr = page.createElement("tr");
    for (const value of row) {
      const cell = page.createElement(r === 0 ? "th" : "td");
      cell.textContent = typeof value === "number" && Number.isNaN(value) ? "" : String(value);
      tr.append(cell);
    }
    table.append(tr);
  });
  page.body.append(table);
  return `<!DOCTYPE html>\n${page.documentElement.outerHTML}`;
}

/** Offer `blob` as a download named `filename`. */
export function download(doc, filename, blob) {
  const url = doc.defaultView.URL.createObjectURL(blob);
  const link = h("a", { href: url, download: filename });
  doc.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => doc.defaultView.URL.revokeObjectURL(url), 1000);
}

/**
 * Export buttons (PNG, SVG, CSV, HTML) for a view.
 * @param {{name: string, root: HTMLElement, rows: () => Array<Array<string|number>>, title: () => string,
 *          reportError: (e: unknown) => void, prepare?: () => void, tableRows?: () => Array<Array<string|number>>}} options
 *   `rows()` gives the CSV/table (header row first); `tableRows()`, when given, the HTML page's table instead (a
 *   shorter one, for views whose CSV is too long to read as a table); `prepare()` runs before each export (e.g. to
 *   build token blocks not built yet)
 */
export function createExportMenu({ name, root, rows, title, reportError, prepare, tableRows = rows }) {
  const doc = root.ownerDocument;
  const run = (fn) => () =>
    Promise.resolve()
      .then(() => prepare?.())
      .then(fn)
      .catch(reportError);
  const actions = {
    PNG: [
      "Download the current view as a PNG image",
      async () => download(doc, `${name}.png`, await sceneToPng(captureScene(root), doc)),
    ],
    SVG: [
      "Download the current view as an SVG image",
      () =>
        download(doc, `${name}.svg`, new Blob([sceneToSvgText(captureScene(root), doc)], { type: "image/svg+xml" })),
    ],
    CSV: [
      "Download the scores as CSV",
      () => download(doc, `${name}.csv`, new Blob([toCsv(rows())], { type: "text/csv" })),
    ],
    HTML: [
      "Download a self-contained HTML page of this view",
      () =>
        download(
          doc,
          `${name}.html`,
          new Blob([staticPage(doc, { title: title(), svg: sceneToSvg(captureScene(root), doc), rows: tableRows() })], {
            type: "text/html",
          }),
        ),
    ],
  };
  const menu = h("div", { class: "iw-export", role: "group", "aria-label": "Export" });
  for (const [label, [description, fn]] of Object.entries(actions)) {
    const b = h("button", { type: "button", class: "iw-button", "aria-label": description, title: description }, label);
    b.dataset.iwExport = label.toLowerCase();
    b.addEventListener("click", run(fn));
    menu.append(b);
  }
  return menu;
}
