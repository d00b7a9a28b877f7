"""ConSim (interp_widgets.concepts.consim) against Interpreto 0.5.2's ``ConSim``: for a seed the same selected texts,
the same prompts string for string, and the same scores of one greedy SmolLM2 wrapper (``ChatLM``) passed to both;
then exact scores from a fake LLM, the prompt's marks on hand-made importances, saving, and the refusals."""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
import torch
from interpreto.concepts.metrics.consim import ConSim as InterpretoConSim
from interpreto.concepts.metrics.consim import PromptTypes

from interp_widgets.concepts import (
    ChatLM,
    ConSimExamples,
    ConSimResult,
    PCAConcepts,
    collect_activations,
    consim,
    consim_prompt,
    select_examples,
)
from interp_widgets.concepts.consim import (
    LONG_NAMES,
    PROMPT_TYPES,
    agreement,
    class_importances,
    concept_contributions,
    read_answers,
)
from interp_widgets.demo import corpus

CLASSES = ["negative", "neutral", "positive"]
pytestmark = pytest.mark.usefixtures("quiet_single_thread")  # SmolLM2 generates several times faster on one thread
PINNED = [27, 28, 5, 12, 9, 6, 24, 29]  # the texts seed 3 selects (parity test)


@pytest.fixture(scope="module")
def classifier(bert_classifier):
    """The tiny BERT classifier with its head's biases moved so that it predicts all three classes (it predicts no
    "negative" otherwise); a copy, so the session's model is untouched."""
    model, tokenizer = bert_classifier
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.classifier.bias += torch.tensor([1.8, 0.9, 0.0])
    return model, tokenizer


@pytest.fixture(scope="module")
def pool(classifier):
    """40 demo texts labelled so that every other one is predicted correctly: texts, labels, predictions."""
    from interp_widgets.concepts.consim import _predict

    model, tokenizer = classifier
    texts = corpus()[:40]
    predictions = _predict(model, tokenizer, texts)
    labels = np.where(np.arange(40) % 2 == 0, predictions, (predictions + 1) % 3)
    return texts, labels, predictions


class Recorder:
    """One LLM seen by both libraries: forwards to ``llm`` and keeps every prompt it rendered and every reply."""

    def __init__(self, llm):
        self.llm, self.calls, self.name = llm, [], getattr(llm, "name", "fake")

    def generate(self, prompt):
        reply = self.llm.generate(prompt)
        self.calls.append((self.llm.render(prompt), reply))
        return reply


def _interpreto_inputs(examples, labels, G, L):
    interpretation = dict(enumerate(labels))
    global_importances = {CLASSES[i]: {c: float(G[i, c]) for c in range(G.shape[1])} for i in range(len(CLASSES))}

    def concept_output_gradient(inputs, concepts_x_gradients=True, tqdm_bar=False):
        assert list(inputs) == examples.texts[: len(inputs)] and concepts_x_gradients
        return [torch.tensor(L[i], dtype=torch.float32) for i in range(len(inputs))]

    explainer = types.SimpleNamespace(concept_output_gradient=concept_output_gradient)
    return interpretation, global_importances, explainer


