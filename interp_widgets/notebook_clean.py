"""Saved widget state that GitHub, nbviewer and nbconvert accept (``interp-widgets clean``).

Notebook front ends save the state of live widgets in ``metadata.widgets["application/vnd.jupyter.widget-state+json"]``
(nbclient and ``nbconvert --execute`` always; JupyterLab and Notebook 7 with "Save Widget State Automatically" on).
Three things go wrong with it:

* GitHub refuses to render a notebook whose entry lacks ``state`` ("the 'state' key is missing from
  'metadata.widgets'"; Colab and some older front ends write the model states directly under the entry).
  :func:`clean_widget_metadata` moves such model states under ``state``, or removes an entry it cannot repair.
* Front ends save every model they know, also those no output shows (closed or never displayed widgets). Those
  are removed: only models reachable from a ``widget-view`` output (directly or through ``IPY_MODEL_`` / ``anywidget:``
  references of other saved models) are kept. When nothing is left the entry goes, and the outputs show their
  static fallbacks (``image/svg+xml`` / ``image/png``), which are never touched.
* anywidget saves each model's whole ES module (``_esm``) and stylesheet (``_css``), so ten views of one bundle
  carry ten copies of it. Duplicates are replaced by a small loader module: anywidget's front end imports ``_esm``
  from the model's own state only (a ``Blob`` URL, or an ``http(s)`` URL that would need a server), but each model
  gets ``model.widget_manager``, whose ``get_model(id)`` returns another saved model. The loader reads the source
  from the first model carrying it and runs that module's ``initialize`` and ``render``. A duplicate ``_css`` is
  emptied: anywidget keeps one ``<style>`` per ``_anywidget_id`` in the page and skips an empty ``_css``, so the
  first model's stylesheet styles every view of that class. Cleaning again expands and re-deduplicates the
  loaders, so a notebook stays consistent after more cells are run and saved.

Example:
    >>> import nbformat
    >>> notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("slider")])
    >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"d3f1": {"model_name": "IntSliderModel", "state": {}}}}
    >>> github_widget_problem(notebook)
    "metadata.widgets['application/vnd.jupyter.widget-state+json'] has no 'state' key (GitHub refuses to render the notebook)"
    >>> clean_widget_metadata(notebook)  # no output shows model d3f1
    ["metadata.widgets['application/vnd.jupyter.widget-state+json'] has no 'state' key (GitHub refuses to render the notebook): moved 1 model state(s) under 'state'", 'removed the saved state of 1 model(s) that no output shows: d3f1', 'removed metadata.widgets: no saved widget state is left (outputs show their static fallbacks)']
    >>> "widgets" in notebook.metadata, github_widget_problem(notebook)
    (False, None)
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
_ENTRY = f"metadata.widgets[{WIDGET_STATE_MIME!r}]"
_REFERENCE = re.compile(r"^(?:IPY_MODEL_|anywidget:)(\S+)$")
#: ``_esm`` sources shorter than this are left alone (the loader itself is about 900 characters).
MIN_DEDUPE_CHARS = 2048
_LOADER_HEAD = "// interp_widgets deduplicated _esm: source "
_LOADER_LINE = re.compile(
    r"^// interp_widgets deduplicated _esm: source (\S+) sha256 ([0-9a-f]{64}) css (shared|own)\n"
)
_LOADER_BODY = """\
// anywidget imports _esm from this model's own state; this loader imports the identical module saved once in
// model MODEL (interp-widgets clean) through the widget manager, then runs its initialize and render.
const SOURCE = MODEL;
let loaded;
function load(model) {
  loaded ??= (async () => {
    const source = (await model.widget_manager.get_model(SOURCE)).get("_esm");
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    try {
      const mod = await import(/* webpackIgnore: true */ url);
      if (mod.render) return { render: mod.render };
      return typeof mod.default === "function" ? await mod.default() : mod.default;
    } finally {
      URL.revokeObjectURL(url);
    }
  })();
  return loaded;
}
export default {
  async initialize(context) { return (await load(context.model)).initialize?.(context); },
  async render(context) { return (await load(context.model)).render?.(context); },
};
"""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def esm_loader(source_model: str, sha256: str, *, shared_css: bool) -> str:
    """The ``_esm`` that replaces a duplicate: it loads the module saved in model ``source_model`` (whose ``_esm``
    has SHA-256 ``sha256``) through anywidget's widget manager.

    Example:
        >>> loader = esm_loader("4b1e", "0" * 64, shared_css=True)
        >>> loader.splitlines()[0]
        '// interp_widgets deduplicated _esm: source 4b1e sha256 0000000000000000000000000000000000000000000000000000000000000000 css shared'
        >>> 'get_model(SOURCE)' in loader, len(loader) < 1200
        (True, True)
    """
    head = f"{_LOADER_HEAD}{source_model} sha256 {sha256} css {'shared' if shared_css else 'own'}\n"
    return head + _LOADER_BODY.replace("MODEL", json.dumps(source_model))


def github_widget_problem(notebook) -> str | None:
    """The reason GitHub's notebook renderer would refuse ``notebook`` because of its widget metadata, or None.

    GitHub reads ``metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]``: the entry must have
    ``state`` or be absent.

    Example:
        >>> import nbformat
        >>> notebook = nbformat.v4.new_notebook()
        >>> github_widget_problem(notebook) is None
        True
        >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0}}
        >>> github_widget_problem(notebook).endswith("has no 'state' key (GitHub refuses to render the notebook)")
        True
    """
    widgets = notebook.get("metadata", {}).get("widgets")
    if widgets is None:
        return None
    if not isinstance(widgets, dict):
        return "metadata.widgets is not an object"
    if WIDGET_STATE_MIME not in widgets:
        return None
    entry = widgets[WIDGET_STATE_MIME]
    if not isinstance(entry, dict):
        return f"{_ENTRY} is not an object"
    if "state" not in entry:
        return f"{_ENTRY} has no 'state' key (GitHub refuses to render the notebook)"
    if not isinstance(entry["state"], dict):
        return f"{_ENTRY}['state'] is not an object"
    return None


def _shown_models(notebook) -> set[str]:
    shown = set()
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) or []:
            view = (output.get("data") or {}).get(WIDGET_VIEW_MIME)
            if isinstance(view, dict) and isinstance(view.get("model_id"), str):
                shown.add(view["model_id"])
    return shown


def _references(value) -> set[str]:
    if isinstance(value, str):
        match = _REFERENCE.match(value)
        return {match.group(1)} if match else set()
    if isinstance(value, dict):
        return set().union(*(_references(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_references(v) for v in value)) if value else set()
    return set()


def _reachable(states: dict, roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = [model for model in roots if model in states]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        todo += [ref for ref in _references(states[model].get("state", {})) if ref in states and ref not in seen]
    return seen


def _is_anywidget(model: dict) -> bool:
    return (model.get("model_module") == "anywidget" and isinstance(model.get("state"), dict)
            and isinstance(model["state"].get("_esm"), str))  # fmt: skip


def _expand_loaders(states: dict) -> list[str]:
    """Put the full source back into every loader ``_esm``; returns problems (loaders whose source is gone)."""
    sources = {}
    for model_id, model in states.items():
        if _is_anywidget(model) and not _LOADER_LINE.match(model["state"]["_esm"]):
            sources.setdefault(_sha256(model["state"]["_esm"]), model["state"])
    problems, broken = [], []
    for model_id, model in states.items():
        match = _LOADER_LINE.match(model["state"]["_esm"]) if _is_anywidget(model) else None
        if not match:
            continue
        source = sources.get(match.group(2))
        if source is None:
            broken.append(model_id)
            continue
        model["state"]["_esm"] = source["_esm"]
        if match.group(3) == "shared":
            model["state"]["_css"] = source.get("_css", "")
    for model_id in broken:
        del states[model_id]
    if broken:
        problems.append(f"removed the saved state of {len(broken)} model(s) whose deduplicated _esm points at a "
                        f"module that is no longer saved: {', '.join(sorted(broken))}")  # fmt: skip
    return problems


def _dedupe(states: dict) -> tuple[int, int]:
    """Replace repeated ``_esm`` (and matching ``_css``) by loaders; returns (models changed, characters saved)."""
    first: dict[str, str] = {}
    changed = saved = 0
    for model_id, model in states.items():
        if not _is_anywidget(model):
            continue
        state = model["state"]
        esm = state["_esm"]
        if len(esm) < MIN_DEDUPE_CHARS or _LOADER_LINE.match(esm):
            continue
        digest = _sha256(esm)
        if digest not in first:
            first[digest] = model_id
            continue
        source = states[first[digest]]["state"]
        css = state.get("_css", "")
        shared_css = (
            bool(css) and css == source.get("_css") and state.get("_anywidget_id") == source.get("_anywidget_id")
        )
        state["_esm"] = esm_loader(first[digest], digest, shared_css=shared_css)
        saved += len(esm) - len(state["_esm"])
        if shared_css:
            state["_css"] = ""
            saved += len(css)
        changed += 1
    return changed, saved


def clean_widget_metadata(notebook, *, dedupe: bool = True) -> list[str]:
    """Repair, prune and (with ``dedupe``) deduplicate the saved widget state of ``notebook`` (an ``nbformat``
    node) in place; returns one message per problem it fixed (empty: nothing changed). Outputs are not touched.

    Example:
        >>> import nbformat
        >>> notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
        >>> clean_widget_metadata(notebook)
        []
        >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0, "state": {}}}
        >>> clean_widget_metadata(notebook)
        ['removed metadata.widgets: no saved widget state is left (outputs show their static fallbacks)']
    """
    metadata = notebook.setdefault("metadata", {})
    if "widgets" not in metadata:
        return []
    before = copy.deepcopy(metadata["widgets"])
    widgets = metadata["widgets"]
    problems: list[str] = []
    if not isinstance(widgets, dict):
        del metadata["widgets"]
        return ["removed metadata.widgets: it is not an object"]
    if WIDGET_STATE_MIME in widgets:
        entry = widgets[WIDGET_STATE_MIME]
        problem = github_widget_problem(notebook)
        if not isinstance(entry, dict) or ("state" in entry and not isinstance(entry["state"], dict)):
            del widgets[WIDGET_STATE_MIME]
            problems.append(f"{problem}: removed it")
        elif "state" not in entry:
            models = {k: v for k, v in entry.items() if isinstance(v, dict) and "model_name" in v}
            if models:
                widgets[WIDGET_STATE_MIME] = {"version_major": entry.get("version_major", 2),
                                              "version_minor": entry.get("version_minor", 0), "state": models}  # fmt: skip
                problems.append(f"{problem}: moved {len(models)} model state(s) under 'state'")
            else:
                del widgets[WIDGET_STATE_MIME]
                problems.append(f"{problem}: removed it (it holds no model state to repair)")
    entry = widgets.get(WIDGET_STATE_MIME)
    if entry is not None:
        states = entry["state"]
        problems += _expand_loaders(states)
        keep = _reachable(states, _shown_models(notebook))
        dropped = [model for model in states if model not in keep]
        for model in dropped:
            del states[model]
        if dropped:
            listed = ", ".join(sorted(dropped)[:10]) + (" …" if len(dropped) > 10 else "")
            problems.append(f"removed the saved state of {len(dropped)} model(s) that no output shows: {listed}")
        if dedupe:
            changed, saved = _dedupe(states)
            old = (before.get(WIDGET_STATE_MIME) or {}).get("state") if isinstance(before, dict) else None
            if changed and states != old:
                problems.append(f"replaced {changed} duplicate copies of widget front-end modules by loaders "
                                f"({saved / 1024:.0f} KB smaller)")  # fmt: skip
        if not states:
            del widgets[WIDGET_STATE_MIME]
    if not widgets:
        del metadata["widgets"]
        problems.append("removed metadata.widgets: no saved widget state is left (outputs show their static fallbacks)")
    if not problems and metadata.get("widgets") != before:
        problems.append("rewrote the saved widget state")  # e.g. loaders pointed at a model that was removed
    return problems


def clean_notebook(path: str | Path, *, check: bool = False, dedupe: bool = True) -> list[str]:
    """Clean the widget metadata of the notebook file at ``path`` in place (see :func:`clean_widget_metadata`);
    returns the problems found. With ``check`` nothing is written. A notebook without problems is not rewritten.

    Example:
        >>> import nbformat
        >>> path = getfixture("tmp_path") / "run.ipynb"
        >>> notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
        >>> notebook.metadata["widgets"] = {WIDGET_STATE_MIME: {"0a1b": {"model_name": "LayoutModel", "state": {}}}}
        >>> nbformat.write(notebook, path)
        >>> len(clean_notebook(path, check=True)), "widgets" in nbformat.read(path, as_version=4).metadata
        (3, True)
        >>> len(clean_notebook(path)), clean_notebook(path), "widgets" in nbformat.read(path, as_version=4).metadata
        (3, [], False)
    """
    import nbformat

    source = Path(path)
    if source.suffix != ".ipynb":
        raise ValueError(f"{source} is not a notebook; give a .ipynb file")
    if not source.is_file():
        raise FileNotFoundError(f"no notebook at {source}")
    text = source.read_text(encoding="utf-8")
    try:
        notebook = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    except (json.JSONDecodeError, nbformat.reader.NotJSONError) as err:
        raise ValueError(f"{source} is not valid notebook JSON ({err})") from err
    problems = clean_widget_metadata(notebook, dedupe=dedupe)
    if problems and not check:
        nbformat.validate(notebook)
        source.write_text(nbformat.writes(notebook), encoding="utf-8")
    return problems
