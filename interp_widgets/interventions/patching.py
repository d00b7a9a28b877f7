"""Exact activation patching: :func:`activation_patching`.

For every patched point (a point type at one block, one unit, one position or all positions) the model runs the
base prompt with one activation taken from the other prompt's run, and the metric of that patched run is recorded:

- denoising (``direction="denoise"``): the corrupt prompt runs, the clean activation is patched in;
- noising (``direction="noise"``): the clean prompt runs, the corrupt activation is patched in.

Points: ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"``, ``"resid_mid"`` (what :func:`interp_widgets.layers.
resolve_layer` reads, so every block layout it knows works; parallel-residual blocks have no ``resid_mid`` and are
refused) and ``"head"`` (query head h's slice of the attention output projection's input, its output before
``o_proj``, as :func:`~interp_widgets.layers.resolve_head` gives it, so grouped-query models work). Per head also:

- ``"q"`` (units ``H0``...), ``"k"`` and ``"v"`` (units ``KV0``..., one per key / value head: 3 per layer on
  SmolLM2): the head's slice of the query / key / value projection's output (``q_proj``, ``attention.self.query``,
  or GPT-2's fused ``c_attn``), before rotary embeddings and q/k norms, which are the same functions of the
  position in both runs, so the patched head computes with the other run's vector;
- ``"pattern"`` (units ``H0``...): query head h's attention weights at the query position (a row of the pattern),
  then ``pattern @ V`` again. It needs eager attention: the call runs the model with the eager attention function
  (switched to for the call through :func:`~interp_widgets.layers.attention_implementation`, and back afterwards),
  and a model that cannot switch at run time gets an error that says how to reload it. With ``"pattern"`` among
  the points, every point of that call runs on eager attention.

Every patch goes through :func:`~interp_widgets.interventions.intervene`. Two paths compute the same numbers:

- ``batched=True`` (the default): the patched runs of one point type and block share forward passes, one row per
  (patch, pair), under the ``max_batch_tokens`` budget of :class:`~interp_widgets.adapter.ModelAdapter`. The rows
  of block ℓ start at block ℓ from the base run's residual stream there (the blocks below ℓ compute the same as in
  the base run, so they are run once, not once per patch), and only the scored position's logits are computed. The
  replay calls the blocks with the arguments the model passed them in the base run; it is checked against the model's
  own forward pass first, and a model where that check fails (a head other than final norm + output embedding, such
  as BERT's masked-LM transform or a classifier) runs every patched row through the whole model instead, still
  batched.
- ``batched=False``: one patched run per forward pass through the whole model (the slow reference the tests and the
  benchmark compare with).

Example:
    >>> result = activation_patching(lm, lm_tokenizer, "the cat sat on the", "the dog sat on the", answer=" the",
    ...                              foil=" on", progress=False)
    >>> panel = result.panel("resid_pre")
    >>> panel.positions[:4], panel.values.shape, [round(float(v), 2) for v in panel.values[0, 0, 2:4]]
    (['t', 'he', 'c', 'at'], (2, 1, 8), [0.28, 0.67])
    >>> everywhere = activation_patching(lm, lm_tokenizer, "the cat sat on the", "the dog sat on the", answer=" the",
    ...                                  foil=" on", positions="all", progress=False)
    >>> everywhere.panel("resid_pre").values[:, 0, 0].round(4).tolist()  # every position patched: the clean run
    [1.0, 1.0]
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets._model_names import display_name, model_name_of
from interp_widgets.adapter import ModelAdapter
from interp_widgets.interventions.intervene import intervene
from interp_widgets.interventions.patching_inputs import (
    DIRECTIONS,
    Scorer,
    check_separates,
    metric_name,
    normalise,
    prepare_pairs,
    resolve_answers,
    scored_logits,
)
from interp_widgets.interventions.patching_result import (
    POSITIONS,
    TOP_K,
    PatchingBaseline,
    PatchingPair,
    PatchingPanel,
    PatchingResult,
    PatchingSetting,
)
from interp_widgets.interventions.points import EditPoint, resolve_point
from interp_widgets.layers import (
    BlockReplay,
    UnsupportedModelError,
    attend,
    attention_function,
    attention_implementation,
    blocks,
    eager_attention_forward,
    evaluation,
    hidden_of,
    no_new_hooks,
    qkv_projection,
    register,
    resolve_head,
    resolve_layer,
)
from interp_widgets.validation import check_choice

#: the point types activation patching takes
EXACT_POINTS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "head", "q", "k", "v", "pattern")
#: per-head points whose units are key / value heads (grouped-query models have fewer of them than query heads)
_KV_POINTS = ("k", "v")
_REPLAY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class _Unit:
    """One patched unit: the ``intervene`` point it is written at (``name``), the point whose hidden state is
    recorded (``capture``) and, for a query / key / value head, its ``cols`` in that hidden state; a pattern's unit
    is its query head (``head``) of the attention ``modules`` of the block."""

    name: str
    capture: EditPoint | None
    cols: slice | None = None
    head: int | None = None
    modules: tuple = ()

    def value(self, hidden: torch.Tensor) -> torch.Tensor:
        """The unit's activation in a recorded hidden state: (pairs, tokens, width), or a pattern's (pairs, query
        tokens, key tokens)."""
        if self.capture is None:
            return hidden[:, self.head]
        activation = self.capture.activation(hidden)
        return activation if self.cols is None else activation[..., self.cols]


@dataclass(frozen=True)
class _Site:
    """One point type at one block and its units (one for a stream point, one per head)."""

    point: str
    layer: int
    units: tuple[_Unit, ...]
    labels: tuple[str, ...]


def _head_counts(model: nn.Module) -> tuple[int, int, int]:
    """(query heads, key / value heads, head width) from the config."""
    config = model.config
    n_heads = resolve_head(model, "layer:0.head:0").n_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    width = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    return n_heads, int(n_kv), int(width)


def _qkv_units(model: nn.Module, point: str, layer: int, chosen: list[int]) -> tuple[_Unit, ...]:
    n_heads, n_kv, width = _head_counts(model)
    path, fused = qkv_projection(model, layer, point, hint="patch 'head' (each head's output) or 'pattern' instead")
    offset = 0 if fused is None else fused * n_heads * width
    capture = resolve_point(model, path)
    return tuple(_Unit(capture.name, capture, slice(offset + j * width, offset + (j + 1) * width)) for j in chosen)


def _pattern_units(model: nn.Module, layer: int, chosen: list[int]) -> tuple[_Unit, ...]:
    block = resolve_layer(model, layer).module
    modules = tuple(m for m in block.modules() if type(m).__name__.endswith("Attention"))
    if not modules:
        raise UnsupportedModelError(
            f"cannot find the attention module of the blocks of {type(model).__name__}; patch 'head' instead"
        )
    return tuple(_Unit(f"pattern:{layer}", None, head=h, modules=modules) for h in chosen)


def _sites(model: nn.Module, points: Sequence[str], layers: list[int], heads: list[int] | None) -> list[_Site]:
    sites = []
    for point in points:
        for layer in layers:
            if point in ("head", "q", "pattern"):
                n_heads = resolve_head(model, f"layer:{layer}.head:0").n_heads
                chosen = list(range(n_heads)) if heads is None else heads
                labels = tuple(f"H{h}" for h in chosen)
            elif point in _KV_POINTS:
                chosen = list(range(_head_counts(model)[1]))
                labels = tuple(f"KV{j}" for j in chosen)
            else:
                chosen, labels = [None], ("stream",)
            if point == "head":
                units = tuple(
                    _Unit(e.name, e) for e in (resolve_point(model, f"layer:{layer}.head:{h}") for h in chosen)
                )
            elif point in ("q", *_KV_POINTS):
                units = _qkv_units(model, point, layer, chosen)
            elif point == "pattern":
                units = _pattern_units(model, layer, chosen)
            else:
                edit_point = resolve_point(model, f"layer:{layer}.{point}")
                units = (_Unit(edit_point.name, edit_point),)
            sites.append(_Site(point, layer, units, labels))
    return sites


def _check_points(points) -> tuple[str, ...]:
    if isinstance(points, str):
        points = (points,)
    points = tuple(points)
    if not points:
        raise ValueError(f"points is empty; name at least one of {EXACT_POINTS}")
    for point in points:
        check_choice("point", point, EXACT_POINTS)
    if len(set(points)) != len(points):
        raise ValueError(f"points repeats a point type: {points}; name each once")
    return points


def _check_layers(model: nn.Module, layers) -> list[int]:
    n_blocks = len(blocks(model)[1])
    if layers is None:
        return list(range(n_blocks))
    chosen = [layers] if isinstance(layers, int) else list(layers)
    out = []
    for layer in chosen:
        if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool) or not -n_blocks <= layer < n_blocks:
            raise ValueError(
                f"layer {layer!r} does not exist: this model has {n_blocks} blocks; pass layers= block indices in "
                f"0..{n_blocks - 1} (negative from the end), or None for all"
            )
        out.append(int(layer) % n_blocks)
    return out


def _check_heads(model: nn.Module, heads) -> list[int] | None:
    if heads is None:
        return None
    chosen = [heads] if isinstance(heads, int) else list(heads)
    # resolve_head refuses a head that does not exist, naming the valid range
    return [resolve_head(model, f"layer:0.head:{h}").head for h in chosen]


@contextlib.contextmanager
def _recording(model: nn.Module, sites: list[_Site], store: dict) -> Iterator[None]:
    """Record the full hidden state at each site's capture point (for heads: every head's output side by side; for a
    pattern: the attention weights (pairs, heads, query tokens, key tokens))."""
    handles = []

    def recorder(key):
        def hook(module, inputs, value):
            store[key] = hidden_of(value).detach().clone()

        return hook

    def pattern_recorder(key):
        def record(weights):
            store[key] = weights.detach().clone()
            return weights

        return record

    try:
        for site in sites:
            unit = site.units[0]
            if unit.capture is None:
                for module in unit.modules:
                    _PATTERN_EDITS[module] = pattern_recorder((site.point, site.layer))
                    handles.append(_Removal(module))
            else:
                handles.append(register(unit.capture.point, recorder((site.point, site.layer))))
        yield
    finally:
        for handle in handles:
            handle.remove()


class _Removal:
    """A handle that takes a module's pattern edit away again."""

    def __init__(self, module):
        self.module = module

    def remove(self):
        _PATTERN_EDITS.pop(self.module, None)