def test_same_examples_prompts_and_scores_as_interpreto(classifier, pool, smollm2):
    model, tokenizer = classifier
    texts, labels, predictions = pool
    splitter = types.SimpleNamespace(_model=model, tokenizer=tokenizer, device="cpu")

    # 1. the selection: n_learning = n_evaluation = 4 over 3 classes draws a remainder of each kind (with replacement)
    for seed in (0, 3):
        ours = select_examples(model, tokenizer, texts, labels, n_learning=4, n_evaluation=4, seed=seed)
        theirs = InterpretoConSim(splitter, None, classes=CLASSES).select_examples(
            texts, torch.as_tensor(labels), nb_lp_samples=4, nb_ep_samples=4, seed=seed, device="cpu"
        )
        assert ours.texts == theirs[0]
        assert ours.labels.tolist() == theirs[1].tolist() and ours.predictions.tolist() == theirs[2].tolist()
        assert (
            ours.texts == [texts[i] for i in ours.indices]
            and ours.predictions.tolist() == predictions[ours.indices].tolist()
        )
    assert ours.indices.tolist() == PINNED  # seed 3

    # 2. the prompts of every type, from our concept results
    store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
    concepts = PCAConcepts(6).fit(store)
    L = concept_contributions(concepts, model, tokenizer, ours.texts, ours.predictions)
    G = class_importances(L[: ours.n_learning], ours.predictions, 3)
    concept_labels = [f"words of concept {c}" for c in range(6)]
    interpretation, global_importances, explainer = _interpreto_inputs(ours, concept_labels, G, L)
    prompter = InterpretoConSim(splitter, None, classes=CLASSES)
    for name in PROMPT_TYPES:
        for anonymize in (False, True):
            messages, expected = consim_prompt(
                ours,
                name,
                concept_labels=concept_labels,
                global_importances=G,
                local_importances=L,
                anonymize_classes=anonymize,
            )
            explained = name not in ("L1", "L2")
            prompt, _ = prompter.evaluate(
                ours.texts,
                torch.as_tensor(ours.predictions),
                concept_explainer=explainer if explained else None,
                concepts_interpretation=interpretation if explained else None,
                global_importances=global_importances if explained else None,
                prompt_type=PromptTypes[LONG_NAMES[name]],
                anonymize_classes=anonymize,
            )
            assert [(role.value, text) for role, text in prompt] == messages, (name, anonymize)
            shown = [f"Class_{p}" for p in ours.predictions] if anonymize else [CLASSES[p] for p in ours.predictions]
            assert expected == shown[ours.n_learning :]

    # 3. one greedy SmolLM2 wrapper answers both: the same rendered prompt, the same reply, the same score
    llm = Recorder(ChatLM(*smollm2, max_new_tokens=16))
    result = consim(
        ours,
        llm,
        prompt_types="E3",  # the richest prompt; one generation per library keeps the test short
        concept_labels=concept_labels,
        global_importances=G,
        local_importances=L,
    )
    asker = InterpretoConSim(splitter, llm, classes=CLASSES)
    for run in result.runs:
        score = asker.evaluate(
            ours.texts,
            torch.as_tensor(ours.predictions),
            concept_explainer=explainer if run.prompt_type == "E3" else None,
            concepts_interpretation=interpretation if run.prompt_type == "E3" else None,
            global_importances=global_importances if run.prompt_type == "E3" else None,
            prompt_type=PromptTypes[LONG_NAMES[run.prompt_type]],
        )
        ours_call, their_call = llm.calls[result.runs.index(run)], llm.calls[-1]
        assert ours_call == their_call  # the same text to SmolLM2, the same reply
        assert run.response == their_call[1]
        assert run.answers == InterpretoConSim._extract_predictions_from_response(run.response, 4)
        # scored against the evaluation texts' predictions, Interpreto's reading gives our score ...
        with pytest.warns(UserWarning) if run.score is None else _no_warning():
            assert InterpretoConSim._compute_score(run.response, run.expected) == run.score
        # ... and Interpreto 0.5.2's evaluate() scores the same answers against the learning texts' predictions
        learning = [CLASSES[p] for p in ours.predictions[: ours.n_learning]]
        assert score == agreement(learning, run.answers)
    assert result.settings["llm"] == "LM (HuggingFaceTB/SmolLM2-135M-Instruct)"

    # 4. a readable, deterministic LLM passed to both: the scores as numbers
    class Fixed:
        name = "fixed"

        def generate(self, prompt):
            return "Sample_4: negative\nSample_5: Positive\nSample_6: positive, surely\nSample_7: neutral"

    result = consim(ours, Fixed(), prompt_types=("L1", "L2"))
    asker = InterpretoConSim(splitter, Fixed(), classes=CLASSES)
    for run in result.runs:
        score = asker.evaluate(
            ours.texts, torch.as_tensor(ours.predictions), prompt_type=PromptTypes[LONG_NAMES[run.prompt_type]]
        )
        assert run.answers == ["negative", "positive", "positive,", "neutral"]
        assert (
            run.score == InterpretoConSim._compute_score(run.response, run.expected) == 1 / 4
        )  # the evaluation texts' predictions
        assert (
            score == agreement([CLASSES[p] for p in ours.predictions[:4]], run.answers) == 3 / 4
        )  # the learning texts'


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------- a fake LLM: exact scores
MIXED = [0, 1, 2, 0, 1, 2, 1, 2, 0, 2, 0, 1]  # predictions of labels [0, 1, 2] * 4: the first six right, the rest wrong


