"""Encoder–decoder (sequence-to-sequence) language models: T5, BART, mBART, Marian, M2M100.

The explained sequence is the source tokens, then the decoder's start token and the target tokens, on one axis
(``source_length`` source tokens first); the adapter runs such a row through both stacks when given
``source_length``.

Example:
    >>> from interp_widgets.adapter import ModelAdapter
    >>> from interp_widgets.tasks import task_for
    >>> problem = task_for(ModelAdapter(seq2seq, seq2seq_tokenizer)).explain("the cat sat", Explain(max_new_tokens=2))[0]
    >>> problem.source_length, problem.n_targets
    (7, 2)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from interp_widgets.adapter import UnsupportedModelError
from interp_widgets.layers import evaluation, is_encoder_decoder
from interp_widgets.targets import Contrast, Targets
from interp_widgets.tasks.base import Explain, ExplainedInput, Task
from interp_widgets.tasks.foils import resolve_lm_foils
from interp_widgets.text_units import Encoding, encode
from interp_widgets.validation import check_int

__all__ = ["Seq2SeqLMTask"]


class Seq2SeqLMTask(Task):
    """An encoder–decoder LM: the input is the source; every token of its generated or forced (``continuation``)
    target is a target. A target text is tokenized as a target (``tokenizer(text_target=...)``, so with the
    end-of-sequence token it appends, as Hugging Face labels).

    Recognised before the masked LMs (``priority``): ``BartForConditionalGeneration`` and
    ``MBartForConditionalGeneration`` are also in transformers' masked-LM mapping.

    Example:
        >>> from interp_widgets.adapter import ModelAdapter
        >>> from interp_widgets.tasks import task_for
        >>> task = task_for(ModelAdapter(seq2seq, seq2seq_tokenizer))
        >>> task.name, task.joined_axes, task.pad_safe
        ('seq2seq-lm', True, False)
    """

    name = "seq2seq-lm"
    priority = 20
    default_score = "log_probability"
    joined_axes = True

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return is_encoder_decoder(model) and cls.model_class_in(model, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES")

    def check(self) -> None:
        _check_shared_embeddings(self.adapter.model)

    @property
    def pad_safe(self) -> bool:
        return False

    def explain_inputs(self, items, encodings, options: Explain) -> list[ExplainedInput]:
        if options.target is not None or options.mask_position is not None:
            option = "target" if options.target is not None else "mask_position"
            raise ValueError(
                f"{option}= applies to classifiers and masked LMs; this model is an encoder–decoder (seq2seq-lm), "
                "which explains its target sequence: pass continuation='target text' (forced) or nothing (generated)."
            )
        rest = (options.continuation, options.max_new_tokens, options.do_sample, options.seed)
        return [self._seq2seq_input(enc, *rest) for enc in encodings]

    def foil_logits(self, problems: list[ExplainedInput]) -> list[torch.Tensor]:
        return self._split_logits(
            [p.encoding.input_ids for p in problems],
            [p.target_positions for p in problems],
            [p.source_length for p in problems],
        )

    def foils(self, problem: ExplainedInput, foil, logits: torch.Tensor, alignment) -> Contrast:
        if isinstance(foil, str):  # tokenized as a target, like the forced continuation
            foil = self._target_ids(foil, logits.shape[-1], what="contrast")
        start = np.asarray([self.decoder_start_token_id], dtype=np.int64)
        return resolve_lm_foils(self.adapter.tokenizer, logits.shape[-1], foil, start, problem.n_targets, alignment)

    @torch.inference_mode()
    def _split_logits(self, ids, positions, splits) -> list[torch.Tensor]:
        """Logits ``(len(positions[i]), vocab)`` of source + decoder ids split at ``splits[i]`` (batched)."""
        adapter = self.adapter
        out: list[torch.Tensor | None] = [None] * len(ids)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, x in enumerate(ids):
            groups.setdefault((len(x), int(splits[i])), []).append(i)
        with evaluation(adapter.model):
            for (length, split), members in groups.items():
                for start in range(0, len(members), adapter.rows_per_batch(length)):
                    group = members[start : start + adapter.rows_per_batch(length)]
                    tensor = torch.as_tensor(np.stack([ids[i] for i in group]), dtype=torch.long)
                    index = torch.as_tensor(np.stack([np.asarray(positions[i], dtype=np.int64) for i in group]))
                    logits = adapter.forward_ids(tensor, positions=index, source_length=split)
                    for row, i in enumerate(group):
                        out[i] = logits[row]
        return out  # type: ignore[return-value]

    def attention_maps(self, out) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per decoder layer ``(rows, heads, S + D, S + D)`` on the joined source + decoder axis: a decoder row holds
        its cross-attention over the source, then its self-attention over the decoder tokens (each part sums to 1);
        a source row holds the same-numbered encoder layer's self-attention (zero when the encoder is shallower).
        The cross-attentions ``(rows, heads, D, S)`` per decoder layer come second."""
        decoder, _ = super().attention_maps(out)
        encoder = list(getattr(out, "encoder_attentions", None) or [])
        cross = list(getattr(out, "cross_attentions", None) or [])
        if not cross or any(c is None for c in cross) or any(d is None for d in decoder):
            raise UnsupportedModelError(
                f"{type(self.adapter.model).__name__} returned no cross-attention weights even "
                "with eager attention; load it with attn_implementation='eager'."
            )
        joined = []
        for layer, (self_attn, cross_attn) in enumerate(zip(decoder, cross)):
            rows, heads, n_dec, n_src = cross_attn.shape
            top = torch.zeros((rows, heads, n_src, n_src + n_dec), dtype=cross_attn.dtype, device=cross_attn.device)
            if layer < len(encoder) and encoder[layer] is not None:
                top = torch.cat([encoder[layer].detach().to(cross_attn.dtype), top[..., n_src:]], dim=-1)
            joined.append(torch.cat([top, torch.cat([cross_attn, self_attn], dim=-1)], dim=-2))
        return joined, cross

    def activation_pass(self, module: nn.Module):
        """An encoder layer runs the encoder alone on each text; a decoder layer (or the LM head) reads each text as
        a target (teacher-forced, after the decoder's start token), with the same text as the source, and the row of
        token ``j`` is decoder position ``j + 1``."""
        model = self.adapter.model
        decoder = not any(module is m for m in model.get_encoder().modules())
        start = self.decoder_start_token_id if decoder else None

        def run(ids: torch.Tensor, mask: torch.Tensor) -> None:
            if not decoder:
                model.get_encoder()(input_ids=ids, attention_mask=mask)
                return
            first = torch.full((len(ids), 1), start, dtype=ids.dtype, device=ids.device)
            model(
                input_ids=ids,
                attention_mask=mask,
                decoder_input_ids=torch.cat([first, ids], dim=1),
                decoder_attention_mask=torch.cat([torch.ones_like(first), mask], dim=1),
                use_cache=False,
            )

        return run, int(decoder)

    def _target_ids(self, continuation, vocab: int, *, what: str = "continuation") -> np.ndarray:
        """The token ids of an encoder–decoder target: a text tokenized as a target (with the end-of-sequence token the
        tokenizer appends to labels), or token ids, checked against the vocabulary."""
        tokenizer = self.adapter.tokenizer
        if isinstance(continuation, str):
            if not continuation.strip():
                raise ValueError(
                    f"{what} is empty; pass the target text the model should be explained for (such as "
                    "'Das Zimmer war sauber.') or its token ids."
                )
            try:
                ids = tokenizer(text_target=continuation)["input_ids"]
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"the tokenizer cannot build {what} {continuation!r} as a target ({err}); pass the "
                    "target's token ids instead."
                ) from None
            if all(i in tokenizer.all_special_ids for i in ids):
                raise ValueError(
                    f"{what} {continuation!r} tokenizes as a target to special tokens only ({ids}); pass a "
                    "target text with content, or its token ids."
                )
            return np.asarray(ids, dtype=np.int64)
        if isinstance(continuation, (bytes, dict)) or not hasattr(continuation, "__iter__"):
            raise TypeError(
                f"{what} must be a target text or a sequence of token ids; got {type(continuation).__name__}"
            )
        items = continuation.tolist() if hasattr(continuation, "tolist") else list(continuation)
        if items and isinstance(items[0], list):
            raise ValueError(
                f"{what} is nested ({len(items)} sequences); an encoder–decoder target is one sequence of "
                "token ids (for several sources, call once per target)."
            )
        bad = [v for v in items if not isinstance(v, (int, np.integer)) or isinstance(v, bool)]
        if bad:
            raise TypeError(f"{what} has {bad[0]!r}, not a token id; pass the target as text or a list of ints.")
        if not items:
            raise ValueError(f"{what} has no tokens; pass the target text or its token ids.")
        outside = [int(v) for v in items if not 0 <= int(v) < vocab]
        if outside:
            raise ValueError(f"{what} has token id {outside[0]} outside the vocabulary of {vocab}.")
        return np.asarray(items, dtype=np.int64)

    def _seq2seq_input(self, enc: Encoding, continuation, max_new_tokens, do_sample, seed) -> ExplainedInput:
        """Source ``enc`` and its generated or forced target on one axis: source tokens, decoder start, target."""
        tokenizer = self.adapter.tokenizer
        source_ids = enc.input_ids
        vocab = (
            int(self.adapter.model.get_output_embeddings().weight.shape[0])
            if self.adapter.model.get_output_embeddings() is not None
            else int(self.adapter.embedding.weight.shape[0])
        )
        start = self.decoder_start_token_id
        if continuation is None:
            new_ids, probs = self.generate(source_ids, max_new_tokens=max_new_tokens, do_sample=do_sample, seed=seed)
        else:
            new_ids = self._target_ids(continuation, vocab)
            probs = None
        self.adapter.check_length(len(new_ids) + 1, "the target plus the decoder's start token")
        n_source, n_new = len(source_ids), len(new_ids)
        ids = np.concatenate([source_ids, [start], new_ids]).astype(np.int64)
        positions = np.arange(n_source, n_source + n_new)  # decoder positions 0..n-1 predict the target tokens
        if probs is None:
            logits = self._split_logits([ids], [positions], [n_source])[0]
            probs = torch.softmax(logits.float(), dim=-1)[torch.arange(n_new), torch.as_tensor(new_ids)]
            probs = probs.cpu().numpy().astype(np.float64)
        # the target side as text: its decoded pieces; words as the tokenizer splits the decoded target text
        specials = set(tokenizer.all_special_ids)
        text = enc.text + "\n"
        base = len(text)
        content = [int(i) for i in new_ids if int(i) not in specials]
        target_text = tokenizer.decode(content) if content else ""
        char_word: dict[int, int] = {}
        if target_text.strip():
            words_of = encode(tokenizer, target_text, add_special_tokens=False)
            for (a, b), w in zip(words_of.offsets, words_of.word_ids):
                for c in range(int(a), int(b)):
                    char_word.setdefault(c, int(w))
        tokens, offsets, word_ids = list(enc.tokens), [tuple(o) for o in enc.offsets], list(enc.word_ids)
        tokens.append(tokenizer.convert_ids_to_tokens(start))
        offsets.append((base, base))
        word_ids.append(-1)
        next_word = int(enc.word_ids.max(initial=-1)) + 1
        previous, kept, words, new_words, last_word = "", [], list(enc.words), [], None
        for token_id in new_ids:
            token_id = int(token_id)
            if token_id in specials:
                tokens.append(tokenizer.convert_ids_to_tokens(token_id))
                offsets.append((base + len(previous), base + len(previous)))
                word_ids.append(-1)
                continue
            kept.append(token_id)
            piece = tokenizer.decode(kept)
            chunk = piece[len(previous) :]
            tokens.append(chunk)
            offsets.append((base + len(previous), base + max(len(previous), len(piece))))
            first = len(previous) + (len(chunk) - len(chunk.lstrip()))
            word = char_word.get(first, last_word if new_words else None)
            if not new_words or word != last_word:
                new_words.append(chunk)
                next_word += 1
            else:
                new_words[-1] += chunk
            last_word = word
            word_ids.append(next_word - 1)
            previous = piece
        words += [w.strip() for w in new_words]
        special = np.concatenate([enc.special_mask, [True], np.isin(new_ids, list(specials))])
        next_sentence = int(enc.sentence_ids.max(initial=-1)) + 1
        sentence_ids = np.concatenate([enc.sentence_ids, np.where(special[n_source:], -1, next_sentence)])
        encoding = Encoding(
            text=text + target_text,
            input_ids=ids,
            tokens=tokens,
            offsets=np.asarray(offsets, dtype=np.int64),
            special_mask=special,
            word_ids=np.asarray(word_ids, dtype=np.int64),
            sentence_ids=sentence_ids,
            words=words,
            sentences=enc.sentences + [target_text.strip()],
        )
        at = positions + 1  # where each target token sits on the joined axis
        return ExplainedInput(
            encoding=encoding,
            targets=Targets([f"{tokens[p]!r}@{p}" for p in at], ids=new_ids, probs=probs),
            target_positions=positions,
            visible=at,
            generated_mask=np.arange(len(ids)) > n_source,
            source_length=n_source,
        )

    def generate(
        self,
        source_ids,
        *,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy or sampled target of an encoder–decoder for the source ``source_ids``: the encoder runs once, the
        decoder once per new token from its start token (``decoder_start_token_id``)."""
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        generator = torch.Generator(device="cpu").manual_seed(int(seed))
        eos = getattr(self.adapter.model.config, "eos_token_id", None)
        eos = self.adapter.tokenizer.eos_token_id if eos is None else eos
        device = self.adapter.device
        source = torch.tensor([list(source_ids)], dtype=torch.long, device=device)
        decoder = [self.decoder_start_token_id]
        new_ids, probs = [], []
        with evaluation(self.adapter.model), torch.inference_mode():
            encoded = self.adapter.model.get_encoder()(input_ids=source, attention_mask=torch.ones_like(source))
            self.adapter.count_forward(1, 1)
            for _ in range(int(max_new_tokens)):
                ids = torch.tensor([decoder], dtype=torch.long, device=device)
                with self.adapter.logits_at(torch.tensor([[len(decoder) - 1]]), (1, len(decoder))):
                    out = self.adapter.model(
                        encoder_outputs=encoded,
                        attention_mask=torch.ones_like(source),
                        decoder_input_ids=ids,
                        use_cache=False,
                    )
                self.adapter.count_forward(1, 1)
                logits = out.logits[0, -1].float().cpu()
                p = torch.softmax(logits, dim=-1)
                if do_sample:
                    scaled = torch.softmax(logits / max(float(temperature), 1e-6), dim=-1)
                    token = int(torch.multinomial(scaled, 1, generator=generator))
                else:
                    token = int(p.argmax())
                new_ids.append(token)
                probs.append(float(p[token]))
                decoder.append(token)
                if stop_at_eos and eos is not None and token == eos:
                    break
        return np.asarray(new_ids, dtype=np.int64), np.asarray(probs, dtype=np.float64)

    @property
    def decoder_start_token_id(self) -> int:
        """The token an encoder–decoder's decoder starts from (``config.decoder_start_token_id``).

        Example:
            >>> from interp_widgets.adapter import ModelAdapter
            >>> from interp_widgets.tasks import task_for
            >>> task_for(ModelAdapter(seq2seq, seq2seq_tokenizer)).decoder_start_token_id
            0
        """
        config = self.adapter.model.config
        start = getattr(config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(getattr(self.adapter.model, "generation_config", None), "decoder_start_token_id", None)
        if start is None:
            raise UnsupportedModelError(
                f"{type(self.adapter.model).__name__} has no config.decoder_start_token_id; set it on the "
                "config before explaining (the token the decoder starts from)"
            )
        return int(start)


def _check_shared_embeddings(model: nn.Module) -> None:
    """Refuse an encoder–decoder whose encoder and decoder embed tokens with different modules: the adapter runs
    both sides from one embedding space (the shared embedding, as in T5, BART, mBART, Marian and M2M100)."""
    shared = model.get_input_embeddings()
    for stack in (model.get_encoder(), model.get_decoder()):
        own = getattr(stack, "embed_tokens", None)
        if own is None or own is shared:
            continue
        same = getattr(own, "weight", None) is getattr(shared, "weight", None) and getattr(
            own, "embed_scale", 1.0
        ) == getattr(shared, "embed_scale", 1.0)
        if not same:
            raise UnsupportedModelError(
                f"{type(model).__name__} embeds source and target tokens with different modules (its config has "
                "share_encoder_decoder_embeddings=False or untied embeddings); interp_widgets explains encoder–decoder "
                "models whose encoder and decoder share one token embedding."
            )
