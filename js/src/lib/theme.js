/**
 * Light/dark detection for colours that must be computed in JS. Follows JupyterLab
 * (`body[data-jp-theme-light]`), VS Code (`body.vscode-dark` / `vscode-high-contrast`) and otherwise
 * `prefers-color-scheme`. Everything else in the widgets is themed through CSS variables.
 *
 * @example
 *   const stop = watchTheme(document, (theme) => recolour(theme));
 *   stop(); // on view teardown
 */

const DARK_QUERY = "(prefers-color-scheme: dark)";
const JUPYTER_LIGHT = "data-jp-theme-light"; // JupyterLab's body attribute: "true" or "false"

/**
 * @param {Document} doc
 * @returns {"light" | "dark"}
 */
export function detectTheme(doc = document) {
  const body = doc.body;
  const jp = body?.getAttribute(JUPYTER_LIGHT);
  if (jp === "true") return "light";
  if (jp === "false") return "dark";
  const vscode = (name) => body?.classList.contains(`vscode-${name}`);
  if (vscode("light")) return "light";
  if (vscode("dark") || vscode("high-contrast")) return "dark";
  const media = doc.defaultView?.matchMedia?.(DARK_QUERY);
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
  if (doc.body) observer.observe(doc.body, { attributes: true, attributeFilter: ["class", JUPYTER_LIGHT] });
  const media = doc.defaultView?.matchMedia?.(DARK_QUERY);
  media?.addEventListener?.("change", check);
  return () => {
    observer.disconnect();
    media?.removeEventListener?.("change", check);
  };
}
