"""The doctest namespace: the names every ``Example:`` block in ``interp_widgets/`` may use without defining them.

``pytest --doctest-modules interp_widgets`` runs those blocks against the tiny offline models of
:mod:`tests.tiny_models`, so an example shows real output of real (tiny) models:

- ``np``, ``torch``
- ``tokenizer`` and ``model``: a 2-layer BERT classifier (d = 32, labels negative / neutral / positive) with the
  MiniLM WordPiece tokenizer; ``adapter`` is their ``ModelAdapter``
- ``masked_lm``: a 2-layer BERT masked LM with the same tokenizer
- ``lm`` and ``lm_tokenizer``: a 2-layer GPT-2 causal LM with a byte-level BPE tokenizer
- ``seq2seq`` and ``seq2seq_tokenizer``: a 2-layer T5 encoder–decoder (d = 32) with a byte-level BPE tokenizer
  whose sources and targets end with ``</s>``
- ``chat_lm`` and ``chat_tokenizer``: a 2-layer Llama causal LM whose tokenizer (the same BPE plus ``<|im_start|>`` /
  ``<|im_end|>``) has a ChatML chat template with a default system prompt, as SmolLM2's
- ``texts``: 40 sentences of the demo corpus
- ``result``: a saliency ``AttributionResult`` of ``model`` on "Not bad at all, honestly."
- ``store``: the per-token ``ActivationStore`` of ``model``'s layer 1 over ``texts`` (775 rows × 32)
- ``concepts``: ``NMFConcepts(8, nonnegative="shift", estimator_params={"random_state": 0})`` fitted on ``store``
- ``cockatiel_result``: ``cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256)``, built once, on the
  first doctest of ``interp_widgets.concepts.cockatiel`` that asks for it
"""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# experiment trackers (interp_widgets.geometry.trackers) stay local: W&B offline, no MLflow usage telemetry
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_DIR", tempfile.mkdtemp(prefix="wandb-"))  # runs started without dir= stay out of the repo
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(autouse=True)
def _doctest_names(request):
    """Fill the doctest namespace only for doctest items, so the test suite does not build these objects."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    import numpy as np
    import torch

    # imported before the examples run: with WANDB_MODE=offline it prints a notice once, on import
    import transformers.integrations.integration_utils  # noqa: F401

    from interp_widgets.adapter import ModelAdapter
    from interp_widgets.attribution import Saliency
    from interp_widgets.demo import corpus
    from tests import tiny_models

    model, tokenizer = tiny_models.bert_classifier()
    lm, lm_tokenizer = tiny_models.gpt2_lm()
    seq2seq, seq2seq_tokenizer = tiny_models.t5_seq2seq()
    chat_lm, chat_tokenizer = tiny_models.chat_llama_lm()
    namespace = request.getfixturevalue("doctest_namespace")
    namespace.update(
        np=np,
        torch=torch,
        model=model,
        tokenizer=tokenizer,
        adapter=ModelAdapter(model, tokenizer),
        masked_lm=tiny_models.bert_masked_lm()[0],
        lm=lm,
        lm_tokenizer=lm_tokenizer,
        texts=corpus()[:40],
        seq2seq=seq2seq,
        seq2seq_tokenizer=seq2seq_tokenizer,
        chat_lm=chat_lm,
        chat_tokenizer=chat_tokenizer,
        result=_saliency_result(Saliency, model, tokenizer),
        **_concept_names(model, tokenizer, corpus()[:40]),
    )
    if request.node.name.startswith("interp_widgets.concepts.cockatiel"):  # built only where it is used
        namespace["cockatiel_result"] = _cockatiel_result(model, tokenizer, corpus()[:40])
    torch.manual_seed(0)
    np.random.seed(0)
    yield


_CACHE: dict = {}


def _saliency_result(method, model, tokenizer):
    if "result" not in _CACHE:
        _CACHE["result"] = method().attribute(model, tokenizer, "Not bad at all, honestly.")
    return _CACHE["result"]


def _concept_names(model, tokenizer, texts):
    if "concepts" not in _CACHE:
        from interp_widgets.concepts import NMFConcepts, collect_activations

        store = collect_activations(model, tokenizer, texts, layer=1, progress=False)
        _CACHE["store"], _CACHE["concepts"] = (
            store,
            NMFConcepts(8, nonnegative="shift", estimator_params={"random_state": 0}).fit(store),
        )
    return {"store": _CACHE["store"], "concepts": _CACHE["concepts"]}


def _cockatiel_result(model, tokenizer, texts):
    if "cockatiel" not in _CACHE:
        from interp_widgets.concepts import cockatiel

        _CACHE["cockatiel"] = cockatiel(model, tokenizer, texts, n_concepts=3, n_samples=256, progress=False)
    return _CACHE["cockatiel"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test is a failed test: CI must not go green on tests that did not run (doctests included)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped tests fail here ({reason}); make the test run or remove it"


def pytest_ignore_collect(collection_path, config):
    """``--doctest-modules`` runs the package's docstring examples; the test suite's helper modules (files under
    ``tests/`` that are not ``test_*.py``, such as the browser harness) hold no examples to run."""
    in_tests = "tests" in collection_path.parts[len(config.rootpath.parts) :]
    if in_tests and collection_path.suffix == ".py" and not collection_path.name.startswith(("test_", "conftest")):
        return True
    return None
