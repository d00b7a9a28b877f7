"""Layer names, layer resolution and hooks: what a model needs, without a tokenizer.

Every output of the package (activation stores, concept models, the training monitor, attribution results) records
one **canonical layer name**, the ``name`` of the :class:`LayerPoint` that :func:`resolve_layer` returns:

=============================  =================================================================================
canonical name                 the point in block ``i``
=============================  =================================================================================
``layer:i``                    the block's output (the residual stream after the block, before any final norm)
``layer:i.resid_pre``          the block's input (the residual stream before the block)
``layer:i.attn_out``           what the attention sublayer adds to the residual stream
``layer:i.resid_mid``          the residual stream after attention and before the MLP
``layer:i.mlp_out``            what the MLP sublayer adds to the residual stream
``layer:i.mlp_in``             what the MLP module receives: its input, after the block's norm on pre-norm blocks
                               (circuit-tracer's ``mlp.hook_in``, sparsify's ``layers.i.mlp`` input); a transcoder
                               reads it
``encoder.layer:i``, …         the same points in the encoder or the decoder of an encoder–decoder model
a module path                  any other module, by its path in ``model.named_modules()``
=============================  =================================================================================

:func:`resolve_layer` also accepts an int block index (``-1`` is the last block), a block's module path
(``"bert.encoder.layer.3"`` resolves to ``layer:3``), a module object, and TransformerLens / SAELens hook names
(:func:`from_hook_name`):

=============================  ==========================
TransformerLens / SAELens      canonical name
=============================  ==========================
``blocks.i.hook_resid_pre``    ``layer:i.resid_pre``
``blocks.i.hook_resid_mid``    ``layer:i.resid_mid``
``blocks.i.hook_resid_post``   ``layer:i``
``blocks.i.hook_attn_out``     ``layer:i.attn_out``
``blocks.i.hook_mlp_out``      ``layer:i.mlp_out``
=============================  ==========================

The last block's ``hook_resid_post`` is before the final norm, and so is ``layer:<last>``; Hugging Face's last
``hidden_states`` entry is after it. ``tests/saelens`` checks every row of this table against transformer-lens itself
(a tiny GPT-2 and a tiny Llama converted by its own loader), with and without the processing options of
``HookedTransformer.from_pretrained``: ``fold_ln``, ``center_unembed``, ``fold_value_biases`` and
``refactor_factored_attn_matrices`` leave these points unchanged, and ``center_writing_weights`` subtracts each row's
mean on LayerNorm models (see :func:`interp_widgets.concepts.transformer_lens_processing`). Attention-head
(``attn.hook_z``) and MLP-neuron (``mlp.hook_post``) hooks are not mapped.

Sub-points are found from the block's own modules:

- post-norm encoders (BERT, RoBERTa, DeBERTa-v2, MiniLM…) read ``attention.output.dense``, ``attention`` and
  ``output.dense``;
- pre-norm blocks (GPT-2, Llama, Qwen 2/3, Mistral, Phi-3, ModernBERT…) read the attention and MLP modules and the
  input of the second norm;
- "sandwich" blocks (Gemma 2/3, OLMo 2), which normalise each sublayer's output before adding it, read the outputs
  of ``post_attention_layernorm`` and ``post_feedforward_layernorm`` and the input of the MLP's pre-norm;
- parallel-residual blocks (GPT-NeoX / Pythia, GPT-J, Phi-1/2, CodeGen: ``x + attn(x) + mlp(x)``) have no
  ``resid_mid``; asking for it raises :class:`UnsupportedModelError` (see :func:`parallel_residual`).

``tests/test_model_families.py`` checks the residual arithmetic of each layout on a tiny model of every family.

Attention heads are named ``layer:i.head:h`` (:func:`resolve_head`): head ``h``'s slice of the input of the block's
attention output projection (``o_proj``, ``c_proj``, ``attention.output.dense``…), that is its contribution before the
projection (TransformerLens's ``hook_z``). Query heads are counted, so grouped-query models (Llama, SmolLM2) have
``num_attention_heads`` of them.

Hooks are context managers (:func:`hooks`, :func:`capture`, :func:`evaluation`) that remove themselves on exit,
on errors and on Ctrl-C, and restore every module's train/eval mode.

Example:
    >>> [resolve_layer(model, spec).name for spec in (1, "bert.encoder.layer.0", "blocks.1.hook_attn_out")]
    ['layer:1', 'layer:0', 'layer:1.attn_out']
    >>> resolve_layer(model, "layer:1.attn_out").path
    'bert.encoder.layer.1.attention.output.dense'
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets.validation import check_choice

SUB_POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "mlp_in")
STACKS = ("encoder", "decoder")
_BLOCK_NAME = re.compile(
    r"(?:(encoder|decoder)\.)?layer:(-?\d+)(?:\.(resid_pre|resid_post|attn_out|resid_mid|mlp_out|mlp_in))?"
)
_HEAD_NAME = re.compile(r"((?:(?:encoder|decoder)\.)?layer:-?\d+)\.head:(-?\d+)")
_HOOK_NAME = re.compile(r"blocks\.(\d+)\.hook_(resid_pre|resid_mid|resid_post|attn_out|mlp_out)")

# Attribute paths inside one block, first match wins. Post-norm blocks (BERT family) apply LayerNorm after each
# residual sum, so the sublayer outputs are the dense projections before it and resid_mid is the attention output.
_POST_NORM = {
    "attn_out": ("attention.output.dense",),
    "mlp_out": ("output.dense",),
    "resid_mid": ("attention",),
    "mlp_in": ("intermediate",),
}
_PRE_NORM = {
    "attn_out": ("self_attn", "attn", "attention", "self_attention", "mixer"),
    "mlp_out": ("mlp", "feed_forward", "ffn", "block_sparse_moe"),
    # the input of the second norm (ModernBERT calls it mlp_norm)
    "resid_mid": ("post_attention_layernorm", "ln_2", "ln_mlp", "norm2", "mlp_norm"),
    # the input of the MLP module itself (after the second norm; parallel blocks have one too)
    "mlp_in": ("mlp", "feed_forward", "ffn", "block_sparse_moe"),
}
# "Sandwich" blocks (Gemma 2/3, OLMo 2) normalise each sublayer's output before adding it to the residual stream, so
# what is added is the output of post_attention_layernorm / post_feedforward_layernorm, and resid_mid is the input of
# the MLP's pre-norm (or of the MLP itself when there is none, as in OLMo 2).
_SANDWICH_MARK = "post_feedforward_layernorm"
_SANDWICH_NORM = {
    "attn_out": ("post_attention_layernorm",),
    "mlp_out": ("post_feedforward_layernorm",),
    "resid_mid": ("pre_feedforward_layernorm", "mlp"),
    "mlp_in": ("mlp",),
}
# Blocks whose attention and MLP both read the block input and add their outputs at once (GPT-NeoX/Pythia with
# use_parallel_residual, GPT-J, Phi-1/2, CodeGen): the residual stream has no point between the two sublayers.
_PARALLEL_TYPES = ("gptj", "phi", "codegen")
# The attention output projection inside one block, first match wins: its input is the heads' outputs side by side.
_OUT_PROJ = (
    "self_attn.o_proj",
    "attn.c_proj",
    "attention.output.dense",
    "attention.dense",
    "self_attn.out_proj",
    "self_attn.dense",
    "attn.o_proj",
    "attn.out_proj",
    "attn.Wo",
    "self_attention.dense",
    "layer.0.SelfAttention.o",
)
# The query / key / value projections inside one block, first match wins: separate modules, or one fused module
# whose output is [q | k | v] side by side (GPT-2's c_attn).
_QKV = {
    "q": ("self_attn.q_proj", "attn.q_proj", "attention.self.query", "self_attention.q_proj"),
    "k": ("self_attn.k_proj", "attn.k_proj", "attention.self.key", "self_attention.k_proj"),
    "v": ("self_attn.v_proj", "attn.v_proj", "attention.self.value", "self_attention.v_proj"),
}
_FUSED_QKV = ("attn.c_attn",)
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads")
_INPUT_SITES = {"resid_pre"}


class UnsupportedModelError(TypeError):
    """Raised for a model whose structure or task interp_widgets cannot handle."""


@dataclass(frozen=True)
class LayerPoint:
    """One place in a model to read or patch: its canonical ``name``, the module ``path`` and the hooked ``module``.

    ``site`` is ``"output"`` (the module's output, a forward hook) or ``"input"`` (its first input, a forward
    pre-hook); ``block`` is the block index for block points, else None.

    Example:
        >>> point = resolve_layer(model, "layer:0.resid_mid")
        >>> point.name, point.path, point.site
        ('layer:0.resid_mid', 'bert.encoder.layer.0.attention', 'output')
    """

    name: str
    path: str
    module: nn.Module
    site: str = "output"
    block: int | None = None


def _config_layers(model: nn.Module, stack: str | None) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    keys = {
        None: ("num_hidden_layers", "n_layer", "num_layers"),
        "encoder": ("encoder_layers", "num_layers"),
        "decoder": ("decoder_layers", "num_decoder_layers", "num_layers"),
    }[stack]
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def is_encoder_decoder(model: nn.Module) -> bool:
    """Whether ``model`` is an encoder–decoder model (T5, BART, Marian…), whose layers are ``encoder.layer:i``.

    Example:
        >>> is_encoder_decoder(model)
        False
    """
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def blocks(model: nn.Module, stack: str | None = None) -> tuple[str, nn.ModuleList]:
    """The module path and list of transformer blocks (``bert.encoder.layer``, ``transformer.h``, ``model.layers``…).

    Encoder–decoder models need ``stack="encoder"`` or ``"decoder"``.

    Example:
        >>> blocks(model)[0]
        'bert.encoder.layer'
    """
    if is_encoder_decoder(model):
        if stack not in STACKS:
            raise ValueError(
                f"{type(model).__name__} is an encoder–decoder model; name the stack: "
                "'encoder.layer:i' or 'decoder.layer:i'"
            )
        root = model.get_encoder() if stack == "encoder" else model.get_decoder()
        prefix = next(name for name, module in model.named_modules() if module is root)
        scope = ((f"{prefix}.{name}" if prefix else name, module) for name, module in root.named_modules())
    elif stack is not None:
        raise ValueError(f"{type(model).__name__} has one stack of blocks; use 'layer:i', not '{stack}.layer:i'")
    else:
        scope = model.named_modules()
    n_layers = _config_layers(model, stack)
    for name, module in scope:  # lazily: the walk stops at the first match (this runs for every resolved point)
        if isinstance(module, nn.ModuleList) and len(module) > 0 and (n_layers is None or len(module) == n_layers):
            return name, module
    raise UnsupportedModelError(
        f"could not find the transformer blocks of {type(model).__name__}; "
        "pass a module path from model.named_modules() instead"
    )


def _stacks(model: nn.Module) -> tuple[str | None, ...]:
    return STACKS if is_encoder_decoder(model) else (None,)


def layer_names(model: nn.Module) -> list[str]:
    """Every canonical block name of ``model`` (``layer:i`` and its sub-points), then every module path.

    Example:
        >>> layer_names(model)[:6]
        ['layer:0', 'layer:0.resid_pre', 'layer:0.attn_out', 'layer:0.resid_mid', 'layer:0.mlp_out', 'layer:0.mlp_in']
    """
    names = []
    for stack in _stacks(model):
        _, found = blocks(model, stack)
        prefix = f"{stack}." if stack else ""
        points = [p for p in SUB_POINTS if not (p == "resid_mid" and parallel_residual(model))]
        for i in range(len(found)):
            names += [f"{prefix}layer:{i}"] + [f"{prefix}layer:{i}.{point}" for point in points]
    return names + [name for name, _ in model.named_modules() if name]


def from_hook_name(hook_name: str) -> str:
    """The canonical name of a TransformerLens / SAELens hook name (``blocks.8.hook_resid_post`` → ``layer:8``).

    Example:
        >>> from_hook_name("blocks.8.hook_resid_post"), from_hook_name("blocks.2.hook_mlp_out")
        ('layer:8', 'layer:2.mlp_out')
    """
    match = _HOOK_NAME.fullmatch(hook_name.strip())
    if match is None:
        raise ValueError(
            f"unsupported hook name {hook_name!r}; interp_widgets maps blocks.<i>.hook_resid_pre, hook_resid_mid, "
            "hook_resid_post, hook_attn_out and hook_mlp_out. Pass a module path for anything else."
        )
    block, point = int(match.group(1)), match.group(2)
    return f"layer:{block}" if point == "resid_post" else f"layer:{block}.{point}"


def to_hook_name(name: str) -> str:
    """The TransformerLens / SAELens hook name of a canonical block name (``layer:8`` → ``blocks.8.hook_resid_post``).

    Example:
        >>> to_hook_name("layer:8"), to_hook_name("layer:3.attn_out")
        ('blocks.8.hook_resid_post', 'blocks.3.hook_attn_out')
    """
    match = _BLOCK_NAME.fullmatch(name.strip())
    if match is None or match.group(1) or int(match.group(2)) < 0:
        raise ValueError(f"{name!r} is not a canonical block name of a decoder or encoder (layer:i or layer:i.<point>)")
    if match.group(3) == "mlp_in":
        raise ValueError(
            f"{name!r} (the MLP module's input, after the norm) has no TransformerLens hook of its own: "
            "blocks.i.hook_mlp_in is the stream before the norm; use layer:i.resid_mid for that"
        )
    return f"blocks.{int(match.group(2))}.hook_{match.group(3) or 'resid_post'}"


def parallel_residual(model: nn.Module) -> bool:
    """Whether the blocks of ``model`` add attention and MLP outputs in parallel (``x + attn(x) + mlp(x)``).

    Such blocks (GPT-NeoX / Pythia with ``use_parallel_residual``, GPT-J, Phi-1/2, CodeGen) have no ``resid_mid``
    point: the block output is ``resid_pre + attn_out + mlp_out``.

    Example:
        >>> parallel_residual(model)  # BERT adds attention, then the MLP
        False
    """
    config = getattr(model, "config", None)
    return (
        bool(getattr(config, "use_parallel_residual", False)) or getattr(config, "model_type", None) in _PARALLEL_TYPES
    )


def _sub_module(
    model: nn.Module, block_path: str, block: nn.Module, point: str, base: str = "layer:i"
) -> tuple[str, nn.Module, str]:
    if point == "resid_pre":
        return block_path, block, "input"
    if point == "resid_mid" and parallel_residual(model):
        raise UnsupportedModelError(
            f"{type(model).__name__} adds its attention and MLP outputs to the residual stream in parallel, so its "
            "blocks have no resid_mid point (block output = resid_pre + attn_out + mlp_out); use "
            f"'{base}.resid_pre', '{base}.attn_out' or '{base}.mlp_out' instead"
        )
    modules = dict(block.named_modules())
    post_norm = "attention.output.LayerNorm" in modules or "attention.output.layer_norm" in modules
    table = _POST_NORM if post_norm else _SANDWICH_NORM if _SANDWICH_MARK in modules else _PRE_NORM
    for candidate in table[point]:
        if candidate in modules:
            site = "input" if point == "mlp_in" or (point == "resid_mid" and not post_norm) else "output"
            return f"{block_path}.{candidate}", modules[candidate], site
    children = [name for name, _ in block.named_children()]
    raise UnsupportedModelError(
        f"cannot find the {point} point in the blocks of {type(model).__name__} (block children: {children}); "
        f"pass a module path such as '{block_path}.{children[0] if children else '...'}' instead"
    )


def _block_point(model: nn.Module, stack: str | None, index: int, point: str | None) -> LayerPoint:
    block_path, found = blocks(model, stack)
    prefix = f"{stack}." if stack else ""
    if not -len(found) <= index < len(found):
        raise ValueError(
            f"layer index {index} is out of range; this model has {len(found)} blocks "
            f"({prefix}layer:0..{prefix}layer:{len(found) - 1})."
        )
    index %= len(found)
    base = f"{prefix}layer:{index}"
    if point in (None, "resid_post"):
        return LayerPoint(base, f"{block_path}.{index}", found[index], "output", index)
    path, module, site = _sub_module(model, f"{block_path}.{index}", found[index], point, base)
    return LayerPoint(f"{base}.{point}", path, module, site, index)


def _unknown(model: nn.Module, layer) -> ValueError:
    modules = [name for name, _ in model.named_modules() if name]
    try:
        shortcuts = [name for name in layer_names(model) if ":" in name and "." not in name.split(":")[1]]
    except UnsupportedModelError:
        shortcuts = []
    close = [n for n in modules if isinstance(layer, str) and layer and layer.split(".")[-1] in n][:8]
    listed = shortcuts[:12] + (["…"] if len(shortcuts) > 12 else [])
    return ValueError(
        f"unknown layer {layer!r}; use one of {listed or modules[:12]}"
        + (", a sub-point such as 'layer:0.attn_out'" if shortcuts else "")
        + " or a module path"
        + (f" (similar names: {close})" if close else "")
        + "; interp_widgets.layers.layer_names(model) lists them all."
    )


def resolve_layer(model: nn.Module, layer: str | int | nn.Module) -> LayerPoint:
    """Resolve a layer given as a canonical name, an int block index, a module path, a module or a hook name.

    Block modules get their canonical ``layer:i`` name whichever way they are given. Unknown names raise a
    ValueError that lists valid names.

    Example:
        >>> resolve_layer(model, -1).name, resolve_layer(model, "bert.pooler").name
        ('layer:1', 'bert.pooler')
        >>> resolve_layer(model, "layer:7")
        Traceback (most recent call last):
        ...
        ValueError: layer index 7 is out of range; this model has 2 blocks (layer:0..layer:1).
    """
    if isinstance(layer, nn.Module):
        for name, module in model.named_modules():
            if module is layer:
                return resolve_layer(model, name) if name else LayerPoint("", "", module)
        raise ValueError("the given module is not part of this model; pass one of model.modules() or its path")
    if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
        if is_encoder_decoder(model):
            raise ValueError(
                f"{type(model).__name__} is an encoder–decoder model; name the stack: "
                f"'encoder.layer:{int(layer)}' or 'decoder.layer:{int(layer)}'"
            )
        return _block_point(model, None, int(layer), None)
    if not isinstance(layer, str):
        raise TypeError(
            f"layer must be a name such as 'layer:3', an int block index or a module; got {type(layer).__name__}"
        )
    spec = layer.strip()
    if _HOOK_NAME.fullmatch(spec):
        spec = from_hook_name(spec)
    match = _BLOCK_NAME.fullmatch(spec)
    if match is not None:
        return _block_point(model, match.group(1), int(match.group(2)), match.group(3))
    try:  # a module path (get_submodule walks only the path, not the whole model)
        module = model.get_submodule(spec) if spec else None
    except AttributeError:
        module = None
    if module is not None:
        for stack in _stacks(model):
            try:
                block_path, found = blocks(model, stack)
            except UnsupportedModelError:
                break
            prefix = f"{block_path}."
            if spec.startswith(prefix) and spec[len(prefix) :].isdigit() and int(spec[len(prefix) :]) < len(found):
                return _block_point(model, stack, int(spec[len(prefix) :]), None)
        return LayerPoint(spec, spec, module)
    raise _unknown(model, layer)


@dataclass(frozen=True)
class HeadPoint:
    """One attention head: its canonical ``name`` (``layer:i.head:h``), the ``point`` whose input holds every head's
    output side by side (the attention output projection, a pre-hook), the ``head`` index and ``n_heads``.

    Example:
        >>> head = resolve_head(model, "layer:1.head:-1")
        >>> head.name, head.point.path, head.point.site, head.n_heads
        ('layer:1.head:1', 'bert.encoder.layer.1.attention.output.dense', 'input', 2)
    """

    name: str
    point: LayerPoint
    head: int
    n_heads: int

    def heads_of(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` (…, n_heads · head_dim) viewed as (…, n_heads, head_dim).

        Example:
            >>> resolve_head(model, "layer:0.head:1").heads_of(torch.zeros(1, 3, 32)).shape
            torch.Size([1, 3, 2, 16])
        """
        if hidden.shape[-1] % self.n_heads:
            raise UnsupportedModelError(
                f"the input of {self.point.path} has width {hidden.shape[-1]}, not a multiple of the {self.n_heads} "
                f"heads of the model's config; pass the module path '{self.point.path}' to edit it whole"
            )
        return hidden.unflatten(-1, (self.n_heads, hidden.shape[-1] // self.n_heads))


def is_head_name(spec) -> bool:
    """Whether ``spec`` is an attention head name, ``layer:i.head:h`` (see :func:`resolve_head`).

    Example:
        >>> is_head_name("layer:3.head:5"), is_head_name("layer:3.attn_out")
        (True, False)
    """
    return isinstance(spec, str) and _HEAD_NAME.fullmatch(spec.strip()) is not None


def resolve_head(model: nn.Module, spec: str) -> HeadPoint:
    """Resolve ``"layer:i.head:h"`` (negative ``i`` and ``h`` count from the end) to a :class:`HeadPoint`.

    Example:
        >>> resolve_head(model, "layer:0.head:2")
        Traceback (most recent call last):
        ...
        ValueError: head 2 does not exist: the blocks of BertForSequenceClassification have 2 attention heads; use layer:0.head:0 .. layer:0.head:1
    """
    match = _HEAD_NAME.fullmatch(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"{spec!r} is not a head name; write 'layer:<block>.head:<head>', e.g. 'layer:3.head:5'")
    block = resolve_layer(model, match.group(1))
    modules = dict(block.module.named_modules())
    found = next((path for path in _OUT_PROJ if path in modules), None)
    if found is None:
        children = [name for name, _ in block.module.named_children()]
        raise UnsupportedModelError(
            f"cannot find the attention output projection in the blocks of {type(model).__name__} (block children: "
            f"{children}); pass its module path instead to edit all heads at once"
        )
    config = getattr(model, "config", None)
    n_heads = next((getattr(config, key) for key in _HEAD_KEYS if isinstance(getattr(config, key, None), int)), None)
    if n_heads is None:
        raise UnsupportedModelError(
            f"the config of {type(model).__name__} does not say how many attention heads it has"
        )
    head = int(match.group(2))
    if not -n_heads <= head < n_heads:
        raise ValueError(
            f"head {head} does not exist: the blocks of {type(model).__name__} have {n_heads} attention heads; use "
            f"{block.name}.head:0 .. {block.name}.head:{n_heads - 1}"
        )
    head %= n_heads
    path = f"{block.path}.{found}"
    point = LayerPoint(path, path, modules[found], "input", block.block)
    return HeadPoint(f"{block.name}.head:{head}", point, head, n_heads)


def qkv_projection(model: nn.Module, layer, kind: str, *, hint: str = "") -> tuple[str, int | None]:
    """The module path of the ``kind`` (``"q"``, ``"k"`` or ``"v"``) projection of block ``layer``, and where its
    output sits: None for a module of its own, else its index in a fused ``[q | k | v]`` module (GPT-2's ``c_attn``).

    ``hint`` ends the error raised for a block with neither (what the caller can do instead).

    Example:
        >>> qkv_projection(model, 0, "k")
        ('bert.encoder.layer.0.attention.self.key', None)
        >>> qkv_projection(lm, 1, "v")
        ('transformer.h.1.attn.c_attn', 2)
    """
    check_choice("kind", kind, tuple(_QKV))
    block = resolve_layer(model, layer)
    modules = dict(block.module.named_modules())
    path = next((p for p in _QKV[kind] if p in modules), None)
    if path is not None:
        return f"{block.path}.{path}", None
    path = next((p for p in _FUSED_QKV if p in modules), None)
    if path is not None:
        return f"{block.path}.{path}", "qkv".index(kind)
    children = [name for name, _ in block.module.named_children()]
    raise UnsupportedModelError(
        f"cannot find the {kind} projection of the blocks of {type(model).__name__} (block children: {children})"
        + (f"; {hint}" if hint else "")
    )


@dataclass(frozen=True)
class NormModule:
    """A normalisation module: ``y = w ⊙ (x − c(x)) / r(x) + b`` with ``r(x) = sqrt(mean((x − c(x))²) + eps)``.

    ``centred`` is True for LayerNorm (c = the mean over the last axis), False for RMSNorm (c = 0); ``bias`` is b or
    None. :meth:`scale` is r(x), the one factor that depends on x non-linearly.

    Example:
        >>> norm = norm_modules(model)[0]
        >>> norm.path, norm.centred, norm.eps
        ('bert.embeddings.LayerNorm', True, 1e-12)
    """

    path: str
    module: nn.Module
    centred: bool
    eps: float
    bias: torch.Tensor | None

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """r(x), shape (…, 1), in float32 at least.

        Example:
            >>> norm_modules(model)[0].scale(torch.tensor([[1.0, 3.0]]))
            tensor([[1.]])
        """
        x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        centred = x - x.mean(-1, keepdim=True) if self.centred else x
        return torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps)


_TORCH_NORMS = (nn.LayerNorm, *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()))


