"""Write js/src/lib/view_schema.json, the payload schema the front end checks saved outputs against, from the
Python view classes (interp_widgets.widgets._mime.payload_schema). Run it after changing a view's traits.

Usage: python scripts/view_schema.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from interp_widgets.widgets._payload_schema import schema_json

TARGET = Path(__file__).resolve().parent.parent / "js" / "src" / "lib" / "view_schema.json"

if __name__ == "__main__":
    text = schema_json()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        sys.exit(0 if current == text else f"{TARGET} is out of date; run python scripts/view_schema.py")
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
