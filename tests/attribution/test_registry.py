"""The method registry, list_methods, third-party methods on the public engine bases, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp_widgets.attribution import (
    METHODS,
    AttentionMethod,
    AttributionCollection,
    AttributionResult,
    Attributor,
    GradientMethod,
    InputXGradient,
    MethodInfo,
    Occlusion,
    PerturbationMethod,
    RawAttention,
    attribute,
    list_methods,
)
from interp_widgets.attribution.base import ExplainedInput, RowChunk, evaluate_rows
from interp_widgets.registry import Registry, UnknownNameError

BUILT_IN = {
    "saliency",
    "input_x_gradient",
    "integrated_gradients",
    "smoothgrad",
    "vargrad",
    "squaregrad",
    "gradient_shap",
    "occlusion",
    "lime",
    "kernel_shap",
    "sobol",
    "raw_attention",
    "attention_rollout",
    "gradient_weighted_attention",
}


@pytest.fixture
def registered():
    """Names registered by a test are removed again afterwards, so other tests see the built-in methods only."""
    before = set(METHODS)
    yield
    for name in set(METHODS) - before:
        METHODS.remove(name)


def test_every_built_in_method_is_registered_and_engines_are_not():
    assert set(METHODS) == BUILT_IN
    assert all(issubclass(cls, Attributor) and cls.name == name for name, cls in METHODS.items())
    assert not {GradientMethod, PerturbationMethod, AttentionMethod} & set(METHODS.values())
    with pytest.raises(TypeError):
        METHODS["mine"] = InputXGradient  # read-only


def test_list_methods_reports_the_properties():
    infos = {m.name: m for m in list_methods()}
    assert set(infos) == BUILT_IN and all(isinstance(m, MethodInfo) for m in infos.values())
    assert infos["integrated_gradients"].family == "gradient" and infos["integrated_gradients"].signed
    assert not infos["saliency"].signed  # its default reduce="norm" is unsigned
    assert infos["occlusion"].unit_level and not infos["occlusion"].needs_gradients
    assert infos["gradient_weighted_attention"].needs_gradients and not infos["raw_attention"].needs_gradients
    assert not infos["sobol"].signed and infos["kernel_shap"].signed
    frame = list_methods(as_frame=True)
    assert list(frame.columns) == ["class", "family", "signed", "needs_gradients", "unit_level", "summary"]
    assert frame.loc["lime", "class"] == "Lime" and frame.loc["raw_attention", "family"] == "attention"


def test_unknown_method_lists_the_available_names(bert_classifier):
    with pytest.raises(ValueError, match=r"unknown method 'shapley'; available: attention_rollout, gradient_shap"):
        attribute(*bert_classifier, "good", method="shapley")
    with pytest.raises(KeyError):
        METHODS["shapley"]
    assert METHODS.get("shapley") is None and "shapley" not in METHODS


def test_a_method_defined_here_registers_itself_and_runs_through_attribute(bert_classifier, registered):
    model, tokenizer = bert_classifier

    class DoubledInputXGradient(GradientMethod):
        """Twice input × gradient (signed)."""

        name = "doubled_input_x_gradient"
        multiplies_inputs = True

        def _per_dimension(self, x, base, mean_grad, mean_sq):
            return 2 * mean_grad * x

    assert METHODS["doubled_input_x_gradient"] is DoubledInputXGradient
    info = next(m for m in list_methods() if m.name == "doubled_input_x_gradient")
    assert (info.cls, info.family, info.signed, info.needs_gradients, info.unit_level) == (
        DoubledInputXGradient,
        "gradient",
        True,
        True,
        False,
    )
    assert info.summary == "Twice input × gradient (signed)."
    ours = attribute(model, tokenizer, "not bad at all", method="doubled_input_x_gradient")
    reference = InputXGradient().attribute(model, tokenizer, "not bad at all")
    assert isinstance(ours, AttributionResult) and ours.method == "doubled_input_x_gradient" and ours.signed
    np.testing.assert_allclose(ours.scores, 2 * reference.scores, rtol=1e-5, atol=1e-7)


def test_perturbation_attention_and_plain_methods_extend_the_public_bases(bert_classifier, registered):
    model, tokenizer = bert_classifier

    class LeaveOneOut(PerturbationMethod):
        """Drop in the score when one unit is replaced by the baseline (signed)."""

        name = "leave_one_out"
        description = "f(x) − f(x without the unit) (signed)"

        def masks(self, n_units):
            return np.vstack([np.ones((1, n_units), bool), ~np.eye(n_units, dtype=bool)])

        def _estimate(self, masks, values):
            return values[0] - values[1:], {}

    class LastLayerAttention(AttentionMethod):
        """The last layer's attention weights, mean over heads (unsigned)."""

        name = "last_layer_attention"
        description = "attention weight in the last layer, mean over heads (unsigned)"

        def _relevance(self, attentions, gradients):
            return attentions[-1].mean(dim=1)

    class RowCount(Attributor):
        """Scores every token with the number of rows it was evaluated in: one per target (a plain Attributor)."""

        name = "row_count"
        signed = False

        def _attribute_inputs(self, adapter, problems: list[ExplainedInput], *, score, granularity):
            counts = [np.zeros((p.n_targets, p.length)) for p in problems]

            def build(item, start, stop):
                rows = np.arange(start, stop)
                x = adapter.embed(torch.as_tensor(problems[item].encoding.input_ids)[None])[0].detach()
                return x.expand(len(rows), -1, -1), rows

            def consume(chunk: RowChunk, scores, grads):
                counts[chunk.item][chunk.start : chunk.stop] += 1

            evaluate_rows(
                adapter, problems, [p.n_targets for p in problems], build, consume, score=score, with_grad=False
            )
            return [self._result(p, c, score_meaning="rows per target", score=score) for p, c in zip(problems, counts)]

    families = {m.name: m.family for m in list_methods()}
    assert (families["leave_one_out"], families["last_layer_attention"], families["row_count"]) == (
        "perturbation",
        "attention",
        "other",
    )
    texts = ["not bad at all", "awful"]
    ours = attribute(model, tokenizer, texts, method="leave_one_out", granularity="word")
    reference = Occlusion(window=1).attribute(model, tokenizer, texts, granularity="word")
    assert isinstance(ours, AttributionCollection)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        attribute(model, tokenizer, "good", method="last_layer_attention").scores,
        RawAttention(layer=-1).attribute(model, tokenizer, "good").scores,
        atol=1e-7,
    )
    counts = attribute(model, tokenizer, "good", method="row_count", target=[0, 1])
    assert counts.scores.tolist() == np.ones((2, len(counts.tokens))).tolist()


