"""``attribution_graph``: the attribution graph of one prompt through a model and its per-layer transcoders (a
:class:`~interp_widgets.circuits.TranscoderSet`) or its cross-layer transcoder (a
:class:`~interp_widgets.circuits.CrossLayerTranscoderSet`), computed here (circuit-tracer's method; Ameisen et al.
2025).

**The local replacement model.** On the prompt, every attention pattern and every normalisation's scale is frozen at
its value (:func:`~interp_widgets.interventions.freeze.freezing`), so the model is linear in its residual stream, and
each block's MLP output becomes

    mlp_out[l] = Σ_f a_f W_dec[f] + b_dec + W_skip x[l] + error[l]

where ``x[l]`` is the transcoder's input point, ``a_f`` the transcoder's feature activations and ``error[l]`` the true
MLP output minus the transcoder's prediction, so the replacement reproduces the model's forward pass exactly. With a
cross-layer transcoder the sum runs over the features of every layer ``s ≤ l``, each with its decoder to layer ``l``
(``Σ_{s ≤ l} Σ_f a_f W_dec[s][f, l − s] + b_dec[l]``, no skip term): a feature writes to every layer from its own on,
and its edges add up its direct effects through all of them. As
circuit-tracer does, position 0 has no feature or error nodes: its MLP output minus the skip term is a constant. The
skip term stays live (it is linear in the stream), so paths through skips are part of the direct effects.

**Nodes and edges.** The sources are the active features (positions ≥ 1), the error nodes (every layer × position)
and the token embeddings (each position's input to block 0); the targets are the features (their pre-activation
``W_enc[f] · x[l] + b_enc[f]``) and the logit targets (demeaned logits ``(u_t − mean_v u_v) · h``, ``h`` the final
norm's output). ``adjacency[t, s]`` is the direct effect of source ``s`` on target ``t``: with every feature
activation held (no source reaches another through a feature), it is the source's value times the gradient of the
target with respect to it. One forward pass of the prompt keeps its autograd graph; each backward pass then computes
``batch_size`` rows at once, one target per cotangent of a batched backward pass (``is_grads_batched``), so memory
grows with ``batch_size × tokens`` only in the backward pass.

**Closure.** The model being linear in the sources, the direct effects into every node sum to the node's value minus
a constant: its value with every source set to zero (b_enc, every upstream b_dec and position 0's MLP outputs).
**Feature cap.** With ``max_feature_nodes`` below the number of active features, the logit rows come first; then,
every ``update_interval`` batches, the influence of the rows computed so far (power iteration on the row-normalised
``|rows|``, seeded with the logit probabilities) ranks the features not yet visited and the most influential enter
next. Features never visited are dropped as rows and columns (their share of the influence is reported as
``graph.cap.lost_influence``).

Example:
    >>> from interp_widgets.circuits import TranscoderSet
    >>> from interp_widgets.concepts import Transcoder
    >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
    >>> graph = attribution_graph(lm, lm_tokenizer, "The cat sat on the", tcs, batch_size=8, progress=False)
    >>> settings = graph.provenance.settings
    >>> settings["bos_added"], graph.n_layers, len(graph.features) == settings["n_active_features"]
    (True, 2, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from interp_widgets.circuits.cross_layer import CrossLayerTranscoderSet
from interp_widgets.circuits.graph import AttributionGraph, FeatureCap, GraphInput, GraphNodes, GraphProvenance
from interp_widgets.circuits.transcoders import TranscoderSet, transcoder_points
from interp_widgets.interventions.freeze import freezing
from interp_widgets.layers import (
    UnsupportedModelError,
    evaluation,
    is_encoder_decoder,
    register,
    register_edit,
    resolve_layer,
)
from interp_widgets.targets import Targets
from interp_widgets.validation import check_fraction, check_int

__all__ = ["ReplacementState", "attribution_graph", "graph_prompt", "replacement_state"]


# ---------------------------------------------------------------------------------------------- the prompt
def graph_prompt(tokenizer, prompt) -> tuple[torch.Tensor, bool]:
    """The token ids ``(1, T)`` of ``prompt`` (a text or a sequence of token ids) as the graph reads them, and whether
    a BOS was prepended: a prompt whose first token is not special gets the tokenizer's BOS (else its pad or EOS
    token) in front, as circuit-tracer's ``ensure_tokenized`` does, because position 0 carries no nodes.

    Example:
        >>> ids, added = graph_prompt(lm_tokenizer, "The cat")
        >>> ids[0, 0].item() == lm_tokenizer.bos_token_id, added, graph_prompt(lm_tokenizer, ids)[1]
        (True, True, False)
    """
    if isinstance(prompt, str):
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    elif isinstance(prompt, torch.Tensor):
        ids = prompt.reshape(-1).tolist()
    elif isinstance(prompt, (Sequence, np.ndarray)):
        ids = [int(i) for i in np.asarray(prompt).reshape(-1)]
    else:
        raise TypeError(f"prompt must be a text or a sequence of token ids, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt has no tokens; give a text of at least one token")
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = False
    if ids[0] not in special:
        first = next(
            (t for t in (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None),
            None,
        )
        if first is None:
            raise ValueError(
                "the prompt does not start with a special token and the tokenizer has no BOS, pad or EOS token to "
                "put in front (position 0 carries no nodes): start the prompt with a special token's id"
            )
        ids, added = [int(first), *ids], True
    if len(ids) < 2:
        raise ValueError("the prompt needs at least one token after its first (special) token")
    return torch.tensor([ids], dtype=torch.long), added


# ---------------------------------------------------------------------------------------------- the replacement
@dataclass
class ReplacementState:
    """The recorded local replacement model of one prompt: per layer ``inputs`` (the transcoder input ``x[l]``,
    (T, d)), ``outputs`` (the true MLP output, (T, d)), ``pre`` (the feature pre-activations, (T, n)), ``acts`` (the
    activations, zero at position 0), ``errors`` (true output − prediction, zero at position 0) and ``constants``
    (the MLP output minus its live skip term, (T, d)); ``resid0`` the stream entering block 0, ``final`` the final
    norm's output and ``logits`` the model's logits at the last position; ``weights`` each layer's raw weights
    (``replacement_weights(layer)`` of the set: ``W_dec`` is (n, layers written, d), column ``j`` writing to layer
    ``layer + j``; one column for per-layer transcoders).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
        >>> ids, _ = graph_prompt(lm_tokenizer, "The cat")
        >>> state = replacement_state(lm, ids, tcs)
        >>> len(state.acts), state.errors[0].shape[1], float(state.errors[0][0].abs().max())
        (2, 32, 0.0)
    """

    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]
    pre: list[torch.Tensor]
    acts: list[torch.Tensor]
    errors: list[torch.Tensor]
    constants: list[torch.Tensor]
    resid0: torch.Tensor
    final: torch.Tensor
    logits: torch.Tensor
    weights: list[dict[str, torch.Tensor]]
    live_skip: bool = True


def _skip(weights: dict, x: torch.Tensor) -> torch.Tensor:
    return x @ weights["W_skip"].T if "W_skip" in weights else torch.zeros_like(x)


def _decoder(weights: list[dict], source: int, target: int) -> torch.Tensor | None:
    """The decoder rows (n, d) with which layer ``source``'s features write to layer ``target``'s MLP output, or None
    (a per-layer transcoder writes to its own layer only; a cross-layer one to every layer from its own on)."""
    W = weights[source]["W_dec"]
    j = target - source
    return W[:, j] if 0 <= j < W.shape[1] else None


def _activation(tc, weights: dict, pre: torch.Tensor) -> torch.Tensor:
    """The transcoder's activation of raw pre-activations (the same rule as its encoder)."""
    if tc.activation == "relu":
        return torch.relu(pre)
    if tc.activation == "jumprelu":
        return torch.relu(pre) * (pre > weights["threshold"]).to(pre.dtype)
    values, indices = pre.topk(tc.k_, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))


