"""The one greedy chat-LM wrapper of the concepts package: :class:`ChatLM` renders a conversation with the model's chat
template and answers greedily. :class:`~interp_widgets.concepts.LMScorer` (label scores),
:class:`~interp_widgets.concepts.LMLabeler` (labels) and :func:`~interp_widgets.concepts.consim` ask their LLM
through it; its :meth:`ChatLM.generate` is Interpreto's ``LLMInterface.generate``.
"""

from __future__ import annotations

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

    def complete(self, prompt, *, scores: bool = False):
        """Greedy generation: the new token ids, and each step's logits when ``scores`` (else None)."""
        import torch

        tok = self.tokenizer
        device = self.model.get_input_embeddings().weight.device
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        batch = tok(self.render(prompt), return_tensors="pt", add_special_tokens=not tok.chat_template)
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            out = self.model.generate(
                **batch,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
                output_scores=scores,
                return_dict_in_generate=True,
            )
        return out.sequences[0, batch["input_ids"].shape[1] :].tolist(), (out.scores if scores else None)

    def generate(self, prompt) -> str:
        """The reply's text (after what a last assistant message began), special tokens removed."""
        new, _ = self.complete(prompt)
        return self.tokenizer.decode(new, skip_special_tokens=True)

    __call__ = generate
