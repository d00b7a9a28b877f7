"""Detection and fuzzing scores of labels (delphi's, ported): exact scores from a fixed fake scorer on a hand-made
interpretation, chance from constant scorers, quantile sampling, fuzzing marks, the prompts, errors, the cache, and
one small run of the real SmolLM2 scorer."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from interp_widgets.concepts import ConceptInterpretation, LMScorer, score_labels
from interp_widgets.concepts.label_scores import (
    CHANCE_LEVEL,
    DETECTION_SYSTEM_PROMPT,
    FUZZING_SYSTEM_PROMPT,
    chance_p_value,
    derangement,
    fuzz_marks,
    highlight,
    scorer_prompt,
    split_quantiles,
)

KINDS = ("detection", "fuzzing")

WORDS = ["soup ", "rain ", "cat "]  # concept c fires on WORDS[c]; concept 0's four weakest contexts say "stew "
K, WIDTH, CENTER = 10, 5, 2


def _example(c: int, i: int) -> dict:
    word = "stew " if c == 0 and i >= 6 else WORDS[c]
    value = float(K - i)
    activations = [0.0] * WIDTH
    activations[CENTER] = value
    if c == 0 and i == 0:
        activations[1] = 0.5 * value  # the strongest context marks two tokens: "ate soup "
    return {
        "row": 100 * c + 10 * i + CENTER,
        "activation": value,
        "text_id": 10 * c + i,
        "position": CENTER,
        "token": word.strip(),
        "context": [f"#{c}.{i} ", "ate ", word, "today ", "."],
        "context_activations": activations,
        "center": CENTER,
    }


def _interpretation() -> ConceptInterpretation:
    n = len(WORDS)
    examples = [[_example(c, i) for i in range(K)] for c in range(n)]
    return ConceptInterpretation.from_flat(
        method="hand-made",
        layer="layer:0",
        labels=[w.strip() for w in WORDS],
        density=np.full(n, 0.1),
        mean=np.ones(n),
        maximum=np.full(n, float(K)),
        minimum=np.zeros(n),
        top_rows=np.array([[e["row"] for e in row] for row in examples]),
        top_values=np.array([[e["activation"] for e in row] for row in examples]),
        examples=examples,
        top_texts=np.zeros((n, 1), dtype=np.int64),
        top_text_values=np.ones((n, 1)),
        texts=["text"],
        hist_counts=np.zeros((n, 2), dtype=np.int64),
        hist_edges=np.tile(np.arange(3.0), (n, 1)),
    )


def _shown(messages: list[dict]) -> tuple[str, list[str]]:
    last = messages[-1]["content"]
    label = re.search(r"Latent explanation: (.*)", last).group(1)
    return label, re.findall(r"^Example \d+: (.*)$", last, flags=re.M)


class WordScorer:
    """Answers 1 for a context that holds the label's word (detection) or whose every marked span does (fuzzing);
    P("1") is 0.9 for a match, 0.3 for a "stew" context and 0.1 otherwise. Records what it was shown."""

    name = "word scorer"

    def __init__(self):
        self.prompts = []

    def __call__(self, prompts):
        self.prompts += prompts
        answers = []
        for messages in prompts:
            label, texts = _shown(messages)
            fuzzing = messages[0]["content"] == FUZZING_SYSTEM_PROMPT
            hits, p_one = [], []
            for text in texts:
                spans = re.findall(r"<<(.*?)>>", text) if fuzzing else [text]
                hit = bool(spans) and all(label in span for span in spans)
                hits.append(int(hit))
                p_one.append(0.9 if hit else 0.3 if "stew" in text else 0.1)
            answers.append((json.dumps(hits), p_one))
        return answers


def test_a_fixed_fake_scorer_gets_the_exact_balanced_accuracy_and_auc():
    interp = _interpretation()
    scores = score_labels(interp, WordScorer(), concepts=[0], n_examples=10)[0]
    # 10 firing contexts (6 say "soup", 4 "stew") and 10 of the other concepts' contexts: TPR 0.6, TNR 1
    for kind in ("detection", "fuzzing"):
        assert scores[kind] == {
            "balanced_accuracy": pytest.approx(0.8),
            "auc": 1.0,  # P("1") still ranks the "stew" contexts above the non-firing ones
            "n_examples": 20,
            "n_activating": 10,
            "n_non_activating": 10,
            "n_failed": 0,
            # Fisher's exact test, one-sided: TP 6 of 10, TN 10 of 10, six answers of 1 among twenty examples
            "p_value": pytest.approx(210 / 38760),
            "above_chance": True,
        }
    assert scores["label"] == "soup" and scores["scorer"] == "word scorer"
    assert score_labels(interp, WordScorer(), concepts=[1], n_examples=10)[1]["detection"]["balanced_accuracy"] == 1.0


@pytest.mark.parametrize("answer", ["[1]", "[0]", ("[1]", [0.7]), ("[0]", 0.2)])
def test_a_constant_scorer_is_at_chance(answer):
    scores = score_labels(_interpretation(), lambda prompts: [answer] * len(prompts), n_examples=6)
    for entry in scores.values():
        for kind in ("detection", "fuzzing"):
            assert entry[kind]["balanced_accuracy"] == 0.5
            assert entry[kind]["auc"] == (None if isinstance(answer, str) else 0.5)


def test_unreadable_answers_are_counted_as_failed_and_left_out():
    scores = score_labels(_interpretation(), lambda prompts: ["I think so"] * len(prompts), concepts=[0], n_examples=4)
    assert scores[0]["detection"]["n_failed"] == 8 and scores[0]["detection"]["balanced_accuracy"] == 0.0


def test_firing_contexts_come_from_every_quantile():
    scorer = WordScorer()
    score_labels(_interpretation(), scorer, concepts=[0], n_examples=5, n_quantiles=5)
    detection = [p for p in scorer.prompts if p[0]["content"] == DETECTION_SYSTEM_PROMPT]
    ranks = [int(m.group(1)) for p in detection for t in _shown(p)[1] for m in [re.match(r"#0\.(\d+)", t)] if m]
    assert len(ranks) == 5 and sorted(r // 2 for r in ranks) == [0, 1, 2, 3, 4]  # quantiles of 2 top examples each
    assert split_quantiles(list(range(10)), 5, 5) == [(q, r) for q, r in zip(range(5), sorted(ranks))]
    assert sorted(split_quantiles(list(range(10)), 5, 10)) == [(r // 2, r) for r in range(10)]  # all of each
    assert split_quantiles(list(range(10)), 5, 20) == [(r // 2, r) for r in range(10)]  # a small quantile, in order


def test_fuzzing_marks_the_firing_tokens_and_as_many_on_non_firing_contexts():
    scorer = WordScorer()
    score_labels(_interpretation(), scorer, concepts=[0], n_examples=10)
    texts = [t for p in scorer.prompts if p[0]["content"] == FUZZING_SYSTEM_PROMPT for t in _shown(p)[1]]
    firing = sorted(t for t in texts if t.startswith("#0."))
    assert firing[0] == "#0.0 <<ate soup >>today ." and firing[1] == "#0.1 ate <<soup >>today ."
    assert firing[-1] == "#0.9 ate <<stew >>today ."
    quiet = [t for t in texts if not t.startswith("#0.")]
    assert len(quiet) == 10
    for text in quiet:  # ceil(11 marked tokens / 10 contexts) = 2 tokens, the donor's firing token among them
        spans = re.findall(r"<<(.*?)>>", text)
        assert sum(len(span.split()) for span in spans) == 2 and any(re.search("rain|cat", span) for span in spans)
    marks = fuzz_marks(_example(1, 0), 2)
    assert len(marks) == 2 and CENTER in marks
    assert highlight(["a ", "b ", "c ", "d"], {0, 2, 3}) == "<<a >>b <<c d>>"


def test_prompts_are_delphis():
    scorer = WordScorer()
    score_labels(_interpretation(), scorer, concepts=[0], n_examples=2)
    by_kind = {p[0]["content"]: p for p in scorer.prompts}
    assert set(by_kind) == {DETECTION_SYSTEM_PROMPT, FUZZING_SYSTEM_PROMPT}
    for messages in scorer.prompts:
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
        label, texts = _shown(messages)
        assert label == "soup" and len(texts) == 1
        assert messages[-1]["content"] == f"Latent explanation: soup\n\nText examples:\n\nExample 0: {texts[0]}\n"
    # sha256 of json.dumps(delphi's prompt(examples="Example 0: x", explanation="food")) at EleutherAI/delphi@3c2e139
    digest = {k: hashlib.sha256(json.dumps(scorer_prompt(k, "food", ["x"])).encode()).hexdigest() for k in KINDS}
    assert digest == {
        "detection": "4bfa04091c81ac2a5623c24fc1af9ef297879a72ef3a951333f210e10e7dd3c5",
        "fuzzing": "3dc240dd144824ce9bcc3d6997371ef7eda85bda1f72ea95814486de2c27294c",
    }


def test_bad_input_errors_name_the_fix():
    interp = _interpretation()
    with pytest.raises(TypeError, match="interpret_concepts"):
        score_labels({"labels": []}, WordScorer())
    with pytest.raises(TypeError, match="callable"):
        score_labels(interp, "SmolLM2")
    with pytest.raises(ValueError, match="one answer per prompt"):
        score_labels(interp, lambda prompts: ["[1]"], concepts=[0], n_examples=2)
    with pytest.raises(ValueError, match="smaller n_non_activating"):
        score_labels(interp, WordScorer(), concepts=[0], n_non_activating=21)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        score_labels(interp, WordScorer(), threshold=0)
    with pytest.raises(TypeError, match="reply text"):
        score_labels(interp, lambda prompts: [1] * len(prompts), concepts=[0], n_examples=2)
    dead = interp.replace(density=np.array([0.1, 0.0, 0.1]))
    with pytest.raises(ValueError, match="leave them out"):
        score_labels(dead, WordScorer(), concepts=[1])
    with pytest.raises(TypeError, match="load_lm"):
        LMScorer(object(), None)


def test_scores_are_cached_with_the_labels_saved_and_dropped_on_relabel(tmp_path):
    interp = _interpretation()
    scorer = WordScorer()
    first = score_labels(interp, scorer, n_examples=4)
    asked = len(scorer.prompts)
    assert asked == 2 * 3 * 2 * 8 and set(interp.label_scores) == {0, 1, 2}  # the control asks as much again
    assert score_labels(interp, scorer, n_examples=4) == first and len(scorer.prompts) == asked  # cached
    score_labels(interp, scorer, n_examples=4, seed=1)
    assert len(scorer.prompts) == 2 * asked  # other settings: asked again
    loaded = ConceptInterpretation.load(interp.save(tmp_path / "interp.safetensors"))
    assert loaded.label_scores == interp.label_scores  # JSON in the file's header
    interp.relabel(lambda c, examples: "soup" if c == 0 else f"thing {c}", source="hand")
    assert set(interp.label_scores) == {0}  # concept 0's label is unchanged
    assert set(loaded.replace(labels=["soup", "rain", "dog"]).label_scores) == {0, 1}
    interp.relabel(lambda c, examples: f"lazy {c}", lazy=True)
    assert interp.label_scores == {0: interp.label_scores[0]} and interp.ensure_label(0) == "lazy 0"
    assert interp.label_scores == {}
    score_labels(interp, scorer, concepts=[2], n_examples=2)
    assert interp.label_scores[2]["label"] == "lazy 2"  # a lazy label is made, then scored


def test_the_embedded_smollm2_scorer_gives_well_formed_scores(smollm2):
    interp = _interpretation()
    scorer = LMScorer(*smollm2, max_new_tokens=6)  # four prompts of about 900 tokens: the test's whole cost
    scores = score_labels(interp, scorer, concepts=[0], n_examples=1)[0]
    assert scores["scorer"] == "LM (HuggingFaceTB/SmolLM2-135M-Instruct)"
    for kind in ("detection", "fuzzing"):
        score = scores[kind]
        assert (score["n_examples"], score["n_activating"], score["n_non_activating"]) == (2, 1, 1)
        # the reply is begun with "[", so SmolLM2's answers are read, with P("1"); how good they are is not tested
        assert score["n_failed"] == 0 and 0.0 <= score["balanced_accuracy"] <= 1.0 and 0.0 <= score["auc"] <= 1.0


def test_the_chance_test_on_known_counts():
    # every answer right on 10 + 10: the one table of C(20, 10) with TP = 10
    assert chance_p_value(10, 10, 10, 10) == pytest.approx(1 / 184756)
    # TP 8 / 10, TN 8 / 10: P(TP >= 8) with 10 answers of 1 = (45·45 + 10·10 + 1) / C(20, 10)
    assert chance_p_value(8, 10, 8, 10) == pytest.approx(2126 / 184756)
    assert chance_p_value(7, 10, 7, 10) > CHANCE_LEVEL > chance_p_value(8, 10, 8, 10)  # 0.7 on 20 is not enough
    assert chance_p_value(5, 10, 5, 10) > 0.5 and chance_p_value(2, 10, 2, 10) > 0.99  # at or below chance
    assert chance_p_value(3, 3, 3, 3) == 1 / 20 == CHANCE_LEVEL  # even perfect on 6 examples is not below 0.05
    assert chance_p_value(4, 4, 4, 4) == 1 / 70 < CHANCE_LEVEL and chance_p_value(4, 4, 0, 0) == 1.0
    constant = score_labels(_interpretation(), lambda prompts: ["[1]"] * len(prompts), concepts=[0], n_examples=6)
    assert constant[0]["detection"]["above_chance"] is False and constant[0]["detection"]["p_value"] == 1.0


def _many(n: int, k: int = 10) -> ConceptInterpretation:
    """n concepts of k top contexts each, with no shared rows; concept c's contexts say "#c.i"."""
    examples = [[{**_example(0, i), "row": 100 * c + 10 * i + CENTER, "context": [f"#{c}.{i} ", "ate ", "word ", "today ", "."]}
                 for i in range(k)] for c in range(n)]  # fmt: skip
    return ConceptInterpretation.from_flat(
        method="hand-made", layer="layer:0", labels=[f"label {c}" for c in range(n)], density=np.full(n, 0.1),
        mean=np.ones(n), maximum=np.full(n, float(k)), minimum=np.zeros(n),
        top_rows=np.array([[e["row"] for e in row] for row in examples]),
        top_values=np.array([[e["activation"] for e in row] for row in examples]), examples=examples,
        top_texts=np.zeros((n, 1), dtype=np.int64), top_text_values=np.ones((n, 1)), texts=["text"],
        hist_counts=np.zeros((n, 2), dtype=np.int64), hist_edges=np.tile(np.arange(3.0), (n, 1)),
    )  # fmt: skip