def _unembedding(model) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor | None]:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise UnsupportedModelError(
            f"{type(model).__name__} has no output embedding (get_output_embeddings()): attribution graphs explain "
            "the next-token logits of a causal language model (AutoModelForCausalLM)"
        )
    return head, head.weight, getattr(head, "bias", None)


def _check_inputs(model, transcoders) -> None:
    if not isinstance(transcoders, (TranscoderSet, CrossLayerTranscoderSet)):
        raise TypeError(
            f"transcoders must be a TranscoderSet or a CrossLayerTranscoderSet (interp_widgets.circuits), got "
            f"{type(transcoders).__name__}; train one with TranscoderSet.fit or load one with TranscoderSet.load or "
            "CrossLayerTranscoderSet.from_circuit_tracer"
        )
    if is_encoder_decoder(model):
        raise UnsupportedModelError(
            f"{type(model).__name__} is an encoder-decoder: attribution graphs are computed for decoder-only "
            "causal language models"
        )
    transcoders.check_model(model)
    missing = sorted(set(range(transcoders.n_layers)) - set(transcoders.layers))
    if missing:
        raise ValueError(
            f"the transcoder set has no transcoder for layers {missing}: the replacement model replaces every MLP, "
            f"so a graph needs all {transcoders.n_layers} layers (TranscoderSet.fit(..., layers='all'))"
        )
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if dtypes - {torch.float32}:
        raise ValueError(
            f"the model's weights are {sorted(str(d) for d in dtypes)}; attribution graphs are computed in float32 "
            "(bf16/fp16 break the closure to float tolerance): load the model with torch_dtype=torch.float32, or "
            "pass a float32 copy (copy.deepcopy(model).float()); this function never changes your model"
        )


