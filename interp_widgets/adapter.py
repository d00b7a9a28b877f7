"""The adapter that joins a Hugging Face model and its tokenizer for the compute families of interp_widgets.

It runs any model the same way, whatever its task: from ``inputs_embeds`` or ids, in length-bucketed batches capped
by ``max_batch_tokens``, counting the passes. What differs between tasks (targets, generation, training labels …)
lives in :mod:`interp_widgets.tasks`. What needs only a tokenizer lives in
:mod:`interp_widgets.text_units` (tokenization, word and sentence units); what needs only a model lives in
:mod:`interp_widgets.layers` (canonical layer names, hooks). The adapter never mutates the model: no added tokens,
no resized embeddings, no config edits, no device moves, and the train/eval mode is restored after every call.

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> adapter = ModelAdapter(model, tokenizer)
    >>> enc = adapter.encode("Not bad at all.")
    >>> enc.tokens, enc.word_ids.tolist()
    (['[CLS]', 'Not', 'bad', 'at', 'all', '.', '[SEP]'], [-1, 0, 1, 2, 3, 4, -1])
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, fields
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from interp_widgets.layers import UnsupportedModelError
from interp_widgets._inputs import input_items, is_conversation
from interp_widgets.text_units import Encoding, check_fast_tokenizer, encode, encode_chat
from interp_widgets.validation import check_int, check_number

__all__ = ["ModelAdapter", "Encoding", "PassCount", "UnsupportedModelError", "execution_device"]

# Encoders that scale their token embeddings by ``embed_scale`` only when they embed ``input_ids`` themselves (so
# ``inputs_embeds`` must arrive scaled), while their decoder scales whatever it gets. BART, mBART and M2M100 scale
# inside their embedding module (``*ScaledWordEmbedding``) and T5 does not scale: neither needs anything.
_ENCODER_SCALES_IDS_ONLY = ("marian",)


def execution_device(module: nn.Module) -> torch.device | None:
    """The device accelerate runs ``module`` on when it is dispatched (its ``_hf_hook``), else ``None``.

    Example:
        >>> execution_device(model.get_input_embeddings()) is None  # an ordinary, undispatched model
        True
    """
    hook = getattr(module, "_hf_hook", None)
    for item in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):
        device = getattr(item, "execution_device", None)
        if device is not None:
            return torch.device(device)
    return None


@dataclass
class PassCount:
    """Model passes counted by :meth:`ModelAdapter.counting`.

    ``forward`` counts calls of the model and ``forward_rows`` the sequences they ran; ``backward`` counts backward
    passes (calls of ``torch.autograd.grad``, each possibly batched over several targets) and ``backward_rows`` the
    gradients they produced (one per row and target: vector-Jacobian products).

    Example:
        >>> count = PassCount(forward=2, forward_rows=18, backward=2, backward_rows=144)
        >>> count.per_target(8)
        {'forward': 0.25, 'forward_rows': 2.25, 'backward': 0.25, 'backward_rows': 18.0}
    """

    forward: int = 0
    forward_rows: int = 0
    backward: int = 0
    backward_rows: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    def per_target(self, n_targets: int) -> dict[str, float]:
        """Each count divided by the number of explained targets (tokens, classes)."""
        n = max(1, int(n_targets))
        return {name: value / n for name, value in self.as_dict().items()}


class ModelAdapter:
    """Wrap a Hugging Face ``PreTrainedModel`` and its tokenizer for attribution, concepts and geometry.

    Args:
        model: a Hugging Face model with a head (its task is :func:`interp_widgets.tasks.task_for` of the adapter).
        tokenizer: its *fast* tokenizer (needed for character offsets).
        max_batch_tokens: cap on the tokens of one forward (and backward) pass; evaluations are bucketed by length
            under it. This is the memory budget: the activations a backward pass keeps grow with the tokens of the
            pass, about 2.3 MB per token for SmolLM2-135M in float32 (so 2048 tokens, one 2,048-token row per pass,
            need about 4.7 GB on top of the weights), and a 2,048-token prompt fits a pass only when
            ``max_batch_tokens >= 2048`` (a longer row still runs alone in its pass).

    Only the logits that are scored are computed: language models apply their output head to the scored positions
    only (see :meth:`forward_embeds`). Dispatched models (``device_map``, accelerate hooks) work as they are: inputs
    go to the input embedding's execution device, and the adapter never calls ``.to()`` on the model.

    Example:
        >>> adapter = ModelAdapter(model, tokenizer, max_batch_tokens=4096)
        >>> adapter.max_batch_tokens, adapter.device
        (4096, device(type='cpu'))
    """

    def __init__(self, model: nn.Module, tokenizer, *, max_batch_tokens: int = 16384):
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be a torch.nn.Module (a Hugging Face PreTrainedModel), got {type(model).__name__}"
            )
        check_fast_tokenizer(tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_tokens = check_int("max_batch_tokens", max_batch_tokens, minimum=1)
        self._observer: tuple[Callable | None, dict] = (None, {})
        self._counters: list[PassCount] = []

    # ------------------------------------------------------------------ basic facts
    @property
    def device(self) -> torch.device:
        """The device inputs go to: the input embedding's (its accelerate execution device when the model is
        dispatched with a ``device_map``). The adapter never moves the model.

        Example:
            >>> adapter.device
            device(type='cpu')
        """
        embedding = self.model.get_input_embeddings()
        for module in (embedding, self.model):
            device = None if module is None else execution_device(module)
            if device is not None:
                return device
        weight = getattr(embedding, "weight", None)
        if isinstance(weight, torch.Tensor):
            if weight.device.type == "meta":
                raise ValueError(
                    "the model's input embedding is on the meta device and no accelerate hook loads it: its weights "
                    "were never loaded (a model built under init_empty_weights, or dispatched with no offload "
                    "folder). Load them first: from_pretrained(..., device_map=..., offload_folder=...) or "
                    "accelerate.load_checkpoint_and_dispatch(model, checkpoint, device_map=...)"
                )
            return weight.device
        for param in self.model.parameters():
            if param.device.type != "meta":
                return param.device
        return torch.device("cpu")

    @property
    def embedding(self) -> nn.Embedding:
        """The input (token) embedding layer."""
        emb = self.model.get_input_embeddings()
        if emb is None:
            raise UnsupportedModelError(f"{type(self.model).__name__} exposes no input embedding layer")
        return emb

    @property
    def max_length(self) -> int:
        """Longest input the model accepts, in tokens (see :attr:`context_limit`).

        Example:
            >>> adapter.max_length
            128
        """
        return self.context_limit[0]

    @property
    def context_limit(self) -> tuple[int, str]:
        """The model's context length and where it comes from: the smallest of ``config.max_position_embeddings``
        (``n_positions``, ``max_sequence_length``) and the tokenizer's ``model_max_length``.

        Example:
            >>> adapter.context_limit
            (128, 'config.max_position_embeddings = 128')
        """
        config = self.model.config
        limits = [
            (getattr(config, name, None), f"config.{name}")
            for name in ("max_position_embeddings", "n_positions", "max_sequence_length")
        ]
        tok_limit = getattr(self.tokenizer, "model_max_length", None)
        limits.append((tok_limit if tok_limit and tok_limit < 10**7 else None, "tokenizer.model_max_length"))
        limits = [(int(v), source) for v, source in limits if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        if not limits:
            return 2048, "no limit in the config or tokenizer; 2048 assumed"
        limit = min(v for v, _ in limits)
        return limit, " and ".join(f"{source} = {v}" for v, source in limits if v == limit)

    def check_length(self, n_tokens: int, what: str = "the text") -> None:
        """Raise a ValueError naming the model's context limit and the fix when ``n_tokens`` exceed it.

        Example:
            >>> adapter.check_length(300, "the prompt")
            Traceback (most recent call last):
              ...
            ValueError: the prompt is 300 tokens, longer than the model's context of 128 tokens (config.max_position_embeddings = 128). Shorten it or split it into several texts of at most 128 tokens (for example, keep its last 128 tokens).
        """
        limit, source = self.context_limit
        if int(n_tokens) > limit:
            raise ValueError(
                f"{what} is {int(n_tokens)} tokens, longer than the model's context of {limit} tokens ({source}). "
                f"Shorten it or split it into several texts of at most {limit} tokens (for example, keep its last "
                f"{limit} tokens)."
            )

    # ------------------------------------------------------------------ tokenization
    def encode(self, text, *, add_special_tokens: bool = True, add_generation_prompt: bool = False,
               continue_final_message: bool = False) -> Encoding:  # fmt: skip
        """Tokenize one text with character offsets, word ids and sentence ids (:func:`~interp_widgets.text_units.encode`),
        refusing texts longer than the model accepts (:meth:`check_length`).

        A chat conversation (a list of ``{"role", "content"}`` messages) goes through the tokenizer's chat template
        (:func:`~interp_widgets.text_units.encode_chat`, with ``add_generation_prompt`` / ``continue_final_message``).

        Example:
            >>> adapter.encode("It isn't bad.").words
            ['It', "isn't", 'bad', '.']
            >>> chat = ModelAdapter(chat_lm, chat_tokenizer).encode([{"role": "user", "content": "Hi!"}])
            >>> chat.turn_roles, chat.text.count("<|im_start|>")
            (['system', 'user'], 2)
        """
        if is_conversation(text):
            encoding = encode_chat(self.tokenizer, text, add_generation_prompt=add_generation_prompt,
                                   continue_final_message=continue_final_message)  # fmt: skip
            self.check_length(len(encoding), "the conversation")
        else:
            encoding = encode(self.tokenizer, text, add_special_tokens=add_special_tokens)
            self.check_length(len(encoding), "the text")
        return encoding

    def encode_many(self, texts, **chat_options) -> list[Encoding]:
        """Tokenize one text or conversation, or a list of them; errors name the index of a bad input.
        ``chat_options`` (``add_generation_prompt``, ``continue_final_message``) apply to conversations.

        Example:
            >>> [len(e) for e in adapter.encode_many(["Good.", "Very bad film."])]
            [4, 6]
        """
        items, _ = input_items(texts)
        if len(items) == 0:
            raise ValueError("no texts given; pass a string or a non-empty list of strings.")
        out = []
        for i, text in enumerate(items):
            try:
                out.append(self.encode(text, **(chat_options if is_conversation(text) else {})))
            except (TypeError, ValueError) as err:
                if type(err) not in (TypeError, ValueError):
                    raise
                raise type(err)(f"text {i}: {err}") from err
        return out

    # ------------------------------------------------------------------ running the model
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings of ``input_ids`` (positions are added by the model itself).

        Example:
            >>> adapter.embed(torch.tensor([[101, 2204, 102]])).shape
            torch.Size([1, 3, 32])
        """
        return self.embedding(input_ids.to(self.device))

    def _check_split(self, source_length, length: int) -> int | None:
        two_stacks = "decoder_inputs_embeds" in inspect.signature(self.model.forward).parameters
        if not two_stacks:
            if source_length is not None:
                raise ValueError(
                    f"source_length applies to encoder–decoder models; {type(self.model).__name__} runs "
                    "one sequence per row. Leave source_length out."
                )
            return None
        if source_length is None:
            raise ValueError(
                "an encoder–decoder model needs source_length= (the number of source tokens at the start "
                "of each row; the rest are the decoder's tokens)"
            )
        source_length = int(source_length)
        if not 0 < source_length < int(length):
            raise ValueError(
                f"source_length {source_length} must leave at least one source and one decoder token in "
                f"rows of {int(length)} tokens"
            )
        return source_length

    def forward_embeds(
        self,
        embeds: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        positions: torch.Tensor | None = None,
        source_length: int | None = None,
    ) -> torch.Tensor:
        """Logits of the model run from ``inputs_embeds`` (one batch, no splitting).

        With ``positions`` (``(rows, K)`` sequence positions), a language model computes its logits at those
        positions only: the output head runs on the hidden states gathered there, so a 2,048-token row costs one
        row of logits per scored position instead of 2,048. The result is then ``(rows, K, vocab)``; classifier
        logits stay ``(rows, classes)``.

        Inside :meth:`observing`, the model also gets the observer's keyword arguments and the observer sees the
        model's whole output.

        An encoder–decoder model (one whose forward takes ``decoder_inputs_embeds``) takes ``source_length``: the first ``source_length`` rows of
        the token axis are the encoder's ``inputs_embeds``, the rest the decoder's ``decoder_inputs_embeds``
        (positions count on the joined axis). The embeddings are those of the shared embedding module
        (:meth:`embed`); an encoder that applies its ``embed_scale`` only to ids (Marian) gets its part scaled here,
        so the logits equal those of the model run on the ids.

        Example:
            >>> adapter.forward_embeds(adapter.embed(torch.tensor([[101, 2204, 102]]))).shape
            torch.Size([1, 3])
            >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
            >>> x = lm_adapter.embed(torch.tensor([[5, 6, 7, 8]]))
            >>> full = lm_adapter.forward_embeds(x)
            >>> picked = lm_adapter.forward_embeds(x, positions=torch.tensor([[3, 1]]))
            >>> full.shape, picked.shape, bool(torch.allclose(picked[0], full[0, [3, 1]], atol=1e-6))
            (torch.Size([1, 4, 600]), torch.Size([1, 2, 600]), True)
        """
        split = self._check_split(source_length, embeds.shape[1])
        if split is None:
            return self._run(
                {"inputs_embeds": embeds}, tuple(embeds.shape[:2]), embeds.device, attention_mask, positions
            )
        source = embeds[:, :split] * self._encoder_embed_scale()
        return self._run(
            {"inputs_embeds": source, "decoder_inputs_embeds": embeds[:, split:]},
            tuple(embeds.shape[:2]),
            embeds.device,
            attention_mask,
            positions,
            split,
        )

    def forward_ids(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        positions: torch.Tensor | None = None,
        source_length: int | None = None,
    ) -> torch.Tensor:
        """Logits of the model run from token ids (one batch, no splitting); ``positions`` as in
        :meth:`forward_embeds`. The ids go to :attr:`device`.

        Example:
            >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
            >>> lm_adapter.forward_ids(torch.tensor([[5, 6, 7]]), positions=torch.tensor([[2]])).shape
            torch.Size([1, 1, 600])
        """
        device = self.device
        input_ids = input_ids.to(device)
        if attention_mask is not None:
            attention_mask = attention_mask.to(device)
        split = self._check_split(source_length, input_ids.shape[1])
        inputs = (
            {"input_ids": input_ids}
            if split is None
            else {"input_ids": input_ids[:, :split], "decoder_input_ids": input_ids[:, split:]}
        )
        return self._run(inputs, tuple(input_ids.shape[:2]), device, attention_mask, positions, split)

    def _encoder_embed_scale(self) -> float:
        if getattr(self.model.config, "model_type", "") in _ENCODER_SCALES_IDS_ONLY:
            return float(getattr(self.model.get_encoder(), "embed_scale", 1.0) or 1.0)
        return 1.0

    def _run(
        self, inputs: dict, shape: tuple[int, int], device, attention_mask, positions, split: int | None = None
    ) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones(shape, dtype=torch.long, device=device)
        observer, extra = self._observer
        if split is not None:
            inputs = {**inputs, "decoder_attention_mask": attention_mask[:, split:], "use_cache": False}
            attention_mask = attention_mask[:, :split]
            shape = (shape[0], shape[1] - split)
            positions = None if positions is None else positions - split
        with self.logits_at(positions, shape) as gathered:
            out = self.model(**inputs, attention_mask=attention_mask, **extra)
        self.count_forward(1, int(shape[0]))
        if observer is not None:
            observer(out)
        logits = out.logits
        if positions is not None and logits.dim() == 3 and not gathered["done"]:
            index = positions.to(logits.device)
            logits = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))
        return logits

    @contextlib.contextmanager
    def logits_at(self, positions: torch.Tensor | None, shape: tuple[int, int]) -> Iterator[dict]:
        """Within the block, a language model's output head sees only the hidden states at ``positions``
        ``(rows, K)`` of a ``shape = (rows, length)`` batch, so its logits are ``(rows, K, vocab)``.

        A forward pre-hook on the output embedding (``get_output_embeddings()``) gathers the positions; whatever the
        model does after its head (soft-capping, scaling) still applies. The hook is removed on exit, also on errors.
        The yielded dict's ``"done"`` says whether the gather happened (a model whose head is not an output embedding
        module called on ``(rows, length, d)`` hidden states gives full logits instead). Classifiers and
        ``positions=None`` change nothing (a classifier's head is no output embedding).

        Example:
            >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
            >>> with lm_adapter.logits_at(torch.tensor([[2]]), (1, 3)) as gathered:
            ...     logits = lm(input_ids=torch.tensor([[5, 6, 7]])).logits
            >>> logits.shape, gathered["done"]
            (torch.Size([1, 1, 600]), True)
        """
        state = {"done": False}
        head = None
        if positions is not None:
            head = self.model.get_output_embeddings()
            if head is self.model.get_input_embeddings():
                head = None
        if head is None:
            yield state
            return
        rows, length = shape

        def gather(module, args, kwargs):
            hidden = args[0] if args else None
            if (
                state["done"]
                or not isinstance(hidden, torch.Tensor)
                or hidden.dim() != 3
                or tuple(hidden.shape[:2]) != (rows, length)
            ):
                return None
            state["done"] = True
            index = positions.to(hidden.device)
            picked = hidden.gather(1, index[..., None].expand(-1, -1, hidden.shape[-1]))
            return (picked, *args[1:]), kwargs

        handle = head.register_forward_pre_hook(gather, with_kwargs=True)
        try:
            yield state
        finally:
            handle.remove()

    @contextlib.contextmanager
    def counting(self) -> Iterator[PassCount]:
        """Count the forward and backward passes run through the adapter inside the block.

        Example:
            >>> with adapter.counting() as count:
            ...     _ = adapter.forward_embeds(adapter.embed(torch.tensor([[101, 2204, 102], [101, 2919, 102]])))
            >>> count
            PassCount(forward=1, forward_rows=2, backward=0, backward_rows=0)
        """
        counter = PassCount()
        self._counters.append(counter)
        try:
            yield counter
        finally:
            self._counters.remove(counter)

    def count_forward(self, passes: int, rows: int) -> None:
        """Record ``passes`` forward passes over ``rows`` sequences in every active :meth:`counting` block (for
        passes run on the model directly, such as a generation step).

        Example:
            >>> with adapter.counting() as count:
            ...     adapter.count_forward(1, 3)
            >>> count.forward, count.forward_rows
            (1, 3)
        """
        for counter in self._counters:
            counter.forward += int(passes)
            counter.forward_rows += int(rows)

    def count_backward(self, passes: int, rows: int) -> None:
        """Record ``passes`` backward passes producing ``rows`` gradients in every active :meth:`counting` block.

        Example:
            >>> with adapter.counting() as count:
            ...     adapter.count_backward(1, 8)
            >>> count.backward, count.backward_rows
            (1, 8)
        """
        for counter in self._counters:
            counter.backward += int(passes)
            counter.backward_rows += int(rows)

    @contextlib.contextmanager
    def observing(self, observer: Callable, **forward_kwargs) -> Iterator["ModelAdapter"]:
        """Call ``observer(model_output)`` after every :meth:`forward_embeds` of the block, passing
        ``forward_kwargs`` (such as ``output_attentions=True``) to the model.

        Example:
            >>> seen = []
            >>> with adapter.observing(lambda out: seen.append(out.logits.shape), output_hidden_states=True):
            ...     _ = adapter.forward_embeds(adapter.embed(torch.tensor([[101, 2204, 102]])))
            >>> seen
            [torch.Size([1, 3])]
        """
        previous = self._observer
        self._observer = (observer, forward_kwargs)
        try:
            yield self
        finally:
            self._observer = previous

    def length_buckets(
        self, lengths: Sequence[int], *, copies: int = 1, max_padding: float | None = None
    ) -> list[list[int]]:
        """Group item indices into batches of similar length, each under ``max_batch_tokens``.

        ``copies`` is how many rows each item expands into (for example IG steps), so that a batch of ``b`` items
        holds ``b * copies * max_len`` tokens at most. An item too big on its own forms a batch alone.
        ``max_padding`` (a fraction) also closes a batch before its padding would exceed that share of its padded
        tokens: items of very different lengths then never share a pass, whatever ``max_batch_tokens`` allows.

        Example:
            >>> ModelAdapter(model, tokenizer, max_batch_tokens=400).length_buckets([5, 200, 7, 190])
            [[0, 2], [3, 1]]
            >>> ModelAdapter(model, tokenizer, max_batch_tokens=400).length_buckets([5, 200, 7, 190], max_padding=0.1)
            [[0], [2], [3, 1]]
        """
        if max_padding is not None:
            check_number("max_padding", max_padding, minimum=0)
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        tokens = 0  # real tokens of the current batch
        for i in order:
            longest = max(lengths[i], lengths[current[-1]] if current else 0)  # sorted: the new item is the longest
            padded = (len(current) + 1) * longest
            if current and (
                padded * copies > self.max_batch_tokens
                or (max_padding is not None and padded - tokens - lengths[i] > max_padding * padded)
            ):
                batches.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += lengths[i]
        if current:
            batches.append(current)
        return batches

    def rows_per_batch(self, length: int) -> int:
        """How many rows of ``length`` tokens fit in one forward pass under ``max_batch_tokens`` (at least 1).

        Example:
            >>> ModelAdapter(model, tokenizer, max_batch_tokens=16384).rows_per_batch(64)
            256
        """
        return max(1, self.max_batch_tokens // max(1, int(length)))
