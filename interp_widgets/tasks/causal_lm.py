"""Causal language models: the continuation of a prompt (generated or forced), or a chat reply.

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> from interp_widgets.tasks import task_for
    >>> task_for(ModelAdapter(lm, lm_tokenizer)).explain("The room was", Explain(continuation=" clean"))[0].n_targets
    2
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets._inputs import is_conversation
from interp_widgets.layers import evaluation
from interp_widgets.targets import Contrast, Targets
from interp_widgets.tasks.base import Explain, ExplainedInput, Task
from interp_widgets.tasks.foils import resolve_lm_foils
from interp_widgets.text_units import Encoding, extend_encoding
from interp_widgets.validation import check_int

__all__ = ["CausalLMTask"]


class CausalLMTask(Task):
    """A causal LM (``*ForCausalLM``, ``*LMHeadModel``): every token of its continuation is a target, scored from
    the position before it.

    An input may be a chat conversation, rendered once by the tokenizer's chat template: the explained reply is its
    last message when it is the assistant's (forced), else a ``continuation`` (forced) or the reply the model
    generates after the template's generation prompt; ``max_new_tokens=0`` turns generation off.

    Example:
        >>> from interp_widgets.adapter import ModelAdapter
        >>> from interp_widgets.tasks import task_for
        >>> task = task_for(ModelAdapter(lm, lm_tokenizer))
        >>> task.name, task.pad_safe, task.default_pooling()
        ('causal-lm', False, 'last')
    """

    name = "causal-lm"
    priority = 5
    default_score = "log_probability"
    causal = True
    scores_next_token = True
    supports_concept_importance = True

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return cls.model_class_in(model, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", ("ForCausalLM", "LMHeadModel"))

    @property
    def pad_safe(self) -> bool:
        return False

    def encode_inputs(self, items: list) -> list[Encoding | None]:
        """Plain texts are encoded here; conversations (None) are encoded with their reply in :meth:`explain_inputs`."""
        if not any(is_conversation(item) for item in items):
            return self.adapter.encode_many(items)
        return [None if is_conversation(item) else self._encode_at(item, i) for i, item in enumerate(items)]

    def explain_inputs(self, items, encodings, options: Explain) -> list[ExplainedInput]:
        if options.target is not None:
            raise ValueError(
                "a causal LM explains its continuation; pass continuation='text' (forced) or nothing (generated), "
                "not target."
            )
        rest = (options.continuation, options.max_new_tokens, options.do_sample, options.seed)
        return [
            self._chat_reply_input(item, i, *rest) if enc is None else self._generation_input(enc, *rest)
            for i, (item, enc) in enumerate(zip(items, encodings))
        ]

    def encode_scored(self, text) -> Encoding:
        """A conversation's next token: of its last assistant reply, or starting the reply."""
        if is_conversation(text):
            if text[-1].get("role") == "assistant":
                return self.adapter.encode(text, continue_final_message=True)
            return self.adapter.encode(text, add_generation_prompt=True)
        return self.adapter.encode(text)

    def concept_targets(self, logits: torch.Tensor, target) -> tuple[list[int], list[str], torch.Tensor]:
        """Token ids, single-token strings or None (the predicted next token), scored at the last position."""
        last = logits[0, -1]
        if target is None:
            ids = [int(last.argmax())]
        else:
            items = target if isinstance(target, (list, tuple)) else [target]
            ids = []
            for item in items:
                if isinstance(item, str):
                    encoded = self.adapter.tokenizer(item, add_special_tokens=False)["input_ids"]
                    if len(encoded) != 1:
                        raise ValueError(f"target {item!r} is {len(encoded)} tokens; give a single token or its id")
                    item = encoded[0]
                if (
                    isinstance(item, bool)
                    or not isinstance(item, (int, np.integer))
                    or not 0 <= int(item) < last.shape[0]
                ):
                    raise ValueError(f"target {item!r} is not a token id in 0..{last.shape[0] - 1}")
                ids.append(int(item))
        return ids, self.adapter.tokenizer.convert_ids_to_tokens(ids), last

    def foils(self, problem: ExplainedInput, foil, logits: torch.Tensor, alignment) -> Contrast:
        prompt = problem.encoding.input_ids[~problem.generated_mask]
        return resolve_lm_foils(self.adapter.tokenizer, logits.shape[-1], foil, prompt, problem.n_targets, alignment)

    @classmethod
    def check_training_labels(cls, tokenizer, labels, n_texts: int) -> None:
        super().check_training_labels(tokenizer, labels, n_texts)
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token = tokenizer.eos_token first")

    @classmethod
    def training_batch(cls, tokenizer, batch: dict, labels, generator: torch.Generator, mlm_probability: float) -> dict:
        """``labels = input_ids`` with padding set to -100."""
        return {**batch, "labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}

    def _generation_input(self, enc: Encoding, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
        prompt_ids = enc.input_ids
        if continuation is None:
            new_ids, probs = self.generate(prompt_ids, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
        else:
            if isinstance(continuation, str):
                if not continuation:
                    raise ValueError("continuation is empty; pass the text the model should be explained for.")
                new_ids = np.asarray(
                    self.adapter.tokenizer(continuation, add_special_tokens=False)["input_ids"], dtype=np.int64
                )
            else:
                new_ids = np.asarray(list(continuation), dtype=np.int64)
            if len(new_ids) == 0:
                raise ValueError("continuation has no tokens")
            self.adapter.check_length(len(prompt_ids) + len(new_ids), "the prompt plus its continuation")
            full = np.concatenate([prompt_ids, new_ids])
            positions = np.arange(len(prompt_ids) - 1, len(full) - 1)
            logits = self.logits([full], [positions])[0]  # only the positions that predict the continuation
            probs = torch.softmax(logits.float(), dim=-1)[torch.arange(len(new_ids)), torch.as_tensor(new_ids)]
            probs = probs.cpu().numpy().astype(np.float64)
        return self._extend_encoding(enc, new_ids, probs)

    def _encode_at(self, text, index: int) -> Encoding:
        try:
            return self.adapter.encode(text)
        except ValueError as err:
            raise ValueError(f"text {index}: {err}") from None

    def _chat_reply_input(self, messages, index: int, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
        """The assistant reply of a conversation for a causal LM: its last assistant message or ``continuation`` text
        (forced), or what the model generates after the template's generation prompt."""
        try:
            last = messages[-1].get("role")
            if last == "assistant":
                if continuation is not None:
                    raise ValueError(
                        "the conversation already ends with the assistant reply to explain (forced); drop "
                        "continuation=, or drop the last message to explain the continuation instead"
                    )
                return self._forced_reply(self.adapter.encode(messages, continue_final_message=True))
            if isinstance(continuation, str):
                if not continuation.strip():
                    raise ValueError(
                        "continuation is empty; pass the assistant reply the model should be explained for."
                    )
                reply = [*messages, {"role": "assistant", "content": continuation}]
                return self._forced_reply(self.adapter.encode(reply, continue_final_message=True))
            if continuation is None and not max_new_tokens:
                raise ValueError(
                    f"the conversation ends with a {last!r} message, so there is no assistant reply to explain, and "
                    "generation is off (max_new_tokens=0). End the messages with the reply to explain, "
                    '{"role": "assistant", "content": "..."}, pass continuation="...", or set max_new_tokens >= 1 to '
                    "explain the reply the model generates."
                )
            prompt = self.adapter.encode(messages, add_generation_prompt=True)
        except (TypeError, ValueError) as err:
            if type(err) not in (TypeError, ValueError):
                raise
            raise type(err)(f"text {index}: {err}") from err
        return self._generation_input(prompt, continuation, max_new_tokens, do_sample, seed)

    def _forced_reply(self, enc: Encoding) -> ExplainedInput:
        """Targets are the tokens of the last turn (the reply, which ends the text); each is scored from the position
        before it, in one forward pass over the whole conversation."""
        reply = np.flatnonzero(enc.turn_ids == len(enc.turn_roles) - 1)
        start = int(reply[0])
        new_ids = enc.input_ids[start:]
        logits = self.logits([enc.input_ids])[0]
        positions = np.arange(start, len(enc))
        probs = torch.softmax(logits.float(), dim=-1)[torch.as_tensor(positions - 1), torch.as_tensor(new_ids)]
        return ExplainedInput(
            encoding=enc,
            targets=Targets(
                [f"{t!r}@{p}" for t, p in zip(enc.tokens[start:], positions)], ids=new_ids, probs=probs.cpu().numpy()
            ),
            target_positions=positions - 1,
            visible=positions,
            generated_mask=np.arange(len(enc)) >= start,
        )

    def _extend_encoding(self, enc: Encoding, new_ids: np.ndarray, probs: np.ndarray) -> ExplainedInput:
        """Append generated tokens to a prompt encoding (:func:`~interp_widgets.text_units.extend_encoding`): they are
        the targets."""
        encoding = extend_encoding(self.adapter.tokenizer, enc, new_ids)
        prompt_len, n_new = len(enc.input_ids), len(new_ids)
        tokens = encoding.tokens
        positions = np.arange(prompt_len, prompt_len + n_new)
        return ExplainedInput(
            encoding=encoding,
            targets=Targets([f"{t!r}@{p}" for t, p in zip(tokens[prompt_len:], positions)], ids=new_ids, probs=probs),
            target_positions=positions - 1,
            visible=positions,
            generated_mask=np.concatenate([np.zeros(prompt_len, bool), np.ones(n_new, bool)]),
        )

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
            >>> from interp_widgets.adapter import ModelAdapter
            >>> from interp_widgets.tasks import task_for
            >>> lm_adapter = ModelAdapter(lm, lm_tokenizer)
            >>> ids, probs = task_for(lm_adapter).generate(lm_adapter.encode("The room was").input_ids, max_new_tokens=3)
            >>> ids.shape, bool(((0 < probs) & (probs <= 1)).all())
            ((3,), True)
        """
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        limit, source = self.adapter.context_limit
        if len(input_ids) + int(max_new_tokens) > limit:
            raise ValueError(
                f"the prompt ({len(input_ids)} tokens) plus max_new_tokens ({max_new_tokens}) is longer than the "
                f"model's context of {limit} tokens ({source}); shorten the prompt or ask for at most "
                f"{max(0, limit - len(input_ids))} new tokens."
            )
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        eos = self.adapter.tokenizer.eos_token_id
        device = self.adapter.device
        ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
        new_ids, probs = [], []
        # transformers 5 renamed past_key_values to cache; pass whichever this model's forward takes
        cache_arg = (
            "cache" if "cache" in inspect.signature(self.adapter.model.forward).parameters else "past_key_values"
        )
        past = None
        with evaluation(self.adapter.model), torch.inference_mode():
            step_input = ids
            for _ in range(int(max_new_tokens)):
                seen = ids.shape[1] + len(new_ids)
                mask = torch.ones((1, seen), dtype=torch.long, device=device)
                last = torch.tensor([[step_input.shape[1] - 1]])
                with self.adapter.logits_at(last, tuple(step_input.shape)):  # logits of the last position only
                    out = self.adapter.model(
                        input_ids=step_input, attention_mask=mask, use_cache=True, **{cache_arg: past}
                    )
                self.adapter.count_forward(1, 1)
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
                step_input = torch.tensor([[token]], dtype=torch.long, device=device)
        return np.asarray(new_ids, dtype=np.int64), np.asarray(probs, dtype=np.float64)