@contextlib.contextmanager
def _frozen(model, ids: torch.Tensor) -> Iterator[None]:
    """Attention patterns and norm scales frozen on ``ids``, in eval mode, with every hook removed on exit."""
    device = next(model.parameters()).device
    with evaluation(model), freezing(model, ("attention", "norms"), {"input_ids": ids.to(device)}):
        yield


def replacement_state(
    model, ids: torch.Tensor, transcoders: TranscoderSet | CrossLayerTranscoderSet
) -> ReplacementState:
    """Record the local replacement model of the prompt ``ids`` (1, T): run the model with attention and norms frozen
    and read every layer's transcoder input and MLP output (see :class:`ReplacementState`).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tc = Transcoder(16, k=2, skip=True, max_epochs=1, progress=False)
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=tc)
        >>> state = replacement_state(lm, graph_prompt(lm_tokenizer, "The cat")[0], tcs)
        >>> skip = state.inputs[1] @ state.weights[1]["W_skip"].T
        >>> torch.allclose(state.outputs[1], state.constants[1] + skip)
        True
    """
    _check_inputs(model, transcoders)
    with _frozen(model, ids):
        return _record(model, ids, transcoders)


def _record(model, ids: torch.Tensor, transcoders, skip_in_errors: bool = False) -> ReplacementState:
    """:func:`replacement_state` inside a block where attention and norms are already frozen on ``ids``; with
    ``skip_in_errors`` the skip terms are no path: their output is part of the error nodes and the constants."""
    n_layers = transcoders.n_layers
    points = [transcoder_points(model, layer, transcoders.input_point) for layer in range(n_layers)]
    head, _, _ = _unembedding(model)
    device = next(model.parameters()).device
    seen: dict = {}
    handles = []
    try:
        for layer, (x_point, y_point) in enumerate(points):
            handles.append(register(x_point, lambda m, i, h, layer=layer: seen.setdefault(("x", layer), h.detach())))
            handles.append(
                register(y_point, lambda m, i, v, layer=layer: seen.setdefault(("y", layer), _hidden(v).detach()))
            )
        handles.append(
            register(resolve_layer(model, "layer:0.resid_pre"), lambda m, i, h: seen.setdefault("resid0", h.detach()))
        )
        handles.append(head.register_forward_pre_hook(lambda m, args: seen.setdefault("final", args[0].detach())))
        with torch.no_grad():
            logits = model(input_ids=ids.to(device)).logits
    finally:
        for handle in handles:
            handle.remove()
    state = ReplacementState(
        [], [], [], [], [], [], seen["resid0"][0], seen["final"][0], logits[0, -1], [], live_skip=not skip_in_errors
    )
    for layer in range(n_layers):
        w = {
            name: t.to(device=device, dtype=torch.float32) for name, t in transcoders.replacement_weights(layer).items()
        }
        x = seen[("x", layer)][0]
        pre = x @ w["W_enc"].T + w["b_enc"]
        acts = _activation(transcoders[layer], w, pre)
        acts[0] = 0.0
        state.inputs.append(x)
        state.pre.append(pre)
        state.acts.append(acts)
        state.weights.append(w)
    for layer in range(n_layers):  # each layer's prediction: the features of every layer that writes to it
        x, y, w = state.inputs[layer], seen[("y", layer)][0], state.weights[layer]
        skip = torch.zeros_like(x) if skip_in_errors else _skip(w, x)
        prediction = w["b_dec"] + skip
        for source in range(layer + 1):
            decoder = _decoder(state.weights, source, layer)
            if decoder is not None:
                prediction = prediction + state.acts[source] @ decoder
        errors = y - prediction
        errors[0] = 0.0
        state.outputs.append(y)
        state.errors.append(errors)
        state.constants.append(y - skip)
    return state


def _hidden(value):
    return value[0] if isinstance(value, (tuple, list)) else value


