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
``cos(embed(label), embed(context))`` between contexts where the concept fires and contexts where it does not;
:func:`compare_labelers` runs two labellers on the same concepts and held-out contexts and compares their scores.

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

from interp_widgets.concepts.chat import ChatLM
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
    right = token[len(stripped) :] + "".join(pieces[center + 1 :])
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
            raise TypeError(
                f"LMLabeler needs a causal LM with generate(), got {type(model).__name__}; "
                "e.g. LMLabeler(*interp_widgets.demo.load_lm())"
            )
        self.chat = ChatLM(model, tokenizer, max_new_tokens=max_new_tokens, who="LMLabeler")
        self.model, self.tokenizer, self.max_new_tokens, self.name = (
            model,
            tokenizer,
            self.chat.max_new_tokens,
            self.chat.name,
        )
        self.n_examples = check_int("n_examples", n_examples, minimum=1)
        self.max_words = check_int("max_words", max_words, minimum=1)

    def prompt(self, examples: list[dict]) -> str:
        """The text the model is given for these examples (its chat template applied when it has one).

        Example:
            >>> text = LMLabeler(lm, lm_tokenizer).prompt([{"context": ["a ", "dog"], "center": 1, "token": "dog"}])
            >>> "a [[dog]]" in text
            True
        """
        return self.chat.render(self._messages(examples))

    def _messages(self, examples: list[dict]) -> list[dict]:
        lines = "\n".join(f"- {marked_context(e)}" for e in examples[: self.n_examples])
        request = (
            "These snippets come from texts where one feature of a language model is active; the token where "
            f"it is most active is marked with {MARK_OPEN} {MARK_CLOSE}.\n{lines}\n"
            f"In at most {self.max_words} words, what does the feature detect? Answer with the label only."
        )
        messages = [{"role": "user", "content": request}]
        if not getattr(self.tokenizer, "chat_template", None):  # a plain LM is given the answer's start
            messages.append({"role": "assistant", "content": "Label:"})
        return messages

    def __call__(self, concept: int, examples: list[dict]) -> str:
        if not examples:
            return ""
        answer = self.chat.generate(self._messages(examples))
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


def label_auroc(
    labels: Sequence[str],
    coefficients: np.ndarray,
    contexts: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    *,
    threshold: float = 0.0,
) -> np.ndarray:
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
        raise ValueError(
            f"coefficients must be (contexts, concepts) = ({len(contexts)}, {len(labels)}), got {coefficients.shape}"
        )
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


