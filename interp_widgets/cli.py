"""Command line: ``interp-widgets demo`` writes a self-contained offline HTML report; ``interp-widgets export``
turns an executed notebook into an offline HTML page with live widgets.

Example:
    $ interp-widgets demo --text "The waiter was rude but the pasta was superb." --out report.html
    $ interp-widgets export executed.ipynb -o executed.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interp_widgets.demo.report import DEFAULT_STEPS


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

    Not run here: ``demo`` fine-tunes the demo classifier and trains concepts (minutes on a CPU)::

        main(["demo", "--text", "Not bad at all.", "--out", "report.html"])
    """
    parser = argparse.ArgumentParser(prog="interp-widgets", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser("demo", help="explain built-in texts (and yours) with the demo classifier")
    demo_cmd.add_argument("--text", action="append", default=[], help="a text to explain (repeatable)")
    demo_cmd.add_argument("--out", default="interp_widgets_demo.html", help="report path (default: %(default)s)")
    demo_cmd.add_argument("--no-builtin", action="store_true", help="explain only the --text inputs")
    demo_cmd.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                          help="fine-tuning steps of the monitored training run (default: %(default)s)")
    demo_cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    export_cmd = commands.add_parser(
        "export", help="offline HTML of an executed notebook, widgets live from their saved state (no CDN)"
    )
    export_cmd.add_argument("notebook", help="an executed .ipynb (nbclient and nbconvert --execute save widget state)")
    export_cmd.add_argument("-o", "--out", help="HTML path (default: the notebook's path with .html)")
    args = parser.parse_args(argv)
    if args.command == "export":
        return _export(args.notebook, args.out)

    from interp_widgets.demo import EXAMPLE_TEXTS
    from interp_widgets.demo.report import build_report

    texts = ([] if args.no_builtin else list(EXAMPLE_TEXTS)) + list(args.text)
    if not texts:
        parser.error("nothing to explain: give --text or drop --no-builtin")
    try:
        page = build_report(texts, steps=args.steps, progress=not args.quiet)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        print(f"interp-widgets demo: {err}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.write_text(page, encoding="utf-8")
    print(out)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
