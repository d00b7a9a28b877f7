"""Tasks (interp_widgets.tasks): the registry, a fifth task added by a test-local module with no edit anywhere else,
and no code outside tasks/ that branches on the task."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import interp_widgets
from interp_widgets.adapter import ModelAdapter, UnsupportedModelError
from interp_widgets.targets import Targets
from interp_widgets.tasks import TASKS, Explain, ExplainedInput, Task, task_for
from tests.conftest import model_fingerprint
from tests.tiny_models import bert_labelled_config, seeded, wordpiece_tokenizer

LABELS = {0: "O", 1: "FOOD", 2: "QUALITY"}
TEXT = "The soup was cold."


@pytest.fixture(scope="module")
def token_classifier():
    from transformers import BertForTokenClassification

    tokenizer = wordpiece_tokenizer()
    config = bert_labelled_config(tokenizer, LABELS)
    return seeded(lambda: BertForTokenClassification(config)), tokenizer


@pytest.fixture
def token_task():
    """A fifth task, defined here as a user would in their own module: subclassing Task registers it."""

    class TokenClassificationTask(Task):
        """Every non-special token's label (predicted, or ``target``: one label name for every token)."""

        name = "token-classification"
        priority = 10

        @classmethod
        def matches(cls, model) -> bool:
            return cls.model_class_in(
                model, "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", ("ForTokenClassification",)
            )

        def explain_inputs(self, items, encodings, options: Explain) -> list[ExplainedInput]:
            id2label = self.adapter.model.config.id2label
            logits = self.logits([e.input_ids for e in encodings], [np.arange(len(e)) for e in encodings])
            problems = []
            for enc, lg in zip(encodings, logits):
                positions = np.flatnonzero(~enc.special_mask)
                probs = torch.softmax(lg.float(), dim=-1)[torch.as_tensor(positions)]
                if options.target is None:
                    ids = probs.argmax(-1).numpy()
                else:
                    ids = np.full(len(positions), self.adapter.model.config.label2id[options.target])
                problems.append(
                    ExplainedInput(
                        encoding=enc,
                        targets=Targets(
                            [f"{id2label[int(i)]}@{p}" for i, p in zip(ids, positions)],
                            ids=ids,
                            probs=probs[torch.arange(len(ids)), torch.as_tensor(ids)].numpy(),
                        ),
                        target_positions=positions.astype(np.int64),
                        visible=np.full(len(ids), len(enc), dtype=np.int64),
                    )
                )
            return problems

    try:
        yield TokenClassificationTask
    finally:
        TASKS.remove("token-classification")


def test_builtin_tasks_and_their_lookup(bert_classifier, gpt2_lm, bert_masked_lm, t5_seq2seq):
    assert sorted(TASKS) == ["causal-lm", "masked-lm", "seq2seq-lm", "sequence-classification"]
    names = [task_for(ModelAdapter(*pair)).name for pair in (bert_classifier, gpt2_lm, bert_masked_lm, t5_seq2seq)]
    assert names == ["sequence-classification", "causal-lm", "masked-lm", "seq2seq-lm"]


def test_explain_options_are_one_frozen_object(gpt2_lm):
    options = Explain(continuation=" clean", contrast=" cold")
    with pytest.raises(AttributeError):
        options.seed = 1  # type: ignore[misc]
    task = task_for(ModelAdapter(*gpt2_lm))
    problem = task.explain("The room was", options)[0]
    assert problem.n_targets == len(problem.foil_ids) == len(gpt2_lm[1](" clean")["input_ids"])


def test_a_fifth_task_joins_by_a_module_of_its_own(token_classifier, token_task):
    model, tokenizer = token_classifier
    before = model_fingerprint(model, tokenizer)
    assert isinstance(task_for(ModelAdapter(model, tokenizer)), token_task)

    result = interp_widgets.attribute(model, tokenizer, TEXT, method="saliency", method_params={"progress": False})
    direct = copy.deepcopy(model)(**tokenizer(TEXT, return_tensors="pt")).logits[0].softmax(-1)
    tokens = tokenizer(TEXT)["input_ids"]
    positions = np.arange(1, len(tokens) - 1)  # the non-special tokens
    predicted = direct[positions].argmax(-1).numpy()
    assert result.target_labels == [f"{LABELS[int(i)]}@{p}" for i, p in zip(predicted, positions)]
    np.testing.assert_allclose(result.target_probs, direct[positions, predicted].detach().numpy(), rtol=1e-5)
    assert result.scores.shape == (len(positions), len(tokens)) and np.isfinite(result.scores).all()

    # each token's saliency is the gradient norm of its own label logit (checked for one target against autograd)
    embeds = model.get_input_embeddings()(torch.tensor([tokens])).detach().requires_grad_(True)
    logit = copy.deepcopy(model)(inputs_embeds=embeds).logits[0, positions[1], predicted[1]]
    (gradient,) = torch.autograd.grad(logit, embeds)
    np.testing.assert_allclose(result.scores[1], gradient[0].norm(dim=-1).numpy(), rtol=1e-4, atol=1e-6)

    forced = interp_widgets.attribute(model, tokenizer, TEXT, method="saliency", target="FOOD",
                                      method_params={"progress": False})  # fmt: skip
    assert [label.split("@")[0] for label in forced.target_labels] == ["FOOD"] * len(positions)

    from interp_widgets.concepts import collect_activations

    store = collect_activations(model, tokenizer, [TEXT], layer=-1, progress=False)
    hidden = copy.deepcopy(model)(**tokenizer(TEXT, return_tensors="pt"), output_hidden_states=True).hidden_states[-1]
    np.testing.assert_allclose(store.to_numpy(), hidden[0, positions].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert model_fingerprint(model, tokenizer) == before


def test_without_its_module_the_model_is_refused(token_classifier):
    with pytest.raises(UnsupportedModelError, match="unsupported model class BertForTokenClassification"):
        task_for(ModelAdapter(*token_classifier))


def _code_strings_and_names(path: Path):
    """String constants that are not docstrings, and every attribute / name read, of one module."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield "string", node.value, node.lineno
        elif isinstance(node, ast.Attribute):
            yield "name", node.attr, node.lineno
        elif isinstance(node, ast.Name):
            yield "name", node.id, node.lineno


def test_no_code_outside_tasks_branches_on_the_task():
    package = Path(interp_widgets.__file__).parent
    task_names = set(TASKS) | {cls.__name__ for cls in TASKS.values()}
    found = []
    for path in sorted(package.rglob("*.py")):
        if "tasks" in path.relative_to(package).parts:
            continue
        for kind, value, line in _code_strings_and_names(path):
            if (kind == "string" and value in task_names) or (
                kind == "name" and (value.startswith("TASK_") or value in {"is_seq2seq", "detect_task"} | task_names)
            ):
                found.append(f"{path.relative_to(package)}:{line}: {value}")
    assert not found, "task tests outside interp_widgets/tasks:\n" + "\n".join(found)
