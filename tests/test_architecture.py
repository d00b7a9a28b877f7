"""The package's structure: no import cycle between any two modules, counting imports inside functions.

The layer contracts themselves are import-linter contracts in ``pyproject.toml``, checked by ``lint-imports`` in the
README's test command; this test covers what a sibling-level contract cannot see (a module and its own package).
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_strongly_connected_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_any_two_modules():
    graph = grimp.build_graph("interp_widgets", cache_dir=None)
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    cycles = strongly_connected(edges)
    details = [
        " ; ".join(
            f"{a} -> {b} (line {', '.join(str(d['line_number']) for d in graph.get_import_details(importer=a, imported=b))})"
            for a in cycle
            for b in sorted(edges[a] & set(cycle))
        )
        for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(details)


def test_importing_the_package_or_its_widgets_loads_no_model_code():
    import subprocess
    import sys

    code = (
        "import sys, interp_widgets, interp_widgets.widgets; "
        "print(sorted(m for m in ('torch', 'transformers', 'interp_widgets.attribution') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"import interp_widgets / interp_widgets.widgets loaded {out}"


def test_every_top_level_module_has_a_layer():
    """A new module or package must be placed in the layers contract, or import-linter would not constrain it."""
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(contract for contract in config if contract["type"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    # "(name)" is an optional layer: a package placed before it lands (interventions, circuits) may be missing
    optional = {name[1:-1] for name in placed if name.startswith("(")}
    placed = {name.strip("()") for name in placed}
    package = root / "interp_widgets"
    modules = {f"interp_widgets.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {f"interp_widgets.{p.name}" for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert modules == placed - (optional - modules), (
        f"not in a layer: {sorted(modules - placed)}; listed but missing: {sorted(placed - modules)}"
    )
