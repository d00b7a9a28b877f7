"""Concept labellers that never call a network, and a score of label quality that neither labeller optimises.

A labeller is any callable ``labeler(concept, examples) -> str``: ``examples`` are the concept's top examples of a
:class:`~interp_widgets.concepts.ConceptInterpretation` (dicts with ``token``, ``context``, ``center``,
``activation`` ...). Two ship here:

* :class:`TokenLabeler`: the most frequent distinct top tokens (what :func:`interpret_concepts` uses by default);
* :class:`LMLabeler`: prompts a local instruction model loaded with ``transformers`` (the embedded SmolLM2 by
  default) with the top contexts, the firing token marked, and keeps its short answer.

A local LM takes about a second per concept on a CPU, so label lazily: ``interp.relabel(LMLabeler(...), lazy=True)``
labels a concept the first time it is viewed (:meth:`ConceptInterpretation.ensure_label`, which the concept browser
calls for the concepts it shows) and caches the label.

:func:`label_auroc` measures labels with a score neither labeller optimises: the AUROC, over held-out contexts, of
``cos(embed(label), embed(context))`` between contexts where the concept fires and contexts where it does not.

Example:
    >>> from interp_widgets.concepts import interpret_concepts
    >>> interp = interpret_concepts(concepts, store, progress=False)
    >>> TokenLabeler(2)(0, interp.examples[0])
    'it / ,'
    >>> interp.relabel(TokenLabeler(1), source="first token").labels[:2]
    ['it', 'overnight']
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from interp_widgets.validation import check_int

MARK_OPEN, MARK_CLOSE = "[[", "]]"


class TokenLabeler:
    """Label a concept by its ``n_tokens`` most frequent distinct top tokens, strongest first.

    Example:
        >>> TokenLabeler(2)(0, [{"token": " bad"}, {"token": "awful"}, {"token": "Bad"}])
        'bad / awful'
    """

    name = "top tokens"

    def __init__(self, n_tokens: int = 3):
        self.n_tokens = check_int("n_tokens", n_tokens, minimum=1)

    def __call__(self, concept: int, examples: list[dict]) -> str:
        from interp_widgets.concepts.interpret import label_from_tokens

        return label_from_tokens([e["token"] for e in examples], self.n_tokens)


def marked_context(example: dict, max_chars: int = 160) -> str:
    """One top example as text with its firing token in ``[[ ]]``, cut to about ``max_chars`` around it.

    Example:
        >>> marked_context({"context": ["the ", "food ", "was ", "great"], "center": 3})
        'the food was [[great]]'
    """
    pieces = list(example["context"])
    center = int(example["center"])
    left = "".join(pieces[:center])
    token = pieces[center]
    stripped = token.rstrip()
    right = token[len(stripped):] + "".join(pieces[center + 1:])
    half = max_chars // 2
    if len(left) > half:
        left = "\u2026" + left[-half:]
    if len(right) > half:
        right = right[:half] + "\u2026"
    return f"{left}{MARK_OPEN}{stripped}{MARK_CLOSE}{right}".replace("\n", " ").strip()


class LMLabeler:
    """Label a concept by asking a local instruction-tuned causal LM about its top contexts (no network).

    The model sees up to ``n_examples`` contexts with the firing token in ``[[ ]]`` and is asked for a label of a few
    words; generation is greedy, so labels are reproducible. The answer is cut to its first line and ``max_words``
    words; an empty answer falls back to the top-token label (and says so).

    Args:
        model, tokenizer: a causal LM, ideally instruction-tuned with a chat template: the embedded
            SmolLM2-135M-Instruct is ``LMLabeler(*interp_widgets.demo.load_lm())``.
        n_examples: contexts shown per concept.
        max_new_tokens, max_words: bounds on the answer.

    Example:
        >>> labeler = LMLabeler(lm, lm_tokenizer, n_examples=2, max_new_tokens=4)
        >>> label = labeler(0, [{"context": ["the ", "food ", "was ", "great"], "center": 3, "token": "great"}])
        >>> isinstance(label, str) and 0 < len(label.split()) <= 6
        True
    """

    def __init__(self, model, tokenizer, *, n_examples: int = 8, max_new_tokens: int = 12, max_words: int = 6):
        if not hasattr(model, "generate"):
            raise TypeError(f"LMLabeler needs a causal LM with generate(), got {type(model).__name__}; "
                            "e.g. LMLabeler(*interp_widgets.demo.load_lm())")
        self.model, self.tokenizer = model, tokenizer
        self.n_examples = check_int("n_examples", n_examples, minimum=1)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        self.max_words = check_int("max_words", max_words, minimum=1)
        self.name = f"LM ({getattr(model.config, '_name_or_path', '') or type(model).__name__})".replace("LM ()", "LM")

    def prompt(self, examples: list[dict]) -> str:
        """The text the model is given for these examples (its chat template applied when it has one).

        Example:
            >>> text = LMLabeler(lm, lm_tokenizer).prompt([{"context": ["a ", "dog"], "center": 1, "token": "dog"}])
            >>> "a [[dog]]" in text
            True
        """
        lines = "\n".join(f"- {marked_context(e)}" for e in examples[: self.n_examples])
        request = ("These snippets come from texts where one feature of a language model is active; the token where "
                   f"it is most active is marked with {MARK_OPEN} {MARK_CLOSE}.\n{lines}\n"
                   f"In at most {self.max_words} words, what does the feature detect? Answer with the label only.")
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                                      add_generation_prompt=True)
        return request + "\nLabel:"

    def __call__(self, concept: int, examples: list[dict]) -> str:
        import torch

        if not examples:
            return ""
        text = self.prompt(examples)
        batch = self.tokenizer(text, return_tensors="pt", add_special_tokens=not getattr(self.tokenizer,
                                                                                       "chat_template", None))
        device = self.model.get_input_embeddings().weight.device
        batch = {k: v.to(device) for k, v in batch.items()}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.model.generate(**batch, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      pad_token_id=pad)
        answer = self.tokenizer.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        return clean_label(answer, self.max_words) or TokenLabeler()(concept, examples) + " (token fallback)"


def clean_label(answer: str, max_words: int = 6) -> str:
    """The first line of a model's answer, without quotes, a "Label:" prefix or trailing punctuation, cut to
    ``max_words`` words.

    Example:
        >>> clean_label('Label: "Food quality words."\\nThe feature ...')
        'Food quality words'
    """
    line = next((part for part in answer.strip().splitlines() if part.strip()), "")
    line = re.sub(r"^\s*(the\s+)?(label|feature)\s*(is)?\s*[:\-]\s*", "", line, flags=re.I)
    line = line.strip().strip("\"'`*").strip()
    line = re.sub(r"[.!;:,]+$", "", line).strip()
    return " ".join(line.split()[:max_words])


def label_auroc(labels: Sequence[str], coefficients: np.ndarray, contexts: Sequence[str],
                embed: Callable[[list[str]], np.ndarray], *, threshold: float = 0.0) -> np.ndarray:
    """AUROC of ``cos(embed(label), embed(context))`` separating contexts where each concept fires from the rest.

    Args:
        labels: one label per concept (an empty label scores NaN).
        coefficients: ``(contexts, concepts)`` concept activation of each held-out context (e.g. its max over tokens).
        contexts: the held-out context texts.
        embed: texts -> ``(n, d)`` embeddings (e.g. :func:`interp_widgets.demo.sentence_embedder`).
        threshold: a concept fires in a context when its coefficient exceeds this.

    Returns one AUROC per concept (NaN where a concept fires in all or none of the contexts). 0.5 is chance.

    Example:
        >>> embed = lambda texts: np.array([[t.count("food") + 0.1, t.count("rain") + 0.1] for t in texts])
        >>> C = np.array([[1.0, 0.0], [0.8, 0.0], [0.0, 0.9], [0.0, 0.0]])
        >>> label_auroc(["food", "rain"], C, ["food food", "food", "rain", "x"], embed).round(2).tolist()
        [1.0, 1.0]
    """
    from sklearn.metrics import roc_auc_score

    coefficients = np.asarray(coefficients, dtype=np.float64)
    if coefficients.shape != (len(contexts), len(labels)):
        raise ValueError(f"coefficients must be (contexts, concepts) = ({len(contexts)}, {len(labels)}), "
                         f"got {coefficients.shape}")
    context_vectors = _unit(np.asarray(embed(list(contexts)), dtype=np.float64))
    scores = np.full(len(labels), np.nan)
    live = [c for c, label in enumerate(labels) if label.strip()]
    if not live:
        return scores
    label_vectors = _unit(np.asarray(embed([labels[c] for c in live]), dtype=np.float64))
    similarity = context_vectors @ label_vectors.T
    for j, c in enumerate(live):
        fires = coefficients[:, c] > threshold
        if 0 < fires.sum() < len(fires):
            scores[c] = roc_auc_score(fires, similarity[:, j])
    return scores


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
