"""Run every benchmark script (or the ones named) and print their ``bench:`` lines, plus a summary table.

Each benchmark prints ``bench: <name> = <value> (goal <op> <target>)``. This runner checks each line against its
goal and reports MET / MISSED; it never fails on a missed goal (performance goals live here, not in tests).

Example:
    $ python benchmarks/run.py                 # all benchmarks
    $ python benchmarks/run.py attribution     # benchmarks/attribution.py only
"""

from __future__ import annotations

import operator
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(
    r"^bench: (?P<name>\S+) = (?P<value>[-+0-9.eE]+|nan)\S* \(goal (?P<op><=|>=|<|>|==) (?P<target>[-+0-9.eE]+)\S*\)"
)
OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}


def parse(line: str) -> tuple[str, float, str, float] | None:
    """Parse one ``bench:`` line into ``(name, value, op, target)``.

    Example:
        >>> parse("bench: ig_time_ratio = 0.41 (goal <= 0.5)")
        ('ig_time_ratio', 0.41, '<=', 0.5)
    """
    match = LINE.match(line.strip())
    if not match:
        return None
    return match["name"], float(match["value"]), match["op"], float(match["target"])


def main(names: list[str]) -> int:
    scripts = (
        [HERE / f"{n}.py" for n in names]
        if names
        else sorted(p for p in HERE.glob("*.py") if p.name not in ("run.py",) and not p.name.startswith("_"))
    )
    results = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:  # type: ignore[union-attr]
            print(line, end="", flush=True)
            parsed = parse(line)
            if parsed:
                results.append(parsed)
        proc.wait()
        if proc.returncode:
            print(f"!! {script.name} exited with {proc.returncode}")
    print("\n== summary")
    for name, value, op, target in results:
        status = "MET" if OPS[op](value, target) else "MISSED"
        print(f"{status:6s} {name} = {value:.4g} (goal {op} {target:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