def norm_modules(model: nn.Module) -> list[NormModule]:
    """Every LayerNorm / RMSNorm module of ``model`` (the blocks', the embeddings', the final one, q/k norms).

    torch's ``LayerNorm`` is centred; modules whose class name holds ``RMSNorm``, or that keep a
    ``variance_epsilon`` (T5LayerNorm, LlamaRMSNorm), are not. Another class named ``…Norm`` is refused.

    Example:
        >>> [norm.path for norm in norm_modules(lm)][-2:]
        ['transformer.h.1.ln_2', 'transformer.ln_f']
    """
    found = []
    for path, module in model.named_modules():
        name = type(module).__name__
        if not (isinstance(module, _TORCH_NORMS) or name.endswith("Norm")):
            continue
        eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
        if isinstance(module, nn.LayerNorm) or (name.endswith("LayerNorm") and not hasattr(module, "variance_epsilon")):
            centred = True
        elif isinstance(module, _TORCH_NORMS[1:]) or "RMSNorm" in name or hasattr(module, "variance_epsilon"):
            centred = False
        else:
            centred = None
        if centred is None or not isinstance(eps, (int, float)):
            raise UnsupportedModelError(
                f"{path} is a {name}, a normalisation interp_widgets cannot read (neither LayerNorm nor RMSNorm with "
                "an eps attribute); leave 'norms' out of freeze="
            )
        bias = getattr(module, "bias", None)
        found.append(NormModule(path, module, centred, float(eps), bias if isinstance(bias, torch.Tensor) else None))
    return found


