"""One adapter between Hugging Face models and every compute family of interp_widgets.

The adapter detects the task of a model, tokenizes with character offsets and word/sentence units, runs the model
from ``inputs_embeds`` in length-bucketed batches capped by ``max_batch_tokens``, resolves targets and layers, and
installs hooks as context managers. It never mutates the model: no added tokens, no resized embeddings, no config
edits, no device moves, and the train/eval mode is restored after every call.

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> adapter = ModelAdapter(model, tokenizer)               # doctest: +SKIP
    >>> enc = adapter.encode("Not bad at all.")               # doctest: +SKIP
    >>> enc.tokens, enc.word_ids                              # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

TASK_CLASSIFICATION = "sequence-classification"
TASK_CAUSAL_LM = "causal-lm"
TASK_MASKED_LM = "masked-lm"
SUPPORTED_TASKS = (TASK_CLASSIFICATION, TASK_CAUSAL_LM, TASK_MASKED_LM)

_WORD_PATTERN = re.compile(r"\w+(?:['\u2019\-]\w+)*|[^\w\s]", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+")


class UnsupportedModelError(TypeError):
    """Raised for a model whose task the adapter cannot explain."""


def detect_task(model: nn.Module) -> str:
    """Return the task of a Hugging Face model: sequence classification, causal LM or masked LM.

    Example:
        >>> detect_task(GPT2LMHeadModel(GPT2Config(n_layer=1)))  # doctest: +SKIP
        'causal-lm'
    """
    from transformers.models.auto import modeling_auto as auto

    name = type(model).__name__
    mappings = (
        (TASK_CLASSIFICATION, auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, ("ForSequenceClassification",)),
        (TASK_CAUSAL_LM, auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, ("ForCausalLM", "LMHeadModel")),
        (TASK_MASKED_LM, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, ("ForMaskedLM",)),
    )
    for task, names, suffixes in mappings:
        if name in set(names.values()) or name.endswith(suffixes):
            return task
    raise UnsupportedModelError(
        f"unsupported model class {name}; supported: sequence classification (*ForSequenceClassification), "
        "causal LM (*ForCausalLM, *LMHeadModel) and masked LM (*ForMaskedLM). Load your checkpoint with "
        "AutoModelForSequenceClassification, AutoModelForCausalLM or AutoModelForMaskedLM."
    )


@dataclass
class Encoding:
    """One tokenized text with the units attributions are aggregated over.

    ``tokens`` are the exact text slices of each token (special tokens show their token string), ``offsets`` the
    character spans, ``word_ids`` and ``sentence_ids`` the unit of every token (-1 for special tokens).

    Example:
        >>> enc = adapter.encode("Great food. Slow service.")  # doctest: +SKIP
        >>> enc.sentence_ids                                  # doctest: +SKIP
        array([-1,  0,  0,  0,  1,  1,  1, -1])
    """

    text: str
    input_ids: np.ndarray
    tokens: list[str]
    offsets: np.ndarray
    special_mask: np.ndarray
    word_ids: np.ndarray
    sentence_ids: np.ndarray
    words: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


def _spans(pattern: re.Pattern, text: str, *, split: bool) -> list[tuple[int, int]]:
    if not split:
        return [m.span() for m in pattern.finditer(text)]
    spans, start = [], 0
    for m in pattern.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _unit_ids(offsets: np.ndarray, special: np.ndarray, text: str, spans: list[tuple[int, int]]) -> np.ndarray:
    """Map each token to the unit whose span contains the token's first non-space character."""
    ids = np.full(len(offsets), -1, dtype=np.int64)
    starts = np.array([s for s, _ in spans] or [0])
    for i, (a, b) in enumerate(offsets):
        if special[i] or b <= a:
            continue
        first = a
        while first < b - 1 and text[first].isspace():
            first += 1
        unit = int(np.searchsorted(starts, first, side="right") - 1)
        if unit >= 0 and spans and first < spans[unit][1]:
            ids[i] = unit
        else:  # a token of pure whitespace or punctuation between units joins the previous unit
            ids[i] = max(unit, 0)
    return ids