def context_windows(store, window: int = 24) -> tuple[list[str], list[tuple[int, int]]]:
    """Held-out contexts for :func:`label_auroc`: each text of ``store`` cut into windows of ``window`` tokens.

    A text's last window is kept when it holds at least half of ``window`` tokens. Returns the context texts (the
    characters their tokens cover) and the row range ``(start, stop)`` of each in ``store``.

    Example:
        >>> contexts, bounds = context_windows(store, window=4)
        >>> contexts[:2], bounds[:2]
        (['The third generation is', 'worse than the second'], [(0, 4), (4, 8)])
    """
    window = check_int("window", window, minimum=1)
    contexts, bounds = [], []
    for t in range(len(store.texts)):
        rows = store.text_rows(t)
        for a in range(0, len(rows), window):
            chunk = rows[a : a + window]
            if len(chunk) < max(1, window // 2):
                continue
            start, end = int(store.offsets[chunk[0], 0]), int(store.offsets[chunk[-1], 1])
            contexts.append(store.texts[t][start:end])
            bounds.append((int(chunk[0]), int(chunk[-1]) + 1))
    return contexts, bounds


def compare_labelers(
    labelers: Sequence,
    concept_model,
    interpretation,
    store,
    embed: Callable[[list[str]], np.ndarray],
    *,
    n_concepts: int = 36,
    window: int = 24,
    min_contexts: int = 5,
    max_fraction: float = 0.5,
    massive_factor: float | None = 10.0,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict:
    """Score labellers against each other with :func:`label_auroc` on held-out contexts that neither labeller saw.

    ``store`` holds the held-out texts' activations at the concept model's layer; it is cut into
    :func:`context_windows` of ``window`` tokens, and a concept's coefficient in a context is its largest activation
    there. Rows whose norm is over ``massive_factor`` times the median (attention sinks, which SAEs are trained
    without) do not count. ``n_concepts`` concepts are drawn at random (``seed``) among the live concepts of
    ``interpretation`` that fire in at least ``min_contexts`` contexts and at most ``max_fraction`` of them; each
    labeller labels each from its top examples in ``interpretation``.

    Returns a dict: ``concepts`` (the drawn concept ids), ``eligible`` and ``contexts`` (counts), and per labeller
    name (its ``name`` attribute, else its class name) ``labels``, ``auroc`` (one per drawn concept; NaN where a
    label is empty), ``mean`` and ``median`` (over finite scores) and ``seconds`` (labelling time per concept).
    With two labellers, ``difference`` is the second's AUROC minus the first's on the concepts both scored,
    ``difference_mean``, ``difference_ci`` its bootstrap 95% interval (``n_boot`` resamples) and ``higher``, how
    many concepts each labeller scored higher on.

    Example:
        >>> from interp_widgets.concepts import SparseAutoencoder, interpret_concepts
        >>> sae = SparseAutoencoder(16, k=2, max_epochs=3, progress=False).fit(store)
        >>> interp = interpret_concepts(sae, store, k=3, progress=False)
        >>> first_token = lambda concept, examples: examples[0]["token"].strip()
        >>> embed = lambda texts: np.array([[len(t), t.count("o") + 1.0] for t in texts])  # a toy embedding
        >>> result = compare_labelers([TokenLabeler(), first_token], sae, interp, store, embed, n_concepts=3, window=4)
        >>> result["concepts"], result["eligible"], result["contexts"], result["higher"]
        ([9, 10, 12], 13, 201, {'top tokens': 2, '<lambda>': 1})
        >>> result["top tokens"]["labels"], result["<lambda>"]["labels"]
        (['. / this', 'comfortable / is / h', 'gripping / to / has'], ['this', 'comfortable', 'gripping'])
        >>> result["top tokens"]["auroc"].round(3).tolist(), round(result["difference_mean"], 3)
        ([0.443, 0.562, 0.546], -0.024)
    """
    import time

    labelers = list(labelers)
    if not labelers:
        raise ValueError("pass at least one labeller, e.g. [TokenLabeler(), LMLabeler(*demo.load_lm())]")
    names = [
        getattr(labeler, "name", None) or getattr(labeler, "__name__", None) or type(labeler).__name__
        for labeler in labelers
    ]
    if len(set(names)) != len(names):
        raise ValueError(f"the labellers need distinct names to be told apart, got {names}; set a .name on each")
    if interpretation.n_concepts != concept_model.n_concepts:
        raise ValueError(
            f"the interpretation has {interpretation.n_concepts} concepts but the concept model "
            f"{concept_model.n_concepts}; pass the interpretation of this concept model"
        )
    n_concepts = check_int("n_concepts", n_concepts, minimum=1)
    contexts, bounds = context_windows(store, window)
    if not contexts:
        raise ValueError(
            f"the held-out store has no context of at least {max(1, window // 2)} tokens; pass more or "
            "longer texts, or a smaller window"
        )
    ordinary = np.ones(len(store), dtype=bool)
    if massive_factor:
        norms = store.row_norms()
        ordinary = norms < massive_factor * np.median(norms)
    coefficients = np.zeros((len(contexts), concept_model.n_concepts), dtype=np.float32)
    for i, (a, b) in enumerate(bounds):
        block = store[a:b][ordinary[a:b]]
        if len(block):
            coefficients[i] = np.asarray(concept_model.transform(block)).max(0)
    fires = (coefficients > 0).sum(0)
    eligible = np.flatnonzero(
        ~np.asarray(interpretation.dead) & (fires >= min_contexts) & (fires <= max_fraction * len(contexts))
    )
    if not len(eligible):
        raise ValueError(
            f"no live concept fires in {min_contexts} to {int(max_fraction * len(contexts))} of the "
            f"{len(contexts)} held-out contexts; pass more held-out texts or lower min_contexts"
        )
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(eligible, size=min(n_concepts, len(eligible)), replace=False))
    result: dict = {"concepts": [int(c) for c in chosen], "eligible": int(len(eligible)), "contexts": len(contexts)}
    for name, labeler in zip(names, labelers):
        start = time.perf_counter()
        labels = [labeler(int(c), interpretation.examples[c]) for c in chosen]
        seconds = (time.perf_counter() - start) / len(chosen)
        wrong = [label for label in labels if not isinstance(label, str)]
        if wrong:
            raise TypeError(f"the labeller {name!r} returned a {type(wrong[0]).__name__}; a labeller returns a str")
        auroc = label_auroc(labels, coefficients[:, chosen], contexts, embed)
        finite = auroc[np.isfinite(auroc)]
        result[name] = {
            "labels": labels,
            "auroc": auroc,
            "seconds": seconds,
            "mean": float(finite.mean()) if len(finite) else float("nan"),
            "median": float(np.median(finite)) if len(finite) else float("nan"),
        }
    if len(labelers) == 2:
        a, b = (result[name]["auroc"] for name in names)
        both = np.isfinite(a) & np.isfinite(b)
        difference = b[both] - a[both]
        result["difference"] = difference
        result["difference_mean"] = float(difference.mean()) if len(difference) else float("nan")
        boot = [rng.choice(difference, len(difference)).mean() for _ in range(n_boot)] if len(difference) else [np.nan]
        result["difference_ci"] = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
        result["higher"] = {names[0]: int((difference < 0).sum()), names[1]: int((difference > 0).sum())}
    return result


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