def hidden_of(value):
    """The hidden-state tensor of a module's output or input: the first element of a tuple, or the tensor itself.

    Example:
        >>> hidden_of((torch.ones(1, 2, 3), None)).shape
        torch.Size([1, 2, 3])
    """
    value = value[0] if isinstance(value, (tuple, list)) else value
    return getattr(value, "last_hidden_state", value)


def _replace_hidden(value, hidden):
    if isinstance(value, tuple):
        return (hidden, *value[1:])
    if isinstance(value, list):
        return [hidden, *value[1:]]
    return hidden


def register(point: LayerPoint, fn: Callable) -> torch.utils.hooks.RemovableHandle:
    """Register ``fn(module, inputs, value)`` at ``point`` and return the handle (the caller removes it).

    For an output point ``value`` is the module's output, as in a torch forward hook; for an input point it is the
    hidden-state input. A tensor returned by ``fn`` replaces the hidden state (at an output point, a returned value
    replaces the output, as in torch).

    Example:
        >>> seen = []
        >>> handle = register(resolve_layer(model, "layer:0.resid_pre"), lambda m, i, h: seen.append(h.shape))
        >>> _ = model(input_ids=torch.tensor([[101, 2204, 102]])); handle.remove()
        >>> seen
        [torch.Size([1, 3, 32])]
    """
    if point.site == "output":
        return point.module.register_forward_hook(fn)

    def pre_hook(module, args, kwargs):
        if args:
            new = fn(module, args, args[0])
            return None if new is None else ((new, *args[1:]), kwargs)
        new = fn(module, args, kwargs.get("hidden_states"))
        return None if new is None else (args, {**kwargs, "hidden_states": new})

    return point.module.register_forward_pre_hook(pre_hook, with_kwargs=True)