def _examples(seed=0):
    labels = [0, 1, 2] * 4
    predictions = MIXED
    texts = [f"text {i}" for i in range(12)]
    return select_examples(None, None, texts, labels, predictions=predictions, classes=CLASSES, n_learning=6,
                           n_evaluation=6, seed=seed)  # fmt: skip


def test_a_fake_llm_gets_exactly_the_scores_it_earns():
    examples = _examples()
    assert examples.indices.tolist() == [5, 3, 10, 9, 11, 7, 4, 2, 6, 0, 1, 8]
    assert examples.predictions[6:].tolist() == [1, 2, 1, 0, 1, 0]

    def fake(messages):
        """Right on every text when shown local importances; else "neutral" for all, read as "neutral," (the comma
        stays: Interpreto's reading) without a learning phase; an unreadable reply to E1."""
        system = messages[0][1]
        if "Concepts contributions" in system:
            return "\n".join(f"Sample_{i}: {CLASSES[examples.predictions[i]]}" for i in range(6, 12)) + "\n\n"
        if "most important concepts" in system and "Sample_0" not in system:
            return "I think they are all neutral."
        neutral = "Neutral, since" if "Sample_0" not in system else "Neutral since"
        return "\n".join(f"Sample_{i}: {neutral}" for i in range(6, 12))

    G = np.array([[1.0, -0.2, 0.0], [0.0, 2.0, 0.1], [0.3, 0.0, -1.0]])
    L = np.eye(12, 3)
    result = consim(examples, fake, prompt_types=PROMPT_TYPES, concept_labels=["a", "b", "c"], global_importances=G,
                    local_importances=L)  # fmt: skip
    assert result.scores == {"L1": 0.0, "E1": None, "L2": 0.5, "E2": 0.5, "E3": 1.0, "U1": 1.0}
    assert (
        result["E1"].answers is None
        and result["L2"].answers == ["neutral"] * 6
        and result["L1"].answers == ["neutral,"] * 6
    )
    frame = result.to_dataframe()
    assert frame.readable.tolist() == [True, False, True, True, True, True]
    assert frame.name.tolist() == list(LONG_NAMES.values())
    assert repr(result).startswith("ConSimResult(6 evaluated texts, seed 0: L1=0.0, E1=unreadable")

    anonymous = consim(examples, lambda m: "Sample_6: Class_1\nSample_7: class_2\n" * 3, prompt_types="L2",
                       anonymize_classes=True)  # fmt: skip
    assert anonymous["L2"].expected == ["Class_1", "Class_2", "Class_1", "Class_0", "Class_1", "Class_0"]
    assert anonymous.scores == {"L2": 4 / 6} and "[Class_0, Class_1, Class_2]" in anonymous["L2"].messages[0][1]


def test_answers_are_read_as_interpreto_reads_them():
    cases = [
        ("Sample_6: neutral\nSample_7: positive", 2),
        ("Sample_6: neutral\nSample_7: positive\n\n\n", 2),
        ("neutral\npositive", 2),  # no colon: the lines themselves
        ("Prediction 1: Very positive\nSentence 2: neg", 2),
        ("Sample_6: neutral\nExplanation: it is", 2),  # a line left out: too few answers
        ("Sample_6: neutral", 2),
        ("", 1),
        (None, 1),
    ]
    for response, n in cases:
        assert read_answers(response, n) == InterpretoConSim._extract_predictions_from_response(response, n)
    assert read_answers("Sample_6:neutral\nSample_7: x", 2) is None  # Interpreto raises IndexError here
    with pytest.raises(IndexError):
        InterpretoConSim._extract_predictions_from_response("Sample_6:neutral\nSample_7: x", 2)
    assert agreement(["a", "b"], ["A", "c"]) == 0.5 and agreement(["a"], None) is None