# ---------------------------------------------------------------------------------------------- targets
def _logit_targets(tokenizer, state: ReplacementState, unembed: torch.Tensor, bias, targets, contrast,
                   desired_logit_prob: float, max_n_logits: int):  # fmt: skip
    """(Targets, demeaned read-out vectors (n, d), their constant parts (n,))."""
    probs = torch.softmax(state.logits.float(), dim=-1)
    vocab = unembed.shape[0]
    mean = unembed.mean(0)
    bias_mean = None if bias is None else bias.mean()

    def token_id(token, what) -> int:
        if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
            if not 0 <= int(token) < vocab:
                raise ValueError(f"{what} id {token} is outside the vocabulary (0..{vocab - 1})")
            return int(token)
        if isinstance(token, str):
            ids = tokenizer(token, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise ValueError(
                    f"{what} {token!r} is {len(ids)} tokens ({ids}), not one: a logit target is one vocabulary "
                    "token; give its id, or the text of a single token (mind the leading space: ' Paris')"
                )
            return int(ids[0])
        raise TypeError(f"{what} must be a token text or a token id, got {type(token).__name__}")

    def label(i: int) -> str:
        return tokenizer.decode([i])

    if contrast is not None:
        if targets is not None:
            raise ValueError("pass targets= or contrast=, not both")
        if not (isinstance(contrast, (tuple, list)) and len(contrast) == 2):
            raise TypeError("contrast must be a pair (answer, foil) of token texts or ids, e.g. (' Paris', ' Rome')")
        answer, foil = token_id(contrast[0], "the contrast answer"), token_id(contrast[1], "the contrast foil")
        if answer == foil:
            raise ValueError("the contrast answer and foil are the same token; give two different tokens")
        vec = (unembed[answer] - unembed[foil]).float()
        const = 0.0 if bias is None else float(bias[answer] - bias[foil])
        found = Targets([f"{label(answer)} − {label(foil)}"], ids=[vocab], probs=[float(probs[answer])])
        return found, vec[None], torch.tensor([const])
    if targets is None:
        check_fraction("desired_logit_prob", desired_logit_prob)
        check_int("max_n_logits", max_n_logits, minimum=1)
        order = torch.argsort(probs, descending=True)[:max_n_logits]
        cumulative = torch.cumsum(probs[order], 0)
        n = int(min(len(order), int((cumulative < desired_logit_prob).sum()) + 1))
        chosen = order[:n].tolist()
    else:
        items = [targets] if isinstance(targets, (str, int, np.integer)) else list(targets)
        if not items:
            raise ValueError("targets is empty; give at least one token, or None for the most probable ones")
        chosen = [token_id(t, "the target") for t in items]
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"targets name the same token twice ({chosen}); give each once")
    vectors = (unembed[chosen] - mean).float()
    consts = torch.zeros(len(chosen)) if bias is None else (bias[chosen] - bias_mean).float().cpu()
    found = Targets([label(i) for i in chosen], ids=chosen, probs=probs[chosen].cpu().numpy())
    return found, vectors, consts


