"""MonitorWidget: throttled streaming (fake clock), message payloads and buffer layout, checkpoint contents, forced
flushes on exception / KeyboardInterrupt / monitor flush, a closed or failing front end, static fallback, escaping."""

from __future__ import annotations

import re
from xml.etree import ElementTree
from html.parser import HTMLParser

import numpy as np
import pytest

from interp_widgets.widgets import monitor as monitor_module
from interp_widgets.series_names import split_series_name
from interp_widgets.widgets.monitor import APPEND_MESSAGE, DEFAULT_PANELS, MonitorWidget


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def capture(widget: MonitorWidget) -> list[tuple[dict, list[bytes]]]:
    sent: list[tuple[dict, list[bytes]]] = []
    widget.send = lambda content, buffers=None: sent.append((content, [bytes(b) for b in buffers or []]))
    return sent


def decode(content: dict, buffers: list[bytes]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rows = content["rows"]
    x = np.frombuffer(buffers[0], dtype="<f8")
    values = np.frombuffer(buffers[1], dtype="<f4").reshape(len(content["series"]), rows)
    return x, dict(zip(content["series"], values))


def decode_checkpoint(widget: MonitorWidget) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    schema, data = widget.checkpoint_schema, widget.checkpoint
    n = schema["rows"]
    x = np.frombuffer(data[: 8 * n], dtype="<f8")
    values = np.frombuffer(data[8 * n :], dtype="<f4").reshape(len(schema["series"]), n)
    return x, dict(zip(schema["series"], values))


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


def test_throttle_sends_at_most_one_flush_per_interval(clock):
    widget = MonitorWidget(layers=["l0"], clock=clock, flush_interval=0.1, checkpoint_interval=1e9)
    sent = capture(widget)
    widget.log(0, loss=1.0)  # the first row goes out at once
    assert [c["rows"] for c, _ in sent] == [1]
    for step in range(1, 50):  # no time passes: everything queues
        widget.log(step, loss=1.0 / (step + 1))
    appends = [c for c, _ in sent if c["type"] == APPEND_MESSAGE]
    assert len(appends) == 1 and widget.rows == 50
    clock.now += 0.099
    widget.log(50, loss=0.5)
    assert len([c for c, _ in sent if c["type"] == APPEND_MESSAGE]) == 1
    clock.now += 0.002  # 0.101 s after the first flush
    widget.log(51, loss=0.5)
    appends = [c for c, _ in sent if c["type"] == APPEND_MESSAGE]
    assert [(c["start"], c["rows"]) for c in appends] == [(0, 1), (1, 51)]  # only the new rows, contiguous
    # one simulated second of logging every millisecond: ≤ 10 flushes
    before = len(sent)
    for k in range(1000):
        clock.now += 0.001
        widget.log(52 + k, loss=0.1)
    assert 9 <= len(sent) - before <= 10


def test_append_payload_layout_and_dtypes(clock):
    widget = MonitorWidget(layers=["a"], clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    widget.log(0, {"loss": 2.0})  # sent alone
    widget.log(3, {"loss": 1.5, "energy_ratio|a": 4.0}, lr=0.01)
    widget.log(7, {"loss": 1.25}, lr=np.float64(0.02))
    widget.flush()
    content, buffers = [m for m in sent if m[0]["type"] == APPEND_MESSAGE][1]
    assert content == {"type": APPEND_MESSAGE, "series": ["loss", "energy_ratio|a", "lr"], "start": 1, "rows": 2}
    assert [len(b) for b in buffers] == [2 * 8, 3 * 2 * 4]  # float64 steps, float32 values series-major
    x, values = decode(content, buffers)
    np.testing.assert_array_equal(x, [3.0, 7.0])
    np.testing.assert_array_equal(values["loss"], np.float32([1.5, 1.25]))
    np.testing.assert_array_equal(values["energy_ratio|a"], np.float32([4.0, np.nan]))
    np.testing.assert_array_equal(values["lr"], np.float32([0.01, 0.02]))
    assert all(isinstance(b, bytes) for b in buffers)


def test_series_without_values_in_a_block_are_not_sent(clock):
    widget = MonitorWidget(clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    widget.log(0, {"loss": 1.0, "isoscore|x": 0.5})
    clock.now += 1
    widget.log(1, {"loss": 0.9})
    assert [c["series"] for c, _ in sent if c["type"] == APPEND_MESSAGE] == [["loss", "isoscore|x"], ["loss"]]


def test_checkpoint_holds_the_whole_history(clock):
    widget = MonitorWidget(layers=["l0"], clock=clock, checkpoint_interval=5.0)
    capture(widget)
    rng = np.random.default_rng(0)
    expected = {}
    for step in range(0, 300, 3):
        clock.now += 0.01
        values = {"loss": float(rng.random())}
        if step % 30 == 0:
            values["energy_ratio|l0"] = float(rng.random() + 1)
        expected[step] = values
        widget.log(step, values)
    widget.flush()
    x, columns = decode_checkpoint(widget)
    assert widget.checkpoint_schema == {"series": ["loss", "energy_ratio|l0"], "rows": 100}
    np.testing.assert_array_equal(x, list(expected))
    np.testing.assert_array_equal(columns["loss"], np.float32([v["loss"] for v in expected.values()]))
    ratio = np.float32([v.get("energy_ratio|l0", np.nan) for v in expected.values()])
    np.testing.assert_array_equal(columns["energy_ratio|l0"], ratio)
    assert len(widget.checkpoint) == 100 * 8 + 2 * 100 * 4


def test_checkpoint_is_periodic_not_per_flush(clock):
    widget = MonitorWidget(clock=clock, flush_interval=0.1, checkpoint_interval=5.0)
    capture(widget)
    widget.log(0, loss=1.0)  # first flush also checkpoints
    assert widget.checkpoint_schema["rows"] == 1
    for step in range(1, 40):
        clock.now += 0.11
        widget.log(step, loss=1.0)  # every log flushes, about 4.3 s in total
    assert widget.checkpoint_schema["rows"] == 1
    clock.now += 1.0
    widget.log(40, loss=1.0)
    assert widget.checkpoint_schema["rows"] == 41


@pytest.mark.parametrize("error", [RuntimeError("diverged"), KeyboardInterrupt()])
def test_with_block_flushes_on_exception_and_interrupt(clock, error):
    widget = MonitorWidget(clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    with pytest.raises(type(error)):
        with widget:
            for step in range(25):
                widget.log(step, loss=float(step))  # fake clock: only the first row was sent
            raise error
    rows = sum(c["rows"] for c, _ in sent if c["type"] == APPEND_MESSAGE)
    assert rows == 25
    assert widget.checkpoint_schema["rows"] == 25


class FakeMonitor:
    """The AnisotropyMonitor contract: subscribe/on_flush/layers/x_label."""

    def __init__(self, layers, x_label="step"):
        self.layers = layers
        self.x_label = x_label
        self.callbacks = []
        self.flushers = []

    def subscribe(self, callback):
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    def on_flush(self, fn):
        self.flushers.append(fn)

    def run(self, steps, fail_at=None):
        try:
            for step in range(steps):
                if step == fail_at:
                    raise KeyboardInterrupt
                for callback in self.callbacks:
                    callback(step, {"loss": 1.0 / (step + 1), "energy_ratio|enc.0": 2.0, "fitting": float(step < 3)})
        finally:
            for fn in self.flushers:
                fn()


def test_monitor_subscription_replay_label_and_forced_flush(clock):
    monitor = FakeMonitor(["enc.0", "enc.1"], x_label="checkpoint")
    widget = MonitorWidget(monitor, clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    assert widget.layers == ["enc.0", "enc.1"] and widget.x_label == "checkpoint"
    with pytest.raises(KeyboardInterrupt):
        monitor.run(100, fail_at=60)
    assert sum(c["rows"] for c, _ in sent if c["type"] == APPEND_MESSAGE) == 60
    x, columns = decode_checkpoint(widget)
    np.testing.assert_array_equal(x, np.arange(60))
    np.testing.assert_array_equal(columns["fitting"][:5], [1, 1, 1, 0, 0])
    widget.close()
    assert monitor.callbacks == []


def test_geometry_log_backfill_live_rows_and_flush_hooks(clock):
    from interp_widgets.geometry.log.geometry_log import GeometryLog

    log = GeometryLog(["layer:0"], x_label="checkpoint")
    for step in range(5):  # e.g. a finished replay
        log.log(step, loss=1.0 / (step + 1))
    widget = MonitorWidget(log, clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    assert widget.rows == 5 and widget.x_label == "checkpoint" and widget.layers == ["layer:0"]
    for step in range(5, 12):
        log.log(step, loss=0.1, accuracy=0.5)
    log.flush()  # what the monitor runs on exit, exception or Ctrl-C
    steps, columns = decode_checkpoint(widget)
    np.testing.assert_array_equal(steps, np.arange(12))
    np.testing.assert_array_equal(columns["loss"][:5], np.float32(1.0 / (np.arange(5) + 1)))
    assert np.isnan(columns["accuracy"][:5]).all() and (columns["accuracy"][5:] == 0.5).all()
    appended = [c for c, _ in sent if c["type"] == APPEND_MESSAGE]
    assert appended[0]["start"] == 5 and sum(c["rows"] for c in appended) == 7
    assert log.widget() is log.widget()


def test_post_execute_hook_flushes_after_a_cell(clock, monkeypatch):
    class Events:
        def __init__(self):
            self.callbacks = {}

        def register(self, name, fn):
            self.callbacks.setdefault(name, []).append(fn)

        def unregister(self, name, fn):
            self.callbacks[name].remove(fn)

    class Shell:
        events = Events()

    shell = Shell()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    widget = MonitorWidget(clock=clock, checkpoint_interval=1e9)
    sent = capture(widget)
    for step in range(10):
        widget.log(step, loss=1.0)
    assert sum(c["rows"] for c, _ in sent) == 1
    for fn in shell.events.callbacks["post_execute"]:
        fn()  # the cell ended (normally, with an exception or interrupted: IPython runs post_execute anyway)
    assert sum(c["rows"] for c, _ in sent if c["type"] == APPEND_MESSAGE) == 10
    assert widget.checkpoint_schema["rows"] == 10


def test_closed_widget_never_breaks_the_loop(clock):
    widget = MonitorWidget(clock=clock)
    widget.close()
    for step in range(2000):
        clock.now += 0.2  # every log would flush and checkpoint
        widget.log(step, loss=1.0)
    assert widget.rows == 2000
    steps, columns = widget.history()
    assert steps.size == 2000 and columns["loss"].size == 2000


def test_failing_send_warns_once_and_logging_continues(clock):
    widget = MonitorWidget(clock=clock)

    def broken(*args, **kwargs):
        raise OSError("websocket closed")

    widget.send = broken
    with pytest.warns(RuntimeWarning, match="stopped streaming.*websocket closed"):
        widget.log(0, loss=1.0)
    for step in range(1, 100):
        clock.now += 1.0
        widget.log(step, loss=1.0)  # no further warning, no exception
    assert widget.rows == 100


def test_bad_input_errors_name_the_problem():
    widget = MonitorWidget()
    capture(widget)
    widget.log(5, loss=1.0)
    with pytest.raises(ValueError, match="must not decrease"):
        widget.log(4, loss=1.0)
    with pytest.raises(TypeError, match="step must be a number"):
        widget.log("five", loss=1.0)
    with pytest.raises(TypeError, match="series 'loss' at step 6: expected a number"):
        widget.log(6, loss="high")
        widget.flush()
    with pytest.raises(ValueError, match="no panel 'nope'"):
        widget.add_series("nope", "lr")
    with pytest.raises(ValueError, match="scale"):
        MonitorWidget(panels=[{"id": "x", "series": ["lr"], "scale": "sqrt"}])


def test_add_series_and_panels_config():
    widget = MonitorWidget()
    widget.add_series("loss", "accuracy")
    widget.add_series("Loss", "accuracy")  # by title; no duplicate
    assert next(p for p in widget.panels if p["id"] == "loss")["series"] == ["loss", "accuracy"]
    widget.add_panel("lr", "Learning rate", ["lr"], scale="log")
    assert widget.panels[-1] == {
        "id": "lr",
        "title": "Learning rate",
        "kind": "lines",
        "series": ["lr"],
        "scale": "log",
    }
    assert [p["id"] for p in widget.panels][: len(DEFAULT_PANELS)] == [p["id"] for p in DEFAULT_PANELS]


def test_new_layers_are_discovered_and_names_split_on_the_first_bar():
    widget = MonitorWidget(layers=["a"])
    capture(widget)
    widget.log(0, {"isoscore|a": 0.1, "isoscore|blocks|3": 0.2})
    widget.flush()
    assert widget.layers == ["a", "blocks|3"]
    assert split_series_name("isoscore|blocks|3") == ("isoscore", "blocks|3")


EVIL = '<img src=x onerror="alert(1)">&amp;'


def _logged_widget(layers, steps=60, **kwargs) -> MonitorWidget:
    widget = MonitorWidget(layers=layers, **kwargs)
    capture(widget)
    rng = np.random.default_rng(1)
    for step in range(steps):
        values = {"loss": 2.0 / (step + 1), "fitting": float(step < 10)}
        for layer in layers:
            ratio = float(1.5 + rng.random())
            values.update({f"energy_ratio|{layer}": ratio, f"control_ratio_q05|{layer}": 0.8,
                           f"control_ratio_q95|{layer}": 1.25, f"isoscore|{layer}": float(rng.random())})  # fmt: skip
        widget.log(step, values)
    widget.flush()
    return widget


def test_fallback_svg_in_mimebundle_and_escaped_layer_names():
    widget = _logged_widget(["enc.0", EVIL], title="run <1>")
    data, _ = widget._repr_mimebundle_()
    svg = widget._fallback_svg()  # the picture: this SVG, or its PNG above 60 KB (widgets._base.static_picture)
    picture = "image/svg+xml" if len(svg.encode()) <= 60 * 1024 else "image/png"
    assert list(data)[:2] == ["application/vnd.jupyter.widget-view+json", picture]
    assert svg.startswith("<svg") and "could not be displayed" not in svg
    tree = ElementTree.fromstring(svg)  # well-formed: the layer name cannot have opened an element
    assert not [e for e in tree.iter() if e.tag.rsplit("}", 1)[-1] in ("img", "script", "foreignObject")]
    texts = ["".join(e.itertext()) for e in tree.iter() if e.tag.endswith("text")]
    assert any(t.startswith('<img src=x onerror="alert(1)">') for t in texts)  # shown literally
    assert "enc.0" in svg and "run &lt;1&gt;" in svg
    assert len(re.findall(r"<path", svg)) > 5  # curves were drawn
    assert data["text/plain"].startswith("MonitorWidget('run <1>', 2 layers, 60 rows")


def test_fallback_before_any_step_and_static_html_has_no_url():
    widget = MonitorWidget()
    svg = widget._repr_mimebundle_()[0]["image/svg+xml"]
    assert "No steps logged yet" in svg
    page = _logged_widget(["l0"]).static_html()
    assert "http" not in page

    tags: list[str] = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append(tag)

    Parser().feed(page)
    assert "script" not in tags and "svg" in tags


def test_chart_has_every_panel_and_log_scale():
    widget = _logged_widget(["l0", "l1"], x_label="checkpoint")
    spec = widget.chart().to_dict()
    text = str(spec)
    assert "'type': 'log'" in text and "checkpoint" in text
    titles = re.findall(r"'title': '([^']+)'", text)
    assert "Loss" in titles and any(t.startswith("Energy ratio: tangent proxy") for t in titles)


def test_saved_state_carries_the_whole_history():
    widget = MonitorWidget(flush_interval=1e9, checkpoint_interval=1e9)
    capture(widget)
    for step in range(30):
        widget.log(step, loss=float(step))
    state = widget.get_state()  # what a notebook save / export embeds
    assert state["checkpoint_schema"] == {"series": ["loss"], "rows": 30}
    x, columns = decode_checkpoint(widget)
    np.testing.assert_array_equal(columns["loss"], np.arange(30, dtype=np.float32))


def test_export_page_embeds_history_and_no_url():
    widget = _logged_widget(["l0"])
    page = widget.to_html()
    assert "http://" not in page and "https://" not in page
    assert "checkpoint" in page and widget.stream_id in page


def test_show_refreshes_the_saved_output_on_the_final_flush(monkeypatch):
    updates = []

    class Handle:
        def update(self, obj):
            updates.append(obj._repr_mimebundle_()[0]["image/svg+xml"])

    monkeypatch.setattr("IPython.display.display", lambda obj, display_id=None: Handle())
    widget = MonitorWidget()
    capture(widget)
    widget.show()
    widget.log(0, loss=1.0)
    widget.log(1, loss=0.5)
    widget.flush()
    widget.flush()  # nothing new: no second update
    assert len(updates) == 1 and "No steps logged yet" not in updates[0]


def test_module_exports():
    assert monitor_module.MonitorWidget is MonitorWidget