def register_edit(point: LayerPoint, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.utils.hooks.RemovableHandle:
    """Register ``fn(hidden) -> hidden`` at ``point``: its result replaces the hidden state (the module's output, or
    the first element of an output tuple; at an input point, the hidden-state input). Returns the handle.

    At ``resid_mid`` of a pre-norm block the result is written into the norm's input tensor, which the block also
    adds the MLP's output to: the residual stream changes, as TransformerLens's ``hook_resid_mid`` and an nnsight
    assignment to ``post_attention_layernorm.input`` change it.

    Example:
        >>> handle = register_edit(resolve_layer(model, "layer:1"), torch.zeros_like)
        >>> with capture(model, ["layer:1"]) as acts, torch.no_grad():  # capture's hook runs after the edit
        ...     _ = model(input_ids=torch.tensor([[101, 2204, 102]]))
        >>> handle.remove(); float(acts["layer:1"][0].abs().max())
        0.0
    """
    if point.site == "output":
        return register(point, lambda module, inputs, value: _replace_hidden(value, fn(hidden_of(value))))
    if point.name.endswith(".resid_mid"):
        # the input of a pre-norm block's second norm is also the residual that the MLP's output is added to (the
        # same tensor): the edit is written into it, so that the stream changes, not only what the MLP reads
        return register(point, lambda module, inputs, hidden: hidden.copy_(fn(hidden)))
    return register(point, lambda module, inputs, hidden: fn(hidden))


@contextlib.contextmanager
def hooks(model: nn.Module, fns: dict[str | int, Callable]) -> Iterator[dict[str, LayerPoint]]:
    """Install ``{layer: fn(module, inputs, value)}`` hooks (see :func:`register`) for the ``with`` block.

    Yields the resolved points by canonical name. The hooks are removed on exit, on errors and on Ctrl-C.

    Example:
        >>> with hooks(model, {"layer:1": lambda m, i, out: None}) as points, torch.no_grad():
        ...     _ = model(input_ids=torch.tensor([[101, 2204, 102]]))
        >>> list(points)
        ['layer:1']
    """
    handles, points = [], {}
    try:
        for layer, fn in fns.items():
            point = resolve_layer(model, layer)
            points[point.name] = point
            handles.append(register(point, fn))
        yield points
    finally:
        for handle in handles:
            handle.remove()


# transformers 5 installs output-capturing forward hooks, once and for good, the first time a model is asked for
# ``output_attentions`` or ``output_hidden_states``; :func:`no_new_hooks` takes them (and their flag) off again
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)
_CAPTURE_FLAG = "_output_capturing_hooks_installed"
_MISSING = object()


