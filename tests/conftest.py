"""Shared fixtures: the tiny real Hugging Face models of :mod:`tests.tiny_models`, and the model fingerprint."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest
import torch

from tests import tiny_models

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(2)

_TENSOR_BACKWARD = torch.Tensor.backward


@pytest.fixture(autouse=True, scope="module")
def _undo_nnsight_patches():
    """Importing ``interpreto`` imports ``nnsight``, which patches ``torch.Tensor.backward`` (and autocast) for the
    whole process. Its patched backward inspects the caller's source and fails on code without a file (exec'd
    README blocks). Undo the patches after each test module so one module's interop test cannot change another's
    torch."""
    yield
    nnsight = sys.modules.get("nnsight")
    if nnsight is not None:
        nnsight.DEFAULT_PATCHER.__exit__(None, None, None)
    assert torch.Tensor.backward is _TENSOR_BACKWARD, "a test module left torch.Tensor.backward patched"


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    return tiny_models.wordpiece_tokenizer()


@pytest.fixture(scope="session")
def bpe_tokenizer():
    return tiny_models.bpe_tokenizer()


@pytest.fixture(scope="session")
def bert_classifier():
    return tiny_models.bert_classifier()


@pytest.fixture(scope="session")
def bert_masked_lm():
    return tiny_models.bert_masked_lm()


@pytest.fixture(scope="session")
def gpt2_lm():
    return tiny_models.gpt2_lm()


@pytest.fixture(scope="session")
def t5_seq2seq():
    return tiny_models.t5_seq2seq()


@pytest.fixture(scope="session")
def bart_seq2seq():
    return tiny_models.bart_seq2seq()


@pytest.fixture(scope="session")
def marian_seq2seq():
    return tiny_models.marian_seq2seq()


@pytest.fixture(scope="session")
def llama_lm():
    return tiny_models.llama_lm()


@pytest.fixture(scope="session")
def chat_llama_lm():
    """A tiny Llama whose tokenizer has ChatML markers as special tokens and a chat template (tests/tiny_models.py)."""
    return tiny_models.chat_llama_lm()


@pytest.fixture(scope="session")
def gpt2_classifier():
    return tiny_models.gpt2_classifier()


def model_fingerprint(model, tokenizer) -> dict:
    """Everything an interp_widgets call must leave unchanged on the user's model and tokenizer."""
    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        digest.update(f"{name}:{tensor.dtype}:{tensor.device.type}:{tuple(tensor.shape)}".encode())
        if tensor.device.type != "meta":  # accelerate's offloaded weights are meta tensors: no data to hash here
            # the raw bytes also cover bfloat16, which numpy lacks
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    hooks = sum(
        len(m._forward_hooks)
        + len(m._forward_pre_hooks)
        + len(m._backward_hooks)
        + len(getattr(m, "_backward_pre_hooks", {}))
        for m in model.modules()
    )
    return {
        "params": digest.hexdigest(),
        "config": model.config.to_json_string(),
        "tokenizer_len": len(tokenizer),
        "tokenizer_vocab": tokenizer.vocab_size,
        "hooks": hooks,
        "modes": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "grads": [p.grad is None for p in model.parameters()],
        "device": str(next(model.parameters()).device),
        "embedding_rows": model.get_input_embeddings().weight.shape[0],
    }


@pytest.fixture(scope="session")
def smollm2():
    """The real pretrained decoder SmolLM2-135M-Instruct (float32, eval mode) and its tokenizer, from the cache."""
    from interp_widgets.demo import load_lm

    return load_lm(progress=False)


_SAELENS_DIR = os.path.join(os.path.dirname(__file__), "saelens")


def pytest_ignore_collect(collection_path, config):
    """``tests/saelens`` needs the sae-lens venv (see its conftest): collected only when named on the command line."""
    path = os.path.abspath(str(collection_path))
    if path != _SAELENS_DIR and not path.startswith(_SAELENS_DIR + os.sep):
        return None
    named = [os.path.abspath(str(arg).split("::")[0]) for arg in config.args]
    wanted = any(arg == _SAELENS_DIR or arg.startswith(_SAELENS_DIR + os.sep) for arg in named)
    return None if wanted else True


def record_perturbed_rows(monkeypatch) -> list:
    """Patch the perturbation engine so that every batch of perturbed embedding rows it builds is appended (cloned)
    to the returned list; the attribution itself runs unchanged."""
    from interp_widgets.attribution import perturbation

    captured: list = []
    real = perturbation.evaluate_rows

    def recording(adapter, problems, n_rows, build_rows, consume, **kw):
        def build(item, start, stop):
            rows, targets = build_rows(item, start, stop)
            captured.append(rows.clone())
            return rows, targets

        return real(adapter, problems, n_rows, build, consume, **kw)

    monkeypatch.setattr(perturbation, "evaluate_rows", recording)
    return captured
