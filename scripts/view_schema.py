"""Write js/src/lib/view_schema.json, the payload schema the front end checks saved outputs against, and
js/src/lib/view_traits.js, each view's data typedef and DATA_TRAITS list, from the Python view classes
(interp_widgets.widgets._payload_schema). Run it after changing a view's data or traits.

Usage: python scripts/view_schema.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from interp_widgets.widgets._payload_schema import schema_json, traits_js

LIB = Path(__file__).resolve().parent.parent / "js" / "src" / "lib"
TARGETS = {LIB / "view_schema.json": schema_json, LIB / "view_traits.js": traits_js}

if __name__ == "__main__":
    for target, generate in TARGETS.items():
        text = generate()
        if "--check" in sys.argv[1:]:
            current = target.read_text(encoding="utf-8") if target.exists() else ""
            if current != text:
                sys.exit(f"{target} is out of date; run python scripts/view_schema.py")
            continue
        target.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {target}")