@contextlib.contextmanager
def no_new_hooks(model: nn.Module) -> Iterator[None]:
    """Remove, on exit (also on errors and Ctrl-C), every module hook added to ``model`` during the block.

    That includes the output-capturing hooks transformers installs for good the first time a model is called with
    ``output_hidden_states=True`` or ``output_attentions=True``, and their "installed" flag, so the model is left
    with exactly the hooks it had.

    Example:
        >>> def count(m):
        ...     return sum(len(mod._forward_hooks) for mod in m.modules())
        >>> before = count(model)
        >>> with no_new_hooks(model), torch.no_grad():
        ...     _ = model(input_ids=torch.tensor([[101, 2204, 102]]), output_hidden_states=True)
        >>> count(model) == before
        True
    """
    modules = [
        (
            module,
            {name: set(getattr(module, name, None) or {}) for name in _HOOK_DICTS},
            module.__dict__.get(_CAPTURE_FLAG, _MISSING),
        )
        for module in model.modules()
    ]
    try:
        yield
    finally:
        for module, hooks_before, flag in modules:
            for name, before in hooks_before.items():
                registry = getattr(module, name, None) or {}
                for key in set(registry) - before:
                    del registry[key]
            if flag is _MISSING:
                module.__dict__.pop(_CAPTURE_FLAG, None)
            else:
                module.__dict__[_CAPTURE_FLAG] = flag