def test_the_marks_and_the_threshold():
    examples = select_examples(None, None, ["w", "x", "y", "z"], [0, 1, 0, 1], predictions=[0, 0, 1, 1],
                               classes=["yes", "no"], n_learning=2, n_evaluation=2)  # fmt: skip
    # concept 0 carries 90 % of "yes", concept 2 all of "no"; concept 1 is never above 5 %: not shown
    G = np.array([[0.9, 0.04, 0.06], [0.0, 0.0, -0.4]])
    L = np.array([[1.0, -1.0, 0.02], [0.0, 0.1, -0.9], [0.5, 0.0, 0.5], [-1, -1, -2]])
    messages, _ = consim_prompt(examples, "U1", concept_labels={0: "zero", 1: "one", 2: "two"}, global_importances=G,
                                local_importances=L)  # fmt: skip
    system, user = messages[0][1].split("\n\n"), messages[1][1].split("\n\n")
    assert system[2] == "For each concept, the most aligned words or descriptions are:\n0: zero\n2: two"
    assert (
        system[3]
        == "The most important concepts and their importance for each class are:\nyes: {0: '++', 2: '+'}\nno: {2: '--'}"
    )
    assert system[5] == "Concepts contributions for Sample_0: {0: '++'}\nConcepts contributions for Sample_1: {2: '--'}"
    assert (
        user[1]
        == "Concepts contributions for Sample_2: {0: '++', 2: '++'}\nConcepts contributions for Sample_3: {0: '-', 2: '--'}"
    )
    # no concept reaches 5 % of its class: the threshold is halved until one does, and the marks use the halved one
    flat = np.full((2, 30), 1.0)
    messages, _ = consim_prompt(examples, "E1", concept_labels=[str(c) for c in range(30)], global_importances=flat)
    assert "yes: {" + ", ".join(f"{c}: '++'" for c in range(30)) + "}" in messages[0][1]
    # only labelled concepts are shown
    messages, _ = consim_prompt(examples, "E1", concept_labels={2: "two"}, global_importances=G)
    assert "are:\n2: two\n\n" in messages[0][1] and "yes: {2: '+'}" in messages[0][1]


def test_saved_and_loaded(tmp_path):
    examples = _examples(seed=2)
    result = consim(examples, lambda m: "Sample_6: neutral\n" * 6, prompt_types=("L1", "L2"))
    loaded = ConSimResult.load(result.save(tmp_path / "consim.safetensors"))
    assert loaded.scores == result.scores and loaded.examples.texts == examples.texts
    assert loaded.examples.indices.tolist() == examples.indices.tolist() and loaded.settings == result.settings
    assert loaded["L2"].messages == result["L2"].messages and loaded["L1"].response == result["L1"].response
    assert loaded.to_dataframe().equals(result.to_dataframe())
    assert examples.to_dataframe().phase.tolist() == ["learning"] * 6 + ["evaluation"] * 6
    other = PCAConcepts(2).fit(np.random.default_rng(0).normal(size=(20, 4))).save(tmp_path / "pca.safetensors")
    with pytest.raises(ValueError, match="not a interp_widgets.ConSimResult"):
        ConSimResult.load(other)
    with pytest.raises(FileNotFoundError):
        ConSimResult.load(tmp_path / "missing.safetensors")


