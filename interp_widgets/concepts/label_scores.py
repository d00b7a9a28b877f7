"""Detection and fuzzing scores of concept labels, as EleutherAI's delphi defines them.

A scorer model sees only a concept's label and judges contexts:

* **detection**: contexts where the concept fires, drawn across activation quantiles of its top examples (not only
  the strongest), mixed with contexts where it does not; the scorer answers 1 when a context shows the label;
* **fuzzing**: every context has tokens between ``<<`` and ``>>``: on a firing context the tokens where the concept
  is at least ``threshold`` of its maximum there; on a non-firing context as many tokens, chosen at random; the
  scorer answers 1 when the marked tokens show the label.

Each score is the balanced accuracy of the answers, and the ROC AUC of P("1") when the scorer gives it; chance is
0.5. :func:`score_labels` scores every label of a :class:`~interp_widgets.concepts.ConceptInterpretation` (from
token statistics, :class:`~interp_widgets.concepts.LMLabeler` or typed by hand) and caches the scores with the labels
(``interp.label_scores``, saved with the interpretation); a changed label drops its scores.

Two checks say how far the scores can be trusted (issue 35). **The control**: each concept's examples are judged
again under another concept's label (a seeded derangement), in the same prompts; the true label must outscore the
swapped one (mean of the two balanced accuracies, strictly; ties do not count) in at least 70 % of the concepts, or
the scorer cannot discriminate (``interp.label_control``). **Chance**: each score carries the one-sided p-value of
Fisher's exact test of balanced accuracy > 0.5 over its readable answers (:func:`chance_p_value`), and is "no better
than chance" unless it is below 0.05; the concept browser marks such scores only when the control passed. SmolLM2,
the default scorer, also wrote the LM labels (:class:`~interp_widgets.concepts.LMLabeler`): with both, it scores its
own labels.

A scorer is any callable ``scorer(prompts) -> answers``: ``prompts`` is a list of chat conversations (lists of
``{"role", "content"}`` dicts, delphi's messages), and each answer is the reply text, or ``(text, p_one)`` with
P("1") for each judged example (a list, or None). :class:`LMScorer` (the default) asks the embedded SmolLM2
offline, greedily, with its reply begun by ``[``, and reads P("1") from its next-token distribution.

Ported (rewritten, not copied) from https://github.com/EleutherAI/delphi at commit
``3c2e139378b56ca02a632697b541a11aebf03855`` (Apache-2.0), which eai-delphi 0.1.3 cannot be installed here for
(it requires vLLM): the quantile sampling of ``delphi/latents/samplers.py`` (``split_quantiles``), the random
non-activating windows of ``delphi/latents/constructors.py``, the samples, highlighting, shuffling, batching and
answer parsing of ``delphi/scorers/classifier/{sample,classifier,detection,fuzz}.py``, the prompts of
``delphi/scorers/classifier/prompts/{detection,fuzz}_prompt.py`` (verbatim: they are the specification) and the
balanced accuracy and AUC of ``delphi/log/result_analysis.py``. Where this library holds less than delphi's cache,
the port says so: the quantiles are those of the concept's top examples (``interpret_concepts(k=...)``: a larger
``k`` reaches weaker activations), and the non-firing contexts are other concepts' top contexts that share no token
with this concept's (the interpretation keeps no activations outside its top contexts, so delphi's "windows where the
latent is zero" become "windows outside this concept's top contexts"). Fuzzing marks on a non-firing context as many
tokens as the firing contexts mark on average (delphi counts their non-zero activations, the same number for a sparse
latent) and always includes the token where the donor context's own concept fires (delphi's fixed firing position).

Example:
    >>> from interp_widgets.concepts import interpret_concepts
    >>> interp = interpret_concepts(concepts, store, progress=False)
    >>> says_yes = lambda prompts: ["[1]"] * len(prompts)  # a scorer that calls everything a match
    >>> scores = score_labels(interp, says_yes, concepts=[0, 1], n_examples=4)
    >>> scores[0]["detection"]["balanced_accuracy"], scores[0]["detection"]["n_examples"], scores[0]["label"]
    (0.5, 8, 'it / , / sitting')
    >>> interp.label_scores[1]["fuzzing"]["balanced_accuracy"]  # cached with the labels
    0.5
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any, Callable, Sequence

import numpy as np

from interp_widgets.concepts.chat import ChatLM
from interp_widgets.validation import check_int

#: delphi's highlight delimiters (``sample.py``: ``L``, ``R``).
L, R = "<<", ">>"

# ---------------------------------------------------------------- delphi's prompts (verbatim)
# delphi/scorers/classifier/prompts/detection_prompt.py at 3c2e139: the system prompt, three worked examples (from
# neuronpedia gpt2-small latents; their odd characters are GPT-2 byte tokens, kept as delphi has them) and the
# generation prompt.
DETECTION_SYSTEM_PROMPT = """You are an intelligent and meticulous linguistics researcher.