# ------------------------------------------------------------------------------------------ attention patterns
_PATTERN = "interp_widgets_patched_pattern"
_PATTERN_EDITS: dict[nn.Module, Callable] = {}  # attention module -> fn(weights) -> weights, while a patch runs


def _pattern_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, with the pattern (batch, heads, query, key) passed through the module's
    edit (a recorder or a patch), then ``pattern @ V`` again (value heads repeated for grouped-query attention)."""
    eager = eager_attention_forward(module, action="patch the attention pattern", hint="patch 'head' instead")
    output, weights = eager(module, query, key, value, attention_mask, **kwargs)
    edit = _PATTERN_EDITS.get(module)
    if edit is None:
        return output, weights
    new = edit(weights)
    if new is weights:
        return output, weights
    return attend(new, query, value), new


@contextlib.contextmanager
def _pattern_attention_on(model: nn.Module) -> Iterator[None]:
    """Run ``model`` with :func:`_pattern_attention` (eager attention whose pattern can be read and patched)."""
    why = "patching attention patterns needs the attention weights, which only eager attention computes"
    with (
        attention_implementation(model, "eager", why=why, hint=" (eager attention gives the patterns)"),
        attention_function(model, _PATTERN, _pattern_attention, why=why),
    ):
        yield


class _Replay:
    """Runs the patched rows from block ℓ on (:class:`~interp_widgets.layers.BlockReplay` of a batch-1 base run,
    whose block arguments broadcast over rows, with every base row's residual stream), and only the scored position's
    logits. Checked against the model's own logits; ``None`` when the model cannot be replayed so."""

    def __init__(self, blocks: BlockReplay, position: int):
        self.blocks, self.position = blocks, position

    @classmethod
    def trace(cls, model: nn.Module, adapter: ModelAdapter, ids: torch.Tensor, position: int, logits: torch.Tensor):
        """Run ``ids`` (the base prompts) and record the blocks' calls and inputs; None if not replayable."""
        if logits.dim() != 3:
            return None
        one = BlockReplay.record(model, lambda: model(input_ids=ids[:1].to(adapter.device), use_cache=False))
        if one is None:
            return None
        every = BlockReplay.record(model, lambda: model(input_ids=ids.to(adapter.device), use_cache=False))
        if every is None:
            return None
        one.resid_pre = every.resid_pre  # the base rows' own residual streams, from one batched pass
        replay = cls(one, position)
        # the check: replaying every block from block 0 for two rows gives the model's own logits
        rows = torch.tensor([0, ids.shape[0] - 1])
        try:
            again = replay.run(0, rows)
        except Exception:  # noqa: BLE001 - any failure means: run the whole model instead
            return None
        expected = logits[rows, position].to(again.dtype)
        if again.shape != expected.shape or not torch.allclose(again, expected, atol=_REPLAY_TOLERANCE, rtol=0):
            return None
        return replay

    def run(self, start: int, pairs: torch.Tensor) -> torch.Tensor:
        """Scored logits (rows, vocab) of base rows ``pairs`` run from block ``start`` on (edits apply by hooks)."""
        return self.blocks.logits(start, pairs, slice(self.position, self.position + 1))[:, 0]


def _row_writer(writes: list):
    """An edit that applies ``writes``: (rows, positions or None for all, cols or None, values (rows, [positions,]
    width)); for a pattern, cols is the head index and the edited tensor (batch, heads, query, key)."""

    def write(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        for rows, positions, cols, values in writes:
            index = rows.to(x.device)
            values = values.to(device=x.device, dtype=x.dtype)
            if isinstance(cols, int):  # a pattern: (batch, heads, query, key)
                if positions is None:
                    out[index, cols] = values
                else:
                    out[index, cols, positions.to(x.device)] = values
                continue
            cols = slice(None) if cols is None else cols
            if positions is None:
                out[index, :, cols] = values
            else:
                out[index, positions.to(x.device), cols] = values
        return out

    return write


@contextlib.contextmanager
def _applied(model: nn.Module, edits: dict) -> Iterator[None]:
    """Apply ``{name: (unit, fn)}``: through ``intervene``, or as pattern edits of the attention function."""
    patterns = {name: pair for name, pair in edits.items() if pair[0].capture is None}
    handles = []
    try:
        for unit, fn in patterns.values():
            for module in unit.modules:
                _PATTERN_EDITS[module] = fn
                handles.append(_Removal(module))
        with intervene(model, {name: fn for name, (unit, fn) in edits.items() if name not in patterns}):
            yield
    finally:
        for handle in handles:
            handle.remove()


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="run", leave=False, disable=not enabled or total < 64)


def activation_patching(
    model: nn.Module,
    tokenizer,
    clean,
    corrupt,
    *,
    answer=None,
    foil=None,
    points=("resid_pre",),
    positions: str = "each",
    metric="logit_diff",
    direction: str = "denoise",
    layers=None,
    heads=None,
    batched: bool = True,
    max_batch_tokens: int | None = None,
    progress: bool = True,
) -> PatchingResult:
    """Exact activation patching of ``points`` at every block (and head), position by position or at all positions.

    Args:
        model: a Hugging Face language model (causal or masked: the scored position is the last token, or the one
            ``[MASK]`` of the clean prompt) or classifier (its class logits are scored). Never changed: mode, hooks,
            gradients and config are as before, also after an error.
        tokenizer: its fast tokenizer.
        clean, corrupt: a prompt each, or two lists of prompts (pairs, IOI-style); every prompt must have the same
            token count (an error names the fix otherwise).
        answer, foil: the tokens the metric compares, one token each (a string that tokenises to one token, or an
            id; a list gives one per pair). Defaults: the clean run's top token and the corrupt run's top other token.
        points: any of ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"``, ``"resid_mid"``, ``"head"``, ``"q"``,
            ``"k"``, ``"v"``, ``"pattern"``; one panel each.
        positions: ``"each"`` (one patch per position) or ``"all"`` (every position at once).
        metric: ``"logit_diff"`` (answer − foil logit), ``"answer_prob"``, ``"kl"`` (KL(clean ‖ patched)) or a
            callable ``metric(logits (rows, vocab), pair (rows,)) -> (rows,)``. Values are normalised to 0 = corrupt
            run, 1 = clean run; a pair whose two metrics do not differ is refused.
        direction: ``"denoise"`` (corrupt run, clean activation patched in) or ``"noise"`` (clean run, corrupt
            activation patched in; a low value then means important).
        layers: block indices to patch (default: all); heads: query-head indices for ``"head"``, ``"q"`` and
            ``"pattern"`` (default: all; ``"k"`` and ``"v"`` always patch every key / value head).
        batched: False runs one patch per forward pass through the whole model (the slow reference).
        max_batch_tokens: tokens per forward pass (the :class:`~interp_widgets.adapter.ModelAdapter` budget; the
            pairs of one patch always share a pass).
        progress: show a tqdm bar for long runs.

    Returns a :class:`~interp_widgets.interventions.PatchingResult` whose panels hold, per (layer, unit, position),
    the normalised value, the raw metric, the spread over pairs and the patched run's top 5 next tokens.

    Example:
        >>> result = activation_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the",
        ...                              points=("attn_out", "head", "v", "pattern"), positions="all", progress=False)
        >>> result.panel("head").units, result.panel("v").units, result.panel("attn_out").values.shape
        (['H0', 'H1'], ['KV0', 'KV1'], (2, 1, 1))
        >>> activation_patching(lm, lm_tokenizer, "the cat sat", "the dog sat", answer=" on", foil=" the",
        ...                     points="head", heads=[2])
        Traceback (most recent call last):
        ...
        ValueError: head 2 does not exist: the blocks of GPT2LMHeadModel have 2 attention heads; use layer:0.head:0 .. layer:0.head:1
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a Hugging Face model), got {type(model).__name__}")
    points = _check_points(points)
    check_choice("positions", positions, POSITIONS)
    check_choice("direction", direction, DIRECTIONS)
    name = metric_name(metric)
    chosen_layers = _check_layers(model, layers)
    chosen_heads = _check_heads(model, heads)
    sites = _sites(model, points, chosen_layers, chosen_heads)
    pairs = prepare_pairs(tokenizer, clean, corrupt)
    adapter = ModelAdapter(
        model, tokenizer, **({} if max_batch_tokens is None else {"max_batch_tokens": max_batch_tokens})
    )
    adapter.check_length(pairs.n_tokens, "the prompt")
    patterns = _pattern_attention_on(model) if "pattern" in points else contextlib.nullcontext()
    with evaluation(model), no_new_hooks(model), torch.no_grad(), patterns:
        return _patch(model, adapter, tokenizer, pairs, sites, answer, foil, positions, metric, name, direction,
                      batched, progress)  # fmt: skip


def _patch(
    model, adapter, tokenizer, pairs, sites, answer, foil, positions, metric, name, direction, batched, progress
):
    device = adapter.device
    recorded: dict[str, dict] = {"clean": {}, "corrupt": {}}
    logits = {}
    for side, ids in (("clean", pairs.clean_ids), ("corrupt", pairs.corrupt_ids)):
        with _recording(model, sites, recorded[side]):
            logits[side] = model(input_ids=ids.to(device)).logits
    clean_scored = scored_logits(logits["clean"], pairs.position)
    corrupt_scored = scored_logits(logits["corrupt"], pairs.position)
    labels = getattr(model.config, "id2label", None) if logits["clean"].dim() == 2 else None
    answers = resolve_answers(
        tokenizer, answer, foil, pairs.n_pairs, clean_logits=clean_scored, corrupt_logits=corrupt_scored,
        labels=labels, needs_foil=name == "logit_diff",
    )  # fmt: skip
    scorer = Scorer(metric, answers, clean_scored)
    every = torch.arange(pairs.n_pairs)
    clean_metrics = scorer(clean_scored, every).double().cpu().numpy()
    corrupt_metrics = scorer(corrupt_scored, every).double().cpu().numpy()
    check_separates(clean_metrics, corrupt_metrics, name)

    base_side, source_side = ("corrupt", "clean") if direction == "denoise" else ("clean", "corrupt")
    base_ids = pairs.corrupt_ids if direction == "denoise" else pairs.clean_ids
    source = recorded[source_side]
    n_positions = pairs.n_tokens if positions == "each" else 1
    replay = None
    if batched:
        replay = _Replay.trace(model, adapter, base_ids, pairs.position, logits[base_side])

    n_pairs = pairs.n_pairs
    total = sum(len(site.units) for site in sites) * n_positions * n_pairs
    results = {}  # (site index) -> raw (units, positions, pairs), top ids, top probs
    bar = _progress(total, progress, "activation patching")
    try:
        for s, site in enumerate(sites):
            raw = np.zeros((len(site.units), n_positions, n_pairs), np.float64)
            top_ids = np.zeros((len(site.units), n_positions, TOP_K), np.int64)
            top_probs = np.zeros((len(site.units), n_positions, TOP_K), np.float32)
            hidden = source[(site.point, site.layer)]
            patches = [(u, p) for u in range(len(site.units)) for p in range(n_positions)]
            if batched:
                per_pass = max(1, adapter.rows_per_batch(pairs.n_tokens) // n_pairs)
                chunks = [patches[i : i + per_pass] for i in range(0, len(patches), per_pass)]
            else:
                chunks = [[patch] for patch in patches]
            for chunk in chunks:
                if batched:
                    scored = _run_chunk(adapter, replay, site, chunk, hidden, base_ids, pairs, positions)
                    pair_index = torch.arange(n_pairs).repeat(len(chunk))
                else:
                    scored = torch.cat(
                        [
                            _run_one(adapter, site, chunk[0], hidden, base_ids, pairs, positions, k)
                            for k in range(n_pairs)
                        ]
                    )
                    pair_index = torch.arange(n_pairs)
                values = scorer(scored, pair_index).double().cpu().numpy().reshape(len(chunk), n_pairs)
                probs = torch.softmax(scored.float(), dim=-1).reshape(len(chunk), n_pairs, -1).mean(1)
                best = probs.topk(min(TOP_K, probs.shape[-1]), dim=-1)
                for j, (u, p) in enumerate(chunk):
                    raw[u, p] = values[j]
                    top_ids[u, p, : best.indices.shape[1]] = best.indices[j].cpu().numpy()
                    top_probs[u, p, : best.values.shape[1]] = best.values[j].cpu().numpy()
                bar.update(len(chunk) * n_pairs)
            results[s] = (raw, top_ids, top_probs)
    finally:
        bar.close()
    return _result(model, tokenizer, pairs, answers, sites, results, positions, name, direction, labels,
                   clean_metrics, corrupt_metrics)  # fmt: skip


def _patch_edits(site: _Site, chunk, hidden, pairs_per_patch: int, positions: str, row_pairs) -> dict:
    """``{name: (unit, edit)}`` writing each row's patch: rows are patch-major, ``pairs_per_patch`` rows per patch.
    Units that share a point (the query heads of one projection) share one edit."""
    writes: dict[str, tuple[_Unit, list]] = {}
    for u in sorted({u for u, _ in chunk}):
        unit = site.units[u]
        rows = [j * pairs_per_patch + k for j, (uu, _) in enumerate(chunk) if uu == u for k in range(pairs_per_patch)]
        source_pairs = torch.as_tensor([row_pairs[r] for r in rows])
        value = unit.value(hidden)
        cols = unit.head if unit.capture is None else unit.cols
        if positions == "all":
            write = (torch.as_tensor(rows), None, cols, value[source_pairs])
        else:
            where = torch.as_tensor([chunk[r // pairs_per_patch][1] for r in rows])
            write = (torch.as_tensor(rows), where, cols, value[source_pairs, where])
        writes.setdefault(unit.name, (unit, []))[1].append(write)
    return {name: (unit, _row_writer(w)) for name, (unit, w) in writes.items()}


def _run_chunk(adapter, replay, site, chunk, hidden, base_ids, pairs, positions) -> torch.Tensor:
    n_pairs = pairs.n_pairs
    row_pairs = torch.arange(n_pairs).repeat(len(chunk))
    edits = _patch_edits(site, chunk, hidden, n_pairs, positions, row_pairs.tolist())
    with _applied(adapter.model, edits):
        if replay is not None:
            return replay.run(site.layer, row_pairs)
        ids = base_ids[row_pairs]
        out = adapter.forward_ids(ids, positions=torch.full((len(ids), 1), pairs.position, dtype=torch.long))
    return out[:, 0] if out.dim() == 3 else out


def _run_one(adapter, site, patch, hidden, base_ids, pairs, positions, pair: int) -> torch.Tensor:
    """One patched run through the whole model (the reference path): one row, one patch."""
    edits = _patch_edits(site, [patch], hidden[pair : pair + 1], 1, positions, [0])
    with _applied(adapter.model, edits):
        logits = adapter.model(input_ids=base_ids[pair : pair + 1].to(adapter.device)).logits
    return scored_logits(logits, pairs.position)


def _result(model, tokenizer, pairs, answers, sites, results, positions, name, direction, labels, clean, corrupt):
    panels = []
    for point in dict.fromkeys(site.point for site in sites):
        indices = [s for s, site in enumerate(sites) if site.point == point]
        raw = np.stack([results[s][0] for s in indices])  # (layers, units, positions, pairs)
        normalised = normalise(raw, clean, corrupt)
        top_ids = np.stack([results[s][1] for s in indices])
        top_probs = np.stack([results[s][2] for s in indices])
        vocab = np.unique(top_ids)
        decode = (
            (lambda i: str(labels.get(int(i), i))) if labels is not None else (lambda i: tokenizer.decode([int(i)]))
        )
        panels.append(
            PatchingPanel(
                point,
                [sites[s].layer for s in indices],
                list(sites[indices[0]].labels),
                pairs.layout.tokens if positions == "each" else ["all"],
                values=normalised.mean(-1),
                raw=raw.mean(-1),
                spread=normalised.std(-1),
                top_ids=top_ids,
                top_probs=top_probs,
                vocab_ids=vocab,
                top_tokens=[decode(i) for i in vocab],
            )
        )
    pair = PatchingPair(
        pairs.layout, pairs.corrupt_tokens, answers.answers, answers.answer_ids, answers.foils, answers.foil_ids,
        pairs.n_pairs, -1 if labels is not None else pairs.position,
    )  # fmt: skip
    model_name = display_name(model_name_of(model)) or type(model).__name__
    setting = PatchingSetting(name, direction, "exact", positions, model_name)
    return PatchingResult(pair, setting, PatchingBaseline(clean, corrupt), tuple(panels))