def test_bad_input_is_refused_clearly(gpt2_lm):
    examples = _examples()
    G, L = np.ones((3, 3)), np.ones((12, 3))
    labels = [0, 1, 2] * 4
    cases = [
        (lambda: consim_prompt(examples, "E9"), ValueError, "unknown ConSim prompt type 'E9'"),
        (lambda: consim_prompt(examples, "E2", global_importances=G), ValueError, "give concept_labels="),
        (
            lambda: consim_prompt(examples, "E3", concept_labels=["a"] * 3, global_importances=G),
            ValueError,
            "give local_importances=",
        ),
        (
            lambda: consim_prompt(
                examples, "E3", concept_labels=["a"] * 3, global_importances=G, local_importances=L[:2]
            ),
            ValueError,
            "at least 6 rows",
        ),
        (
            lambda: consim_prompt(examples, "E1", concept_labels=["a"] * 3, global_importances=np.zeros((3, 3))),
            ValueError,
            "all zero",
        ),
        (
            lambda: consim_prompt(examples, "E1", concept_labels=["a"] * 3, global_importances=np.ones((2, 3))),
            ValueError,
            "(classes, concepts) = (3",
        ),
        (
            lambda: consim_prompt(examples, "E1", concept_labels="abc", global_importances=G),
            TypeError,
            "concept_labels must be",
        ),
        (lambda: consim_prompt("examples", "L1"), TypeError, "ConSimExamples"),
        (lambda: consim(examples, 42, prompt_types="L1"), TypeError, "llm must answer"),
        (
            lambda: consim(examples, print, prompt_types="E3", concept_labels=["a"] * 3),
            ValueError,
            "give concepts=, model= and tokenizer=",
        ),
        (lambda: consim(examples, print, prompt_types=()), ValueError, "at least one prompt type"),
        (
            lambda: select_examples(
                None,
                None,
                ["a"] * 12,
                labels,
                predictions=labels,
                classes=["good one", "b", "c"],
                n_learning=6,
                n_evaluation=6,
            ),
            ValueError,
            "predicts 0 of the texts wrongly",
        ),
        (
            lambda: select_examples(
                None, None, ["a"] * 12, labels, predictions=[0, 0, 2] * 4, classes=CLASSES, n_learning=4, n_evaluation=4
            ),
            ValueError,
            "class 'neutral' has 0 correctly",
        ),
        (
            lambda: select_examples(None, None, ["a"] * 12, labels, predictions=labels, classes=CLASSES, n_learning=2),
            ValueError,
            "3 classes cannot all appear among 2 learning texts",
        ),
        (
            lambda: select_examples(
                None, None, ["a"] * 12, labels, predictions=MIXED, classes=CLASSES, n_learning=3, n_evaluation=1
            ),
            ValueError,
            "cannot be spread over 3 classes",
        ),
        (
            lambda: select_examples(None, None, ["a"] * 12, [3] * 12, predictions=labels, classes=CLASSES),
            ValueError,
            "labels must be class indices in [0, 3)",
        ),
        (
            lambda: select_examples(None, None, ["a"] * 12, labels[:5], predictions=labels, classes=CLASSES),
            ValueError,
            "one class index per text (12)",
        ),
        (
            lambda: select_examples(None, None, ["a"] * 12, labels, classes=CLASSES),
            ValueError,
            "or the model's predictions",
        ),
        (
            lambda: select_examples(None, None, ["a"] * 12, labels, predictions=labels),
            ValueError,
            "give the class names",
        ),
        (lambda: ChatLM(object(), None), TypeError, "ChatLM needs a causal LM"),
        (lambda: ChatLM.messages([("robot", "hi")]), ValueError, "role 'system', 'user' or 'assistant'"),
    ]
    for call, error, message in cases:
        with pytest.raises(error) as caught:
            call()
        assert message in str(caught.value), (message, str(caught.value))
    spaced = ConSimExamples(texts=["a", "b"], labels=[0, 1], predictions=[0, 1], indices=[0, 1], classes=["good one", "b"],
                            n_learning=1)  # fmt: skip
    with pytest.raises(ValueError, match="cannot be read back"):
        consim_prompt(spaced, "L1")
    assert consim_prompt(spaced, "L1", anonymize_classes=True)[1] == ["Class_1"]
    lm, lm_tokenizer = gpt2_lm
    with pytest.raises(ValueError, match="ConSim explains a sequence classifier"):
        select_examples(lm, lm_tokenizer, ["a b", "c d"], [0, 1], classes=["x", "y"], n_learning=1, n_evaluation=1)
