// Bundle js/src into interp_widgets/static: one ESM (+ CSS) per widget and the boot script of exported pages.
// Usage: node build.mjs [--watch]
import * as esbuild from "esbuild";

const watch = process.argv.includes("--watch");

const options = {
  entryPoints: ["src/token_highlight.js", "src/generation.js", "src/comparison.js", "src/examples.js", "src/monitor.js", "src/concept_browser.js", "src/export_boot.js"],
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

if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  await esbuild.build(options);
}