You will be given a certain latent of text, such as "male pronouns" or "text with negative sentiment".

You will then be given several text examples. Your task is to determine which examples possess the latent.

For each example in turn, return 1 if the sentence is correctly labeled or 0 if the tokens are mislabeled. You must return your response in a valid Python list. Do not return anything else besides a Python list.
"""

DETECTION_EXAMPLES = (
    (
        """Latent explanation: Words related to American football positions, specifically the tight end position.

Test examples:

Example 0:<|endoftext|>Getty ImagesĊĊPatriots tight end Rob Gronkowski had his bossâĢĻ
Example 1: names of months used in The Lord of the Rings:ĊĊâĢľâĢ¦the
Example 2: Media Day 2015ĊĊLSU defensive end Isaiah Washington (94) speaks to the
Example 3: shown, is generally not eligible for ads. For example, videos about recent tragedies,
Example 4: line, with the left side âĢĶ namely tackle Byron Bell at tackle and guard Amini
""",
        "[1,0,0,0,1]",
    ),
    (
        """Latent explanation: The word "guys" in the phrase "you guys".

Test examples:

Example 0: enact an individual health insurance mandate?âĢĿ, Pelosi's response was to dismiss both
Example 1: birth control access<|endoftext|> but I assure you women in Kentucky aren't laughing as they struggle
Example 2: du Soleil Fall Protection Program with construction requirements that do not apply to theater settings because
Example 3:Ċ<|endoftext|> distasteful. Amidst the slime lurk bits of Schadenfre
Example 4: the<|endoftext|>ľI want to remind you all that 10 days ago (director Massimil
""",
        "[0,0,0,0,0]",
    ),
    (
        """Latent explanation: "of" before words that start with a capital letter.

Test examples:

Example 0: climate, TomblinâĢĻs Chief of Staff Charlie Lorensen said.Ċ
Example 1: no wonderworking relics, no true Body and Blood of Christ, no true Baptism
Example 2:ĊĊDeborah Sathe, Head of Talent Development and Production at Film London,
Example 3:ĊĊIt has been devised by Director of Public Prosecutions (DPP)
Example 4: and fair investigation not even include the Director of Athletics? Â· Finally, we believe the
""",
        "[1,1,1,1,1]",
    ),
)

# delphi/scorers/classifier/prompts/fuzz_prompt.py at 3c2e139.
FUZZING_SYSTEM_PROMPT = """You are an intelligent and meticulous linguistics researcher.

You will be given a certain latent of text, such as "male pronouns" or "text with negative sentiment". You will be given a few examples of text that contain this latent. Portions of the sentence which strongly represent this latent are between tokens << and >>.

Some examples might be mislabeled. Your task is to determine if every single token within << and >> is correctly labeled. Consider that all provided examples could be correct, none of the examples could be correct, or a mix. An example is only correct if every marked token is representative of the latent

For each example in turn, return 1 if the sentence is correctly labeled or 0 if the tokens are mislabeled. You must return your response in a valid Python list. Do not return anything else besides a Python list.
"""

FUZZING_EXAMPLES = (
    (
        """Latent explanation: Words related to American football positions, specifically the tight end position.

Test examples:

Example 0:<|endoftext|>Getty ImagesĊĊPatriots<< tight end>> Rob Gronkowski had his bossâĢĻ
Example 1: posted<|endoftext|>You should know this<< about>> offensive line coaches: they are large, demanding<< men>>
Example 2: Media Day 2015ĊĊLSU<< defensive>> end Isaiah Washington (94) speaks<< to the>>
Example 3:<< running backs>>," he said. .. Defensive<< end>> Carroll Phillips is improving and his injury is
Example 4:<< line>>, with the left side âĢĶ namely<< tackle>> Byron Bell at<< tackle>> and<< guard>> Amini
""",
        "[1,0,0,1,1]",
    ),
    (
        """Latent explanation: The word "guys" in the phrase "you guys".

Test examples:

Example 0: if you are<< comfortable>> with it. You<< guys>> support me in many other ways already and
Example 1: birth control access<|endoftext|> but I assure you<< women>> in Kentucky aren't laughing as they struggle
Example 2:âĢĻs gig! I hope you guys<< LOVE>> her, and<< please>> be nice,
Example 3:American, told<< Hannity>> that âĢľyou<< guys>> are playing the race card.âĢĿ
Example 4:<< the>><|endoftext|>ľI want to<< remind>> you all that 10 days ago (director Massimil
""",
        "[0,0,0,0,0]",
    ),
    (
        """Latent explanation: "of" before words that start with a capital letter.

Test examples:

Example 0: climate, TomblinâĢĻs Chief<< of>> Staff Charlie Lorensen said.Ċ
Example 1: no wonderworking relics, no true Body and Blood<< of>> Christ, no true Baptism
Example 2:ĊĊDeborah Sathe, Head<< of>> Talent Development and Production at Film London,
Example 3:ĊĊIt has been devised by Director<< of>> Public Prosecutions (DPP)
Example 4: and fair investigation not even include the Director<< of>> Athletics? Â· Finally, we believe the
""",
        "[1,1,1,1,1]",
    ),
)

# Both prompt files end the conversation with this user turn.
GENERATION_PROMPT = """Latent explanation: {explanation}

Text examples:

{examples}
"""

_PROMPTS = {
    "detection": (DETECTION_SYSTEM_PROMPT, DETECTION_EXAMPLES),
    "fuzzing": (FUZZING_SYSTEM_PROMPT, FUZZING_EXAMPLES),
}
Scorer = Callable[[list[list[dict]]], Sequence[Any]]


def scorer_prompt(kind: str, label: str, texts: Sequence[str]) -> list[dict]:
    """delphi's conversation for one batch: its system prompt, three worked examples, then ``texts`` to judge.

    Example:
        >>> messages = scorer_prompt("detection", "food words", ["the soup was hot", "it rained"])
        >>> len(messages), messages[0]["role"], messages[-1]["content"].splitlines()[-2:]
        (8, 'system', ['Example 0: the soup was hot', 'Example 1: it rained'])
    """
    if kind not in _PROMPTS:
        raise ValueError(f"kind must be 'detection' or 'fuzzing', got {kind!r}")
    system, worked = _PROMPTS[kind]
    examples = "\n".join(f"Example {i}: {text}" for i, text in enumerate(texts))
    messages = [{"role": "system", "content": system}]
    for user, assistant in worked:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": GENERATION_PROMPT.format(explanation=label, examples=examples)})
    return messages


# ---------------------------------------------------------------- sampling
def split_quantiles(examples: Sequence, n_quantiles: int, n_samples: int, seed: int = 22) -> list[tuple[int, Any]]:
    """delphi's ``split_quantiles``: ``examples`` (strongest first) cut into ``n_quantiles`` equal slices, and
    ``n_samples // n_quantiles`` drawn at random from each (all of a smaller slice). Returns ``(quantile, example)``
    pairs, quantile 0 the strongest; the remainder of ``len(examples) // n_quantiles`` is never drawn, as in delphi.

    Example:
        >>> split_quantiles(list("abcdefgh"), 4, 4)
        [(0, 'a'), (1, 'c'), (2, 'e'), (3, 'h')]
    """
    rng = random.Random(seed)  # delphi seeds the global generator once, then samples quantile by quantile
    size, per = len(examples) // n_quantiles, n_samples // n_quantiles
    chosen = []
    for q in range(n_quantiles):
        block = list(examples[q * size : (q + 1) * size])
        picked = block if len(block) < per else rng.sample(block, per)
        chosen += [(q, example) for example in picked]
    return chosen


def highlight(tokens: Sequence[str], marked) -> str:
    """The tokens joined, each run of marked tokens between ``<<`` and ``>>`` (delphi's ``_highlight``).

    Example:
        >>> highlight(["the ", "tight ", "end ", "ran"], {1, 2})
        'the <<tight end >>ran'
    """
    marked = set(marked)
    out, inside = [], False
    for i, token in enumerate(tokens):
        if (i in marked) != inside:
            out.append(L if not inside else R)
            inside = not inside
        out.append(token)
    if inside:
        out.append(R)
    return "".join(out)


def fuzz_marks(example: dict, n_marks: int | None, threshold: float = 0.3) -> list[int]:
    """The tokens fuzzing marks in one context. A firing context (``n_marks=None``) marks the tokens whose activation
    is at least ``threshold`` times its largest; a non-firing one ``n_marks`` tokens: the token where its own concept
    fires (``center``) and others drawn at random (delphi reseeds with 22 for each context).

    Example:
        >>> fuzz_marks({"context": list("abcde"), "center": 2, "context_activations": [0, 1.0, 0.2, 0.5, 0]}, None)
        [1, 3]
        >>> fuzz_marks({"context": list("abcde"), "center": 2}, 2)
        [1, 2]
    """
    n = len(example["context"])
    if n_marks is None:
        values = _activations(example)
        cut = threshold * max(values)
        return [i for i, v in enumerate(values) if v >= cut]
    rng = random.Random(22)
    count = min(n_marks, n)
    center = int(example["center"])
    if count == 0:
        return []
    if 0 <= center < n:
        chosen = [center] + rng.sample([i for i in range(n) if i != center], count - 1)
    else:
        chosen = rng.sample(range(n), count)
    return sorted(chosen)


def _activations(example: dict) -> list[float]:
    if "context_activations" in example:
        return [float(v) for v in example["context_activations"]]
    values = [0.0] * len(example["context"])  # a hand-made example: only its firing token is known
    values[int(example["center"])] = float(example.get("activation", 1.0))
    return values


def _span(example: dict) -> range:
    start = int(example["row"]) - int(example["center"])
    return range(start, start + len(example["context"]))


def non_firing_contexts(interpretation, concept: int) -> list[dict]:
    """Contexts for ``concept`` to not fire on: the other concepts' top contexts that share no store row with its
    own top contexts, each once (the first concept's copy), in concept then rank order.

    Example:
        >>> from interp_widgets.concepts import interpret_concepts
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> len(non_firing_contexts(interp, 0)) > 0
        True
    """
    own = set()
    for example in interpretation.examples[concept]:
        own.update(_span(example))
    seen, found = set(), []
    for c, examples in enumerate(interpretation.examples):
        if c == concept:
            continue
        for example in examples:
            span = _span(example)
            key = (span.start, span.stop)
            if key in seen or own.intersection(span):
                continue
            seen.add(key)
            found.append(example)
    return found


# ---------------------------------------------------------------- answers and metrics
def parse_answer(text: str, n: int) -> list[int] | None:
    """The first ``[...]`` list of 0/1 in a reply, as delphi parses it; None when there is none or it does not
    hold ``n`` answers.

    Example:
        >>> parse_answer("Sure: [1, 0]", 2), parse_answer("yes", 1), parse_answer("[1]", 2)
        ([1, 0], None, None)
    """
    match = re.search(r"\[.*?\]", text or "", flags=re.S)
    if match is None:
        return None
    try:
        values = json.loads(match.group(0))
    except ValueError:
        return None
    if not isinstance(values, list) or len(values) != n or any(v not in (0, 1, True, False) for v in values):
        return None
    return [int(v) for v in values]


#: The level of the chance test (:func:`chance_p_value`): a score whose p-value is at least this is marked "no
#: better than chance".
CHANCE_LEVEL = 0.05
#: The swapped-label control passes (the scorer discriminates) when the true label outscores the swapped one in at
#: least this fraction of the concepts (issue 35).
CONTROL_THRESHOLD = 0.7


def chance_p_value(true_positives: int, n_activating: int, true_negatives: int, n_non_activating: int) -> float:
    """One-sided p-value of "balanced accuracy > 0.5": Fisher's exact test of the 2 × 2 table answer × truth over
    the judged (readable) examples, P(TP ≥ observed) under the hypergeometric law that holds when the answers do not
    depend on whether the concept fires (given how many examples fire and how many answers are 1). Balanced
    accuracy > 0.5 is exactly TPR > FPR, the direction this tests. 1.0 when either class has no judged example
    (nothing to tell apart).

    Example:
        >>> chance_p_value(10, 10, 10, 10) == 1 / 184756  # every example right: p = 1 / C(20, 10)
        True
        >>> round(chance_p_value(8, 10, 8, 10), 4)  # balanced accuracy 0.8 on 20: (45·45 + 10·10 + 1) / C(20, 10)
        0.0115
        >>> chance_p_value(6, 10, 4, 10) > 0.5, chance_p_value(3, 3, 0, 3)  # 0.5 is no better; nor is "always 1"
        (True, 1.0)
    """
    tp, pos, tn, neg = (int(v) for v in (true_positives, n_activating, true_negatives, n_non_activating))
    if pos <= 0 or neg <= 0:
        return 1.0
    said_one = tp + (neg - tn)
    # exact in integers, so a p-value at the level (1 / 20 for a perfect 3 + 3) is not pushed below it by rounding
    tail = sum(
        math.comb(said_one, x) * math.comb(pos + neg - said_one, pos - x) for x in range(tp, min(said_one, pos) + 1)
    )
    return tail / math.comb(pos + neg, pos)


def classification_scores(activating, predictions, probabilities=None) -> dict:
    """Balanced accuracy of ``predictions`` (None: a failed answer, left out and counted) and the ROC AUC of P("1")
    (None without probabilities or with one class), delphi's ``compute_classification_metrics`` and ``compute_auc``,
    and the chance test of the balanced accuracy (:func:`chance_p_value` over the readable answers; ``above_chance``:
    its p-value is below :data:`CHANCE_LEVEL`).

    Example:
        >>> classification_scores([1, 1, 0, 0], [1, 0, 0, None], [0.9, 0.4, 0.2, 0.6])  # doctest: +NORMALIZE_WHITESPACE
        {'balanced_accuracy': 0.75, 'auc': 0.75, 'n_examples': 4, 'n_activating': 2, 'n_non_activating': 2,
         'n_failed': 1, 'p_value': 0.6666666666666666, 'above_chance': False}
    """
    activating = np.asarray(activating, dtype=bool)
    valid = np.array([p is not None for p in predictions], dtype=bool)
    predicted = np.array([bool(p) if p is not None else False for p in predictions], dtype=bool)
    pos, neg = int((activating & valid).sum()), int((~activating & valid).sum())
    tp, tn = int((predicted & activating & valid).sum()), int((~predicted & ~activating & valid).sum())
    balanced = ((tp / pos if pos else 0.0) + (tn / neg if neg else 0.0)) / 2
    auc = None
    if probabilities is not None:
        known = np.array([p is not None for p in probabilities], dtype=bool)
        labels = activating[known]
        if known.any() and 0 < labels.sum() < len(labels):
            from sklearn.metrics import roc_auc_score

            values = np.array([p for p in probabilities if p is not None], dtype=np.float64)
            auc = float(roc_auc_score(labels, values))
    return {
        "balanced_accuracy": float(balanced),
        "auc": auc,
        "n_examples": int(len(activating)),
        "n_activating": int(activating.sum()),
        "n_non_activating": int((~activating).sum()),
        "n_failed": int((~valid).sum()),
        "p_value": (p_value := chance_p_value(tp, pos, tn, neg)),
        "above_chance": bool(p_value < CHANCE_LEVEL),
    }


# ---------------------------------------------------------------- the default scorer
class LMScorer(ChatLM):
    """A scorer that asks a local chat LM (the embedded SmolLM2-135M-Instruct by default, offline), greedily
    (:class:`ChatLM`).

    The reply is started with ``[`` (delphi's answer is a Python list; a small model keeps to the format when its
    reply is begun for it). The answer is the first ``n`` digits 0 / 1 the model writes, ``n`` being the number of
    examples in the prompt; a reply with fewer is returned as written (and counts as failed). P("1") of each is read
    where it is written, as delphi reads its top-5 log probabilities: the top five next tokens holding "1" against
    those holding "0", P1 / (P0 + P1). The reply stops at its ``n``-th answer, and the prompts' shared beginning (the
    instructions and few-shot examples) runs once: :meth:`ChatLM.complete` keeps its key-value cache.

    Args:
        model, tokenizer: a causal LM with a chat template; None loads ``interp_widgets.demo.load_lm()``.
        max_new_tokens: the longest reply.

    Example:
        >>> scorer = LMScorer(chat_lm, chat_tokenizer, max_new_tokens=3)  # a tiny untrained chat model: noise
        >>> [type(text).__name__ for text, p in scorer([scorer_prompt("detection", "food", ["soup"])])]
        ['str']
    """

    def __init__(self, model=None, tokenizer=None, *, max_new_tokens: int = 12):
        super().__init__(model, tokenizer, max_new_tokens=max_new_tokens, who="LMScorer")

    def __call__(self, prompts: list[list[dict]]) -> list[tuple[str, list[float] | None]]:
        import torch

        tok = self.tokenizer
        answers = []
        for messages in prompts:
            n = max(1, len(re.findall(r"^Example \d+:", messages[-1]["content"], flags=re.M)))
            new, step_scores = self.complete(
                [*messages, {"role": "assistant", "content": "["}],
                scores=True,
                stop=lambda ids, n=n: _digits(tok, ids) >= n,
            )
            digits, probabilities = [], []
            for step, token in enumerate(new):
                written = _answer_digits(tok, token)
                if not written:
                    continue
                top = torch.log_softmax(step_scores[step][0].float(), -1).topk(5)
                p0 = p1 = 0.0
                for logprob, candidate in zip(top.values.tolist(), top.indices.tolist()):
                    text = tok.decode([candidate])
                    if "0" in text:
                        p0 += math.exp(logprob)
                    elif "1" in text:
                        p1 += math.exp(logprob)
                digits.append(written[0])
                probabilities.append(p1 / (p0 + p1) if p0 + p1 > 0 else 0.0)
                if len(digits) == n:
                    break
            if len(digits) == n:
                answers.append(("[" + ",".join(digits) + "]", probabilities))
            else:
                answers.append(("[" + tok.decode(new, skip_special_tokens=True), None))
        return answers


def _answer_digits(tokenizer, token: int) -> list[str]:
    """The 0s and 1s that token ``token`` writes (its first one is an answer)."""
    return [ch for ch in tokenizer.decode([token]) if ch in "01"]


def _digits(tokenizer, ids) -> int:
    """How many of the tokens ``ids`` write a 0 or a 1 (each such token is one answer)."""
    return sum(bool(_answer_digits(tokenizer, i)) for i in ids)


# ---------------------------------------------------------------- scoring
def score_labels(
    interpretation,
    scorer: Scorer | None = None,
    *,
    concepts: Sequence[int] | None = None,
    n_examples: int = 10,
    n_non_activating: int | None = None,
    n_quantiles: int = 10,
    n_examples_shown: int = 1,
    threshold: float = 0.3,
    seed: int = 42,
    refresh: bool = False,
    control: bool = True,
) -> dict[int, dict]:
    """Detection and fuzzing scores of each concept's label, cached with the labels (``interp.label_scores``).

    For each concept (all live ones by default), ``n_examples`` firing contexts are drawn from its top examples across
    ``n_quantiles`` activation quantiles (no more than ``n_examples`` or its number of top examples) and ``n_non_activating`` (default: as
    many) non-firing contexts at random (``seed``; without replacement, where delphi draws with) from
    :func:`non_firing_contexts`. Detection shows them plain,
    fuzzing marked (:func:`fuzz_marks`, ``threshold``); each list is shuffled (``seed``) and cut into prompts of
    ``n_examples_shown`` contexts (:func:`scorer_prompt`), and the scorer's answers are scored by
    :func:`classification_scores`. A lazy label is made first (the scored label is the one shown).

    **The control** (``control=True``, the default; it doubles the scorer's work): each scored concept's examples
    are judged again, in the same prompts with the same examples and order, under the label of another scored concept
    (a derangement of the scored concepts drawn with ``seed``, so no concept keeps its own label; two concepts are
    needed). The true label *outscores* the swapped one when the mean of its detection and fuzzing balanced
    accuracies is strictly greater; a tie counts as not outscoring (a label identical to the swapped one can only
    tie). ``fraction`` is the share of concepts where the true label outscores, and the scorer ``discriminates``
    when ``fraction >= CONTROL_THRESHOLD`` (0.7). The control is cached as ``interp.label_control`` (``{"scorer",
    "settings", "concepts": {concept: {"label", "swapped_from", "swapped_label", "detection", "fuzzing",
    "true_score", "swapped_score", "outscores"}}, "n", "wins", "ties", "fraction", "threshold", "discriminates"}``),
    saved with the labels and dropped when any label it judged changes.

    **Chance**: each score carries ``p_value``, the one-sided Fisher exact test of balanced accuracy > 0.5 over its
    readable answers (:func:`chance_p_value`), and ``above_chance`` (``p_value < CHANCE_LEVEL``, 0.05, per score, not
    corrected for the many labels). A score that is not above chance is "no better than chance"; the concept browser
    marks it only when the control passed.

    Scores are reused while the label and these settings (and the scorer's ``name``) are unchanged; ``refresh=True``
    asks again. Returns ``{concept: {"label", "scorer", "settings", "detection", "fuzzing"}}``, each score a dict
    of ``balanced_accuracy``, ``auc`` (None without P("1")), ``n_examples``, ``n_activating``, ``n_non_activating``
    and ``n_failed`` (answers that could not be read, left out of the accuracy).

    Example:
        >>> from interp_widgets.concepts import interpret_concepts
        >>> interp = interpret_concepts(concepts, store, progress=False)
        >>> first = lambda prompts: ["[1]" if "<<" in p[-1]["content"] else "[0]" for p in prompts]
        >>> score_labels(interp, first, concepts=[2], n_examples=4)[2]["fuzzing"]["balanced_accuracy"]
        0.5
    """
    from interp_widgets.concepts.interpret import ConceptInterpretation

    if not isinstance(interpretation, ConceptInterpretation):
        raise TypeError(
            f"score_labels needs a ConceptInterpretation, got {type(interpretation).__name__}; "
            "make one with interpret_concepts(concept_model, store)"
        )
    n_examples = check_int("n_examples", n_examples, minimum=1)
    n_quantiles = check_int("n_quantiles", n_quantiles, minimum=1)
    n_examples_shown = check_int("n_examples_shown", n_examples_shown, minimum=1)
    n_non_activating = n_examples if n_non_activating is None else check_int("n_non_activating", n_non_activating)
    if not 0 < float(threshold) <= 1:
        raise ValueError(f"threshold is a fraction of each context's largest activation, in (0, 1]; got {threshold}")
    if scorer is None:
        scorer = LMScorer()
    if not callable(scorer):
        raise TypeError(
            f"scorer must be a callable taking a list of chat prompts and returning one answer each, got "
            f"{type(scorer).__name__}; e.g. LMScorer(*interp_widgets.demo.load_lm())"
        )
    live = [c for c in range(interpretation.n_concepts) if not interpretation.dead[c]]
    chosen = live if concepts is None else [interpretation._index(c) for c in concepts]
    dead = [c for c in chosen if interpretation.dead[c]]
    if dead:
        raise ValueError(f"concepts {dead} never fired, so they have no label or contexts to score; leave them out")
    name = getattr(scorer, "name", None) or getattr(scorer, "__name__", None) or type(scorer).__name__
    settings = {
        "n_examples": n_examples,
        "n_non_activating": n_non_activating,
        "n_quantiles": n_quantiles,
        "n_examples_shown": n_examples_shown,
        "threshold": float(threshold),
        "seed": int(seed),
    }
    results = {}
    for c in chosen:
        label = interpretation.ensure_label(c)
        cached = interpretation.labelling.scores.get(c)
        if not refresh and cached and cached["scorer"] == name and cached["settings"] == settings:
            results[c] = cached
            continue
        entry = {"label": label, "scorer": name, "settings": settings}
        for kind, samples in _samples(interpretation, c, settings).items():
            entry[kind] = _ask(scorer, kind, label, samples, n_examples_shown, seed)
        results[c] = entry
        scores = {**interpretation.labelling.scores, c: entry}
        interpretation.labelling.scores = scores
    if control and len(chosen) >= 2:
        interpretation.labelling.control = _control(interpretation, scorer, name, chosen, results, settings, refresh)
    return results


def derangement(n: int, seed: int) -> list[int]:
    """A permutation of ``range(n)`` with no fixed point, uniform over those (shuffles drawn with ``seed`` until one
    has none; about e tries), for ``n >= 2``.

    Example:
        >>> perm = derangement(5, 42)
        >>> sorted(perm) == list(range(5)), any(p == i for i, p in enumerate(perm))
        (True, False)
    """
    n = check_int("n", n, minimum=2)
    rng = random.Random(seed)
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(p != i for i, p in enumerate(perm)):
            return perm


def _mean_accuracy(entry: dict) -> float:
    return (entry["detection"]["balanced_accuracy"] + entry["fuzzing"]["balanced_accuracy"]) / 2


def _control(
    interpretation, scorer, name: str, chosen: list[int], results: dict, settings: dict, refresh: bool
) -> dict:
    labels = interpretation.labels
    perm = derangement(len(chosen), settings["seed"])
    swaps = {c: chosen[p] for c, p in zip(chosen, perm)}
    cached = interpretation.labelling.control
    if (not refresh and cached and cached["scorer"] == name and cached["settings"] == settings
            and {c: e["swapped_from"] for c, e in cached["concepts"].items()} == swaps):  # fmt: skip
        return cached
    concepts = {}
    for c in chosen:
        d = swaps[c]
        entry = {"label": labels[c], "swapped_from": d, "swapped_label": labels[d]}
        for kind, samples in _samples(interpretation, c, settings).items():
            entry[kind] = _ask(scorer, kind, labels[d], samples, settings["n_examples_shown"], settings["seed"])
        entry["true_score"], entry["swapped_score"] = _mean_accuracy(results[c]), _mean_accuracy(entry)
        entry["outscores"] = bool(entry["true_score"] > entry["swapped_score"])
        concepts[c] = entry
    wins = sum(e["outscores"] for e in concepts.values())
    ties = sum(e["true_score"] == e["swapped_score"] for e in concepts.values())
    fraction = wins / len(concepts)
    return {
        "scorer": name, "settings": settings, "concepts": concepts, "n": len(concepts), "wins": wins, "ties": ties,
        "fraction": fraction, "threshold": CONTROL_THRESHOLD, "discriminates": bool(fraction >= CONTROL_THRESHOLD),
    }  # fmt: skip


def _samples(interpretation, concept: int, settings: dict) -> dict[str, list[tuple[str, bool]]]:
    examples = interpretation.examples[concept]
    # as many quantiles as there are examples to draw and top examples to cut (delphi draws n_examples // n_quantiles)
    quantiles = min(settings["n_quantiles"], settings["n_examples"], len(examples))
    firing = split_quantiles(examples, quantiles, settings["n_examples"])
    pool = non_firing_contexts(interpretation, concept)
    want = settings["n_non_activating"]
    if want and len(pool) < want:
        raise ValueError(
            f"concept {concept} has {len(pool)} contexts outside its top contexts to not fire on, fewer than "
            f"n_non_activating={want}; pass a smaller n_non_activating, or interpret with a larger k"
        )
    rng = np.random.default_rng(settings["seed"])  # delphi draws with replacement; no context is shown twice here
    quiet = [pool[i] for i in sorted(rng.choice(len(pool), size=want, replace=False))] if want else []
    marks = [fuzz_marks(e, None, settings["threshold"]) for _, e in firing]
    n_marks = math.ceil(sum(len(m) for m in marks) / len(marks)) if marks else 0
    return {
        # delphi lists the non-firing samples first, then shuffles
        "detection": [("".join(e["context"]), False) for e in quiet]
        + [("".join(e["context"]), True) for _, e in firing],
        "fuzzing": [(highlight(e["context"], fuzz_marks(e, n_marks)), False) for e in quiet]
        + [(highlight(e["context"], m), True) for (_, e), m in zip(firing, marks)],
    }


def _ask(scorer, kind: str, label: str, samples: list[tuple[str, bool]], shown: int, seed: int) -> dict:
    samples = list(samples)
    random.Random(seed).shuffle(samples)  # delphi's Classifier shuffles with random.Random(seed)
    batches = [samples[i : i + shown] for i in range(0, len(samples), shown)]
    prompts = [scorer_prompt(kind, label, [text for text, _ in batch]) for batch in batches]
    answers = list(scorer(prompts))
    if len(answers) != len(prompts):
        raise ValueError(
            f"the scorer returned {len(answers)} answers for {len(prompts)} prompts; return one answer per prompt"
        )
    predictions, probabilities, any_probability = [], [], False
    for batch, answer in zip(batches, answers):
        text, p_one = answer if isinstance(answer, tuple) else (answer, None)
        if not isinstance(text, str):
            raise TypeError(
                f"a scorer answer is a str or (str, P('1') per example), got {type(text).__name__}; "
                "return the reply text"
            )
        parsed = parse_answer(text, len(batch))
        predictions += parsed if parsed is not None else [None] * len(batch)
        if p_one is not None and not isinstance(p_one, (list, tuple)):
            p_one = [p_one]
        usable = p_one is not None and len(p_one) == len(batch)
        any_probability |= usable
        probabilities += [float(p) for p in p_one] if usable else [None] * len(batch)
    return classification_scores(
        [activating for _, activating in samples], predictions, probabilities if any_probability else None
    )