# ---------------------------------------------------------------------------------------------- the batched pass
class _Backward:
    """One forward pass of the prompt through the replacement model (attention and norms frozen, each MLP's output
    its constant part plus the live skip term), whose graph answers many backward passes: :meth:`rows` takes a batch
    of targets and returns their direct-effect rows over every source.

    The targets of one call go through the backward pass together as a batch of cotangents
    (``torch.autograd.grad(..., is_grads_batched=True)``, vectorised with ``vmap``), so the forward pass runs on the
    prompt once, not replicated per target: its saved activations do not grow with the batch.
    """

    def __init__(self, model, ids, state: ReplacementState, points, sources):
        self.state, self.sources = state, sources
        device = state.final.device
        n_pos, width = state.final.shape
        self.deltas = [torch.zeros(1, n_pos, width, device=device, requires_grad=True) for _ in points]
        self.delta0 = torch.zeros(1, n_pos, width, device=device, requires_grad=True)
        self.reads: dict = {}
        handles = []
        try:
            for layer, (x_point, y_point) in enumerate(points):
                mlp = resolve_layer(model, f"layer:{layer}.mlp_in").module
                handles.append(register(x_point, lambda m, i, h, layer=layer: self.reads.__setitem__(layer, h)))
                # the MLP's output is replaced: where that output is the MLP module's own, the module runs on no
                # tokens at all; elsewhere on a detached input (no autograd graph)
                skip_mlp = y_point.module is mlp and y_point.site == "output"
                handles.append(mlp.register_forward_pre_hook(_empty_input if skip_mlp else _detach_input,
                                                             with_kwargs=True))  # fmt: skip
                handles.append(register_edit(y_point, self._mlp_output(layer)))
            handles.append(register_edit(resolve_layer(model, "layer:0.resid_pre"), lambda h: h + self.delta0))
            head, _, _ = _unembedding(model)
            handles.append(head.register_forward_pre_hook(self._read_final))
            with torch.enable_grad():
                model(input_ids=ids.to(device))
        finally:
            for handle in handles:
                handle.remove()

    def _read_final(self, module, args):
        """Keep the final norm's output and give the unembedding no positions: the logits are never needed here."""
        self.reads["final"] = args[0]
        return (args[0].detach()[:, :0], *args[1:])

    def _mlp_output(self, layer: int):
        w, constant = self.state.weights[layer], self.state.constants[layer]

        def replace(hidden):
            if not self.state.live_skip:
                return constant + self.deltas[layer]
            return constant + _skip(w, self.reads[layer]) + self.deltas[layer]

        return replace

    def rows(self, injections: list[tuple[object, int, torch.Tensor]]) -> torch.Tensor:
        """The rows (len(injections), n_sources) of targets given as ``(read, position, vector)``: ``read`` is a
        layer (a feature's pre-activation reads ``x[layer]``) or ``"final"`` (a logit reads the final norm)."""
        n = len(injections)
        grads_at: dict = {}
        for row, (read, pos, vector) in enumerate(injections):
            if read not in grads_at:
                grads_at[read] = self.reads[read].new_zeros(n, *self.reads[read].shape)
            grads_at[read][row, 0, pos] = vector
        keys = list(grads_at)
        grads = torch.autograd.grad(
            [self.reads[k] for k in keys],
            [*self.deltas, self.delta0],
            grad_outputs=[grads_at[k] for k in keys],
            retain_graph=True,
            allow_unused=True,
            is_grads_batched=True,
        )
        out = torch.zeros(n, self.sources.n_sources, device=self.state.final.device)
        for layer, grad in enumerate(grads[:-1]):
            if grad is None:
                continue
            grad = grad[:, 0]
            for pos, columns, decoded in self.sources.writes.get(layer, ()):
                out[:, columns] += grad[:, pos] @ decoded.T  # a cross-layer feature writes to several layers
            start = self.sources.error_start + layer * grad.shape[1]
            out[:, start : start + grad.shape[1]] = (grad * self.state.errors[layer]).sum(-1)
        if grads[-1] is not None:
            start = self.sources.token_start
            out[:, start : start + grads[-1].shape[2]] = (grads[-1][:, 0] * self.state.resid0).sum(-1)
        return out


def _empty_input(module, args, kwargs):
    """The MLP's input with no positions: the module's output is replaced anyway (its compute is wasted)."""
    if args:
        return (args[0].detach()[:, :0], *args[1:]), kwargs
    return args, {name: v.detach()[:, :0] if isinstance(v, torch.Tensor) else v for name, v in kwargs.items()}


def _detach_input(module, args, kwargs):
    if args:
        return (args[0].detach(), *args[1:]), kwargs
    return args, {name: v.detach() if isinstance(v, torch.Tensor) else v for name, v in kwargs.items()}


class _Sources:
    """The source columns: active features ``(layer, pos, feature)`` sorted, then errors (layer × pos), then tokens;
    ``writes[layer]`` lists ``(pos, columns, a · W_dec rows)`` of the features that write to layer ``layer``'s MLP
    output (from their own layer, or from an earlier one for a cross-layer transcoder)."""

    def __init__(self, state: ReplacementState):
        n_pos = state.final.shape[0]
        found = [torch.nonzero(acts) for acts in state.acts]  # (pos, feature), sorted
        table = [torch.cat([torch.full((len(f), 1), layer), f.cpu()], 1) for layer, f in enumerate(found)]
        self.features = torch.cat(table).numpy().astype(np.int64) if table else np.zeros((0, 3), np.int64)
        self.activations = np.concatenate([state.acts[layer][f[:, 0], f[:, 1]].cpu().numpy() for layer, f in
                                           enumerate(found)]).astype(np.float32)  # fmt: skip
        self.n_features = len(self.features)
        self.error_start = self.n_features
        self.token_start = self.error_start + len(state.acts) * n_pos
        self.n_sources = self.token_start + n_pos
        self.writes: dict[int, list] = {}
        start = 0
        for layer, f in enumerate(found):
            positions = f[:, 0]
            decoders = state.weights[layer]["W_dec"]  # (n, layers written, d)
            for pos in torch.unique(positions).tolist():
                local = torch.nonzero(positions == pos)[:, 0]
                idx = f[local, 1]
                columns = (local + start).to(decoders.device)
                for j in range(decoders.shape[1]):
                    decoded = state.acts[layer][pos, idx][:, None] * decoders[idx, j]
                    self.writes.setdefault(layer + j, []).append((pos, columns, decoded))
            start += len(f)