def test_redefining_a_class_replaces_it_and_a_clash_is_an_error(registered):
    def define():
        class Again(InputXGradient):
            name = "again"

        return Again

    first, second = define(), define()
    assert first is not second and METHODS["again"] is second
    with pytest.raises(ValueError, match="'input_x_gradient' is already taken by .*InputXGradient"):
        type("Impostor", (InputXGradient,), {"name": "input_x_gradient"})
    assert METHODS["input_x_gradient"] is InputXGradient


def test_registry_is_a_live_read_only_mapping():
    registry = Registry("thing")
    assert len(registry) == 0 and "(none registered)" in str(
        pytest.raises(UnknownNameError, registry.__getitem__, "x").value
    )
    cls = registry.add_subclass(type("Thing", (), {"name": "thing"}))
    assert dict(registry) == {"thing": cls} and registry.remove("thing") is cls and not registry


@pytest.mark.parametrize(
    "bad, message",
    [
        (None, "inputs must be a text or a list of texts, got None"),
        (42, "inputs must be a text or a list of texts, got a int"),
        (b"bytes", "got a bytes"),
        (["good", 3], r"inputs\[1\] is a int, not a text"),
    ],
)
def test_inputs_that_are_not_texts_name_the_fix(bert_classifier, bad, message):
    with pytest.raises(TypeError, match=message) as err:
        attribute(*bert_classifier, bad, method="saliency")
    assert 'attribute(model, tokenizer, "a text")' in str(err.value)


def test_texts_in_any_sized_collection_still_work(bert_classifier):
    model, tokenizer = bert_classifier
    as_list = InputXGradient().attribute(model, tokenizer, ["good", "bad"])
    for texts in (("good", "bad"), np.array(["good", "bad"])):
        for a, b in zip(InputXGradient().attribute(model, tokenizer, texts), as_list):
            np.testing.assert_allclose(a.scores, b.scores)
