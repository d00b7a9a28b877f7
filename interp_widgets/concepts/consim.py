"""ConSim: do concept explanations help an LLM simulate the model? (Poché et al., ACL 2025).

ConSim asks an LLM (the *meta-predictor*) to predict a classifier's predictions on some texts, after showing it
other texts with the classifier's predictions (the *learning phase*) and, depending on the prompt type, the concepts
(their labels), their importance for each class (*global*) and for each learning text (*local*). The score is the
share of evaluation texts whose prediction the LLM gets right; explanations help when a prompt that shows them
scores above its baseline (E1 against L1, E2 and E3 against L2).

Three steps, as Interpreto 0.5.2's ``ConSim`` (``interpreto.concepts.metrics.consim``), whose choices this module
reproduces (the tests check the selected examples, the prompts and the answers' reading against it):

1. :func:`select_examples` draws ``n_learning + n_evaluation`` texts: half of them predicted correctly and half
   wrongly, spread over the classes by their true label, then shuffled; the first ``n_learning`` form the learning
   phase. The draw uses a torch generator seeded with ``seed``, in Interpreto's order of draws, so a seed selects the
   same texts in both libraries; as there, the texts that fill up a remainder are drawn with replacement.
2. :func:`consim_prompt` writes the prompt of one prompt type (``"L1"``, ``"E1"``, ``"L2"``, ``"E2"``, ``"E3"``,
   ``"U1"``: :data:`PROMPT_TYPES`): a system message (the task, the classes, the concepts and their importance, the
   learning texts and their predictions), a user message (the evaluation texts) and an empty assistant message.
   Concepts are shown when their absolute global importance is above ``importance_threshold`` of their class's
   total for some class (the threshold is halved until one is); global importances are shown as ``++`` (≥ 6 ×
   threshold), ``+``, ``-``, ``--`` of their **raw** values and local ones of their values divided by the text's
   absolute total, both as Interpreto does (its docstring says that both are normalised).
3. :func:`consim` asks the LLM and scores its answer (:func:`read_answers`, :func:`agreement`).

Where this module departs from Interpreto 0.5.2:

* the score compares the LLM's answers with the model's predictions on the **evaluation** texts, which the LLM is
  asked about; Interpreto 0.5.2 compares them with its predictions on the *learning* texts
  (``literal_model_predictions`` takes the first half), which the LLM saw with their predictions;
* refused with a clear error where Interpreto fails later or silently: too few correct or wrong predictions in a
  class to fill its share (Interpreto returns fewer texts), fewer correct or wrong predictions than classes
  (Interpreto warns, then fails in ``torch.randint``), importances that are all zero (Interpreto loops forever),
  class names that its answer reading cannot match (a space or a colon), a reply line ``Sample_4`` with no ``": "``
  (Interpreto raises ``IndexError``; here the reply is unreadable and the score None);
* the learning phase is the first ``n_learning`` texts (Interpreto splits the texts in half, the same when
  ``n_learning == n_evaluation``).

Local importances are each learning text's concept contributions to the class the model predicts
(:func:`~interp_widgets.concepts.concept_importance`: coefficient × gradient, summed over tokens); by default the
global importance of a class is their mean over the learning texts the model predicts as that class.

Example:
    >>> labels, predictions = [0, 1, 2] * 4, [0, 1, 2, 0, 1, 2, 1, 2, 0, 2, 0, 1]  # made elsewhere
    >>> examples = select_examples(model, tokenizer, texts[:12], labels, predictions=predictions, n_learning=6,
    ...                            n_evaluation=6, seed=0)
    >>> examples.indices.tolist()
    [5, 3, 10, 9, 11, 7, 4, 2, 6, 0, 1, 8]
    >>> answers = ["neutral", "positive", "neutral", "negative", "negative", "negative"]
    >>> fake_llm = lambda messages: "\\n".join(f"Sample_{i}: {a}" for i, a in enumerate(answers, 6))
    >>> result = consim(examples, fake_llm, concepts=concepts, model=model, tokenizer=tokenizer,
    ...                 concept_labels=[f"concept {c}" for c in range(8)], prompt_types=("L2", "E3"))
    >>> result.scores
    {'L2': 0.8333333333333334, 'E3': 0.8333333333333334}
    >>> print(result["E3"].messages[0][1].split("\\n\\n")[2])  # the concepts shown
    For each concept, the most aligned words or descriptions are:
    0: concept 0
    1: concept 1
    2: concept 2
    3: concept 3
    4: concept 4
    5: concept 5
    7: concept 7
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.validation import check_int

_FORMAT = "interp_widgets.ConSimResult"


@dataclass(frozen=True)
class PromptParts:
    """What one prompt type shows: the concepts' labels and global importance (initial phase), the learning texts,
    their local importances and the model's predictions on them (learning phase), the evaluation texts and their local
    importances (evaluation phase)."""

    concepts: bool = False
    global_importances: bool = False
    learning_texts: bool = False
    learning_local_importances: bool = False
    learning_predictions: bool = False
    evaluation_texts: bool = True
    evaluation_local_importances: bool = False

    @property
    def needs_concepts(self) -> bool:
        return self.concepts or self.global_importances


#: The prompt types of the paper (Interpreto's ``PromptTypes``): two baselines without explanations (L1: no learning
#: phase, L2: with one), three explained prompts (E1: global explanations only, E2: global with a learning phase, E3:
#: global and local) and an upper bound (U1: E3 plus the local importances of the evaluation texts, which leak the
#: predictions: not a ConSim score).
PROMPT_TYPES: dict[str, PromptParts] = {
    "L1": PromptParts(),
    "E1": PromptParts(concepts=True, global_importances=True),
    "L2": PromptParts(learning_texts=True, learning_predictions=True),
    "E2": PromptParts(concepts=True, global_importances=True, learning_texts=True, learning_predictions=True),
    "E3": PromptParts(
        concepts=True,
        global_importances=True,
        learning_texts=True,
        learning_local_importances=True,
        learning_predictions=True,
    ),
    "U1": PromptParts(
        concepts=True,
        global_importances=True,
        learning_texts=True,
        learning_local_importances=True,
        learning_predictions=True,
        evaluation_local_importances=True,
    ),
}
#: Interpreto's names of the prompt types.
LONG_NAMES = {
    "L1": "L1_baseline_without_lp",
    "E1": "E1_global_concepts_without_lp",
    "L2": "L2_baseline_with_lp",
    "E2": "E2_global_concepts_with_lp",
    "E3": "E3_global_and_local_concepts_with_lp",
    "U1": "U1_upper_bound_concepts_at_ep",
}


def prompt_type_name(prompt_type) -> str:
    """The short name (``"E3"``) of a prompt type given by its short name, Interpreto's name or Interpreto's enum.

    Example:
        >>> prompt_type_name("E3_global_and_local_concepts_with_lp"), prompt_type_name("l2")
        ('E3', 'L2')
    """
    name = getattr(prompt_type, "name", prompt_type)
    if isinstance(name, str):
        short = name.split("_")[0].upper()
        if short in PROMPT_TYPES and (name.upper() == short or name == LONG_NAMES[short]):
            return short
    raise ValueError(
        f"unknown ConSim prompt type {prompt_type!r}; use one of {list(PROMPT_TYPES)} (or {list(LONG_NAMES.values())})"
    )


# ---------------------------------------------------------------- step 1: the examples
@dataclass
class ConSimExamples:
    """The texts ConSim shows the LLM: the first ``n_learning`` are the learning phase, the rest the evaluation phase.

    ``indices`` are the texts' positions in the list they were drawn from, ``labels`` their true classes and
    ``predictions`` the model's (class indices into ``classes``).

    Example:
        >>> examples = select_examples(None, None, ["a", "b", "c", "d"], [0, 1, 0, 1], predictions=[0, 0, 1, 1],
        ...                            classes=["yes", "no"], n_learning=2, n_evaluation=2, seed=0)
        >>> examples.to_dataframe()[["phase", "text", "label", "prediction", "correct"]]
                phase text label prediction  correct
        0    learning    d    no         no     True
        1    learning    a   yes        yes     True
        2  evaluation    b    no        yes    False
        3  evaluation    c   yes         no    False
    """

    texts: list[str]
    labels: np.ndarray
    predictions: np.ndarray
    indices: np.ndarray
    classes: list[str]
    n_learning: int
    seed: int = 0

    def __post_init__(self):
        self.texts = [str(t) for t in self.texts]
        self.labels = np.asarray(self.labels, dtype=np.int64).reshape(-1)
        self.predictions = np.asarray(self.predictions, dtype=np.int64).reshape(-1)
        self.indices = np.asarray(self.indices, dtype=np.int64).reshape(-1)
        self.classes = [str(c) for c in self.classes]
        n = len(self.texts)
        if not (len(self.labels) == len(self.predictions) == len(self.indices) == n):
            raise ValueError("texts, labels, predictions and indices must have one entry per selected text")
        if not 0 < self.n_learning < n:
            raise ValueError(f"n_learning must leave texts in both phases; got {self.n_learning} of {n}")

    @property
    def n_evaluation(self) -> int:
        return len(self.texts) - self.n_learning

    def to_dataframe(self):
        """One row per selected text: position, phase, index, text, label, prediction, correct."""
        import pandas as pd

        n = len(self.texts)
        return pd.DataFrame(
            {
                "position": np.arange(n),
                "phase": ["learning" if i < self.n_learning else "evaluation" for i in range(n)],
                "index": self.indices,
                "text": self.texts,
                "label": [self.classes[c] for c in self.labels],
                "prediction": [self.classes[c] for c in self.predictions],
                "correct": self.labels == self.predictions,
            }
        )


def _predict(model, tokenizer, texts: list[str]) -> np.ndarray:
    from interp_widgets.adapter import ModelAdapter
    from interp_widgets.layers import evaluation

    adapter = ModelAdapter(model, tokenizer)
    out = []
    with evaluation(model), torch.no_grad():
        for i, text in enumerate(texts):
            enc = adapter.encode(text)
            logits = adapter.forward_ids(torch.as_tensor(np.asarray(enc.input_ids))[None])
            if logits.ndim != 2:
                raise ValueError(
                    f"ConSim explains a sequence classifier; {type(model).__name__} gives logits of shape "
                    f"{tuple(logits.shape)} for text {i}. Pass predictions= to use predictions made elsewhere"
                )
            out.append(int(logits[0].argmax()))
    return np.asarray(out, dtype=np.int64)


def _class_vector(name: str, values, n: int, k: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or len(array) != n:
        raise ValueError(f"{name} must hold one class index per text ({n}); got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer) or (n and (array.min() < 0 or array.max() >= k)):
        raise ValueError(f"{name} must be class indices in [0, {k}) (one per class name); got {array[:8].tolist()}...")
    return array.astype(np.int64)


def select_examples(
    model,
    tokenizer,
    texts: Sequence[str],
    labels,
    *,
    classes: Sequence[str] | None = None,
    predictions=None,
    n_learning: int = 20,
    n_evaluation: int = 20,
    seed: int = 0,
) -> ConSimExamples:
    """Draw ConSim's texts: half predicted correctly, half wrongly, spread over the classes, then shuffled.

    With ``n = n_learning + n_evaluation``, ``n // 2`` texts the model predicts correctly and the rest wrongly are
    drawn; each class (by true label) gives ``(n // 2) // k`` correct and ``(n - n // 2) // k`` wrong ones, and the
    remainders are drawn, with replacement, from the texts left. The order of the draws is Interpreto's
    (``ConSim._extract_interesting_elements``), from a torch generator seeded with ``seed``.

    Args:
        model, tokenizer: the sequence classifier explained (its predictions are computed one text at a time, and
            a text longer than the model accepts is refused, where Interpreto truncates it); both may be None when
            ``predictions`` are given.
        texts, labels: the pool and its true class indices.
        classes: the class names, by index (default: the model's ``id2label``).
        predictions: the model's class indices on ``texts``, when computed elsewhere.
        n_learning, n_evaluation: the texts of each phase.
        seed: the draw's seed.

    Example:
        >>> select_examples(model, tokenizer, texts, [i % 3 for i in range(40)], n_learning=4, n_evaluation=4)
        Traceback (most recent call last):
            ...
        ValueError: class 'negative' has 0 correctly predicted texts, fewer than its share (1); give more texts of that class or ask for fewer texts
    """
    texts = list(texts)
    n_learning = check_int("n_learning", n_learning, minimum=1)
    n_evaluation = check_int("n_evaluation", n_evaluation, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a non-empty list of strings")
    if classes is None:
        id2label = getattr(getattr(model, "config", None), "id2label", None)
        if not id2label:
            raise ValueError("give the class names: classes=[...] (the model has no id2label)")
        classes = [id2label[i] for i in sorted(id2label)]
    classes = [str(c) for c in classes]
    k = len(classes)
    if k < 2:
        raise ValueError(f"ConSim needs at least two classes; got {classes}")
    labels = _class_vector("labels", labels, len(texts), k)
    if predictions is None:
        if model is None or tokenizer is None:
            raise ValueError("give the model and its tokenizer, or the model's predictions (predictions=)")
        predictions = _predict(model, tokenizer, texts)
    predictions = _class_vector("predictions", predictions, len(texts), k)
    if k > n_learning:
        raise ValueError(f"{k} classes cannot all appear among {n_learning} learning texts; raise n_learning")

    n = n_learning + n_evaluation
    n_correct = n // 2
    wanted = {"correct": n_correct, "wrong": n - n_correct}
    pools = {"correct": np.flatnonzero(predictions == labels), "wrong": np.flatnonzero(predictions != labels)}
    for kind, pool in pools.items():
        if len(pool) < wanted[kind]:
            raise ValueError(
                f"the model predicts {len(pool)} of the texts {kind}ly, fewer than the {wanted[kind]} needed; give "
                "more texts or ask for fewer (n_learning, n_evaluation)"
            )
    generator = torch.Generator().manual_seed(seed)
    for kind in pools:  # both shuffles first, then the remainders: Interpreto's order of draws
        pools[kind] = pools[kind][torch.randperm(len(pools[kind]), generator=generator).numpy()]
    chosen = []
    for kind, pool in pools.items():
        per_class = wanted[kind] // k
        if per_class == 0:
            raise ValueError(
                f"{wanted[kind]} {kind} predictions cannot be spread over {k} classes; ask for at least {2 * k} "
                "texts in all (n_learning + n_evaluation)"
            )
        by_class = [pool[labels[pool] == c] for c in range(k)]
        for c, members in enumerate(by_class):
            if len(members) < per_class:
                raise ValueError(
                    f"class {classes[c]!r} has {len(members)} {kind}ly predicted texts, fewer than its share "
                    f"({per_class}); give more texts of that class or ask for fewer texts"
                )
        chosen.append(np.concatenate([members[:per_class] for members in by_class]))
        rest = wanted[kind] - per_class * k
        if rest:
            left = np.concatenate([members[per_class:] for members in by_class])
            if len(left) == 0:
                raise ValueError(f"no {kind}ly predicted text is left to fill the remainder of {rest}; give more texts")
            chosen.append(left[torch.randint(len(left), (rest,), generator=generator).numpy()])
    indices = np.concatenate(chosen)
    indices = indices[torch.randperm(len(indices), generator=generator).numpy()]
    return ConSimExamples(
        texts=[texts[i] for i in indices],
        labels=labels[indices],
        predictions=predictions[indices],
        indices=indices,
        classes=classes,
        n_learning=n_learning,
        seed=seed,
    )


# ---------------------------------------------------------------- step 2: the prompts
def quantize_importance(value: float, threshold: float = 0.05) -> str | None:
    """An importance as ConSim shows it: ``--`` (≤ −6 × threshold), ``-`` (≤ −threshold), ``++`` (≥ 6 × threshold),
    ``+`` (≥ threshold), else None (not shown).

    Example:
        >>> [quantize_importance(v) for v in (-0.5, -0.1, 0.01, 0.1, 0.5)]
        ['--', '-', None, '+', '++']
    """
    if value <= -6 * threshold:
        return "--"
    if value <= -threshold:
        return "-"
    if value >= 6 * threshold:
        return "++"
    if value >= threshold:
        return "+"
    return None


def _shown(marks: dict[int, str]) -> str:
    return "{" + ", ".join(f"{concept}: {mark!r}" for concept, mark in marks.items()) + "}"


def _concept_labels(concept_labels) -> dict[int, str]:
    labels = getattr(concept_labels, "labels", concept_labels)  # a ConceptInterpretation gives its labels
    if isinstance(labels, dict):
        return {int(c): str(label) for c, label in labels.items()}
    if isinstance(labels, (list, tuple)):
        return {c: str(label) for c, label in enumerate(labels)}
    raise TypeError(
        "concept_labels must be a ConceptInterpretation, a list of labels (one per concept) or a dict "
        f"{{concept: label}}; got {type(concept_labels).__name__}"
    )


def _concepts_to_show(global_importances: np.ndarray, threshold: float) -> tuple[list[int], float]:
    totals = np.abs(global_importances).sum(axis=1)
    if not np.any(np.isfinite(totals) & (totals > 0)):
        raise ValueError("the global importances are all zero (or not finite): no concept can be shown")
    while True:
        keep: set[int] = set()
        for row in global_importances:
            magnitude = torch.tensor(row, dtype=torch.float32).abs()
            keep.update(torch.where(magnitude / magnitude.sum() > threshold)[0].tolist())
        if keep:
            return sorted(keep), threshold
        threshold /= 2


def consim_prompt(
    examples: ConSimExamples,
    prompt_type="E3",
    *,
    concept_labels=None,
    global_importances=None,
    local_importances=None,
    anonymize_classes: bool = False,
    importance_threshold: float = 0.05,
) -> tuple[list[tuple[str, str]], list[str]]:
    """The prompt of one prompt type, and the answers expected (the model's predictions on the evaluation texts).

    Args:
        examples: from :func:`select_examples`.
        prompt_type: ``"L1"``, ``"E1"``, ``"L2"``, ``"E2"``, ``"E3"`` or ``"U1"`` (or Interpreto's name or enum).
        concept_labels: a :class:`~interp_widgets.concepts.ConceptInterpretation`, a list of labels or a dict
            ``{concept: label}``; needed by the explained types (only labelled concepts are shown).
        global_importances: ``(classes, concepts)``: each concept's importance for each class.
        local_importances: ``(texts, concepts)``: each selected text's concept importances (the learning texts'
            rows suffice for E3).
        anonymize_classes: call the classes ``Class_0``, ``Class_1`` … (the LLM cannot guess from the names).
        importance_threshold: concepts and marks below this share are not shown (see the module docstring).

    Returns ``(messages, expected)``: ``messages`` is ``[("system", …), ("user", …), ("assistant", "")]`` and
    ``expected`` the class names the LLM should answer for the evaluation texts, in order.

    Example:
        >>> examples = select_examples(None, None, ["good", "bad", "fine", "awful"], [0, 1, 0, 1],
        ...                            predictions=[0, 0, 1, 1], classes=["pos", "neg"], n_learning=2, n_evaluation=2)
        >>> messages, expected = consim_prompt(examples, "L2")
        >>> print(messages[0][1])
        You are a classifier. For each sample, you have to predict the class. You will have examples of samples and labels as reference for the task. Each sample class prediction should be in the format: 'Sample_{i}: {predicted_class}'.
        <BLANKLINE>
        The classes are: [pos, neg]
        <BLANKLINE>
        Sample_0: awful
        Sample_1: good
        <BLANKLINE>
        Sample_0: neg
        Sample_1: pos
        >>> messages[1], expected
        (('user', 'Sample_2: bad\\nSample_3: fine'), ['pos', 'neg'])
    """
    name = prompt_type_name(prompt_type)
    parts = PROMPT_TYPES[name]
    if not isinstance(examples, ConSimExamples):
        raise TypeError(f"examples must be the ConSimExamples of select_examples(); got {type(examples).__name__}")
    classes = examples.classes
    if not anonymize_classes:
        for c in classes:
            if not c or any(ch.isspace() for ch in c) or ":" in c:
                raise ValueError(
                    f"class name {c!r} cannot be read back from the LLM's answer (the answer's first word after "
                    "': ' is compared); use one-word names or anonymize_classes=True"
                )
    shown = [f"Class_{i}" for i in range(len(classes))] if anonymize_classes else list(classes)
    n, n_learning = len(examples.texts), examples.n_learning

    labels = marks = local_marks = None
    if parts.needs_concepts:
        if concept_labels is None or global_importances is None:
            raise ValueError(f"prompt type {name} shows concepts: give concept_labels= and global_importances=")
        labels = _concept_labels(concept_labels)
        G = np.asarray(global_importances, dtype=np.float64)
        if G.ndim != 2 or G.shape[0] != len(classes):
            raise ValueError(f"global_importances must be (classes, concepts) = ({len(classes)}, …); got {G.shape}")
        keep, threshold = _concepts_to_show(G, importance_threshold)
        keep = [c for c in keep if c in labels]
        labels = {c: labels[c] for c in keep}
        marks = [
            {c: m for c in range(G.shape[1]) if c in labels and (m := quantize_importance(float(G[i, c]), threshold))}
            for i in range(len(classes))
        ]
        rows_needed = n if parts.evaluation_local_importances else n_learning
        if parts.learning_local_importances or parts.evaluation_local_importances:
            if local_importances is None:
                raise ValueError(f"prompt type {name} shows local importances: give local_importances=")
            L = torch.as_tensor(np.asarray(local_importances, dtype=np.float64), dtype=torch.float32)
            if L.ndim != 2 or L.shape[0] < rows_needed or L.shape[1] != G.shape[1]:
                raise ValueError(
                    f"local_importances must be (texts, concepts) with at least {rows_needed} rows and "
                    f"{G.shape[1]} concepts; got {tuple(L.shape)}"
                )
            L = L / L.abs().sum(dim=1, keepdim=True)
            local_marks = [
                {c: m for c, v in enumerate(row.tolist()) if c in labels and (m := quantize_importance(v, threshold))}
                for row in L
            ]

    task = "You are a classifier. For each sample, you have to predict the class. "
    if parts.needs_concepts:
        task += "To complete the task, you will be given the concepts and their importance for each class. "
    if parts.learning_texts and parts.learning_predictions:
        if parts.learning_local_importances:
            task += "You will have examples of samples, labels, and concepts contributions to labels as reference for the task. "
        else:
            task += "You will have examples of samples and labels as reference for the task. "
    if parts.evaluation_local_importances:
        task += "At inference time, you will have concepts contributions to labels. "
    task += "Each sample class prediction should be in the format: 'Sample_{i}: {predicted_class}'."

    system = [task, f"The classes are: [{', '.join(shown)}]"]
    if parts.concepts:
        system.append(
            "For each concept, the most aligned words or descriptions are:\n"
            + "\n".join(f"{c}: {label}" for c, label in labels.items())
        )
    if parts.global_importances:
        system.append(
            "The most important concepts and their importance for each class are:\n"
            + "\n".join(f"{shown[i]}: {_shown(marks[i])}" for i in range(len(classes)))
        )
    learning, evaluation = range(n_learning), range(n_learning, n)
    if parts.learning_texts:
        system.append("\n".join(f"Sample_{i}: {examples.texts[i]}" for i in learning))
    if parts.learning_local_importances:
        system.append("\n".join(f"Concepts contributions for Sample_{i}: {_shown(local_marks[i])}" for i in learning))
    if parts.learning_predictions:
        system.append("\n".join(f"Sample_{i}: {shown[examples.predictions[i]]}" for i in learning))
    user = []
    if parts.evaluation_texts:
        user.append("\n".join(f"Sample_{i}: {examples.texts[i]}" for i in evaluation))
    if parts.evaluation_local_importances:
        user.append("\n".join(f"Concepts contributions for Sample_{i}: {_shown(local_marks[i])}" for i in evaluation))
    messages = [("system", "\n\n".join(system)), ("user", "\n\n".join(user)), ("assistant", "")]
    return messages, [shown[examples.predictions[i]] for i in evaluation]


# ---------------------------------------------------------------- step 3: the answers and the score
def read_answers(response: str | None, n: int) -> list[str] | None:
    """The classes an LLM's reply names, as Interpreto reads them; None when the reply cannot be read.

    The reply must have ``n`` lines (trailing empty lines aside). When its first line holds no ``:`` the lines are
    the answers as written; otherwise each line that starts with ``Sample``, ``Sentence`` or ``Prediction`` gives
    the first word after ``": "``, in lower case (lines that start otherwise are left out, and the answers are then
    too few to score).

    Example:
        >>> read_answers("Sample_2: Positive review\\nSample_3: neg\\n", 2)
        ['positive', 'neg']
        >>> read_answers("Sample_2: pos", 2) is None  # one line for two texts
        True
    """
    if not response:
        return None
    lines = response.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) != n:
        return None
    if ":" not in lines[0]:
        return lines
    answers = []
    for line in lines:
        if line.startswith(("Prediction", "Sentence", "Sample")):
            pieces = line.split(": ")
            if len(pieces) < 2:
                return None
            answers.append(pieces[1].strip().lower().split(" ")[0])
    return answers


def agreement(expected: Sequence[str], answers: Sequence[str] | None) -> float | None:
    """The share of answers equal to the expected classes (ignoring case); None when the answers are missing or
    not one per expected class.

    Example:
        >>> agreement(["pos", "neg", "neg"], ["POS", "neg", "pos"])
        0.6666666666666666
        >>> agreement(["pos", "neg"], ["pos"]) is None
        True
    """
    if not answers or len(answers) != len(expected):
        return None
    return sum(a.lower() == b.lower() for a, b in zip(expected, answers)) / len(expected)


def concept_contributions(concept_model, model, tokenizer, texts: Sequence[str], targets, *, layer=None) -> np.ndarray:
    """``(texts, concepts)``: each text's concept contributions (coefficient × gradient, summed over tokens) to its
    target class (:func:`~interp_widgets.concepts.concept_importance`).

    Example:
        >>> concept_contributions(concepts, model, tokenizer, ["Not bad at all."], [2]).round(3)
        array([[ 0.831, -0.01 ,  0.091,  0.053, -0.148,  0.041, -0.196,  0.033]])
    """
    from interp_widgets.concepts.importance import concept_importance

    texts, targets = list(texts), [int(t) for t in targets]
    if len(texts) != len(targets):
        raise ValueError(f"give one target per text; got {len(texts)} texts and {len(targets)} targets")
    return np.stack(
        [
            concept_importance(concept_model, model, tokenizer, text, target=target, layer=layer).per_concept()
            for text, target in zip(texts, targets)
        ]
    )


def class_importances(local_importances, predictions, n_classes: int) -> np.ndarray:
    """``(classes, concepts)``: the mean local importance over the texts predicted as each class (zeros for a class
    with none).

    Example:
        >>> class_importances([[1.0, 0.0], [3.0, 2.0], [0.5, 0.5]], [0, 0, 2], 3)
        array([[2. , 1. ],
               [0. , 0. ],
               [0.5, 0.5]])
    """
    L = np.asarray(local_importances, dtype=np.float64)
    predictions = np.asarray(predictions, dtype=np.int64)
    out = np.zeros((n_classes, L.shape[1]))
    for c in range(n_classes):
        rows = L[predictions[: len(L)] == c]
        if len(rows):
            out[c] = rows.mean(axis=0)
    return out


@dataclass
class ConSimRun:
    """One prompt type's prompt, the LLM's reply, the answers read from it and the score (None: unreadable)."""

    prompt_type: str
    messages: list[tuple[str, str]]
    expected: list[str]
    response: str | None
    answers: list[str] | None
    score: float | None


@dataclass
class ConSimResult:
    """ConSim scores of one draw of examples, one :class:`ConSimRun` per prompt type.

    A score is comparable only with the baseline of the same draw (E1 with L1, E2 and E3 with L2): the examples are
    chosen with as many wrong predictions as right ones, so the score is no accuracy on a natural sample. The paper
    averages over several seeds.

    Example:
        >>> examples = select_examples(None, None, ["good", "bad", "fine", "awful"], [0, 1, 0, 1],
        ...                            predictions=[0, 0, 1, 1], classes=["pos", "neg"], n_learning=2, n_evaluation=2)
        >>> result = consim(examples, lambda m: "Sample_2: pos\\nSample_3: pos", prompt_types=("L1", "L2"))
        >>> result.to_dataframe()[["prompt_type", "score", "n_evaluated", "readable"]]
          prompt_type  score  n_evaluated  readable
        0          L1    0.5            2      True
        1          L2    0.5            2      True
        >>> ConSimResult.load(result.save(getfixture("tmp_path") / "consim.safetensors")).scores
        {'L1': 0.5, 'L2': 0.5}
    """

    examples: ConSimExamples
    runs: list[ConSimRun]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def scores(self) -> dict[str, float | None]:
        return {run.prompt_type: run.score for run in self.runs}

    def __getitem__(self, prompt_type) -> ConSimRun:
        name = prompt_type_name(prompt_type)
        for run in self.runs:
            if run.prompt_type == name:
                return run
        raise KeyError(f"no {name} run; this result has {[run.prompt_type for run in self.runs]}")

    def to_dataframe(self):
        """One row per prompt type: its names, score, evaluated texts, answers read and whether the reply was read."""
        import pandas as pd

        return pd.DataFrame(
            {
                "prompt_type": [run.prompt_type for run in self.runs],
                "name": [LONG_NAMES[run.prompt_type] for run in self.runs],
                "score": [np.nan if run.score is None else run.score for run in self.runs],
                "n_evaluated": [len(run.expected) for run in self.runs],
                "n_answers": [len(run.answers or []) for run in self.runs],
                "readable": [run.score is not None for run in self.runs],
            }
        )

    def save(self, path: str | Path) -> Path:
        """Write to one safetensors file with a JSON header (never pickle)."""
        e = self.examples
        arrays = {"labels": e.labels, "predictions": e.predictions, "indices": e.indices}
        meta = {
            "texts": e.texts,
            "classes": e.classes,
            "n_learning": e.n_learning,
            "seed": e.seed,
            "runs": [
                {
                    "prompt_type": run.prompt_type,
                    "messages": [list(m) for m in run.messages],
                    "expected": run.expected,
                    "response": run.response,
                    "answers": run.answers,
                    "score": run.score,
                }
                for run in self.runs
            ],
            "settings": self.settings,
        }
        return save_bundle(path, _FORMAT, arrays, meta)

    @classmethod
    def load(cls, path: str | Path) -> ConSimResult:
        """Read a file written by :meth:`save`."""
        arrays, meta = load_bundle(path, _FORMAT)
        examples = ConSimExamples(
            texts=meta["texts"],
            labels=arrays["labels"],
            predictions=arrays["predictions"],
            indices=arrays["indices"],
            classes=meta["classes"],
            n_learning=meta["n_learning"],
            seed=meta["seed"],
        )
        runs = [
            ConSimRun(
                prompt_type=run["prompt_type"],
                messages=[tuple(m) for m in run["messages"]],
                expected=run["expected"],
                response=run["response"],
                answers=run["answers"],
                score=run["score"],
            )
            for run in meta["runs"]
        ]
        return cls(examples, runs, meta.get("settings", {}))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'unreadable' if v is None else round(v, 3)}" for k, v in self.scores.items())
        return f"ConSimResult({self.examples.n_evaluation} evaluated texts, seed {self.examples.seed}: {shown})"


def _ask(llm, messages) -> str | None:
    if hasattr(llm, "generate") and callable(llm.generate):  # ChatLM, or Interpreto's LLMInterface (OpenAILLM …)
        return llm.generate(messages)
    if callable(llm):
        return llm(messages)
    raise TypeError(
        f"llm must answer a list of (role, text) messages: an object with generate(messages) -> str (ChatLM, "
        f"Interpreto's LLMInterface) or a callable; got {type(llm).__name__}"
    )


def consim(
    examples: ConSimExamples,
    llm: Callable | None = None,
    *,
    prompt_types: Sequence = ("L1", "E1", "L2", "E2", "E3"),
    concepts=None,
    model=None,
    tokenizer=None,
    concept_labels=None,
    global_importances=None,
    local_importances=None,
    layer=None,
    anonymize_classes: bool = False,
    importance_threshold: float = 0.05,
) -> ConSimResult:
    """Ask the LLM each prompt type's prompt (:func:`consim_prompt`) and score its answers (:func:`agreement`).

    Args:
        examples: from :func:`select_examples`.
        llm: an object with ``generate(messages) -> str`` (:class:`~interp_widgets.concepts.ChatLM`, Interpreto's
            ``LLMInterface``) or a callable ``llm(messages) -> str``; None: ``ChatLM()``, the embedded SmolLM2.
        prompt_types: the prompt types to ask, in order.
        concepts, model, tokenizer, layer: the concept model and the classifier; they compute the local importances
            (:func:`concept_contributions` to each text's predicted class) when the explained types need them.
        concept_labels: a :class:`~interp_widgets.concepts.ConceptInterpretation`, a list of labels or a dict.
        global_importances: ``(classes, concepts)``; default: :func:`class_importances` of the learning texts'
            local importances.
        local_importances: ``(texts, concepts)``, when computed elsewhere.
        anonymize_classes, importance_threshold: as in :func:`consim_prompt`.

    Example (not run here: SmolLM2 takes about a minute)::

        examples = select_examples(model, tokenizer, texts, labels, seed=0)
        result = consim(examples, ChatLM(max_new_tokens=200), concepts=concepts, model=model, tokenizer=tokenizer,
                        concept_labels=interpretation)
        result.to_dataframe()
    """
    if not isinstance(examples, ConSimExamples):
        raise TypeError(f"examples must be the ConSimExamples of select_examples(); got {type(examples).__name__}")
    names = [prompt_type_name(p) for p in ([prompt_types] if isinstance(prompt_types, str) else prompt_types)]
    if not names:
        raise ValueError("give at least one prompt type")
    explained = [PROMPT_TYPES[name] for name in names if PROMPT_TYPES[name].needs_concepts]
    if explained:
        if concept_labels is None:
            raise ValueError(f"prompt types {names} show concepts: give concept_labels=")
        need_local = any(p.learning_local_importances for p in explained) or global_importances is None
        if need_local and local_importances is None:
            if concepts is None or model is None or tokenizer is None:
                raise ValueError(
                    "the explained prompt types need local importances: give concepts=, model= and tokenizer= (or "
                    "local_importances= and global_importances=)"
                )
            rows = (
                len(examples.texts) if any(p.evaluation_local_importances for p in explained) else examples.n_learning
            )
            local_importances = concept_contributions(
                concepts, model, tokenizer, examples.texts[:rows], examples.predictions[:rows], layer=layer
            )
        if global_importances is None:
            local = np.asarray(local_importances, dtype=np.float64)[: examples.n_learning]
            global_importances = class_importances(local, examples.predictions, len(examples.classes))
    if llm is None:
        from interp_widgets.concepts.chat import ChatLM

        llm = ChatLM(max_new_tokens=16 * examples.n_evaluation)
    runs = []
    for name in names:
        messages, expected = consim_prompt(
            examples,
            name,
            concept_labels=concept_labels,
            global_importances=global_importances,
            local_importances=local_importances,
            anonymize_classes=anonymize_classes,
            importance_threshold=importance_threshold,
        )
        response = _ask(llm, messages)
        answers = read_answers(response, len(expected))
        runs.append(ConSimRun(name, messages, expected, response, answers, agreement(expected, answers)))
    settings = {
        "llm": getattr(llm, "name", type(llm).__name__),
        "anonymize_classes": bool(anonymize_classes),
        "importance_threshold": float(importance_threshold),
        "concept_method": type(concepts).__name__ if concepts is not None else None,
    }
    return ConSimResult(examples, runs, settings)