class ConceptScorer:
    """Knows which concept each context comes from ("#k.i"). Under the label of a concept in ``good`` it answers 1
    exactly on that concept's contexts (its true label scores 1.0; on another concept's examples, at most 0.5);
    under any other label it answers 1 exactly on the contexts of other concepts (its true label scores 0.0, so it
    never outscores)."""

    name = "concept scorer"

    def __init__(self, good):
        self.good, self.prompts = set(good), []

    def __call__(self, prompts):
        self.prompts += prompts
        answers = []
        for messages in prompts:
            label, texts = _shown(messages)
            owner = int(label.split()[-1])
            shown = [int(re.match(r"(?:<<)?#(\d+)\.", text).group(1)) for text in texts]
            answers.append(json.dumps([int((k == owner) == (owner in self.good)) for k in shown]))
        return answers


@pytest.mark.parametrize("wins, discriminates", [(7, True), (6, False), (10, True), (0, False)])
def test_the_control_counts_the_concepts_whose_true_label_outscores_a_swapped_one(wins, discriminates):
    interp = _many(10)
    good = range(10)[-wins:] if wins else []
    scores = score_labels(interp, ConceptScorer(good), n_examples=2, n_non_activating=12)
    control = interp.label_control
    assert (control["n"], control["wins"], control["ties"]) == (10, wins, 0)
    assert control["fraction"] == wins / 10 and control["discriminates"] is discriminates
    assert control["threshold"] == 0.7
    for c, entry in control["concepts"].items():
        assert entry["swapped_from"] != c and entry["swapped_label"] == f"label {entry['swapped_from']}"
        assert entry["true_score"] == (1.0 if c in good else 0.0) == scores[c]["detection"]["balanced_accuracy"]
        assert entry["outscores"] is (c in good) and entry["swapped_score"] == pytest.approx(
            (entry["detection"]["balanced_accuracy"] + entry["fuzzing"]["balanced_accuracy"]) / 2
        )
    assert sorted(e["swapped_from"] for e in control["concepts"].values()) == list(range(10))  # a permutation


