"""Command line: ``interp-widgets demo`` writes a self-contained offline HTML report; ``interp-widgets export``
turns an executed notebook into an offline HTML page with live widgets; ``interp-widgets clean`` repairs the saved
widget state of notebooks in place so GitHub and nbviewer render them (``--check`` only reports, for pre-commit);
``interp-widgets transcoders build`` trains the transcoder set of the embedded SmolLM2 and caches it (rerun it after
an interruption: it resumes).

Example:
    $ interp-widgets demo --text "The waiter was rude but the pasta was superb." --out report.html
    $ interp-widgets export executed.ipynb -o executed.html
    $ interp-widgets clean --check notebooks/*.ipynb
    $ interp-widgets transcoders build
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interp_widgets.demo.report import DEFAULT_STEPS, GENERATION_PROMPT


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``interp-widgets`` console script.

    Example:
        >>> import nbformat
        >>> tmp = getfixture("tmp_path")
        >>> nbformat.write(nbformat.v4.new_notebook(), tmp / "run.ipynb")
        >>> main(["export", str(tmp / "run.ipynb"), "-o", str(tmp / "run.html")])  # doctest: +ELLIPSIS
        /.../run.html
        0
        >>> main(["export", str(tmp / "missing.ipynb")])
        2
        >>> main(["clean", "--check", str(tmp / "run.ipynb")])  # nothing to clean
        0

    Not run here: ``demo`` fine-tunes the demo classifier and trains concepts (minutes on a CPU)::

        main(["demo", "--text", "Not bad at all.", "--out", "report.html"])
    """
    parser = argparse.ArgumentParser(prog="interp-widgets", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser(
        "demo",
        help="explain built-in texts (and yours) with the demo classifier, and a "
        "prompt's continuation with the pretrained decoder SmolLM2",
    )
    demo_cmd.add_argument("--text", action="append", default=[], help="a text to explain (repeatable)")
    demo_cmd.add_argument("--out", default="interp_widgets_demo.html", help="report path (default: %(default)s)")
    demo_cmd.add_argument("--no-builtin", action="store_true", help="explain only the --text inputs")
    demo_cmd.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help="fine-tuning steps of the monitored training run (default: %(default)s)",
    )
    demo_cmd.add_argument(
        "--prompt",
        default=GENERATION_PROMPT,
        help="the prompt SmolLM2 continues in the generation section (default: %(default)r)",
    )
    demo_cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    export_cmd = commands.add_parser(
        "export", help="offline HTML of an executed notebook, widgets live from their saved state (no CDN)"
    )
    export_cmd.add_argument("notebook", help="an executed .ipynb (nbclient and nbconvert --execute save widget state)")
    export_cmd.add_argument("-o", "--out", help="HTML path (default: the notebook's path with .html)")
    clean_cmd = commands.add_parser(
        "clean",
        help="repair or strip saved widget state in place (GitHub refuses a widget entry without 'state'), "
        "drop state no output shows and duplicate front-end modules; outputs and static pictures stay",
    )
    clean_cmd.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help=".ipynb files")
    clean_cmd.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 and name each problem if a notebook needs cleaning"
    )
    clean_cmd.add_argument(
        "--no-dedupe", action="store_true", help="keep every model's own copy of its front-end module"
    )
    transcoders_cmd = commands.add_parser("transcoders", help="transcoders of the embedded SmolLM2")
    transcoders_sub = transcoders_cmd.add_subparsers(dest="action", required=True)
    build_cmd = transcoders_sub.add_parser(
        "build",
        help="train a transcoder per layer of SmolLM2 on the shipped corpus's train split, report on held-out "
        "tokens and cache the set beside the dequantised model (an interrupted build resumes when rerun)",
    )
    _add_build_options(build_cmd)
    args = parser.parse_args(argv)
    if args.command == "transcoders":
        return _build_transcoders(args)
    if args.command == "export":
        return _export(args.notebook, args.out)
    if args.command == "clean":
        return _clean(args.notebooks, check=args.check, dedupe=not args.no_dedupe)

    from interp_widgets.demo import EXAMPLE_TEXTS
    from interp_widgets.demo.report import build_report

    texts = ([] if args.no_builtin else list(EXAMPLE_TEXTS)) + list(args.text)
    if not texts:
        parser.error("nothing to explain: give --text or drop --no-builtin")
    try:
        page = build_report(texts, steps=args.steps, prompt=args.prompt, progress=not args.quiet)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        print(f"interp-widgets demo: {err}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.write_text(page, encoding="utf-8")
    print(out)
    return 0


def _layers(value: str):
    if value == "all":
        return value
    try:
        layers = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'all' or block indices such as 0,1,5, got {value!r}") from None
    if not layers or min(layers) < 0:
        raise argparse.ArgumentTypeError(f"expected block indices >= 0, got {value!r}")
    return layers


def _add_build_options(cmd) -> None:
    from interp_widgets.demo_transcoders import DEFAULT_BUILD as d

    cmd.add_argument("--tokens", type=int, default=d.tokens, help="training tokens (default: %(default)s)")
    cmd.add_argument("--latents", type=int, default=d.latents, help="features per layer (default: %(default)s)")
    cmd.add_argument("--k", type=int, default=d.k, help="active features per token, TopK (default: %(default)s)")
    cmd.add_argument("--layers", type=_layers, default=d.layers, help="'all' or indices such as 0,1,5 (default: all)")
    cmd.add_argument(
        "--eval-tokens", type=int, default=d.eval_tokens, help="held-out tokens of the report (default: %(default)s)"
    )
    cmd.add_argument(
        "--explain-tokens",
        type=int,
        default=d.explain_tokens,
        help="training tokens whose top contexts explain the features, 0 for none (default: %(default)s)",
    )
    cmd.add_argument(
        "--checkpoint-every", type=float, default=600.0, help="seconds between checkpoints (default: %(default)s)"
    )
    cmd.add_argument("--out", help="the build's folder (default: in the cache, beside the dequantised SmolLM2)")
    cmd.add_argument("--rebuild", action="store_true", help="train again even if the folder holds a set")
    cmd.add_argument("--quiet", action="store_true", help="no progress bars")


def _build_transcoders(args) -> int:
    """``interp-widgets transcoders build``: train (or resume), evaluate, cache, print the per-layer report."""
    from interp_widgets.demo_transcoders import build_transcoders, report_text

    try:
        built = build_transcoders(
            tokens=args.tokens, latents=args.latents, k=args.k, layers=args.layers, eval_tokens=args.eval_tokens,
            explain_tokens=args.explain_tokens, checkpoint_every=args.checkpoint_every, out=args.out,
            rebuild=args.rebuild, progress=not args.quiet,
        )  # fmt: skip
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        print(f"interp-widgets transcoders build: {err}", file=sys.stderr)
        return 2
    print(report_text(built.report))
    print("timings: " + ", ".join(f"{key} {value}" for key, value in built.timings.items() if key != "set_checksum"))
    print(f"saved in {built.path}")
    return 0


def _export(notebook: str, out: str | None) -> int:
    from interp_widgets.notebook_export import export_notebook

    try:
        path = export_notebook(notebook, out)
    except (ValueError, FileNotFoundError) as err:
        print(f"interp-widgets export: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _clean(notebooks: list[str], *, check: bool, dedupe: bool) -> int:
    from interp_widgets.notebook_clean import clean_notebook

    status = 0
    for notebook in notebooks:
        try:
            problems = clean_notebook(notebook, check=check, dedupe=dedupe)
        except (ValueError, FileNotFoundError) as err:
            print(f"interp-widgets clean: {err}", file=sys.stderr)
            status = 2
            continue
        for problem in problems:
            print(f"{notebook}: {problem}" if check else f"{notebook}: fixed: {problem}")
        if problems and check:
            status = max(status, 1)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
