"""The one greedy chat-LM wrapper of the concepts package: :class:`ChatLM` renders a conversation with the model's chat
template and answers greedily. :class:`~interp_widgets.concepts.LMScorer` (label scores),
:class:`~interp_widgets.concepts.LMLabeler` (labels) and :func:`~interp_widgets.concepts.consim` ask their LLM
through it; its :meth:`ChatLM.generate` is Interpreto's ``LLMInterface.generate``.
"""

from __future__ import annotations

import inspect

from interp_widgets.validation import check_int


class ChatLM:
    """A local chat LM (the embedded SmolLM2-135M-Instruct by default, offline) that answers greedily.

    A prompt is a list of messages, each a ``{"role", "content"}`` dict or a ``(role, text)`` pair whose role is a
    string or an enum whose ``value`` is one (Interpreto's ``Role``). A last ``assistant`` message begins the reply
    (it is written after the chat template's generation prompt, and the model continues it). A tokenizer without a
    chat template gets the contents joined by blank lines, then a new line and the reply's beginning.

    :meth:`generate` is Interpreto's ``LLMInterface.generate(prompt) -> str``, so one instance serves Interpreto's
    ``ConSim`` as well as ours.

    Args:
        model, tokenizer: a causal LM with ``generate()`` and its tokenizer; None loads
            ``interp_widgets.demo.load_lm()``.
        max_new_tokens: the longest reply.

    Example:
        >>> chat = ChatLM(chat_lm, chat_tokenizer, max_new_tokens=3)  # a tiny untrained chat model: noise
        >>> chat.render([("system", "Be brief."), ("user", "Hi!"), ("assistant", "Sample_0:")])[-42:]
        '<|im_end|>\\n<|im_start|>assistant\\nSample_0:'
        >>> isinstance(chat.generate([("user", "Hi!")]), str)
        True
    """

    def __init__(self, model=None, tokenizer=None, *, max_new_tokens: int = 12, who: str = "ChatLM"):
        if model is None:
            from interp_widgets.demo.lm import load_lm  # a declared exception to the layers (pyproject.toml)

            model, tokenizer = load_lm(progress=False)
        if not hasattr(model, "generate") or tokenizer is None:
            raise TypeError(
                f"{who} needs a causal LM with generate() and its tokenizer, got {type(model).__name__}; "
                f"e.g. {who}(*interp_widgets.demo.load_lm())"
            )
        self.model, self.tokenizer = model, tokenizer
        self._prefix = None  # (key-value cache, the token ids it holds, the parameters' versions): see complete()
        # transformers 5 names the cache argument `cache` (`past_key_values` is deprecated); 4.x knows only the latter
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        from interp_widgets._model_names import model_name_of

        self.name = f"LM ({model_name_of(model) or type(model).__name__})"

    @staticmethod
    def messages(prompt) -> list[dict]:
        """The prompt as ``{"role", "content"}`` dicts (roles as strings).

        Example:
            >>> ChatLM.messages([("user", "Hi!")])
            [{'role': 'user', 'content': 'Hi!'}]
        """
        out = []
        for message in prompt:
            role, content = (message["role"], message["content"]) if isinstance(message, dict) else message
            role = getattr(role, "value", role)
            if role not in ("system", "user", "assistant") or not isinstance(content, str):
                raise ValueError(
                    f"a message is (role, text) with role 'system', 'user' or 'assistant' and text a string; "
                    f"got ({role!r}, {type(content).__name__})"
                )
            out.append({"role": role, "content": content})
        return out

    def render(self, prompt) -> str:
        """The text the model continues: the chat template's rendering, a last assistant message begun."""
        messages = self.messages(prompt)
        begun = messages.pop()["content"] if messages and messages[-1]["role"] == "assistant" else ""
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + begun
        return "\n\n".join(m["content"] for m in messages) + "\n" + begun

    def complete(self, prompt, *, scores: bool = False, stop=None):
        """Greedy generation: the new token ids, and each step's logits when ``scores`` (else None).

        The reply ends at an end-of-sequence token, after ``max_new_tokens``, or when ``stop(new_ids)`` (a callable
        given the ids so far) returns true. The key-value cache of the last call is kept: a prompt that begins with
        the same tokens as the last one (the system prompt and few-shot examples that a scorer or labeller repeats for
        every concept) runs only the tokens after them. The cache is dropped when any of the model's parameters has
        changed in place since (an optimizer step).

        Example:
            >>> chat = ChatLM(chat_lm, chat_tokenizer, max_new_tokens=4)
            >>> new, logits = chat.complete([("user", "Hi!")], scores=True)
            >>> len(new) == len(logits) <= 4, chat.complete([("user", "Hi!")], stop=lambda ids: True)[0] == new[:1]
            (True, True)
        """
        import torch

        tok = self.tokenizer
        device = self.model.get_input_embeddings().weight.device
        ids = tok(self.render(prompt), add_special_tokens=not tok.chat_template)["input_ids"]
        ends = self.model.generation_config.eos_token_id if getattr(self.model, "generation_config", None) else None
        ends = set(ends if isinstance(ends, (list, tuple)) else [] if ends is None else [ends])
        ends |= {tok.eos_token_id} - {None}
        versions = tuple(p._version for p in self.model.parameters())
        cache, cached_ids = self._prefix[:2] if self._prefix and self._prefix[2] == versions else (None, [])
        common = 0
        for a, b in zip(ids, cached_ids):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)  # at least one token runs, for the next token's logits
        if cache is None or common == 0:
            from transformers import DynamicCache

            cache, common = DynamicCache(), 0
        elif common < len(cached_ids):
            cache.crop(common - len(cached_ids))  # a negative count removes that many tokens (transformers 4 and 5)
        self._prefix = None  # a failure below leaves no half-extended cache behind
        new, steps = [], []
        feed = ids[common:]
        with torch.no_grad():
            while len(new) < self.max_new_tokens:
                inputs = {"input_ids": torch.tensor([feed], device=device), self._cache_arg: cache, "use_cache": True}
                logits = self.model(**inputs).logits[:, -1]
                token = int(logits.argmax(-1))
                new.append(token)
                if scores:
                    steps.append(logits.float())
                if token in ends or (stop is not None and stop(new)):
                    break
                feed = [token]
        self._prefix = (cache, ids + new[:-1], versions)  # the cache holds every token but the last one
        return new, (tuple(steps) if scores else None)

    def generate(self, prompt) -> str:
        """The reply's text (after what a last assistant message began), special tokens removed."""
        new, _ = self.complete(prompt)
        return self.tokenizer.decode(new, skip_special_tokens=True)

    __call__ = generate
