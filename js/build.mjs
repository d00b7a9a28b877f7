// Bundle js/src into interp_widgets/static: one ESM (+ CSS) per widget and the boot script of exported pages.
// Every top-level js/src/*.js file is an entry point (a widget's view, or export_boot.js); shared modules live in
// js/src/lib/ and are bundled into the entry points that import them. A new view needs no change here.
// Also copies the widget manager that `interp-widgets export` inlines into notebook pages into static/vendor, and
// builds the JupyterLab / Notebook 7 extension (src/labextension, the mime renderer of saved outputs) with
// @jupyterlab/builder into interp_widgets/labextension, which the wheel installs as
// share/jupyter/labextensions/interp-widgets.
// Usage: node build.mjs [--watch] [--no-labextension]   (--watch rebuilds the esbuild bundles only)
import * as esbuild from "esbuild";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const watch = process.argv.includes("--watch");
const labextension = !watch && !process.argv.includes("--no-labextension");

const entryPoints = readdirSync("src", { withFileTypes: true })
  .filter((entry) => entry.isFile() && entry.name.endsWith(".js"))
  .map((entry) => `src/${entry.name}`)
  .sort();

const options = {
  entryPoints,
  outdir: "../interp_widgets/static",
  bundle: true,
  format: "esm",
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  legalComments: "none",
  target: ["es2020"],
  define: { "define.amd": "false" },
  logLevel: "info",
};

// Third-party AMD files for offline notebook export (interp_widgets/notebook_export.py), copied verbatim from
// npm except for one documented patch: html-manager falls back to a CDN for widget modules the page does not
// define; that default becomes "./" so a missing module is looked up beside the page, never on the network.
const VENDOR = [
  { pkg: "requirejs", file: "require.js", out: "require.js" },
  {
    pkg: "@jupyter-widgets/html-manager",
    file: "dist/embed-amd.js",
    out: "embed-amd.js",
    patch: { from: '"https://cdn.jsdelivr.net/npm/"', to: '"./"', count: 2 },
  },
  { pkg: "anywidget", file: "dist/index.js", out: "anywidget.js" },
];

function copyVendor() {
  const outdir = "../interp_widgets/static/vendor";
  mkdirSync(outdir, { recursive: true });
  const notice = ["Third-party files inlined by `interp-widgets export` (copied from npm by js/build.mjs).", ""];
  for (const { pkg, file, out, patch } of VENDOR) {
    const root = join("node_modules", pkg);
    const meta = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    let text = readFileSync(join(root, file), "utf8");
    if (patch) {
      const found = text.split(patch.from).length - 1;
      if (found !== patch.count) {
        throw new Error(`${pkg}/${file}: expected ${patch.count} x ${patch.from}, found ${found}; review the patch`);
      }
      text = text.replaceAll(patch.from, patch.to);
    }
    writeFileSync(join(outdir, out), text);
    notice.push(
      `${out}: ${pkg}@${meta.version} ${file}, licence ${meta.license}` +
        (patch ? `; patched: its ${patch.count} CDN fallback base URLs replaced by ${patch.to}` : ""),
    );
    // The licence text: the package's LICENSE, else js/licenses/ (html-manager's npm package ships none; its
    // licence is the ipywidgets repository's BSD-3-Clause), else an @license header in the file (require.js).
    const licence = [join(root, "LICENSE"), join("licenses", `${pkg.replace("/", "+")}.LICENSE.txt`)].find(existsSync);
    if (licence) copyFileSync(licence, join(outdir, `${out}.LICENSE.txt`));
    else if (!text.slice(0, 400).includes("@license"))
      throw new Error(`${pkg} ships no licence text; add it as js/licenses/`);
  }
  writeFileSync(join(outdir, "NOTICE.txt"), notice.join("\n") + "\n");
}

// The JupyterLab core metadata the builder shares modules against (which @jupyterlab/* and @lumino/* packages
// come from the page, at which versions) is the npm package @jupyterlab/core-meta, pinned in package.json, so the
// build needs no Python JupyterLab and no network. The builder reads it as <core path>/package.json.
function buildLabextension() {
  const core = resolve("node_modules/.cache/interp-widgets-core");
  mkdirSync(core, { recursive: true });
  copyFileSync("node_modules/@jupyterlab/core-meta/core.package.json", join(core, "package.json"));
  const builder = "node_modules/@jupyterlab/builder/lib/build-labextension.js";
  const run = spawnSync(process.execPath, [builder, "--core-path", core, "."], { stdio: "inherit" });
  if (run.status !== 0) throw new Error(`@jupyterlab/builder failed (exit ${run.status ?? run.signal})`);
  // `jupyter labextension list` names the Python package that installed the extension from this file.
  writeFileSync(
    "../interp_widgets/labextension/install.json",
    JSON.stringify(
      {
        packageManager: "python",
        packageName: "interp-widgets",
        uninstallInstructions:
          "Use your Python package manager (pip, conda, etc.) to uninstall the package interp-widgets",
      },
      null,
      2,
    ) + "\n",
  );
}

copyVendor();

if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  await esbuild.build(options);
  if (labextension) buildLabextension();
}