def test_the_control_asks_the_same_prompts_under_the_swapped_label_and_ties_do_not_count():
    interp = _interpretation()
    scorer = WordScorer()
    score_labels(interp, scorer, n_examples=4)
    control = interp.label_control
    per_concept = 2 * 8  # prompts per concept: detection then fuzzing
    true, swapped = scorer.prompts[: 3 * per_concept], scorer.prompts[3 * per_concept :]
    for i, c in enumerate(sorted(control["concepts"])):
        label, other = interp.labels[c], control["concepts"][c]["swapped_label"]
        for a, b in zip(
            true[i * per_concept : (i + 1) * per_concept], swapped[i * per_concept : (i + 1) * per_concept]
        ):
            assert _shown(a)[1] == _shown(b)[1] and (_shown(a)[0], _shown(b)[0]) == (label, other)
    constant = _interpretation()
    score_labels(constant, lambda prompts: ["[1]"] * len(prompts), n_examples=4)
    assert {k: constant.label_control[k] for k in ("wins", "ties", "fraction", "discriminates")} == {
        "wins": 0, "ties": 3, "fraction": 0.0, "discriminates": False}  # fmt: skip
    assert sorted(derangement(2, 7)) == [0, 1] and derangement(2, 7) == [1, 0]
    with pytest.raises(ValueError, match="n"):
        derangement(1, 0)