def _influence(
    rows: torch.Tensor, row_nodes: torch.Tensor, seed: torch.Tensor, max_steps: int = 1000, chunk: int = 256
) -> torch.Tensor:
    """Influence on every source column of the rows computed so far: ``rows`` (r, n_sources) are the direct-effect
    rows of nodes ``row_nodes`` (their column index, −1 for logits), ``seed`` (r,) the logit weights. Power
    iteration on the row-normalised ``|rows|`` (circuit-tracer's partial influences).

    The iteration runs on the square part (r × r: the columns that have rows), and the influence on every column is
    then one product ``(Σ_t current_t) @ normalised``, taken ``chunk`` rows at a time: no copy of ``rows`` is made.
    """
    sums = torch.zeros(rows.shape[0], device=rows.device)
    for start in range(0, rows.shape[0], chunk):
        sums[start : start + chunk] = rows[start : start + chunk].abs().sum(1)
    sums.clamp_min_(1e-10)
    has_row = torch.nonzero(row_nodes >= 0)[:, 0]
    square = torch.zeros(rows.shape[0], rows.shape[0], device=rows.device)
    square[:, has_row] = rows[:, row_nodes[has_row]].abs() / sums[:, None]
    accumulated = torch.zeros_like(seed)
    current = seed.clone()
    for _ in range(max_steps):
        if not current.any():
            break
        accumulated += current
        current = current @ square
    weights = accumulated / sums
    total = torch.zeros(rows.shape[1], device=rows.device)
    for start in range(0, rows.shape[0], chunk):
        total += weights[start : start + chunk] @ rows[start : start + chunk].abs()
    return total


def _pass_bytes(model, n_pos: int, batch: int, width: int, n_layers: int) -> float:
    """Bytes of one backward call at most: the forward pass's saved activations (about 14 floats of width per token
    and layer, and the attention pattern) and the batched backward pass's cotangents (``batch`` of them: the
    gradients of the ``n_layers + 1`` deltas, about 14 more per layer in flight, and the patterns' gradients)."""
    heads = next((getattr(c, k) for c in [model.config] for k in ("num_attention_heads", "n_head") if hasattr(c, k)), 1)
    forward = n_pos * n_layers * (14 * width + heads * n_pos) * 4
    backward = batch * n_pos * ((n_layers + 15) * width + 2 * heads * n_pos) * 4
    return forward + backward


def _rows_bytes(n_rows: int, n_sources: int) -> float:
    """Bytes of the computed rows (each over every source), plus the square part the influence iterates on."""
    return (n_rows * n_sources + n_rows * n_rows) * 4


