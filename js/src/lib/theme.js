/**
 * Light/dark detection for colours that must be computed in JS. Follows JupyterLab
 * (`body[data-jp-theme-light]`), VS Code (`body.vscode-dark` / `vscode-high-contrast`) and otherwise
 * `prefers-color-scheme`. Everything else in the widgets is themed through CSS variables.
 *
 * @example
 *   const stop = watchTheme(document, (theme) => recolour(theme));
 *   stop(); // on view teardown
 */

/**
 * @param {Document} doc
 * @returns {"light" | "dark"}
 */
export function detectTheme(doc = document) {
  const body = doc.body;
  const jp = body?.getAttribute("data-jp-theme-light");
  if (jp === "true") return "light";
  if (jp === "false") return "dark";
  if (body?.classList.contains("vscode-light")) return "light";
  if (body?.classList.contains("vscode-dark") || body?.classList.contains("vscode-high-contrast")) return "dark";
  const media = doc.defaultView?.matchMedia?.("(prefers-color-scheme: dark)");
  return media?.matches ? "dark" : "light";
}

/**
 * Call `onChange(theme)` whenever the detected theme changes. Returns a function that stops watching.
 * @param {Document} doc
 * @param {(theme: "light" | "dark") => void} onChange
 */
export function watchTheme(doc, onChange) {
  let current = detectTheme(doc);
  const check = () => {
    const next = detectTheme(doc);
    if (next !== current) {
      current = next;
      onChange(next);
    }
  };
  const observer = new MutationObserver(check);
  if (doc.body) observer.observe(doc.body, { attributes: true, attributeFilter: ["class", "data-jp-theme-light"] });
  const media = doc.defaultView?.matchMedia?.("(prefers-color-scheme: dark)");
  media?.addEventListener?.("change", check);
  return () => {
    observer.disconnect();
    media?.removeEventListener?.("change", check);
  };
}
