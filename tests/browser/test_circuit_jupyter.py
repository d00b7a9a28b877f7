"""The circuit view in real JupyterLab: with a live kernel, hover a node (its tooltip), click it (its details, from the
notebook or the kernel), pin two nodes with Enter, group them with G and a typed name, intervene (the kernel says
what it needs), then save without widget state; reopened with no kernel, the mime renderer rebuilds the view with
the pins and the group, and an intervene click says it needs the kernel. Hostile labels stay text. And marimo
renders the view.
"""

from __future__ import annotations

import json
import time

import nbformat
import pytest
from playwright.sync_api import expect

from tests.browser.harness import notebook_cells, printed_state, run_cells, wait_for_kernel_idle
from tests.browser.marimo_app import cell_output, marimo_app, write_marimo_notebook

pytestmark = pytest.mark.browser

NOTEBOOK = "circuit.ipynb"
HOSTILE = "<img src=x onerror=alert(1)>"
SETUP = f"""\
import json
from tests.circuits.test_graph import random_graph
graph = random_graph(0)
labels = {{node_id: "{HOSTILE} " + node_id for node_id in graph.node_ids[: len(graph.features)]}}
view = graph.widget(labels=labels)
view
"""
PRINT_STATE = (
    'print("IW_STATE", json.dumps({"pinned": view.pinned, "groups": view.groups, "selected": view.selected, '
    '"kinds": [graph.node_kinds[graph.node_index(i)] for i in view.pinned]}))\n'
)

# Points over nodes of the stage (in page coordinates), found by moving over a grid until the tooltip shows.
FIND_NODES = """(stage) => {
  const box = stage.getBoundingClientRect();
  const tip = stage.querySelector(".iw-circuit-tip");
  const found = [];
  return (async () => {
    const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    for (let y = box.top + 8; y < box.bottom - 50 && found.length < 3; y += 9)
      for (let x = box.left + 46; x < box.right - 10 && found.length < 3; x += 7) {
        stage.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
        await frame();
        if (!tip.hidden && tip.textContent.includes("feature")) { found.push([x, y]); x += 60; }
      }
    stage.dispatchEvent(new MouseEvent("mouseleave", {bubbles: true}));
    return found;
  })();
}"""


