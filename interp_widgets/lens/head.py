"""The decoding path of a lens: the model's own final norm, output head and logit post-processing.

A lens reads the residual stream at some point of the model and decodes it the way the model decodes its last block's
output: through the final norm (``model.norm``, ``transformer.ln_f``, ``gpt_neox.final_layer_norm`` …, found as the
norm child of the base model that comes after its blocks), then every module of the model that is not the base model,
in order (``lm_head`` for causal LMs; the whole MLM head ``cls`` / ``lm_head`` / ``head`` + ``decoder`` for masked
LMs), then the model's logit post-processing: Gemma 2's final soft-capping ``cap * tanh(logits / cap)``, Cohere's
``logit_scale`` and Granite's ``logits_scaling``.

``tests/lens/test_lens.py`` checks on a tiny model of every family that decoding the last block's output this way gives
the model's own logits to 1e-5.

Example:
    >>> head = LensHead(lm)
    >>> head.describe()
    'transformer.ln_f -> lm_head'
"""

from __future__ import annotations

import hashlib
import re

import torch
from torch import nn

from interp_widgets import layers as _layers
from interp_widgets.layers import UnsupportedModelError
from interp_widgets.tasks import task_class

__all__ = ["LensHead", "model_name", "unembedding_hash"]

_NORM_NAME = re.compile(
    r"(^|_)(norm|ln_f|ln_final|layer_norm|layernorm|final_layer_norm|final_layernorm|norm_f|"
    r"final_norm)$",
    re.IGNORECASE,
)


def model_name(model: nn.Module) -> str:
    """The name a lens records for ``model``: its ``config.name_or_path``, else its class name.

    Example:
        >>> model_name(lm)
        'GPT2LMHeadModel'
    """
    config = getattr(model, "config", None)
    name = getattr(config, "name_or_path", "") or getattr(config, "_name_or_path", "") or ""
    return str(name) or type(model).__name__


def unembedding_hash(model: nn.Module) -> str:
    """A short SHA-256 of the model's unembedding matrix, which tells two models with equal shapes apart.

    Example:
        >>> len(unembedding_hash(lm))
        16
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise UnsupportedModelError(_no_unembedding(model))
    data = weight.detach().float().cpu().contiguous().numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()[:16]


def _no_unembedding(model: nn.Module) -> str:
    return (
        f"{type(model).__name__} has no unembedding (output embedding to the vocabulary), so there is nothing to "
        "decode its residual stream with: a lens needs a causal LM (AutoModelForCausalLM) or a masked LM "
        "(AutoModelForMaskedLM), not a classifier or a bare encoder. Load the same checkpoint with one of those "
        "classes."
    )


class LensHead(nn.Module):
    """The model's own decoding path for a residual-stream state: final norm, output head, logit post-processing.

    Refuses (``UnsupportedModelError``) a model without an unembedding, such as a sequence classifier, and
    encoder–decoder models. The modules are the model's own (not copies); the head never changes them.

    Example:
        >>> head = LensHead(lm)
        >>> with torch.no_grad():
        ...     head(torch.zeros(1, 3, 32)).shape
        torch.Size([1, 3, 600])
        >>> LensHead(model)
        Traceback (most recent call last):
        ...
        interp_widgets.layers.UnsupportedModelError: BertForSequenceClassification has no unembedding (output embedding to the vocabulary), so there is nothing to decode its residual stream with: a lens needs a causal LM (AutoModelForCausalLM) or a masked LM (AutoModelForMaskedLM), not a classifier or a bare encoder. Load the same checkpoint with one of those classes.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        try:
            joined_axes = task_class(model).joined_axes
        except UnsupportedModelError:  # a model of no task (a bare stack): the unembedding check below speaks
            joined_axes = False
        if joined_axes:
            raise UnsupportedModelError(
                f"{type(model).__name__} is an encoder–decoder model; the lens supports "
                "decoder-only causal LMs and masked LMs"
            )
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if not isinstance(getattr(out, "weight", None), torch.Tensor):
            raise UnsupportedModelError(_no_unembedding(model))
        base = getattr(model, "base_model", None)
        if base is None or base is model:
            raise UnsupportedModelError(
                f"{type(model).__name__} has no separate base model and head; "
                "the lens needs a *ForCausalLM or *ForMaskedLM model"
            )
        _, block_list = _layers.blocks(model)
        children = list(base.named_children())
        after = False
        norms: list[tuple[str, nn.Module]] = []
        for name, child in children:
            if (
                child is block_list
                or any(child is m for m in block_list.modules())
                or any(m is block_list for m in child.modules())
            ):
                after = True
                continue
            if after and _NORM_NAME.search(name) and not isinstance(child, (nn.ModuleList, nn.Embedding)):
                norms.append((name, child))
        base_name = next(name for name, module in model.named_children() if module is base)
        self._paths = [f"{base_name}.{name}" for name, _ in norms]
        self.norms = nn.ModuleList([module for _, module in norms])
        heads = [(name, module) for name, module in model.named_children() if module is not base]
        if not any(out is m for _, module in heads for m in module.modules()):
            raise UnsupportedModelError(
                f"cannot find the output head of {type(model).__name__} outside its base "
                "model; the lens supports Hugging Face *ForCausalLM and *ForMaskedLM models"
            )
        self._paths += [name for name, _ in heads]
        self.heads = nn.ModuleList([module for _, module in heads])
        config = model.config
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.logit_scale = getattr(config, "logit_scale", None) if config.model_type.startswith("cohere") else None
        self.logits_scaling = getattr(config, "logits_scaling", None)
        self.vocab_size = int(out.weight.shape[0])
        self.d_model = int(out.weight.shape[1])

    def describe(self) -> str:
        """The decoding path as module paths joined by arrows, with the post-processing.

        Example:
            >>> LensHead(lm).describe()
            'transformer.ln_f -> lm_head'
        """
        steps = list(self._paths)
        if self.logit_scale:
            steps.append(f"* {self.logit_scale}")
        if self.logits_scaling:
            steps.append(f"/ {self.logits_scaling}")
        if self.softcap:
            steps.append(f"softcap {self.softcap}")
        return " -> ".join(steps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of residual-stream states ``(..., d)``.

        Example:
            >>> LensHead(lm)(torch.zeros(2, 32)).shape
            torch.Size([2, 600])
        """
        x = hidden
        for module in self.norms:
            x = module(x)
        for module in self.heads:
            x = module(x)
        x = getattr(x, "logits", x)
        if self.logit_scale:
            x = x * self.logit_scale
        if self.logits_scaling:
            x = x / self.logits_scaling
        if self.softcap:
            x = torch.tanh(x / self.softcap) * self.softcap
        return x
