"""Regenerate the README screenshots in docs/screenshots/ from real renderings, never drawn by hand.

Each widget is computed from the demo models (the classifier; SmolLM2 for the generation view), written as an
offline page (``widget.export_html``, the pages the browser tests check) and rendered by headless Debian chromium through the browser-test harness
(``tests/browser/harness.py``); the script fails if a page requests anything beyond the machine. The PNGs are
reduced to a 256-colour palette to stay small.

Usage (a few minutes on a CPU; the demo models are trained and cached on first use):
    PYTHONPATH=. python scripts/screenshots.py [--out docs/screenshots] [--only generation ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser.harness import RequestLog, launch_chromium  # noqa: E402

WIDTH = 920  # CSS pixels of the page; screenshots are taken at device scale 1
# Clicks made before a screenshot, by file stem: the generation view is shown as its source x target heatmap.
ACTIONS = {"generation": lambda root: root.locator('button[data-view="heatmap"]').click()}


NAMES = ("token_highlight", "comparison", "generation", "examples", "concept_browser", "monitor")


def build_widgets(progress: bool, only: set[str] | None = None) -> dict[str, object]:
    """The widget of each screenshot, by file stem (all of ``NAMES``, or those in ``only``), computed from the demo
    classifier and, for the generation view, the pretrained decoder SmolLM2-135M-Instruct (``demo.load_lm``).

    Example:
        >>> sorted(build_widgets(progress=False))  # doctest: +SKIP
        ['comparison', 'concept_browser', 'examples', 'generation', 'monitor', 'token_highlight']
    """
    from interp_widgets import demo
    from interp_widgets.attribution import InputXGradient, IntegratedGradients, Saliency
    from interp_widgets.demo.report import concept_browser, explained_generation, monitored_fine_tuning
    from interp_widgets.widgets import compare

    wanted = set(NAMES if only is None else only)
    widgets: dict[str, object] = {}
    texts = list(demo.EXAMPLE_TEXTS)
    if wanted & {"token_highlight", "comparison", "examples", "concept_browser", "monitor"}:
        model, tokenizer = demo.load_classifier(progress=progress)
    if wanted & {"token_highlight", "comparison", "examples"}:
        ig = IntegratedGradients(progress=progress).attribute(model, tokenizer, texts)
        others = [method(progress=progress).attribute(model, tokenizer, texts[0])
                  for method in (Saliency, InputXGradient)]  # fmt: skip
        widgets.update(
            token_highlight=ig[1].widget(granularity="word"), comparison=compare([ig[0], *others]), examples=ig.widget()
        )
    if "generation" in wanted:  # the report's generation: SmolLM2 continues a prompt, input x gradient per step
        generation = explained_generation(progress=progress)
        widgets["generation"] = generation.widget(selected_step=1)
    if "concept_browser" in wanted:
        browser = concept_browser(model, tokenizer, texts[:2], progress=progress)
        browser.selected_concept = int(np.nanargmax(np.abs(browser.importance)))  # open its detail
        widgets["concept_browser"] = browser
    if "monitor" in wanted:
        widgets["monitor"] = monitored_fine_tuning(12, progress=progress).widget()
    return {name: widgets[name] for name in NAMES if name in widgets}


def shoot(widgets: dict[str, object], out: Path) -> dict[str, int]:
    """Render each widget's exported page in chromium and save the widget's PNG; returns the byte size of each.

    Example:
        >>> shoot({"token_highlight": result.widget()}, Path("docs/screenshots"))  # doctest: +SKIP
        {'token_highlight': 10240}
    """
    from PIL import Image
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="iw-shots-") as tmp, sync_playwright() as driver:
        browser = launch_chromium(driver)
        try:
            for name, widget in widgets.items():
                page_path = widget.export_html(Path(tmp) / f"{name}.html", title=name)
                context = browser.new_context(viewport={"width": WIDTH, "height": 800}, device_scale_factor=1)
                page = context.new_page()
                requests = RequestLog(page)
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(page_path.as_uri())
                root = page.locator(".iw-root").first
                root.wait_for(state="visible", timeout=30_000)
                if name in ACTIONS:
                    ACTIONS[name](root)
                page.wait_for_timeout(500)  # canvases and idle-time blocks finish drawing
                target = out / f"{name}.png"
                root.screenshot(path=str(target))
                requests.assert_loopback_only()
                if errors:
                    raise RuntimeError(f"{name}: the page raised {errors}")
                context.close()
                Image.open(target).convert("RGB").quantize(colors=256).save(target, optimize=True)
                sizes[name] = target.stat().st_size
        finally:
            browser.close()
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Command line of the script.

    Example:
        >>> main(["--out", "/tmp/shots", "--quiet"])  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots", help="where the PNGs go")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--only", nargs="+", choices=NAMES, help="rewrite only these screenshots")
    args = parser.parse_args(argv)
    sizes = shoot(build_widgets(progress=not args.quiet, only=set(args.only) if args.only else None), args.out)
    for name, size in sizes.items():
        print(f"{args.out / (name + '.png')}: {size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
