"""Our ``attribution_graph`` against circuit-tracer 0.5.0's ``attribute`` on the same model, transcoders and prompt.

circuit-tracer computed cases 8, 9 and 11 in its own venv (``generate.py``): a tiny random Llama saved to a local
folder, JumpReLU transcoders loaded from files (case 9 with ``max_feature_nodes=40``) and TopK skip transcoders built
in Python with its ``TopK(k)`` (case 11); cases 12 and 13 with a JumpReLU cross-layer transcoder that its own loader
read from a CLT directory (reading ``mlp.hook_in`` and ``hook_resid_mid``), which ours reads too
(``CrossLayerTranscoderSet.from_circuit_tracer``). Here the same folder and the same transcoder weights go through our
package, with the same ``batch_size``, ``max_feature_nodes``, ``update_interval`` and logit-target settings, and the
adjacencies must agree: ‖ΔA‖_F / ‖A‖_F ≤ 1e-4 over the same nodes (position 0 masked on both sides).
"""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.torch import load_file

from interp_widgets.circuits import AttributionGraph, CrossLayerTranscoderSet, TranscoderSet
from interp_widgets.circuits.attribution import attribution_graph
from interp_widgets.concepts import Transcoder
from tests.circuit_tracer.conftest import ATTRIBUTED, CLT_CASES, read_case

TOPK = 6  # generate.py's TOPK


def our_side(folder, stem: str, activation: str):
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    model = LlamaForCausalLM.from_pretrained(folder / "tiny-llama").eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder / "tiny-llama")
    transcoders = {}
    for layer in range(model.config.num_hidden_layers):
        weights = load_file(folder / f"{stem}_{layer}.safetensors")
        threshold = weights.pop("activation_function.threshold", None)
        transcoders[layer] = Transcoder.from_weights(
            **weights, threshold=threshold, activation=activation, k=TOPK if activation == "topk" else None
        )
    return model, tokenizer, TranscoderSet(transcoders, input_point="mlp_in")


@pytest.mark.parametrize("case", sorted(ATTRIBUTED))
def test_our_graph_equals_circuit_tracers(ct_files, case):
    stem, activation = ATTRIBUTED[case]
    model, tokenizer, transcoders = our_side(ct_files, stem, activation)
    theirs = AttributionGraph.from_circuit_tracer(read_case(ct_files, case)[0], tokenizer=tokenizer)
    cap = 40 if case == 9 else None
    # circuit-tracer prepended <unk> (id 1), not <s>: its filter(None, ...) skips a BOS of id 0. Give its tokens.
    ours = attribution_graph(model, tokenizer, theirs.token_ids, transcoders, max_n_logits=4, desired_logit_prob=0.9,
                             batch_size=16, max_feature_nodes=cap, progress=False)  # fmt: skip
    assert not ours.provenance.settings["bos_added"] and ours.token_ids.tolist() == theirs.token_ids.tolist()
    assert ours.logits.ids.tolist() == theirs.logits.ids.tolist()
    np.testing.assert_allclose(ours.logits.probs, theirs.logits.probs, rtol=1e-5)
    assert ours.provenance.settings["n_active_features"] == (
        theirs.cap.n_active if theirs.cap else len(theirs.features)
    )
    if cap is None:
        assert ours.features.tolist() == theirs.features.tolist()
        np.testing.assert_allclose(ours.activations, theirs.activations, rtol=1e-5, atol=1e-6)
        a, b = ours.adjacency, theirs.adjacency
    else:  # the same number kept; compare the rows and columns of the features both kept
        assert len(ours.features) == len(theirs.features) == cap
        mine = {tuple(f): i for i, f in enumerate(ours.features.tolist())}
        common = [(mine[tuple(f)], j) for j, f in enumerate(theirs.features.tolist()) if tuple(f) in mine]
        assert len(common) >= 0.9 * cap, f"only {len(common)} of {cap} capped features in common"
        rest_ours = list(range(cap, ours.n_nodes))
        rest_theirs = list(range(cap, theirs.n_nodes))
        keep_ours = [i for i, _ in common] + rest_ours
        keep_theirs = [j for _, j in common] + rest_theirs
        a = ours.adjacency[np.ix_(keep_ours, keep_ours)]
        b = theirs.adjacency[np.ix_(keep_theirs, keep_theirs)]
    relative = np.linalg.norm(a - b) / np.linalg.norm(b)
    print(f"case {case}: relative Frobenius difference {relative:.2e} over {len(a)} nodes")
    assert relative <= 1e-4, relative


@pytest.mark.parametrize("case", sorted(CLT_CASES))
def test_our_cross_layer_graph_equals_circuit_tracers(ct_files, case):
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    folder, point = CLT_CASES[case]
    model = LlamaForCausalLM.from_pretrained(ct_files / "tiny-llama").eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(ct_files / "tiny-llama")
    clt = CrossLayerTranscoderSet.from_circuit_tracer(ct_files / folder, model=model)
    assert clt.input_point == point and clt.activation == "jumprelu" and clt.n_layers == 2
    theirs = AttributionGraph.from_circuit_tracer(read_case(ct_files, case)[0], tokenizer=tokenizer)
    ours = attribution_graph(model, tokenizer, theirs.token_ids, clt, max_n_logits=4, desired_logit_prob=0.9,
                             batch_size=16, progress=False)  # fmt: skip
    assert ours.token_ids.tolist() == theirs.token_ids.tolist() and ours.provenance.settings["cross_layer"]
    assert ours.logits.ids.tolist() == theirs.logits.ids.tolist()
    np.testing.assert_allclose(ours.logits.probs, theirs.logits.probs, rtol=1e-5)
    assert ours.features.tolist() == theirs.features.tolist() and len(ours.features) > 10
    assert set(ours.features[:, 0].tolist()) == {0, 1}  # both layers' features, layer 0's writing to both MLPs
    np.testing.assert_allclose(ours.activations, theirs.activations, rtol=1e-5, atol=1e-6)
    a, b = ours.adjacency, theirs.adjacency
    relative = np.linalg.norm(a - b) / np.linalg.norm(b)
    print(f"case {case} (CLT reading {point}): relative Frobenius difference {relative:.2e} over {len(a)} nodes")
    assert relative <= 1e-4, relative
