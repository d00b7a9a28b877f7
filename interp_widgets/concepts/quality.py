"""How well a concept model stands in for its layer: L0, variance unexplained and the next-token loss when spliced in.

:func:`splice_quality` runs the model over texts three or four times per text: as it is (recording the layer), with
the layer's activations replaced by their reconstruction ``inverse_transform(transform(h))`` (the concept model
*spliced in*), and with them replaced by zeros (the reference for how much the layer matters). It reports

- ``l0``: mean active concepts per token;
- ``fvu``: the fraction of variance unexplained, ``‖h − ĥ‖² / ‖h − mean(h)‖²`` over tokens (the mean per feature);
- ``loss_clean``, ``loss_spliced``, ``loss_ablated``: next-token cross-entropy (nats per predicted token; causal LMs
  only), ``delta_loss = loss_spliced − loss_clean``, and ``loss_recovered = (loss_ablated − loss_spliced) /
  (loss_ablated − loss_clean)``: 1 when splicing costs nothing, 0 when it is as bad as deleting the layer.

Special tokens (BOS…) keep their own activations and are left out of ``l0`` and ``fvu``: their activations are
outliers that SAEs are usually not trained on. So are attention-sink rows with ``skip_positions="auto"`` (what
:func:`~interp_widgets.concepts.load_sae` uses), or the first positions with ``skip_positions=1``. The hooks are context managers, removed on exit and on errors; the
model is left as it was. Splicing at ``layer:i.resid_mid`` replaces the input of the block's second norm, which is
what the MLP reads; the residual stream that bypasses the MLP keeps the original value.

A concept model fitted on another model, another layer or differently processed activations reconstructs badly:
its ``fvu`` is large and the loss jumps. :meth:`SpliceQuality.problem` says so (``fvu > 0.5``, or less than 85% of
the loss recovered when ablating the layer costs at least 0.1 nats), and :func:`~interp_widgets.concepts.load_sae`
warns with it. Well-matched SAEs usually explain most of the variance and recover over 90% of the loss; a weak but
matching SAE can trip the warning too, which then says so.

Example:
    >>> from interp_widgets.concepts import SparseAutoencoder, collect_activations
    >>> lm_store = collect_activations(lm, lm_tokenizer, texts, layer=1, progress=False)
    >>> sae = SparseAutoencoder(64, k=16, lr=3e-3, max_epochs=30, batch_size=128, progress=False).fit(lm_store)
    >>> quality = splice_quality(sae, lm, lm_tokenizer, texts[:20], progress=False)
    >>> quality  # a random tiny LM: zero-ablating its last block even lowers the loss, so nothing is "recovered"
    SpliceQuality(layer:1: L0 16, FVU 0.087, loss 7.005 -> 6.989 (-0.015 nats; zero-ablated 6.397), 657 tokens)
    >>> quality.problem() is None, quality.loss_recovered is None
    (True, True)
    >>> splice_quality(sae, lm, lm_tokenizer, texts[:20], skip_positions=1, progress=False).n_tokens  # no first tokens
    637
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from interp_widgets._inputs import check_texts
from interp_widgets.validation import check_int
from interp_widgets.adapter import ModelAdapter
from interp_widgets.tasks import task_for
from interp_widgets.concepts.decompositions import ConceptModel
from interp_widgets.layers import (
    UnsupportedModelError,
    capture,
    evaluation,
    hidden_of,
    hooks,
    resolve_layer,
    to_hook_name,
)

#: ``problem()`` thresholds: FVU above this, or loss recovered below this when ablation costs at least MIN_GAP nats.
MAX_FVU = 0.5
MIN_LOSS_RECOVERED = 0.85
MIN_GAP = 0.1
#: ``skip_positions="auto"``: a row whose norm exceeds this multiple of its text's median row norm is an attention
#: sink's massive activation (the factor ``benchmarks/concepts.py`` drops from its stores with ``select``).
MASSIVE_FACTOR = 10.0


@dataclass
class SpliceQuality:
    """The result of :func:`splice_quality` (see the module docstring for the definitions).

    Example:
        >>> q = SpliceQuality("layer:3", 120, 8.0, 2.5, 3.1, 4.9, 5.0)
        >>> round(q.delta_loss, 2), round(q.loss_recovered, 3)
        (1.8, 0.053)
        >>> q.problem()
        'the SAE reconstructs layer:3 badly: 250% of its variance is unexplained (FVU 2.5; a matching SAE is usually below 0.5), and splicing it in raises the next-token loss by 1.8 nats, recovering 5% of the loss that zero-ablating the layer costs (a matching SAE usually recovers over 90%)'
    """

    layer: str
    n_tokens: int
    l0: float
    fvu: float
    loss_clean: float | None = None
    loss_spliced: float | None = None
    loss_ablated: float | None = None
    n_skipped: int = 0

    @property
    def delta_loss(self) -> float | None:
        """``loss_spliced − loss_clean`` (None for models without a next-token loss)."""
        return None if self.loss_clean is None else self.loss_spliced - self.loss_clean

    @property
    def loss_recovered(self) -> float | None:
        """``(loss_ablated − loss_spliced) / (loss_ablated − loss_clean)``; None without a loss or a gap."""
        if self.loss_clean is None or self.loss_ablated - self.loss_clean <= 1e-12:
            return None
        return (self.loss_ablated - self.loss_spliced) / (self.loss_ablated - self.loss_clean)

    def problem(self) -> str | None:
        """A sentence describing a reconstruction too poor for a matching SAE, or None.

        Example:
            >>> SpliceQuality("layer:1", 100, 12.0, 0.2, 3.0, 3.05, 4.0).problem() is None
            True
        """
        recovered = self.loss_recovered
        gap = None if self.loss_clean is None else self.loss_ablated - self.loss_clean
        bad_fvu = self.fvu > MAX_FVU
        bad_loss = recovered is not None and gap >= MIN_GAP and recovered < MIN_LOSS_RECOVERED
        if not (bad_fvu or bad_loss):
            return None
        parts = []
        if bad_fvu:
            parts.append(
                f"{self.fvu:.0%} of its variance is unexplained (FVU {self.fvu:.3g}; a matching SAE is "
                f"usually below {MAX_FVU})"
            )
        if recovered is not None:
            parts.append(
                f"splicing it in raises the next-token loss by {self.delta_loss:.3g} nats, recovering "
                f"{recovered:.0%} of the loss that zero-ablating the layer costs (a matching SAE usually "
                "recovers over 90%)"
            )
        return f"the SAE reconstructs {self.layer} badly: " + ", and ".join(parts)

    def to_dict(self) -> dict:
        """Every field and derived number, as plain floats (JSON-ready).

        Example:
            >>> sorted(SpliceQuality("layer:1", 10, 2.0, 0.3).to_dict())
            ['delta_loss', 'fvu', 'l0', 'layer', 'loss_ablated', 'loss_clean', 'loss_recovered', 'loss_spliced', 'n_skipped', 'n_tokens']
        """
        return {**asdict(self), "delta_loss": self.delta_loss, "loss_recovered": self.loss_recovered}

    def __repr__(self) -> str:
        head = f"SpliceQuality({self.layer}: L0 {self.l0:.3g}, FVU {self.fvu:.2g}"
        tokens = f"{self.n_tokens} tokens" + (f", {self.n_skipped} skipped" if self.n_skipped else "")
        if self.loss_clean is None:
            return head + f", {tokens})"
        recovered = self.loss_recovered
        rec = "" if recovered is None else f", {recovered:.0%} recovered"
        return (
            head + f", loss {self.loss_clean:.3f} -> {self.loss_spliced:.3f} ({self.delta_loss:+.3f} nats; "
            f"zero-ablated {self.loss_ablated:.3f}{rec}), {tokens})"
        )


def _replace(value, hidden):
    if isinstance(value, tuple):
        return (hidden, *value[1:])
    if isinstance(value, list):
        return [hidden, *value[1:]]
    return hidden


def _next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> tuple[float, int]:
    logp = torch.log_softmax(logits[0, :-1].double(), dim=-1)
    return float(-logp.gather(-1, ids[0, 1:, None]).sum()), int(ids.shape[1] - 1)


def _layer_width(model, layer: str) -> tuple[str, int]:
    name = resolve_layer(model, layer).name
    device = next(model.parameters()).device
    with evaluation(model), torch.no_grad(), capture(model, [name]) as captured:
        ids = torch.zeros((1, 2), dtype=torch.long, device=device)
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return name, int(captured[name][0].shape[-1])


def check_base_model(concept_model: ConceptModel, model, *, layer=None) -> str:
    """Check that ``model`` is the base model of ``concept_model``: name, hook point and width; returns the layer name.

    Example:
        >>> check_base_model(concepts, model)  # the namespace's NMF concepts, fitted on layer 1
        'layer:1'
        >>> check_base_model(concepts, model, layer="layer:0.attn_out")
        Traceback (most recent call last):
        ...
        ValueError: the concept model was fitted on layer:1, not layer:0.attn_out; pass the layer it was fitted on
    """
    concept_model.check_model(model)
    fitted = concept_model.layer_
    spec = layer if layer is not None else fitted
    if spec is None:
        raise ValueError("the concept model does not record its layer (it was fitted on an array); pass layer=")
    try:
        name, width = _layer_width(model, spec)
    except (ValueError, UnsupportedModelError) as err:
        hook = f" (hook {to_hook_name(fitted)})" if fitted and str(fitted).startswith("layer:") else ""
        raise ValueError(f"the SAE's hook point {spec!r}{hook} is not in this {type(model).__name__}: {err}") from None
    if fitted is not None and layer is not None:
        fitted_name = _layer_width(model, fitted)[0]
        if fitted_name != name:
            raise ValueError(
                f"the concept model was fitted on {fitted_name}, not {name}; pass the layer it was fitted on"
            )
    if width != concept_model.n_features_in_:
        expected = concept_model.n_features_in_
        raise ValueError(
            f"the SAE reads {expected}-wide activations (d_in={expected}) but {name} of this "
            f"{type(model).__name__} is {width} wide; use the model and layer the SAE was trained on"
        )
    return name


def splice_quality(
    concept_model: ConceptModel,
    model,
    tokenizer,
    texts,
    *,
    layer=None,
    skip_positions: int | str = 0,
    progress: bool = True,
) -> SpliceQuality:
    """L0, FVU and the next-token loss with ``concept_model`` spliced into its layer of ``model``, over ``texts``.

    Args:
        concept_model: a fitted concept model (an SAE, or any other: NMF, PCA…).
        model, tokenizer: the Hugging Face model and its fast tokenizer; the loss needs a causal LM (for other
            models only ``l0`` and ``fvu`` are measured).
        texts: a text or a list of texts.
        layer: defaults to the layer the concept model was fitted on.
        skip_positions: the first positions of every text that keep their own activations and are left out of
            ``l0`` and ``fvu``, as special tokens are. Use 1 for an SAE fitted without each text's first token:
            LMs without a BOS token make the first token an attention sink whose activations are huge outliers
            (SmolLM2 at layer 15: over 100 times the median norm), and replacing it breaks every later position.
            ``"auto"`` finds those rows per text instead, as ``ActivationStore.row_norms`` / ``select`` drop them
            from a store: any row whose norm is over ``MASSIVE_FACTOR`` (10) times the median norm of the text's
            rows (its largest left out) keeps its own activations and is left out (``n_skipped`` counts them).
            Texts of one token have nothing to compare with and skip nothing.
        progress: show a progress bar over the texts.

    Example:
        >>> q = splice_quality(concepts, model, tokenizer, texts[:10], progress=False)  # the classifier: no loss
        >>> q.layer, q.n_tokens, round(q.fvu, 3), q.loss_clean
        ('layer:1', 181, 0.335, None)
    """
    from tqdm.auto import tqdm

    if not isinstance(concept_model, ConceptModel):
        raise TypeError(f"concept_model must be a fitted ConceptModel, got {type(concept_model).__name__}")
    concept_model._check_fitted()
    texts = [texts] if isinstance(texts, str) else list(texts)
    check_texts(texts, name="texts", call="splice_quality(sae, model, tokenizer, ['a text', ...])")
    if not texts:
        raise ValueError("no texts given; pass a string or a non-empty list of strings")
    auto = isinstance(skip_positions, str) and skip_positions == "auto"
    if isinstance(skip_positions, str) and not auto:
        raise ValueError(f"skip_positions must be a number of leading positions or 'auto', got {skip_positions!r}")
    skip = 0 if auto else check_int("skip_positions", skip_positions, minimum=0)
    adapter = ModelAdapter(model, tokenizer)
    name = check_base_model(concept_model, model, layer=layer)
    point = resolve_layer(model, name)
    causal = task_for(adapter).causal
    n, skipped, active, sq_err, total, total_sq = 0, 0, 0, 0.0, None, None
    losses = {"clean": 0.0, "spliced": 0.0, "ablated": 0.0}
    predicted = 0
    state: dict = {}

    def hook(module, inputs, value):
        hidden = hidden_of(value)
        mode = state.get("mode")
        if mode == "record":
            state["hidden"] = hidden.detach()
            return None
        new = hidden.clone()
        new[0, state["keep"]] = state[mode].to(hidden.dtype) if mode == "spliced" else 0.0
        return new if point.site == "input" else _replace(value, new)

    bar = tqdm(texts, desc=f"splice quality {name}", unit="text", disable=not progress)
    with evaluation(model), torch.no_grad(), hooks(model, {name: hook}):
        for text in bar:
            enc = adapter.encode(text)
            ids = torch.as_tensor(enc.input_ids, device=adapter.device)[None]
            mask = torch.ones_like(ids)
            keep = torch.as_tensor(~enc.special_mask, device=adapter.device)
            keep[:skip] = False
            state.update(mode="record", keep=keep)
            logits = model(input_ids=ids, attention_mask=mask).logits
            if auto:
                massive = _massive_rows(state["hidden"][0].float(), keep)
                skipped += int(massive.sum())
                keep &= ~massive  # state["keep"] is this tensor: the splice leaves the massive rows as they are
            hidden = state["hidden"][0][keep].float()
            if not len(hidden):
                continue
            X = hidden.cpu().numpy()
            C = concept_model.transform(X)
            X_hat = concept_model.inverse_transform(C, X=X)
            active += int((np.abs(C) > 0).sum())
            sq_err += float(((X.astype(np.float64) - X_hat) ** 2).sum())
            total = X.sum(0, dtype=np.float64) if total is None else total + X.sum(0, dtype=np.float64)
            total_sq = (
                (X.astype(np.float64) ** 2).sum(0)
                if total_sq is None
                else total_sq + (X.astype(np.float64) ** 2).sum(0)
            )
            n += len(X)
            if not causal or ids.shape[1] < 2:
                continue
            loss, count = _next_token_loss(logits, ids)
            losses["clean"] += loss
            state["spliced"] = torch.as_tensor(X_hat, device=adapter.device)
            for mode in ("spliced", "ablated"):
                state["mode"] = mode
                losses[mode] += _next_token_loss(model(input_ids=ids, attention_mask=mask).logits, ids)[0]
            predicted += count
    bar.close()
    if not n:
        raise ValueError("the texts have no tokens besides special tokens; pass longer texts")
    centred = float((total_sq - total**2 / n).sum())
    fvu = sq_err / max(centred, 1e-30)
    loss = {key: value / predicted for key, value in losses.items()} if predicted else {}
    return SpliceQuality(
        layer=name,
        n_tokens=n,
        l0=active / n,
        fvu=float(fvu),
        loss_clean=loss.get("clean"),
        loss_spliced=loss.get("spliced"),
        loss_ablated=loss.get("ablated"),
        n_skipped=skipped,
    )


def _massive_rows(hidden: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Which rows of one text (among ``keep``) have a norm over MASSIVE_FACTOR times the median norm of its rows
    without the largest one."""
    norms = hidden.norm(dim=-1)
    out = torch.zeros_like(keep)
    candidates = norms[keep]
    if len(candidates) < 2:
        return out
    ordered = candidates.sort().values
    reference = ordered[:-1].median()  # without the largest row: a sink in a two-token text still stands out
    out[keep] = candidates > MASSIVE_FACTOR * reference
    return out


__all__ = ["SpliceQuality", "check_base_model", "splice_quality"]