def focused_in_accessibility_tree(page) -> dict:
    """The focused element as chromium's accessibility tree exposes it to a screen reader: its role, name and
    selection, and its parent's role, name and description (the tree assistive technology reads, through the DevTools
    protocol)."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        cdp.detach()
    by_id = {node["nodeId"]: node for node in nodes}
    props = lambda node: {p["name"]: p["value"].get("value") for p in node.get("properties", [])}
    found = [
        n for n in nodes if not n.get("ignored") and props(n).get("focused") and n["role"]["value"] != "RootWebArea"
    ]
    assert len(found) == 1, [(n["role"], n.get("name")) for n in found]
    node = found[0]
    parent = by_id.get(node.get("parentId"), {})
    return {
        "role": node["role"]["value"],
        "name": node.get("name", {}).get("value"),
        "selected": props(node).get("selected"),
        "parent": parent.get("role", {}).get("value"),
        "listbox": parent.get("name", {}).get("value", ""),
        "listbox_description": parent.get("description", {}).get("value", ""),
    }


@pytest.fixture()
def circuit_notebook(jupyter_server) -> str:
    jupyter_server.write_notebook(NOTEBOOK, (SETUP, PRINT_STATE))
    yield NOTEBOOK
    jupyter_server.reset()


def _save(page, server, name: str, pins: int) -> dict:
    """Ctrl+S, then wait until the file's view output holds the payload with ``pins`` pins (the output follows the
    view state)."""
    notebook_cells(page).nth(1).locator(".jp-InputPrompt").click()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page.keyboard.press("Control+s")
        page.wait_for_timeout(800)
        try:
            saved = nbformat.read(server.root_dir / name, as_version=4)
        except (OSError, ValueError):
            continue
        outputs = [o for o in saved.cells[0].outputs if "application/vnd.interp-widgets.v1+json" in o.get("data", {})]
        if outputs and len(outputs[0]["data"]["application/vnd.interp-widgets.v1+json"]["state"]["pinned"]) == pins:
            return saved
    raise AssertionError(f"{name} was not saved with {pins} pins")


def test_hover_click_pin_group_save_and_reopen_without_a_kernel(jupyter_server, circuit_notebook, recorded_page):
    page = recorded_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(jupyter_server.notebook_url(circuit_notebook))
    wait_for_kernel_idle(page)
    run_cells(page, 0)
    view = notebook_cells(page).nth(0).locator(".iw-circuit")
    stage = view.locator(".iw-circuit-stage")
    expect(stage).to_be_visible(timeout=60_000)
    points = stage.evaluate(FIND_NODES)
    assert points, "no feature node under the pointer"

    # hover: the tooltip names the node (its hostile label as text) and its activation
    page.mouse.move(*points[0])
    tip = view.locator(".iw-circuit-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(HOSTILE)
    expect(tip).to_contain_text("activation")
    # click: the detail pane (contexts with the activating token marked, the vocabulary, inputs and outputs)
    page.mouse.click(*points[0])
    pane = view.locator(".iw-circuit-pane")
    expect(pane).to_contain_text("Top activating contexts", timeout=30_000)
    expect(pane.locator(".iw-circuit-peak")).to_have_count(1)
    expect(pane).to_contain_text("Strongest inputs")
    # intervene with the kernel but without the graph's model: it says what it needs
    view.locator(".iw-circuit-intervene").click()
    expect(view.locator(".iw-circuit-status")).to_contain_text("need the kernel and the graph's model", timeout=30_000)

    # keyboard: the graph is one tab stop; Enter pins the focused node, an arrow moves, Enter pins another,
    # G asks for the name, Enter in the name field groups them
    stage.focus()
    # the focus lands on the node's option (a roving tabindex over a virtual list: one option, the tab stop)
    focused = view.locator(".iw-circuit-nodes [role=option]:focus")
    expect(focused).to_have_count(1)
    assert view.locator(".iw-circuit-nodes [role=option][tabindex='0']").count() == 1
    first = focused.get_attribute("data-node")
    drawn = int(view.locator(".iw-circuit-status").get_attribute("data-nodes"))
    # what a screen reader reads: chromium's accessibility tree has the focused option in the graph's listbox, with
    # its name and selection state, and the listbox says how much of the graph is shown; the option's place "k of n"
    # among the drawn nodes is in aria-posinset/aria-setsize (the DevTools protocol does not expose those two)
    heard = focused_in_accessibility_tree(page)
    assert heard["role"] == "option" and heard["parent"] == "listbox", heard
    assert heard["listbox"].startswith("Attribution graph nodes: arrow keys move between nodes"), heard
    assert heard["listbox_description"].startswith(f"{drawn} of "), heard
    assert heard["name"] == focused.get_attribute("aria-label") and ", influence " in heard["name"], heard
    assert heard["selected"] is not None, heard
    assert focused.get_attribute("aria-setsize") == str(drawn), focused.get_attribute("aria-setsize")
    assert 1 <= int(focused.get_attribute("aria-posinset")) <= drawn
    page.keyboard.press("Enter")
    page.keyboard.press("ArrowRight")
    assert focused.get_attribute("data-node") != first, "the arrow did not move the DOM focus to another node"
    moved = focused_in_accessibility_tree(page)
    assert moved["role"] == "option" and moved["parent"] == "listbox" and moved["name"] != heard["name"], moved
    page.keyboard.press("Enter")
    page.keyboard.press("g")
    name = view.locator(".iw-circuit-group-name")
    expect(name).to_be_focused()
    name.fill("my <b>group</b>")
    name.press("Enter")
    expect(view.locator(".iw-circuit-groups strong")).to_have_text("my <b>group</b>")
    state = printed_state(page)
    assert len(state["pinned"]) == 2 and state["groups"] == [{"name": "my <b>group</b>", "members": state["pinned"]}]
    assert state["selected"]
    assert view.locator("img, b").count() == 0, "a label became markup"

    saved = _save(page, jupyter_server, circuit_notebook, pins=2)
    payload = next(o for o in saved.cells[0].outputs if "application/vnd.interp-widgets.v1+json" in o.get("data", {}))
    assert payload["data"]["application/vnd.interp-widgets.v1+json"]["state"]["groups"] == state["groups"]
    assert "widgets" not in saved.metadata  # JupyterLab's default: no widget state, so the payload must carry it
    jupyter_server.shutdown_sessions()  # the kernel and its widget models are gone

    page.goto(jupyter_server.notebook_url(circuit_notebook))
    wait_for_kernel_idle(page)  # a new kernel, without the old widget models
    rebuilt = notebook_cells(page).nth(0).locator(".iw-mime-saved .iw-circuit")
    expect(rebuilt).to_be_visible(timeout=60_000)
    expect(rebuilt.locator(".iw-circuit-groups strong")).to_have_text("my <b>group</b>")
    assert rebuilt.locator(".iw-circuit-scores").inner_text().startswith("Pinned subgraph (2 nodes)")
    expect(rebuilt.locator(".iw-circuit-pane h3")).to_contain_text(HOSTILE)  # the saved selection
    # the saved selection sits in a group with an error node: the view names the nodes that can be intervened on
    rebuilt.locator(".iw-circuit-intervene").click()
    expect(rebuilt.locator(".iw-circuit-status")).to_contain_text("interventions act on feature nodes")
    # a feature alone: it needs the kernel, which this rebuilt view does not have
    again = rebuilt.locator(".iw-circuit-stage").evaluate(FIND_NODES)
    page.mouse.click(*again[-1])
    rebuilt.locator(".iw-circuit-intervene").click()
    expect(rebuilt.locator(".iw-circuit-status")).to_contain_text("Intervening needs the kernel", timeout=10_000)
    assert page.locator(".iw-error").count() == 0
    assert rebuilt.locator("img, b").count() == 0
    assert dialogs == []
    recorded_page.requests.assert_loopback_only()


def test_marimo_renders_the_view(tmp_path, recorded_page):
    cells = {
        "setup": "import marimo as mo\nfrom interp_widgets.circuits import example_graph",
        "show": f'example_graph().replace(prompt_tokens=["{HOSTILE}", "b"]).widget(pinned=["0_7_1"])',
    }
    with marimo_app(write_marimo_notebook(tmp_path / "circuit.py", cells)) as app:
        page = recorded_page.page
        page.goto(app.url)
        root = cell_output(page, "show").locator(".iw-root.iw-circuit")
        expect(root).to_be_visible(timeout=60_000)
        expect(root.locator(".iw-circuit-scores")).to_contain_text("Pinned subgraph (1 nodes)")
        assert root.locator("canvas.iw-circuit-base").evaluate("c => c.width > 0")
        assert cell_output(page, "show").locator("img").count() == 0
        assert page.locator(".iw-error").count() == 0
    recorded_page.requests.assert_loopback_only()


def test_the_exported_page_is_offline_inert_and_dark(tmp_path, recorded_page):
    from interp_widgets.circuits import example_graph

    graph = example_graph().replace(prompt_tokens=[HOSTILE, "b"])
    view = graph.widget(labels={"0_7_1": HOSTILE}, pinned=["0_7_1"], selected="0_7_1")
    view.group(HOSTILE, ["0_7_1", "E_11_1"])
    page = recorded_page.page
    page.emulate_media(color_scheme="dark")
    page.goto(view.export_html(tmp_path / "circuit.html").as_uri())
    root = page.locator(".iw-root.iw-circuit")
    expect(root).to_be_visible(timeout=30_000)
    expect(root.locator(".iw-circuit-pane h3")).to_have_text(HOSTILE)
    expect(root.locator(".iw-circuit-groups strong")).to_have_text(HOSTILE)
    expect(root.locator(".iw-circuit-scores")).to_contain_text("Pinned subgraph (2 nodes)")
    expect(root.locator(".iw-circuit-scores")).to_have_css("color", "rgb(157, 167, 177)")  # the dark theme's text
    assert page.locator("img").count() == 0 and page.evaluate("window.__xss === undefined")
    root.locator(".iw-circuit-intervene").click()
    expect(root.locator(".iw-circuit-status")).to_contain_text("interventions act on feature nodes")  # E_11_1
    recorded_page.requests.assert_loopback_only()


LIVE_NOTEBOOK = "circuit_live.ipynb"
LIVE_SETUP = """\
import json
from interp_widgets.circuits import TranscoderSet, attribution_graph, feature_intervention
from interp_widgets.concepts import Transcoder
from interp_widgets.demo import corpus
from tests import tiny_models
model, tokenizer = tiny_models.llama_lm()
tcs = TranscoderSet.fit(model, tokenizer, corpus()[:40], transcoder=Transcoder(32, k=4, max_epochs=2, progress=False))
graph = attribution_graph(model, tokenizer, "The cat sat on the mat because", tcs, batch_size=16, progress=False)
view = graph.widget(model=model, tokenizer=tokenizer, transcoders=tcs)
view
"""
LIVE_CHECK = """\
row = graph.node_index(view.selected)
layer, pos, feature = graph.features[row].tolist()
direct = feature_intervention(model, tokenizer, graph, tcs, [(layer, pos, feature, 0.0)], max_new_tokens=8).top(10)
print("IW_STATE", json.dumps({"selected": view.selected, "p_after": [f"{100 * p:.1f}%" for p in direct.p_after]}))
"""


def test_ablate_a_feature_from_the_view_with_the_kernel(jupyter_server, recorded_page):
    jupyter_server.write_notebook(LIVE_NOTEBOOK, (LIVE_SETUP, LIVE_CHECK))
    try:
        page = recorded_page.page
        page.goto(jupyter_server.notebook_url(LIVE_NOTEBOOK))
        wait_for_kernel_idle(page)
        run_cells(page, 0)
        view = notebook_cells(page).nth(0).locator(".iw-circuit")
        stage = view.locator(".iw-circuit-stage")
        expect(stage).to_be_visible(timeout=60_000)
        points = stage.evaluate(FIND_NODES)
        assert points, "no feature node under the pointer"
        page.mouse.click(*points[0])
        expect(view.locator(".iw-circuit-pane h3")).to_be_visible(timeout=30_000)
        view.locator(".iw-circuit-intervene").click()  # ablate, frozen attention (the default)
        result = view.locator(".iw-circuit-result")
        expect(result.locator("tbody tr")).to_have_count(10, timeout=60_000)
        expect(view.locator(".iw-circuit-status")).to_contain_text("Intervention done")
        expect(result.locator(".iw-circuit-base-continuation pre")).not_to_be_empty()
        expect(result.locator(".iw-circuit-new-continuation pre")).not_to_be_empty()
        shown = result.locator("tbody tr td:nth-child(3)").all_inner_texts()
        state = printed_state(page)  # the same intervention run directly in the kernel
        assert shown == state["p_after"]
        assert page.locator(".iw-error").count() == 0
    finally:
        jupyter_server.reset()