# ---------------------------------------------------------------------------------------------- the graph
def attribution_graph(
    model,
    tokenizer,
    prompt,
    transcoders: TranscoderSet | CrossLayerTranscoderSet,
    *,
    targets=None,
    contrast=None,
    max_feature_nodes: int | None = None,
    batch_size: int = 64,
    update_interval: int = 4,
    desired_logit_prob: float = 0.95,
    max_n_logits: int = 10,
    max_memory_gb: float = 4.0,
    skip_in_errors: bool = False,
    scan: str | None = None,
    progress: bool = True,
) -> AttributionGraph:
    """The attribution graph of ``prompt`` (the next token after it) through ``model`` and ``transcoders`` (a
    :class:`~interp_widgets.circuits.TranscoderSet` with every layer, or a
    :class:`~interp_widgets.circuits.CrossLayerTranscoderSet`): the direct effects between active features, error
    nodes, token embeddings and logit targets in the local replacement model (module docstring).

    Args:
        prompt: a text or token ids; a BOS is prepended when it does not start with a special token (the graph's
            ``provenance.settings["bos_added"]`` says so).
        targets: the logit targets: None (the most probable tokens until their probability reaches
            ``desired_logit_prob``, at most ``max_n_logits``), or token texts / ids (each a single token).
        contrast: ``(answer, foil)``: one target, the logit difference ``u_answer − u_foil`` (a virtual id, the
            vocabulary size, as circuit-tracer's custom targets).
        max_feature_nodes: the most feature rows (and columns) kept, most influential first; None: all.
        batch_size: targets per backward pass (rows at once); the backward pass's memory grows with
            ``batch_size × prompt tokens``.
        update_interval: batches between influence updates when features are capped.
        max_memory_gb: refuse (naming what to lower) when the estimated memory exceeds it: the backward pass's
            (``batch_size × tokens``), and then that of the rows kept (``max_feature_nodes`` + logit targets, each over
            every source: active features, errors and tokens).
        skip_in_errors: fold the transcoders' skip terms into the error nodes (their output is then unexplained,
            not a path for direct effects): the stricter replacement and completeness scores of skip transcoders.
        scan: the transcoder set's name in the graph JSON (default: the set's model name + ``-transcoders``).

    Never changes the model (hooks, attention implementation and modes are restored, also on errors and Ctrl-C).

    Example:
        >>> from interp_widgets.circuits import TranscoderSet
        >>> from interp_widgets.concepts import Transcoder
        >>> tcs = TranscoderSet.fit(lm, lm_tokenizer, texts, transcoder=Transcoder(16, k=2, max_epochs=1, progress=False))
        >>> graph = attribution_graph(lm, lm_tokenizer, "The cat sat on the", tcs, targets=[" the"], progress=False)
        >>> graph.logits.labels, graph.prune().scores().replacement <= 1
        ([' the'], True)
    """
    _check_inputs(model, transcoders)
    check_int("batch_size", batch_size, minimum=1)
    check_int("update_interval", update_interval, minimum=1)
    if max_feature_nodes is not None:
        check_int("max_feature_nodes", max_feature_nodes, minimum=0)
    ids, bos_added = graph_prompt(tokenizer, prompt)
    n_layers, n_pos = transcoders.n_layers, ids.shape[1]
    width = transcoders.d_model
    estimate = _pass_bytes(model, n_pos, batch_size, width, n_layers) / 2**30
    if estimate > max_memory_gb:
        per_row = (
            _pass_bytes(model, n_pos, 2, width, n_layers) - _pass_bytes(model, n_pos, 1, width, n_layers)
        ) / 2**30
        fits = max(1, int((max_memory_gb - (estimate - batch_size * per_row)) / per_row))
        raise ValueError(
            f"a prompt of {n_pos} tokens × batch_size {batch_size} needs about {estimate:.1f} GB of autograd memory, "
            f"over max_memory_gb={max_memory_gb}: lower batch_size to {fits} or less (or shorten the prompt, or "
            "raise max_memory_gb if you have the memory)"
        )
    points = [transcoder_points(model, layer, transcoders.input_point) for layer in range(n_layers)]
    _, unembed, bias = _unembedding(model)
    with _frozen(model, ids):
        state = _record(model, ids, transcoders, skip_in_errors=skip_in_errors)
        found, vectors, _ = _logit_targets(tokenizer, state, unembed.detach(), None if bias is None else
                                           bias.detach(), targets, contrast, desired_logit_prob, max_n_logits)  # fmt: skip
        sources = _Sources(state)
        n_feat = sources.n_features
        cap = n_feat if max_feature_nodes is None else min(max_feature_nodes, n_feat)
        kept = (estimate * 2**30 + _rows_bytes(len(found) + cap, sources.n_sources)) / 2**30
        if kept > max_memory_gb:
            spare = max_memory_gb * 2**30 - estimate * 2**30
            fits = int(max(0.0, spare / (4 * (sources.n_sources + len(found) + cap)) - len(found)))
            raise ValueError(
                f"the graph of {n_pos} tokens keeps {len(found) + cap} rows over {sources.n_sources} sources "
                f"({n_feat} active features): about {kept:.1f} GB with the backward pass, over "
                f"max_memory_gb={max_memory_gb}; lower max_feature_nodes to {fits} or less (or shorten the prompt, "
                "or raise max_memory_gb if you have the memory)"
            )
        bar = tqdm(total=len(found) + cap, desc="attribution graph rows", disable=not progress, unit="row")
        engine = None
        try:
            engine = _Backward(model, ids, state, points, sources)
            device = state.final.device
            n_targets = len(found)
            # every computed row, on the model's device: the logit rows, then feature rows in the order computed
            store = torch.empty(n_targets + cap, sources.n_sources, device=device)
            for i in range(0, n_targets, batch_size):
                store[i : min(i + batch_size, n_targets)] = engine.rows(
                    [("final", n_pos - 1, v.to(device)) for v in vectors[i : i + batch_size]]
                )
            bar.update(n_targets)
            computed: list[int] = []  # the feature indices whose rows follow the logit rows in store, in order

            def compute(chosen: list[int]) -> None:
                for i in range(0, len(chosen), batch_size):
                    chunk = chosen[i : i + batch_size]
                    start = n_targets + len(computed)
                    store[start : start + len(chunk)] = engine.rows([
                        (int(layer), int(pos), encoders[layer][feature])
                        for layer, pos, feature in sources.features[chunk]
                    ])  # fmt: skip
                    computed.extend(chunk)
                    bar.update(len(chunk))

            def influence_of_rows() -> torch.Tensor:
                """Every source column's influence through the rows computed so far (a view of store, no copy)."""
                nodes = torch.tensor([-1] * n_targets + computed, dtype=torch.long, device=device)
                rows = store[: n_targets + len(computed)]
                return _influence(rows, nodes, torch.cat([seed, seed.new_zeros(len(computed))])).cpu()

            encoders = [w["W_enc"] for w in state.weights]
            seed = torch.as_tensor(found.probs, dtype=torch.float32, device=device)
            if cap == n_feat:
                compute(list(range(n_feat)))
            while len(computed) < cap:
                influence = influence_of_rows()[:n_feat]
                influence[computed] = -1.0
                order = torch.argsort(influence, descending=True, stable=True)
                take = min(update_interval * batch_size, cap - len(computed))
                compute(order[:take].tolist())
        finally:
            engine = None  # its autograd graph is freed before the adjacency is assembled
            bar.close()
    lost = None
    if cap < n_feat:
        influence = influence_of_rows()
        dropped = np.setdiff1d(np.arange(n_feat), computed)
        total = float(influence.sum())
        lost = float(influence[dropped].sum()) / total if total > 0 else 0.0
    selected = np.array(sorted(computed), dtype=np.int64)
    slot = np.empty(n_feat, np.int64)
    slot[computed] = np.arange(n_targets, n_targets + len(computed))
    adjacency = _assemble(sources, selected, store, slot[selected], n_targets)
    tokens = [tokenizer.decode([i]) for i in ids[0].tolist()]
    text = prompt if isinstance(prompt, str) else tokenizer.decode(ids[0])
    settings = {
        "bos_added": bos_added,
        "batch_size": batch_size,
        "max_feature_nodes": max_feature_nodes,
        "update_interval": update_interval,
        "input_point": transcoders.input_point,
        "cross_layer": isinstance(transcoders, CrossLayerTranscoderSet),
        "skip_in_errors": bool(skip_in_errors),
        "targets": "contrast" if contrast is not None else ("given" if targets is not None else "salient"),
        "n_active_features": n_feat,
    }
    return AttributionGraph(
        input=GraphInput.of(text, tokens, ids[0].numpy()),
        nodes=GraphNodes(
            features=sources.features[selected],
            activations=sources.activations[selected],
            n_layers=n_layers,
            scan=scan or f"{transcoders.model_name or 'model'}-transcoders",
        ),
        logits=found,
        adjacency=adjacency,
        provenance=GraphProvenance(cap=None if cap == n_feat else FeatureCap(n_feat, lost), settings=settings),
    )


def _assemble(
    sources: _Sources, selected: np.ndarray, store: torch.Tensor, slots: np.ndarray, n_logits: int, chunk: int = 512
) -> np.ndarray:
    """The graph's square adjacency: rows and columns of the selected features, errors, tokens and logits, from
    ``store`` (the logit rows first, then feature rows; ``slots[i]`` is the row of ``selected[i]``, each over every
    source), read ``chunk`` rows at a time."""
    n_sel = len(selected)
    n_other = sources.n_sources - sources.n_features
    n = n_sel + n_other + n_logits
    columns = torch.as_tensor(np.concatenate([selected, np.arange(sources.n_features, sources.n_sources)]),
                              device=store.device)  # fmt: skip
    adjacency = np.zeros((n, n), np.float32)
    row_slots = np.concatenate([slots, np.arange(n_logits)]).astype(np.int64)
    row_places = np.r_[np.arange(n_sel), np.arange(n_sel + n_other, n)]
    for start in range(0, len(row_slots), chunk):
        picked = torch.as_tensor(row_slots[start : start + chunk], device=store.device)
        block = store.index_select(0, picked).index_select(1, columns).cpu().numpy()
        adjacency[row_places[start : start + chunk], : n_sel + n_other] = block
    return adjacency