def test_the_control_is_cached_saved_dropped_on_relabel_and_can_be_turned_off(tmp_path):
    interp = _interpretation()
    scorer = WordScorer()
    score_labels(interp, scorer, n_examples=4)
    asked = len(scorer.prompts)
    score_labels(interp, scorer, n_examples=4)
    assert len(scorer.prompts) == asked  # scores and control cached
    loaded = ConceptInterpretation.load(interp.save(tmp_path / "interp.safetensors"))
    assert loaded.label_control == interp.label_control and 0 in loaded.label_control["concepts"]  # int keys again
    assert loaded.replace(label_source="x").label_control == interp.label_control
    swapped_onto_0 = interp.label_control["concepts"][0]["swapped_from"]
    new = [label if c != swapped_onto_0 else "other" for c, label in enumerate(interp.labels)]
    assert loaded.replace(labels=new).label_control is None  # a label the control judged changed
    interp.relabel(lambda c, examples: interp.labels[c])
    assert interp.label_control is None and len(interp.label_scores) == 3  # a relabel drops it
    off = _interpretation()
    score_labels(off, scorer, n_examples=4, control=False)
    assert off.label_control is None
    score_labels(off, scorer, concepts=[0], n_examples=4)
    assert off.label_control is None  # one concept has no other label to swap in