class ModelAdapter:
    """Wrap a Hugging Face ``PreTrainedModel`` and its tokenizer for attribution, concepts and geometry.

    Args:
        model: a sequence classifier, causal LM or masked LM.
        tokenizer: its *fast* tokenizer (needed for character offsets).
        max_batch_tokens: cap on padded tokens per forward pass; evaluations are bucketed by length under it.

    Example:
        >>> adapter = ModelAdapter(model, tokenizer, max_batch_tokens=4096)  # doctest: +SKIP
        >>> adapter.task                                                     # doctest: +SKIP
        'sequence-classification'
    """

    def __init__(self, model: nn.Module, tokenizer, *, max_batch_tokens: int = 16384):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (a Hugging Face PreTrainedModel), got {type(model).__name__}")
        self.task = detect_task(model)
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(
                f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; character offsets need one. "
                "Load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
            )
        if int(max_batch_tokens) < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_tokens = int(max_batch_tokens)

    # ------------------------------------------------------------------ basic facts
    @property
    def device(self) -> torch.device:
        """Device of the model's first parameter (the adapter never moves the model)."""
        return next(self.model.parameters()).device

    @property
    def embedding(self) -> nn.Embedding:
        """The input (token) embedding layer."""
        emb = self.model.get_input_embeddings()
        if emb is None:
            raise UnsupportedModelError(f"{type(self.model).__name__} exposes no input embedding layer")
        return emb

    @property
    def max_length(self) -> int:
        """Longest input the model accepts, in tokens."""
        config = self.model.config
        limits = [
            getattr(config, name, None)
            for name in ("max_position_embeddings", "n_positions", "max_sequence_length")
        ]
        tok_limit = getattr(self.tokenizer, "model_max_length", None)
        limits.append(tok_limit if tok_limit and tok_limit < 10**7 else None)
        limits = [int(v) for v in limits if isinstance(v, int) and v > 0]
        return min(limits) if limits else 2048

    @property
    def labels(self) -> list[str]:
        """Class names from ``config.id2label`` in index order (classifiers only)."""
        n = int(getattr(self.model.config, "num_labels", 0) or 0)
        id2label = getattr(self.model.config, "id2label", None) or {}
        return [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n)]

    # ------------------------------------------------------------------ tokenization
    def encode(self, text: str, *, add_special_tokens: bool = True) -> Encoding:
        """Tokenize one text with character offsets, word ids and sentence ids.

        Words are runs of word characters (with inner apostrophes and hyphens) or single punctuation marks, found in
        the text itself, so word units are the same for every tokenizer. Sentences split after ``.!?…``.

        Example:
            >>> adapter.encode("It isn't bad.").words  # doctest: +SKIP
            ["It", "isn't", "bad", "."]
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text is empty or only whitespace; pass a text with at least one word.")
        enc = self.tokenizer(
            text,
            add_special_tokens=add_special_tokens,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            truncation=False,
            verbose=False,
        )
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        if len(ids) > self.max_length:
            raise ValueError(
                f"text is {len(ids)} tokens long but the model accepts at most {self.max_length}; "
                "shorten it or split it into several texts."
            )
        special = np.asarray(enc["special_tokens_mask"], dtype=bool)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        pieces = self.tokenizer.convert_ids_to_tokens(ids.tolist())
        tokens = [pieces[i] if special[i] else text[a:b] or pieces[i] for i, (a, b) in enumerate(offsets)]
        word_spans = _spans(_WORD_PATTERN, text, split=False)
        sentence_spans = _spans(_SENTENCE_END, text, split=True)
        return Encoding(
            text=text,
            input_ids=ids,
            tokens=tokens,
            offsets=offsets,
            special_mask=special,
            word_ids=_unit_ids(offsets, special, text, word_spans),
            sentence_ids=_unit_ids(offsets, special, text, sentence_spans),
            words=[text[a:b] for a, b in word_spans],
            sentences=[text[a:b].strip() for a, b in sentence_spans],
        )

    def encode_many(self, texts: str | Sequence[str]) -> list[Encoding]:
        """Tokenize one text or a list of texts; errors name the index of a bad text.

        Example:
            >>> [len(e) for e in adapter.encode_many(["Good.", "Very bad film."])]  # doctest: +SKIP
            [4, 6]
        """
        if isinstance(texts, str):
            texts = [texts]
        if len(texts) == 0:
            raise ValueError("no texts given; pass a string or a non-empty list of strings.")
        out = []
        for i, text in enumerate(texts):
            try:
                out.append(self.encode(text))
            except ValueError as err:
                raise ValueError(f"text {i}: {err}") from None
        return out

    # ------------------------------------------------------------------ running the model
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings of ``input_ids`` (positions are added by the model itself).

        Example:
            >>> adapter.embed(torch.tensor([[101, 2204, 102]])).shape  # doctest: +SKIP
            torch.Size([1, 3, 384])
        """
        return self.embedding(input_ids.to(self.device))

    def forward_embeds(self, embeds: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the model run from ``inputs_embeds`` (one batch, no splitting).

        Example:
            >>> adapter.forward_embeds(adapter.embed(ids)).shape  # doctest: +SKIP
            torch.Size([1, 2])
        """
        if attention_mask is None:
            attention_mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        out = self.model(inputs_embeds=embeds, attention_mask=attention_mask)
        return out.logits

    def length_buckets(self, lengths: Sequence[int], *, copies: int = 1) -> list[list[int]]:
        """Group item indices into batches of similar length, each under ``max_batch_tokens``.

        ``copies`` is how many rows each item expands into (for example IG steps), so that a batch of ``b`` items
        holds ``b * copies * max_len`` tokens at most. An item too big on its own forms a batch alone.

        Example:
            >>> ModelAdapter.length_buckets(adapter, [5, 200, 7, 190])  # doctest: +SKIP
            [[0, 2], [3, 1]]
        """
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = max([lengths[j] for j in current] + [lengths[i]])
            if current and (len(current) + 1) * copies * longest > self.max_batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def rows_per_batch(self, length: int) -> int:
        """How many rows of ``length`` tokens fit in one forward pass under ``max_batch_tokens`` (at least 1).

        Example:
            >>> adapter.rows_per_batch(64)  # doctest: +SKIP
            256
        """
        return max(1, self.max_batch_tokens // max(1, int(length)))

    # ------------------------------------------------------------------ targets
    def resolve_targets(self, target, logits: torch.Tensor | None = None) -> list[int]:
        """Turn a class index, a label name, a list of them, or ``None`` (the predicted class) into class indices.

        Example:
            >>> adapter.resolve_targets("positive")  # doctest: +SKIP
            [1]
        """
        if self.task != TASK_CLASSIFICATION:
            raise ValueError(
                f"class targets apply to sequence classifiers; this model is a {self.task}. "
                "For language models pass token ids or a continuation string."
            )
        labels = self.labels
        if target is None:
            if logits is None:
                raise ValueError("the predicted class needs the model's logits")
            return [int(logits.reshape(-1, logits.shape[-1])[0].argmax())]
        items = list(target) if isinstance(target, (list, tuple, np.ndarray, torch.Tensor)) else [target]
        if not items:
            raise ValueError("target list is empty; pass a class index, a label name or None for the prediction.")
        resolved = []
        for item in items:
            if isinstance(item, torch.Tensor):
                item = item.item()
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                if not 0 <= int(item) < len(labels):
                    raise ValueError(f"class index {int(item)} is out of range; valid indices are 0..{len(labels) - 1} ({labels}).")
                resolved.append(int(item))
            elif isinstance(item, str):
                exact = [i for i, name in enumerate(labels) if name == item]
                folded = [i for i, name in enumerate(labels) if name.lower() == item.lower()]
                if not (exact or folded):
                    raise ValueError(f"unknown label {item!r}; valid labels are {labels} (or their indices).")
                resolved.append((exact or folded)[0])
            else:
                raise TypeError(f"target must be an int, a label name, a list of them or None; got {type(item).__name__}")
        return resolved

    # ------------------------------------------------------------------ layers and hooks
    def blocks(self) -> tuple[str, nn.ModuleList]:
        """The module path and list of transformer blocks (``encoder.layer``, ``transformer.h``, ``model.layers``…).

        Example:
            >>> adapter.blocks()[0]  # doctest: +SKIP
            'bert.encoder.layer'
        """
        n_layers = getattr(self.model.config, "num_hidden_layers", None) or getattr(self.model.config, "n_layer", None)
        candidates = [
            (name, module)
            for name, module in self.model.named_modules()
            if isinstance(module, nn.ModuleList) and len(module) > 0
        ]
        for name, module in candidates:
            if n_layers is None or len(module) == n_layers:
                return name, module
        raise UnsupportedModelError(f"could not find the transformer blocks of {type(self.model).__name__}")

    def layer_names(self) -> list[str]:
        """Every name :meth:`get_layer` accepts: ``layer:i`` shortcuts, then real module paths.

        Example:
            >>> adapter.layer_names()[:2]  # doctest: +SKIP
            ['layer:0', 'layer:1']
        """
        _, blocks = self.blocks()
        return [f"layer:{i}" for i in range(len(blocks))] + [n for n, _ in self.model.named_modules() if n]

    def get_layer(self, layer: str | int | nn.Module) -> tuple[str, nn.Module]:
        """Resolve ``"layer:4"``, ``4``, ``-1``, a module path such as ``"bert.encoder.layer.4"`` or a module.

        Returns ``(canonical module path, module)``; unknown names raise a ValueError listing valid names.

        Example:
            >>> adapter.get_layer("layer:-1")[0]  # doctest: +SKIP
            'bert.encoder.layer.5'
        """
        modules = dict(self.model.named_modules())
        if isinstance(layer, nn.Module):
            for name, module in modules.items():
                if module is layer:
                    return name, module
            raise ValueError("the given module is not part of this model")
        block_path, blocks = self.blocks()
        index = None
        if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
            index = int(layer)
        elif isinstance(layer, str) and re.fullmatch(r"layer:-?\d+", layer.strip()):
            index = int(layer.strip().split(":")[1])
        if index is not None:
            if not -len(blocks) <= index < len(blocks):
                raise ValueError(f"layer index {index} is out of range; this model has {len(blocks)} blocks (layer:0..layer:{len(blocks) - 1}).")
            index %= len(blocks)
            return f"{block_path}.{index}", blocks[index]
        if isinstance(layer, str) and layer in modules and layer:
            return layer, modules[layer]
        shortcuts = [f"layer:{i}" for i in range(len(blocks))]
        close = [n for n in modules if n and isinstance(layer, str) and layer.split(".")[-1] in n][:8]
        raise ValueError(
            f"unknown layer {layer!r}; use one of {shortcuts} or a module path such as "
            f"{[f'{block_path}.{i}' for i in range(min(2, len(blocks)))]}"
            + (f" (similar names: {close})" if close else "")
            + "; adapter.layer_names() lists them all."
        )

    @contextlib.contextmanager
    def hooks(self, hooks: dict[str | int, Callable]) -> Iterator[None]:
        """Install forward hooks ``{layer: fn(module, inputs, output)}``; they are removed on exit, errors and Ctrl-C.

        Example:
            >>> with adapter.hooks({"layer:2": lambda m, i, o: print(o[0].shape)}):  # doctest: +SKIP
            ...     adapter.forward_embeds(embeds)
        """
        handles = []
        try:
            for layer, fn in hooks.items():
                _, module = self.get_layer(layer)
                handles.append(module.register_forward_hook(fn))
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextlib.contextmanager
    def capture(self, layers: Sequence[str | int]) -> Iterator[dict[str, list[torch.Tensor]]]:
        """Record the hidden-state output of each layer during the ``with`` block.

        Example:
            >>> with adapter.capture(["layer:3"]) as acts:  # doctest: +SKIP
            ...     adapter.forward_embeds(embeds)
            >>> acts["layer:3"][0].shape                    # doctest: +SKIP
        """
        store: dict[str, list[torch.Tensor]] = {str(layer): [] for layer in layers}

        def recorder(key):
            def hook(module, inputs, output):
                hidden = output[0] if isinstance(output, (tuple, list)) else output
                store[key].append(hidden.detach())

            return hook

        with self.hooks({layer: recorder(str(layer)) for layer in layers}):
            yield store

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """Put the model in eval mode for the block and restore its exact train/eval mode of every module afterwards.

        Example:
            >>> with adapter.evaluation():  # doctest: +SKIP
            ...     logits = adapter.forward_embeds(embeds)
        """
        modes = [(m, m.training) for m in self.model.modules()]
        try:
            self.model.eval()
            yield
        finally:
            for module, mode in modes:
                module.training = mode

    # ------------------------------------------------------------------ language-model helpers
    def is_pad_safe(self) -> bool:
        """Whether right-padding a batch leaves each row's output unchanged (true for bidirectional encoders).

        Decoder classifiers read the last position and would read padding, so their batches hold equal lengths only.

        Example:
            >>> adapter.is_pad_safe()  # doctest: +SKIP
            True
        """
        from transformers.models.auto import modeling_auto as auto

        model_type = getattr(self.model.config, "model_type", "")
        return self.task != TASK_CAUSAL_LM and model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES

    def generate(
        self,
        input_ids: Sequence[int],
        *,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy or sampled continuation of a causal LM, with the probability of every chosen token.

        Returns ``(new_token_ids, probabilities)``. Sampling uses a private seeded generator, so the global torch
        random state is untouched.

        Example:
            >>> ids, probs = adapter.generate(adapter.encode("Once upon").input_ids, max_new_tokens=5)  # doctest: +SKIP
        """
        if self.task != TASK_CAUSAL_LM:
            raise ValueError(f"generation needs a causal LM; this model is a {self.task}. Use a *ForCausalLM model.")
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if len(input_ids) + int(max_new_tokens) > self.max_length:
            raise ValueError(
                f"prompt ({len(input_ids)} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"maximum of {self.max_length} tokens; shorten the prompt or ask for fewer tokens."
            )
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        eos = self.tokenizer.eos_token_id
        ids = torch.tensor([list(input_ids)], dtype=torch.long, device=self.device)
        new_ids, probs = [], []
        # transformers 5 renamed past_key_values to cache; pass whichever this model's forward takes
        cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        past = None
        with self.evaluation(), torch.inference_mode():
            step_input = ids
            for _ in range(int(max_new_tokens)):
                seen = ids.shape[1] + len(new_ids)
                mask = torch.ones((1, seen), dtype=torch.long, device=self.device)
                out = self.model(input_ids=step_input, attention_mask=mask, use_cache=True, **{cache_arg: past})
                past = getattr(out, cache_arg)
                p = torch.softmax(out.logits[0, -1].float(), dim=-1).cpu()
                if do_sample:
                    scaled = torch.softmax(out.logits[0, -1].float().cpu() / max(float(temperature), 1e-6), dim=-1)
                    token = int(torch.multinomial(scaled, 1, generator=generator))
                else:
                    token = int(p.argmax())
                new_ids.append(token)
                probs.append(float(p[token]))
                if stop_at_eos and eos is not None and token == eos:
                    break
                step_input = torch.tensor([[token]], dtype=torch.long, device=self.device)
        return np.asarray(new_ids, dtype=np.int64), np.asarray(probs, dtype=np.float64)
