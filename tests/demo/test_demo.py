"""The embedded default: the shipped dataset, the fine-tuned classifier and the `interp-widgets demo` report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from interp_widgets import demo


def test_dataset_is_large_balanced_and_split():
    data = demo.load_dataset()
    assert len(data) >= 600
    assert data["text"].is_unique
    assert set(data["label"]) == {"negative", "positive"}
    assert abs((data["label"] == "positive").mean() - 0.5) < 0.05
    assert set(data["split"]) == {"train", "test"}
    assert 0.15 < (data["split"] == "test").mean() < 0.25
    assert {"negation", "contrast", "mixed"} <= set(data["phenomenon"])
    assert data["domain"].nunique() >= 5
    assert len(demo.corpus()) == len(data)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        demo.load_dataset("dev")


@pytest.fixture(scope="module")
def classifier():
    return demo.load_classifier(progress=False)


def test_classifier_reaches_the_accuracy_bar_and_loads_from_cache(classifier, monkeypatch):
    report = demo.training_report()
    assert report["test_accuracy"] >= 0.85, report
    assert report["n_test"] == (demo.load_dataset()["split"] == "test").sum()

    def no_training(*args, **kwargs):
        raise AssertionError("the cached classifier was retrained")

    monkeypatch.setattr(demo, "_train", no_training)
    model, tokenizer = demo.load_classifier(progress=False)
    assert model.config.id2label == {0: "negative", 1: "positive"}
    assert not model.training


def test_classifier_reads_negation_and_contrast(classifier):
    model, tokenizer = classifier
    texts = ["The food was not bad at all.", "Beautiful screen, but it broke within a week and support ignored me."]
    logits = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits
    assert logits.argmax(-1).tolist() == [1, 0]


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.external = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith(("#", "data:", "blob:")):
                self.external.append(value)


def test_cli_writes_an_offline_report_and_escapes_text(tmp_path, classifier):
    out = tmp_path / "report.html"
    evil = "<img src=x onerror=alert(1)> was awful"
    evil_prompt = "<script>alert(2)</script> The capital of France is"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "interp_widgets.cli",
            "demo",
            "--quiet",
            "--no-builtin",
            "--text",
            evil,
            "--steps",
            "4",
            "--prompt",
            evil_prompt,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    page = out.read_text()
    parser = _Collector()
    parser.feed(page)
    assert parser.external == []
    assert not re.search(r"https?://", page)
    assert "<img src=x" not in page and "<script>alert(2)" not in page
    assert "held-out accuracy" in page
    # The full report: attributions, concepts, training curves and SmolLM2's generation, each as a live widget with
    # its state inline.
    sections = re.findall(r"<h2>(.*?)</h2>", page)
    assert {"1. Attributions", "2. Concepts", "3. Geometry during training", "4. Generation"} <= set(sections)
    states = [json.loads(block) for block in re.findall(r'<script type="application/json" id="iw-state-\d+">(.*?)</script>',
                                                        page)]  # fmt: skip
    kinds = {"concepts": "labels", "monitor": "panels", "comparison": "agreements", "generation": "step_tokens"}
    for kind, trait in kinds.items():
        assert any(trait in state["state"] for state in states), f"no {kind} widget in the report"
    (generation,) = [state["state"] for state in states if "step_tokens" in state["state"]]
    assert generation["method"] == "input_x_gradient" and "SmolLM2-135M-Instruct (Q4_1, dequantised)" in page
    assert generation["step_tokens"] and "script" in "".join(generation["tokens"])  # the prompt, escaped in the page
    assert re.search(r"Last measured energy ratios: layer:2: [\d.]+ at step 3; layer:4: [\d.]+ at step 3", page)


def test_report_rejects_too_few_training_steps():
    from interp_widgets.demo.report import build_report

    with pytest.raises(ValueError, match="steps must be an integer >= 2"):
        build_report(["Fine."], steps=1)
    with pytest.raises(ValueError, match="at least one text"):
        build_report([], steps=4)
    with pytest.raises(ValueError, match="the generation prompt is empty"):
        build_report(["Fine."], steps=4, prompt="  ")


def test_cli_reports_bad_input_clearly(tmp_path, classifier):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "interp_widgets.cli",
            "demo",
            "--quiet",
            "--no-builtin",
            "--text",
            "   ",
            "--out",
            str(tmp_path / "x.html"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2
    assert "empty or only whitespace" in done.stderr