@contextlib.contextmanager
def capture(model: nn.Module, layers: Sequence[str | int]) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Record the (detached) hidden state at each layer during the ``with`` block, keyed by canonical name.

    Example:
        >>> with capture(model, ["layer:1", 0]) as acts, torch.no_grad():
        ...     _ = model(input_ids=torch.tensor([[101, 2204, 102]]))
        >>> {name: tuple(tensors[0].shape) for name, tensors in acts.items()}
        {'layer:1': (1, 3, 32), 'layer:0': (1, 3, 32)}
    """
    names = [resolve_layer(model, layer).name for layer in layers]
    store: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def recorder(key):
        def hook(module, inputs, value):
            store[key].append(hidden_of(value).detach())

        return hook

    with hooks(model, {name: recorder(name) for name in names}):
        yield store


@contextlib.contextmanager
def evaluation(model: nn.Module) -> Iterator[None]:
    """Put ``model`` in eval mode for the block and restore the train/eval mode of every module afterwards.

    Example:
        >>> _ = model.train()
        >>> with evaluation(model):
        ...     model.training
        False
        >>> model.training
        True
        >>> _ = model.eval()
    """
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield
    finally:
        for module, mode in modes:
            module.training = mode


def model_configs(model: nn.Module) -> list:
    """Every configuration object of the model and its sub-models, with their nested sub-configurations.

    Example:
        >>> [type(config).__name__ for config in model_configs(model)]
        ['BertConfig']
    """
    found, pending = {}, [m.config for m in model.modules() if hasattr(getattr(m, "config", None), "to_json_string")]
    while pending:
        config = pending.pop()
        if id(config) in found:
            continue
        found[id(config)] = config
        pending.extend(c for key in getattr(config, "sub_configs", {}) if (c := getattr(config, key, None)) is not None)
    return list(found.values())


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str, *, why: str, hint: str = "") -> Iterator[None]:
    """Run a Hugging Face model with the attention implementation ``name`` (``"eager"``, or one registered in
    transformers' ``AttentionInterface``) inside the block.

    A model that cannot switch at run time raises an :class:`UnsupportedModelError` that starts with ``why`` and
    says to reload it with ``attn_implementation="eager"`` (then ``hint``). On exit, also on errors, the attention
    implementation of the model and of every sub-configuration is restored exactly, and the output-capturing hooks
    transformers installs on first use of ``output_attentions`` are removed again (:func:`no_new_hooks`).

    Example:
        >>> with attention_implementation(model, "eager", why="this example reads attention weights"):
        ...     model.config._attn_implementation
        'eager'
        >>> model.config._attn_implementation
        'sdpa'
    """
    saved = [(config, config.__dict__.get("_attn_implementation_internal")) for config in model_configs(model)]
    with no_new_hooks(model):
        try:
            current = getattr(getattr(model, "config", None), "_attn_implementation", None)
            if current is not None and current != name:
                if hasattr(model, "set_attn_implementation"):
                    model.set_attn_implementation(name)
                if model.config._attn_implementation != name:
                    raise UnsupportedModelError(
                        f"{why}; {type(model).__name__} runs {current!r} attention and cannot switch to {name} at run "
                        f"time. Reload it with from_pretrained(..., attn_implementation={name!r})" + hint + "."
                    )
            yield
        finally:
            for config, implementation in saved:
                config._attn_implementation_internal = implementation


_ATTENTION_USERS: dict[str, int] = {}  # attention function name -> blocks running it (registered while any does)


@contextlib.contextmanager
def attention_function(model: nn.Module, name: str, fn: Callable, *, why: str, hint: str = "") -> Iterator[None]:
    """Run a Hugging Face model with the attention function ``fn`` inside the block.

    ``fn(module, query, key, value, attention_mask, **kwargs)`` returns ``(output, weights)`` as transformers'
    attention functions do (:func:`eager_attention_forward` gives a module's own eager one, :func:`attend` the output
    of a changed pattern). It is registered in transformers' ``AttentionInterface`` as ``name`` (one name, one
    function), with eager attention's masks, while any block runs it, and the model switches to it through
    :func:`attention_implementation` (``why`` and ``hint`` as there), which restores everything on exit.

    Example:
        >>> seen = []
        >>> def recording(module, query, key, value, attention_mask, **kwargs):
        ...     output, weights = eager_attention_forward(module)(module, query, key, value, attention_mask, **kwargs)
        ...     seen.append(tuple(weights.shape))
        ...     return output, weights
        >>> with attention_function(lm, "example_recording", recording, why="this example reads patterns"):
        ...     _ = lm(input_ids=torch.tensor([[5, 6, 7]]))
        >>> seen  # (batch, heads, query, key) of each block
        [(1, 2, 3, 3), (1, 2, 3, 3)]
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    if not _ATTENTION_USERS.get(name):
        AttentionInterface.register(name, fn)
        AttentionMaskInterface.register(name, eager_mask)  # the masks eager attention gets
    _ATTENTION_USERS[name] = _ATTENTION_USERS.get(name, 0) + 1
    try:
        with attention_implementation(model, name, why=why, hint=hint):
            yield
    finally:
        _ATTENTION_USERS[name] -= 1
        if not _ATTENTION_USERS[name]:
            del _ATTENTION_USERS[name]
            AttentionInterface._global_mapping.pop(name, None)
            AttentionMaskInterface._global_mapping.pop(name, None)


