"""The Python↔JS trait contract: for every view, the JS ``@typedef`` of its model, the traits its JS reads and
writes, and the ``sync=True`` traits of its Python class are the same names.

Views are found from the Python side (every ``InterpWidget`` subclass in ``interp_widgets.widgets`` that sets
``_bundle``), so a new view without a typedef, or a trait added on one side only, fails here. The JS side is read
statically from ``js/src/<bundle>.js`` and the ``js/src/lib/`` modules it imports (followed transitively):

* the typedef: ``@typedef {object} <Stem>Model`` (``TokenHighlightWidget`` → ``TokenHighlightModel``,
  ``ConceptBrowser`` → ``ConceptBrowserModel``) and its ``@property`` names, or, where the model is an intersection
  ``@typedef {import("./lib/view_traits.js").<Stem>Data & <Stem>State} <Stem>Model``, the ``@property`` names of its
  parts (the data part is generated from the view-data class: ``python scripts/view_schema.py``);
* the traits used: ``model.get("…")``, ``model.set("…")``, ``"change:…"`` event names, the string elements of
  ``const …TRAITS = [ … ]`` / ``new Set([ … ])`` lists (subscribed with `` `change:${name}` ``), and the keys of the
  object literals given to ``save({…})`` (lib/view.js) or to a one-line wrapper of it such as
  ``resetPage = (changes) => save({ ...changes, page: 0 })``; a list imported from the generated
  ``lib/view_traits.js`` (``import { TOKEN_HIGHLIGHT_DATA_TRAITS as DATA_TRAITS } …``) counts as the names it holds.

Comments are stripped first (JSDoc examples mention ``model.get("scores")``). Reads through a variable
(``model.get(name)`` in a helper) are invisible here; such names must also appear in a ``…TRAITS`` list (the view
redraws on them) or a literal read, or the typedef/JS comparison below reports them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import anywidget
import pytest

import interp_widgets.widgets as widgets_package
from interp_widgets.widgets import InterpWidget

JS_SRC = Path(__file__).resolve().parents[2] / "js" / "src"

# Traits that one side has and the other deliberately lacks, per view class name: {class: {trait: reason}}.
# A trait listed here is left out of the comparison; keep each reason to one line. Currently none: every synced
# trait is read or written by its view, and the JS uses no trait Python does not sync.
ALLOWED_DIFFERENCES: dict[str, dict[str, str]] = {}


def _anywidget_base_traits() -> set[str]:
    """Synced traits that anywidget and ipywidgets add to every widget (``_esm``, ``_css``, ``_anywidget_id`` appear
    on instances only, so they are read from one instance of a throwaway subclass)."""

    class Probe(anywidget.AnyWidget):
        _esm = "export default {}"
        _css = ".probe {}"

    probe = Probe()
    try:
        return set(probe.trait_names(sync=True)) | set(anywidget.AnyWidget.class_trait_names(sync=True))
    finally:
        probe.close()


def _views() -> list[type[InterpWidget]]:
    """Every concrete view class of the package: InterpWidget subclasses in interp_widgets.widgets with a _bundle."""
    for info in pkgutil.walk_packages(widgets_package.__path__, widgets_package.__name__ + "."):
        importlib.import_module(info.name)
    found, stack = [], [InterpWidget]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith(widgets_package.__name__ + ".") and cls.__dict__.get("_bundle"):
            found.append(cls)
    return sorted(set(found), key=lambda cls: cls.__name__)


# --- reading the JS -------------------------------------------------------------------------------------------

_REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {""}
_REGEX_AFTER_WORDS = {"return", "typeof", "case", "in", "of", "delete", "void", "new", "yield", "await", "else"}


def strip_comments(source: str) -> str:
    """``source`` with every ``//`` and ``/* */`` comment replaced by a space; strings, template literals (with
    nested ``${…}``) and regex literals are kept as they are, so comment markers or quotes inside them are not
    taken for comments."""
    out: list[str] = []
    i, n = 0, len(source)
    templates: list[int] = []  # brace depth at which each open template's ${ … } expression returns to the template
    depth = 0

    def last_significant() -> str:
        text = "".join(out[-8:]).rstrip()
        if not text:
            return ""
        word = re.search(r"[A-Za-z_$][\w$]*$", text)
        return word.group(0) if word else text[-1]

    def template_from(j: int) -> int:
        """Scan template text from ``j`` to its closing backtick (returns after it) or a ``${`` (returns after it,
        having pushed the depth to return at)."""
        nonlocal depth
        while j < n:
            if source[j] == "\\":
                j += 2
            elif source[j] == "`":
                return j + 1
            elif source.startswith("${", j):
                templates.append(depth)
                depth += 1
                return j + 2
            else:
                j += 1
        return n

    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            out.append(source[i : j + 1])
            i = j + 1
        elif c == "`":
            j = template_from(i + 1)
            out.append(source[i:j])
            i = j
        elif c == "/" and (last_significant() in _REGEX_AFTER or last_significant() in _REGEX_AFTER_WORDS):
            j, in_class = i + 1, False
            while j < n and (in_class or source[j] != "/") and source[j] != "\n":
                if source[j] == "\\":
                    j += 1
                elif source[j] == "[":
                    in_class = True
                elif source[j] == "]":
                    in_class = False
                j += 1
            out.append(source[i : j + 1])
            i = j + 1
        elif c == "{":
            depth += 1
            out.append(c)
            i += 1
        elif c == "}":
            depth -= 1
            out.append(c)
            i += 1
            if templates and depth == templates[-1]:
                templates.pop()
                j = template_from(i)
                out.append(source[i:j])
                i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _balanced(code: str, start: int) -> str:
    """The text inside the bracket that opens at ``code[start]`` (strings skipped, nesting counted)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i = [], start
    while i < len(code):
        c = code[i]
        if c in "\"'`":
            j = i + 1
            while j < len(code) and code[j] != c:
                j += 2 if code[j] == "\\" else 1
            i = j
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return code[start + 1 : i]
        i += 1
    raise ValueError(f"unbalanced bracket at {code[start : start + 60]!r}")


def _top_level_items(text: str) -> list[str]:
    """``text`` split at its top-level commas."""
    items, depth, current, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c in "\"'`":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            current.append(text[i : j + 1])
            i = j + 1
            continue
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


_STRING = r"""(?:"([^"\\]*)"|'([^'\\]*)'|`([^`$\\]*)`)"""


def traits_used(code: str) -> set[str]:
    """Trait names one comment-free JS module reads or writes (see the module docstring for the forms)."""
    names = set()
    for match in re.finditer(r"\bmodel\.(?:get|set)\(\s*" + _STRING, code):
        names.add(next(g for g in match.groups() if g is not None))
    for match in re.finditer(r"""["'`]change:([A-Za-z_]\w*)["'`]""", code):
        names.add(match.group(1))
    for match in re.finditer(r"\bconst\s+\w*TRAITS\s*=\s*(?:new\s+Set\(\s*)?\[", code):
        for item in _top_level_items(_balanced(code, match.end() - 1)):
            if re.fullmatch(r"\.\.\.[A-Za-z_]\w*", item):
                continue  # a spread of a list imported from lib/view_traits.js: imported_lists counts its names
            literal = re.fullmatch(_STRING, item)
            assert literal, f"non-literal entry {item!r} in a TRAITS list"
            names.add(next(g for g in literal.groups() if g is not None))
    writers = {"save"} | set(re.findall(r"\bconst\s+(\w+)\s*=\s*\(\s*\w*\s*\)\s*=>\s*save\(", code))
    for match in re.finditer(r"\b(?:" + "|".join(sorted(writers)) + r")\(\s*\{", code):
        for item in _top_level_items(_balanced(code, match.end() - 1)):
            key = re.match(r"(?:([A-Za-z_]\w*)\s*(?::|$)|[\"']([A-Za-z_]\w*)[\"']\s*:)", item)
            if key:
                names.add(key.group(1) or key.group(2))
            else:
                assert item.startswith("..."), f"cannot read the trait name of {item!r} in a save({{…}})"
    return names


GENERATED = JS_SRC / "lib" / "view_traits.js"


def generated_lists() -> dict[str, list[str]]:
    """The trait lists that the generated ``lib/view_traits.js`` exports, by export name."""
    code = strip_comments(GENERATED.read_text(encoding="utf-8"))
    return {name: re.findall(r'"(\w+)"', body) for name, body in re.findall(r"export const (\w+) = \[(.*?)\];", code)}


def imported_lists(code: str) -> set[str]:
    """Trait names of the lists one comment-free JS module imports from the generated ``lib/view_traits.js``."""
    lists, names = generated_lists(), set()
    for match in re.finditer(r"""import\s*\{([^}]*)\}\s*from\s*["'](?:\.{1,2}/)+(?:lib/)?view_traits\.js["']""", code):
        for item in match.group(1).split(","):
            if item.strip():
                names.update(lists[item.split(" as ")[0].strip()])
    return names


def js_modules(entry: Path) -> list[Path]:
    """``entry`` and the JS modules it imports by relative path, transitively (CSS imports are skipped)."""
    seen, todo = [], [entry.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        code = strip_comments(path.read_text(encoding="utf-8"))
        for spec in re.findall(r"""\b(?:import|from)\s*["'](\.{1,2}/[^"']+\.js)["']""", code):
            todo.append((path.parent / spec).resolve())
    return seen


def typedef_fields(source: str, name: str) -> list[str] | None:
    """``@property`` names of the JSDoc ``@typedef {object} <name>`` in ``source``, or None if there is none."""
    for block in re.findall(r"/\*\*(.*?)\*/", source, flags=re.S):
        if not re.search(r"@typedef\s+\{object\}\s+" + re.escape(name) + r"\b", block):
            continue
        fields = []
        for match in re.finditer(r"@property\s+\{", block):
            rest = block[match.end() - 1 :]
            type_text = _balanced(rest, 0)
            field = re.match(r"\s*\[?([A-Za-z_]\w*)", rest[len(type_text) + 2 :])
            assert field, f"@property without a name in {name}: {rest[:80]!r}"
            fields.append(field.group(1))
        return fields
    return None


def model_fields(entry: Path, name: str) -> list[str] | None:
    """``@property`` names of the model typedef ``name`` in ``entry``: an ``{object}`` typedef, or an intersection
    ``A & B`` of typedefs of this file or of ``import("./…").Name``; None if there is none."""
    source = entry.read_text(encoding="utf-8")
    fields = typedef_fields(source, name)
    if fields is not None:
        return fields
    match = re.search(r"@typedef\s+\{([^{}]*)\}\s+" + re.escape(name) + r"\b", source)
    if not match:
        return None
    fields = []
    for part in match.group(1).split("&"):
        imported = re.fullmatch(r"""\s*import\(["'](.+?)["']\)\.(\w+)\s*""", part)
        if imported:
            part_fields = typedef_fields(
                (entry.parent / imported.group(1)).read_text(encoding="utf-8"), imported.group(2)
            )
        else:
            part_fields = typedef_fields(source, part.strip())
        assert part_fields is not None, f"{entry.name}: {name} is made of {part.strip()!r}, which has no typedef"
        fields += part_fields
    return fields


def _model_name(cls: type) -> str:
    return cls.__name__.removesuffix("Widget") + "Model"


# --- the tests ---------------------------------------------------------------------------------------------------

BASE_TRAITS = _anywidget_base_traits()
VIEWS = _views()


def test_views_are_discovered():
    assert len(VIEWS) >= 6, f"expected the six views, found {[cls.__name__ for cls in VIEWS]}"
    assert {"_esm", "_css", "_model_name", "layout"} <= BASE_TRAITS


@pytest.mark.parametrize("view", VIEWS, ids=lambda cls: cls.__name__)
def test_js_typedef_and_trait_use_match_the_python_synced_traits(view):
    entry = JS_SRC / f"{view._bundle}.js"
    assert entry.is_file(), f"{view.__name__}._bundle = {view._bundle!r} but {entry} does not exist"
    model = _model_name(view)
    fields = model_fields(entry, model)
    assert fields is not None, f"{entry.name} has no `@typedef {{object}} {model}` of {view.__name__}'s synced traits"
    assert len(fields) == len(set(fields)), (
        f"{model} lists a trait twice: {sorted(f for f in fields if fields.count(f) > 1)}"
    )

    modules = js_modules(entry)
    used: dict[str, list[str]] = {}
    for path in modules:
        if path == GENERATED:  # it declares every view's data; each view uses the lists it imports
            continue
        code = strip_comments(path.read_text(encoding="utf-8"))
        for name in traits_used(code) | imported_lists(code):
            used.setdefault(name, []).append(path.relative_to(JS_SRC).as_posix())

    allowed = ALLOWED_DIFFERENCES.get(view.__name__, {})
    python = set(view.class_trait_names(sync=True)) - BASE_TRAITS - set(allowed)
    typedef = set(fields) - set(allowed)
    js = set(used) - set(allowed)

    problems = []

    def compare(left_name, left, right_name, right):
        for missing_from, names in ((right_name, left - right), (left_name, right - left)):
            if names:
                shown = [
                    f"{name} (used in {', '.join(used[name])})" if name in used else name for name in sorted(names)
                ]
                source = left_name if missing_from == right_name else right_name
                problems.append(f"in {source}, not in {missing_from}: {', '.join(shown)}")

    compare(f"Python {view.__name__} sync=True traits", python, f"JS typedef {model}", typedef)
    compare(f"JS typedef {model}", typedef, f"the traits {entry.name} and its lib/ imports read or write", js)
    assert not problems, f"{view.__name__} ↔ {entry.name} trait contract broken:\n  " + "\n  ".join(problems)


def test_the_scanner_reads_code_not_comments_strings_or_regexes():
    code = strip_comments(
        """
        /** @example model.get("in_jsdoc") */
        const re = /["'`]\\/\\//g; // model.get("in_line_comment")
        const url = "https://example.org/*not a comment*/";
        const TRAITS = ["listed", 'also_listed'];
        const text = `${model.get("in_template")} ${x ? `inner ${model.get("nested")}` : ""} // kept`;
        const resetPage = (changes) => save({ ...changes, page: 0 });
        resetPage({ sort_by: a ? -1 : b, descending: f(g, h) });
        save({ selected: model.get("read") === i ? -1 : i });
        model.on("change:watched", redraw);
        """
    )
    assert "in_jsdoc" not in code and "in_line_comment" not in code and "/*not a comment*/" in code
    assert traits_used(code) == {
        "listed", "also_listed", "in_template", "nested", "page", "sort_by", "descending", "selected", "read",
        "watched",
    }  # fmt: skip
