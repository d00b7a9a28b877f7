"""One target lookup (interp_widgets.targets.Targets) with one set of rules, used by every result and view: None is
the first target, ints count from the end when negative, labels match exactly and then ignoring case, and anything
else is refused with a message that names the valid labels and indices."""

from __future__ import annotations

import numpy as np
import pytest

from interp_widgets.attribution import AttributionResult, Saliency
from interp_widgets.lens import logit_lens
from interp_widgets.targets import Targets
from interp_widgets.text_units import TokenLayout
from interp_widgets.widgets import TokenHighlightWidget, compare

TARGETS = Targets(["negative", "neutral", "positive"], ids=[0, 1, 2], probs=[0.1, np.nan, 0.7])


@pytest.mark.parametrize(
    ("target", "row"),
    [(None, 0), (0, 0), (2, 2), (-1, 2), (-3, 0), (np.int64(1), 1), ("neutral", 1), ("POSITIVE", 2)],
)
def test_the_rules_of_a_target_lookup(target, row):
    assert TARGETS.index(target) == row


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        (3, ValueError, r"target index 3 is out of range; valid indices are 0..2 \(or -3..-1 from the end\)"),
        (-4, ValueError, r"target index -4 is out of range"),
        ("great", ValueError, r"unknown target 'great'; valid labels are \['negative', 'neutral', 'positive'\]"),
        (True, TypeError, "must be an int"),
        (1.0, TypeError, "got float"),
    ],
)
def test_a_bad_target_is_refused_naming_the_valid_choices(target, error, message):
    with pytest.raises(error, match=message):
        TARGETS.index(target)


def test_an_exact_label_wins_over_one_that_matches_ignoring_case():
    assert Targets(["Yes", "yes"]).index("yes") == 1 and Targets(["Yes", "yes"]).index("YES") == 0


def test_targets_check_their_lengths_and_fill_unknown_ids_and_probabilities():
    plain = Targets(["a", "b"])
    assert plain.ids.tolist() == [-1, -1] and np.isnan(plain.probs).all() and plain.most_probable() == 0
    assert TARGETS.most_probable() == 2 and TARGETS.take([2, 0]).labels == ["positive", "negative"]
    with pytest.raises(ValueError, match="target probs has 1 entries for 2 targets"):
        Targets(["a", "b"], probs=[0.5])


def _result(labels):
    layout = TokenLayout(text="a b", tokens=["a", "b"], offsets=[(0, 1), (2, 3)], special_mask=[False, False],
                         word_ids=[0, 1], sentence_ids=[0, 0])  # fmt: skip
    return AttributionResult.from_flat(**{f: getattr(layout, f) for f in ("text", "tokens", "offsets", "special_mask",
                                          "word_ids", "sentence_ids")}, scores=np.ones((len(labels), 2)),
                                       target_labels=labels, method="m")  # fmt: skip


def test_every_result_and_view_looks_targets_up_by_the_same_rules(gpt2_lm):
    result = _result(["neg", "pos"])
    assert result.target_index(-1) == result.targets.index(-1) == 1
    assert TokenHighlightWidget(result, selected_target="POS").selected_target == 1
    assert TokenHighlightWidget(result, selected_target=-2).selected_target == 0
    with pytest.raises(ValueError, match="unknown target 'neutral'; valid labels are"):
        result.target_index("neutral")
    with pytest.raises(ValueError, match="unknown target 'neutral'; valid labels are"):
        TokenHighlightWidget(result, selected_target="neutral")
    other = result.replace(method="other")
    assert compare([result, other], target=-1).target_label == compare([result, other], target="POS").target_label
    with pytest.raises(ValueError, match=r"target index 2 is out of range; valid indices are 0..1"):
        compare([result, other], target=2)
    model, tokenizer = gpt2_lm
    lens = logit_lens(model, tokenizer, "The room", targets=[" was"], progress=False)
    assert lens.trajectory(0, target=-1).equals(lens.trajectory(0, target=" was"))  # lenses took no negative index
    with pytest.raises(ValueError, match=r"target index 2 is out of range; valid indices are 0..1"):
        lens.trajectory(0, target=2)


def test_class_targets_follow_the_same_rules(bert_classifier):
    model, tokenizer = bert_classifier
    last = Saliency(progress=False).attribute(model, tokenizer, "Fine.", target=-1)
    assert last.target_labels == [model.config.id2label[model.config.num_labels - 1]]
    with pytest.raises(ValueError, match=r"class index 7 is out of range; valid indices are 0..2"):
        Saliency(progress=False).attribute(model, tokenizer, "Fine.", target=7)