def eager_attention_forward(module: nn.Module, *, action: str = "replace the attention", hint: str = "") -> Callable:
    """The eager attention function of a transformers attention module (``eager_attention_forward`` of its modeling
    module): what an :func:`attention_function` calls for the model's own output and pattern. A module without one
    raises an :class:`UnsupportedModelError` saying it cannot ``action`` (then ``hint``, what to do instead).

    Example:
        >>> eager_attention_forward(lm.transformer.h[0].attn).__module__
        'transformers.models.gpt2.modeling_gpt2'
    """
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise UnsupportedModelError(
            f"cannot {action} of {type(module).__name__}: its module has no eager_attention_forward"
            + (f"; {hint}" if hint else "")
        )
    return eager


def attend(pattern: torch.Tensor, query: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """The output of an attention pattern (batch, heads, query, key) on ``value`` (batch, kv heads, key, width), as
    transformers' attention functions return it: (batch, query tokens, heads, width); grouped-query value heads are
    repeated to the heads of ``query`` as the model does.

    Example:
        >>> q, v = torch.zeros(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
        >>> out = attend(torch.eye(3).expand(1, 4, 3, 3), q, v)
        >>> out.shape, bool(torch.equal(out[0, :, 1], v[0, 0]))  # query head 1 reads value head 0
        (torch.Size([1, 3, 4, 8]), True)
    """
    repeats = query.shape[1] // value.shape[1]
    values = value.repeat_interleave(repeats, dim=1) if repeats > 1 else value
    return torch.matmul(pattern.to(device=values.device, dtype=values.dtype), values).transpose(1, 2).contiguous()


class BlockReplay:
    """The blocks of one recorded forward pass, run again from any block on: each block is called with the arguments
    the model gave it in that pass (masks, rotary embeddings …), then the final norm and the output embedding. Edits
    and hooks apply as in a whole pass, and the blocks below the start are not run again. Used where many runs
    share their first blocks: exact patching, and a transcoder report's spliced losses.

    Example:
        >>> ids = lm_tokenizer("the cat sat on the mat", return_tensors="pt").input_ids
        >>> replay = BlockReplay.record(lm, lambda: lm(input_ids=ids, use_cache=False))
        >>> whole = lm(input_ids=ids).logits
        >>> bool(torch.allclose(replay.logits(0), whole, atol=1e-5)), bool(torch.allclose(replay.logits(1), whole, atol=1e-5))
        (True, True)
        >>> replay.logits(1, rows=torch.tensor([0]), positions=slice(-1, None)).shape
        torch.Size([1, 1, 600])
    """

    def __init__(self, block_list: nn.ModuleList, calls: list, resid_pre: list, norm: nn.Module, head: nn.Module):
        self.blocks, self.calls, self.resid_pre, self.norm, self.head = block_list, calls, resid_pre, norm, head

    @classmethod
    def record(cls, model: nn.Module, forward: Callable[[], object]) -> BlockReplay | None:
        """Call ``forward()`` (one pass of ``model``) and record each block's first call and input; None when the
        model cannot be replayed so: no final norm or output embedding outside the blocks, a block not called, or a
        ``forward`` that raises TypeError (such as a model without ``use_cache``)."""
        path, block_list = blocks(model)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        norms = [n for n in norm_modules(model) if not n.path.startswith(path + ".")]
        if head is None or not norms:
            return None
        calls: list = [None] * len(block_list)
        resid_pre: list = [None] * len(block_list)

        def recorder(i):
            def hook(module, args, kwargs):
                if calls[i] is None:
                    hidden = args[0] if args else kwargs.get("hidden_states")
                    calls[i] = (args[1:] if args else (), {k: v for k, v in kwargs.items() if k != "hidden_states"})
                    resid_pre[i] = hidden.detach().clone()

            return hook

        handles = [block.register_forward_pre_hook(recorder(i), with_kwargs=True) for i, block in enumerate(block_list)]
        try:
            forward()
        except TypeError:
            return None
        finally:
            for handle in handles:
                handle.remove()
        if any(call is None for call in calls):
            return None
        return cls(block_list, calls, resid_pre, norms[-1].module, head)

    def logits(self, start: int, rows: torch.Tensor | None = None, positions: slice | None = None) -> torch.Tensor:
        """The logits (rows, positions, vocab) of the recorded pass run again from block ``start`` on, for the
        recorded rows ``rows`` (default all) at ``positions`` (default all)."""
        hidden = self.resid_pre[start]
        if rows is not None:
            hidden = hidden[rows.to(hidden.device)]
        for i in range(start, len(self.blocks)):
            args, kwargs = self.calls[i]
            hidden = hidden_of(self.blocks[i](hidden, *args, **kwargs))
        if positions is not None:
            hidden = hidden[:, positions]
        return self.head(self.norm(hidden))
