"""The README's Python examples run as written (so the README stays true)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_one_example_per_family():
    assert len(BLOCKS) == 3
    code_lines = [
        [line for line in block.splitlines() if line.strip() and not line.startswith(("import", "from"))]
        for block in BLOCKS
    ]
    assert all(len(lines) <= 12 for lines in code_lines), [len(lines) for lines in code_lines]


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=["attributions", "concepts", "geometry"])
def test_readme_example_runs(index):
    namespace: dict = {}
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), namespace)
