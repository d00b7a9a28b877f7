"""The task of a model: what it predicts, so what an explanation of it targets, and everything that follows from that.

:class:`~interp_widgets.adapter.ModelAdapter` runs any model (devices, embeddings, forward passes, batching, pass
counting). A :class:`Task` knows what one kind of model predicts: how inputs become :class:`ExplainedInput` objects
(targets, foils, their positions), which logits score them, how the model generates, its training labels, which
positions make activation rows and what a lens reads. Each task is a subclass in its own module; the subclass that
sets ``name`` joins :data:`TASKS`, and :func:`task_for` picks the highest-``priority`` task whose :meth:`Task.matches`
accepts the model. Adding a task is adding a module (see ``DEVELOPING.md``, "Add a task").

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> task = task_for(ModelAdapter(lm, lm_tokenizer))
    >>> task.name, task.default_score, task.causal
    ('causal-lm', 'log_probability', True)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from interp_widgets._inputs import input_items
from interp_widgets.adapter import ModelAdapter, UnsupportedModelError
from interp_widgets.layers import evaluation
from interp_widgets.registry import Registry
from interp_widgets.targets import Contrast, Targets
from interp_widgets.tasks.foils import foils_per_input
from interp_widgets.text_units import Encoding

__all__ = ["TASKS", "Explain", "ExplainedInput", "Task", "detect_task", "prepare_inputs", "task_class", "task_for"]

#: Every task class by name (``"causal-lm"`` …); a subclass of :class:`Task` that sets ``name`` adds itself.
TASKS = Registry("task")


@dataclass(frozen=True)
class Explain:
    """What to explain on each input: the options a :class:`Task` reads when it builds :class:`ExplainedInput`\\ s.

    - ``target``: a classifier's class (index, label name, list of them, or None = the predicted class); a masked
      LM's token (None = the predicted token);
    - ``continuation``: a causal or encoder–decoder LM's forced continuation (text or token ids); None = generate
      ``max_new_tokens`` tokens, greedily or sampled (``do_sample``, ``seed``);
    - ``mask_position``: the masked LM's scored position (default: the first mask token);
    - ``true_labels``: one label per input, recorded on the results;
    - ``contrast`` / ``contrast_alignment``: a foil for every target (language models; see
      :mod:`interp_widgets.tasks.foils`).

    Example:
        >>> Explain(continuation=" clean", contrast=" cold").max_new_tokens
        20
    """

    target: object = None
    continuation: object = None
    max_new_tokens: int = 20
    do_sample: bool = False
    seed: int = 0
    mask_position: int | None = None
    true_labels: Sequence[str] | None = None
    contrast: object = None
    contrast_alignment: Sequence[tuple[int, int]] | None = None


@dataclass
class ExplainedInput:
    """One input and the targets explained on it.

    ``targets`` holds the class ids (classification) or vocabulary ids (language models) explained, with their labels
    and probabilities; ``target_positions`` the sequence position whose logits score each target (``-1`` for
    classification); ``visible`` how many leading source tokens each target can see (later sources get NaN scores).
    With a contrast, ``contrast_info`` holds the foil of each target and every score is ``score(target) −
    score(foil)`` (see :mod:`interp_widgets.tasks.foils`). An encoder–decoder input's ``source_length`` counts its
    source tokens at the start of the joined token axis.

    Example:
        >>> problem = prepare_inputs(adapter, "Not bad.")[0]
        >>> problem.length, problem.n_targets, problem.source_mask is None, problem.targets.labels
        (5, 1, True, ['positive'])
    """

    encoding: Encoding
    targets: Targets
    target_positions: np.ndarray
    visible: np.ndarray
    generated_mask: np.ndarray | None = None
    true_label: str | None = None
    contrast_info: Contrast | None = None
    source_length: int | None = None

    def __post_init__(self):
        self.target_positions = np.asarray(self.target_positions, dtype=np.int64).reshape(-1)
        self.visible = np.asarray(self.visible, dtype=np.int64).reshape(-1)
        if len(self.target_positions) != len(self.targets) or len(self.visible) != len(self.targets):
            raise ValueError(
                f"{len(self.targets)} targets with {len(self.target_positions)} positions and {len(self.visible)} "
                "visible counts; give one of each per target"
            )

    @property
    def source_mask(self) -> np.ndarray | None:
        """Encoder–decoder inputs: True for the source (encoder) tokens at the start of the joined token axis."""
        if self.source_length is None:
            return None
        return np.arange(self.length) < self.source_length

    @property
    def length(self) -> int:
        return len(self.encoding)

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    # the targets' and the foils' parts by their flat names (read-only)
    target_ids = property(lambda self: self.targets.ids, doc="Class or vocabulary id of each target.")
    target_labels = property(lambda self: self.targets.labels, doc="Label of each target.")
    target_probs = property(lambda self: self.targets.probs, doc="The model's probability of each target.")
    foil_ids = property(lambda self: None if self.contrast_info is None else self.contrast_info.foils.ids)
    foil_labels = property(lambda self: None if self.contrast_info is None else self.contrast_info.foils.labels)
    foil_probs = property(lambda self: None if self.contrast_info is None else self.contrast_info.foils.probs)
    foil_alignment = property(lambda self: None if self.contrast_info is None else self.contrast_info.alignment)
    contrast = property(lambda self: None if self.contrast_info is None else self.contrast_info.text)


class Task:
    """What one kind of model predicts, bound to an adapter: the base of every task.

    Subclass API (each built-in task is one module of :mod:`interp_widgets.tasks`):

    - ``name`` (registers the class in :data:`TASKS`), ``priority`` (higher is tried first) and the classmethod
      :meth:`matches` ``(model) -> bool``;
    - :meth:`explain_inputs` ``(items, encodings, options)``: the :class:`ExplainedInput` of every input;
    - optional: :meth:`check` (refuse a model at binding), :meth:`encode_inputs`, :meth:`foils` / :meth:`foil_logits`,
      :meth:`generate`, :meth:`training_batch` / :meth:`check_training_labels`, :meth:`activation_pass`,
      :meth:`default_pooling`, :meth:`attention_maps`, :meth:`query_position`, :meth:`lens_targets`,
      :meth:`encode_scored` / :meth:`concept_targets`, :attr:`pad_safe`, and the facts below.

    Facts a compute family asks instead of testing the task's name:

    - ``default_score``: the score explained by default (``"logit"`` or ``"log_probability"``);
    - ``causal``: every position sees only the positions before it (the first is an attention sink, activation rows
      pool the last position, a lens reads the next token);
    - ``joined_axes``: an explained row is a source and a target joined on one axis (encoder–decoders), run through
      two stacks of layers;
    - ``per_class``: scores are per class already (a classifier): no foils, faithfulness curves and concept
      importance by class;
    - ``scores_next_token``: the concept importance of a text is that of its next token;
    - ``supports_concept_importance``: :meth:`concept_targets` is defined.

    Example:
        >>> task = task_for(adapter)
        >>> task.name, task.per_class, task.adapter is adapter
        ('sequence-classification', True, True)
    """

    name: str = ""
    priority: int = 0
    default_score = "logit"
    supports_concept_importance = False
    causal = False
    joined_axes = False
    per_class = False
    scores_next_token = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        TASKS.add_subclass(cls)

    def __init__(self, adapter: ModelAdapter):
        self.adapter = adapter
        self.check()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.adapter.model).__name__})"

    # ------------------------------------------------------------------ which models
    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        """Whether this task explains ``model`` (a Hugging Face model)."""
        raise NotImplementedError(f"{cls.__name__} must implement matches(model)")

    def check(self) -> None:
        """Refuse a model this task cannot run (called when the task is bound to an adapter)."""

    @staticmethod
    def model_class_in(model: nn.Module, mapping_name: str, suffixes: tuple[str, ...] = ()) -> bool:
        """Whether the model's class is in transformers' auto mapping ``mapping_name`` or ends with a suffix.

        Example:
            >>> Task.model_class_in(lm, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
            True
        """
        from transformers.models.auto import modeling_auto as auto

        name = type(model).__name__
        return name in set(getattr(auto, mapping_name).values()) or (bool(suffixes) and name.endswith(suffixes))

    # ------------------------------------------------------------------ running
    @property
    def pad_safe(self) -> bool:
        """Whether right-padding a batch leaves each row's output unchanged (true for bidirectional encoders).

        Decoder classifiers read the last position and would read padding, so their batches hold equal lengths only.

        Example:
            >>> task_for(adapter).pad_safe, task_for(ModelAdapter(lm, lm_tokenizer)).pad_safe
            (True, False)
        """
        from transformers.models.auto import modeling_auto as auto

        return getattr(self.adapter.model.config, "model_type", "") in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES

    @torch.inference_mode()
    def logits(self, ids: Sequence[np.ndarray], positions: Sequence[np.ndarray] | None = None) -> list[torch.Tensor]:
        """Logits of each id sequence (batched, no gradient): ``(classes,)`` for one score per sequence, else
        ``(len(positions[i]), vocab)`` at the given positions only (every position when ``positions`` is None).

        Example:
            >>> [tuple(lg.shape) for lg in task_for(adapter).logits([np.array([101, 2204, 102])])]
            [(3,)]
        """
        adapter = self.adapter
        out: list[torch.Tensor | None] = [None] * len(ids)
        with evaluation(adapter.model):
            for batch in adapter.length_buckets([len(x) for x in ids]):
                lengths = {len(ids[i]) for i in batch}
                groups = [batch] if self.pad_safe or len(lengths) == 1 else [[i] for i in batch]
                for group in groups:
                    width = max(len(ids[i]) for i in group)
                    pad = adapter.tokenizer.pad_token_id or 0
                    tensor = torch.full((len(group), width), pad, dtype=torch.long)
                    mask = torch.zeros((len(group), width), dtype=torch.long)
                    for row, i in enumerate(group):
                        tensor[row, : len(ids[i])] = torch.as_tensor(ids[i])
                        mask[row, : len(ids[i])] = 1
                    index = None
                    if positions is not None:
                        k = max(len(positions[i]) for i in group)
                        index = torch.zeros((len(group), k), dtype=torch.long)
                        for row, i in enumerate(group):
                            index[row, : len(positions[i])] = torch.as_tensor(np.asarray(positions[i], dtype=np.int64))
                    logits = adapter.forward_ids(tensor, mask, positions=index)
                    for row, i in enumerate(group):
                        if logits.dim() == 3:
                            k = len(positions[i]) if positions is not None else len(ids[i])
                            out[i] = logits[row, :k]
                        else:
                            out[i] = logits[row]
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ what to explain
    def explain(self, inputs, options: Explain | None = None) -> list[ExplainedInput]:
        """Tokenize ``inputs`` (a text, a conversation or a list of them) and resolve what to explain on each.

        Example:
            >>> [p.target_labels for p in task_for(adapter).explain(["Good.", "Bad."], Explain(target="negative"))]
            [['negative'], ['negative']]
        """
        options = Explain() if options is None else options
        if options.contrast is not None and self.per_class:
            raise ValueError(
                "contrast= applies to language models (a foil token or continuation); this model is a sequence "
                "classifier, whose scores are per class already. To explain 'A rather than B', pass target=[A, B] "
                "with score='logit' and subtract the rows: result.scores[0] - result.scores[1] is exactly the "
                "attribution of logit(A) - logit(B) for every signed method (reduce='sum')."
            )
        if options.contrast is None and options.contrast_alignment is not None:
            raise ValueError("contrast_alignment aligns a foil with the targets; pass the foil too (contrast=' text')")
        items, single = input_items(inputs)
        encodings = self.encode_inputs(items)
        foils = foils_per_input(options.contrast, len(encodings), single=single)
        if options.true_labels is not None and len(options.true_labels) != len(encodings):
            raise ValueError(f"{len(options.true_labels)} true labels for {len(encodings)} inputs")
        problems = self.explain_inputs(items, encodings, options)
        if options.true_labels is not None:
            for problem, label in zip(problems, options.true_labels):
                problem.true_label = str(label)
        if options.contrast is not None:
            self._add_foils(problems, foils, options.contrast_alignment, single=single)
        return problems

    def encode_inputs(self, items: list) -> list[Encoding | None]:
        """The encoding of every input (a task may leave some to :meth:`explain_inputs`, as None)."""
        return self.adapter.encode_many(items)

    def explain_inputs(self, items: list, encodings: list, options: Explain) -> list[ExplainedInput]:
        """The :class:`ExplainedInput` of every input; see "Subclass API"."""
        raise NotImplementedError(f"{type(self).__name__} must implement explain_inputs")

    def foils(self, problem: ExplainedInput, foil, logits: torch.Tensor, alignment):
        """The foils of ``problem``'s targets as a :class:`~interp_widgets.targets.Contrast` (language models)."""
        raise ValueError(f"contrast= is not supported for {self.name} models")

    def foil_logits(self, problems: list[ExplainedInput]) -> list[torch.Tensor]:
        """Logits ``(n_targets, vocab)`` at every problem's target positions (one batched pass)."""
        return self.logits([p.encoding.input_ids for p in problems], [p.target_positions for p in problems])

    def _add_foils(self, problems: list[ExplainedInput], foils: list, alignment, *, single: bool) -> None:
        """Resolve the foil of every target (one forward pass per input gives the foils' probabilities)."""
        logits = self.foil_logits(problems)
        for item, (problem, foil, lg) in enumerate(zip(problems, foils, logits)):
            try:
                found = self.foils(problem, foil, lg, alignment)
            except (ValueError, TypeError) as err:
                if single:
                    raise
                raise type(err)(f"input {item}: {err}") from None
            probs = torch.softmax(lg.float(), dim=-1)[torch.arange(problem.n_targets), torch.as_tensor(found.foils.ids)]
            problem.contrast_info = found.with_probs(probs.cpu().numpy())

    def query_position(self, problem: ExplainedInput, target: int) -> int:
        """The sequence position whose attention row explains ``target`` (attention methods)."""
        return int(problem.target_positions[target])

    # ------------------------------------------------------------------ generation, training, activations, lenses
    def generate(self, input_ids: Sequence[int], **options) -> tuple[np.ndarray, np.ndarray]:
        """The model's continuation of ``input_ids`` and the probability of each new token (generative tasks)."""
        raise ValueError(
            f"generation needs a causal LM or an encoder–decoder LM; this model is a {self.name}. "
            "Use a *ForCausalLM or *ForConditionalGeneration model."
        )

    @classmethod
    def training_batch(cls, tokenizer, batch: dict, labels, generator: torch.Generator, mlm_probability: float) -> dict:
        """Add the training loss's ``labels`` to a tokenized, padded ``batch`` (geometry replay's probe)."""
        raise ValueError(f"a training probe is not defined for {cls.name} models")

    @classmethod
    def check_training_labels(cls, tokenizer, labels, n_texts: int) -> None:
        """Refuse ``labels=`` for a probe of ``n_texts`` texts where this task takes none (or needs them)."""
        if labels is not None:
            raise ValueError(f"labels= applies to sequence classifiers only; this model is a {cls.name}")

    def default_pooling(self) -> str:
        """How one text becomes one activation row by default: ``"last"`` (causal) or ``"cls"``."""
        if self.causal or self.adapter.tokenizer.cls_token_id is None:
            return "last"
        return "cls"

    def activation_pass(self, module: nn.Module) -> tuple[Callable[[torch.Tensor, torch.Tensor], None], int]:
        """How activations at ``module`` are read from a padded batch of texts: ``run(ids, mask)`` (one forward
        pass; the capture may stop it early) and how many leading rows of the captured hidden states to drop so
        that row ``j`` is token ``j``.

        Example:
            >>> run, skip = task_for(adapter).activation_pass(model.bert.encoder.layer[0])
            >>> skip
            0
        """
        model = self.adapter.model
        # the pass stops at the layer: no key/value cache to build for the blocks that did run
        options = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}

        def run(ids: torch.Tensor, mask: torch.Tensor) -> None:
            model(input_ids=ids, attention_mask=mask, **options)

        return run, 0

    def encode_scored(self, text) -> Encoding:
        """The encoding of one text or conversation whose scores a concept importance explains."""
        return self.adapter.encode(text)

    def concept_targets(self, logits: torch.Tensor, target) -> tuple[list[int], list[str], torch.Tensor]:
        """Resolve the targets of a concept importance: ``(ids, labels, score vector)`` indexed by the ids."""
        raise ValueError(f"concept importance explains classifiers and causal LMs; this model is a {self.name}")

    def attention_maps(self, out) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Each layer's attention probabilities ``(rows, heads, T, T)`` over the explained token axis, from a model
        output run with ``output_attentions=True``, and the cross-attentions (``None`` here: one stack).

        Example:
            >>> from types import SimpleNamespace
            >>> from interp_widgets.adapter import ModelAdapter
            >>> out = SimpleNamespace(attentions=(torch.full((1, 2, 3, 3), 1 / 3),) * 2)  # two layers, two heads
            >>> maps, cross = task_for(ModelAdapter(lm, lm_tokenizer)).attention_maps(out)
            >>> len(maps), tuple(maps[0].shape), cross
            (2, (1, 2, 3, 3), None)
        """
        attentions = list(getattr(out, "attentions", None) or getattr(out, "decoder_attentions", None) or [])
        if not attentions or any(a is None for a in attentions):
            raise UnsupportedModelError(
                f"{type(self.adapter.model).__name__} returned no attention weights even with eager attention; "
                "attention methods need a model that supports output_attentions=True (load it with "
                "attn_implementation='eager')."
            )
        return attentions, None

    def lens_targets(self, ids: np.ndarray) -> tuple[np.ndarray, str]:
        """The token a lens reads at each position, and its label: the next token (``-1`` at the end)."""
        return np.append(ids[1:], -1), "next token"


def task_class(model: nn.Module) -> type[Task]:
    """The class of the task that explains ``model``: the highest-``priority`` registered task that matches (unknown
    models raise an ``UnsupportedModelError`` naming the fix).

    Example:
        >>> task_class(seq2seq).joined_axes
        True
    """
    for cls in sorted(TASKS.values(), key=lambda c: -c.priority):
        if cls.matches(model):
            return cls
    raise UnsupportedModelError(
        f"unsupported model class {type(model).__name__}; supported: sequence classification "
        "(*ForSequenceClassification), causal LM (*ForCausalLM, *LMHeadModel), masked LM (*ForMaskedLM) and "
        "sequence-to-sequence LM (T5, BART, mBART, Marian, M2M100 *ForConditionalGeneration). Load your checkpoint "
        "with AutoModelForSequenceClassification, AutoModelForCausalLM, AutoModelForMaskedLM or "
        "AutoModelForSeq2SeqLM."
    )


def task_for(adapter: ModelAdapter) -> Task:
    """The task of the adapter's model, bound to the adapter: the highest-``priority`` registered task whose
    :meth:`Task.matches` accepts the model. Unknown models raise an ``UnsupportedModelError`` naming the fix.

    Example:
        >>> task_for(adapter)
        ClassificationTask(BertForSequenceClassification)
    """
    return task_class(adapter.model)(adapter)


def detect_task(model: nn.Module) -> str:
    """The name of the task that explains ``model`` (see :func:`task_for`).

    Encoder–decoder models are recognised first: ``BartForConditionalGeneration`` and
    ``MBartForConditionalGeneration`` are also listed in transformers' masked-LM mapping, but they are explained as
    what they are, sequence-to-sequence models.

    Example:
        >>> detect_task(model), detect_task(lm), detect_task(seq2seq)
        ('sequence-classification', 'causal-lm', 'seq2seq-lm')
    """
    return task_class(model).name


def prepare_inputs(adapter: ModelAdapter, inputs, options: Explain | None = None, **keywords) -> list[ExplainedInput]:
    """Tokenize inputs and resolve what to explain on each, according to the model's task (:meth:`Task.explain`);
    ``keywords`` are the fields of :class:`Explain` when ``options`` is not given.

    - classifier: ``target`` is a class index, a label name, a list of them, or ``None`` (the predicted class);
    - causal LM: the model's own greedy (or sampled, ``do_sample``) continuation of ``max_new_tokens`` tokens, or a
      forced ``continuation`` (text or token ids); every continuation token is a target. A chat conversation
      explains the assistant reply (its last message when it is the assistant's, else the continuation or the
      generated reply);
    - masked LM: ``target`` is the token (string or id) scored at ``mask_position`` (default: the first mask token),
      or ``None`` for the predicted token;
    - encoder–decoder LM: the input is the source, the target its generated or forced (``continuation``) output,
      both on one axis (``source_length`` source tokens first, then the decoder's start token and the target).

    Example:
        >>> [p.target_labels for p in prepare_inputs(adapter, ["Great food.", "Slow service."], target="negative")]
        [['negative'], ['negative']]
        >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
        >>> generated = prepare_inputs(lm_adapter, "The room was", max_new_tokens=3)[0]
        >>> generated.n_targets, generated.target_positions.tolist(), generated.generated_mask.tolist()
        (3, [2, 3, 4], [False, False, False, True, True, True])
        >>> forced = prepare_inputs(lm_adapter, "The room was", continuation=" clean")[0]
        >>> forced.encoding.tokens, forced.target_labels
        (['The', 'room', 'was', ' cle', 'an'], ["' cle'@3", "'an'@4"])
        >>> masked = prepare_inputs(ModelAdapter(masked_lm, tokenizer), "The food was [MASK].", target="good")[0]
        >>> masked.target_labels, masked.target_positions.tolist()
        (['good'], [4])
        >>> chat = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]
        >>> reply = prepare_inputs(ModelAdapter(chat_lm, chat_tokenizer), [chat])[0]  # the last reply is forced
        >>> reply.target_labels, reply.encoding.turn_roles
        (["'H'@39", "'e'@40", "'ll'@41", "'o'@42", "'.'@43"], ['system', 'user', 'assistant'])
        >>> foiled = prepare_inputs(lm_adapter, "The room was", continuation=" clean", contrast=" cold")[0]
        >>> foiled.target_labels, foiled.foil_labels, foiled.foil_alignment.tolist()
        (["' cle'@3", "'an'@4"], [' co', 'ld'], [0, 1])
        >>> longer = prepare_inputs(lm_adapter, "The room was", continuation=" clean", contrast=" dirty")[0]
        >>> longer.foil_labels, longer.foil_alignment.tolist()  # ' d', 'ir', 't', 'y': right-aligned
        (['t', 'y'], [2, 3])
    """
    if options is not None and keywords:
        raise TypeError(f"pass options= or keywords, not both (got {sorted(keywords)})")
    return task_for(adapter).explain(inputs, Explain(**keywords) if options is None else options)
