"""Where the built front ends live (``interp_widgets/static``) and the message when they are missing.

Example:
    >>> (STATIC_DIR / "token_highlight.js").name
    'token_highlight.js'
"""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
BUNDLE_MISSING = "JS bundle not built; run `npm --prefix js ci && npm --prefix js run build` or reinstall"
