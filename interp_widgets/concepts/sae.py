"""Sparse autoencoders in torch: ReLU with an L1 penalty, TopK, JumpReLU and BatchTopK, trained from a store.

The input is centred on the decoder bias and scaled so that a row has unit mean squared value per feature
(``scale_``); the decoder rows are kept at unit norm. Every SAE trains with the one loop of
:mod:`~interp_widgets.concepts.training`, set by a :class:`~interp_widgets.concepts.TrainingConfig` (``training=``, or
its fields as keyword arguments: ``SparseAutoencoder(64, lr=3e-3, max_epochs=20)``). Training reads shuffled
minibatches from an :class:`~interp_widgets.concepts.ActivationStore` (or an array), shows a progress bar, stops early
when the loss on a fixed monitoring sample stops improving (the best weights are kept), and resamples dead concepts;
each SAE kind supplies only its initial weights, encoder and loss. Resampling: after an epoch in
which a concept never fired, its decoder row is reset to the residual direction of a badly reconstructed input
(chosen with probability proportional to the square of its reconstruction loss) and its encoder column to that
direction scaled to the mean encoder norm of live concepts (× 0.2 for ReLU; × 1 for the others, where a unit must
win a slot or pass a threshold to fire).

Four activations:

- :class:`SparseAutoencoder` ``activation="relu"``: ReLU, with an L1 penalty on the coefficients;
- :class:`SparseAutoencoder` ``activation="topk"``: the ``k`` largest pre-activations of each row, then ReLU;
- :class:`JumpReLUSAE`: ``pre · H(pre − θ)`` with a learned threshold ``θ`` per concept and an L0 penalty. The step
  ``H`` has no useful gradient, so the threshold learns through the straight-through estimator of Rajamanoharan et
  al. (2024): ``∂H(z − θ)/∂θ ≈ −K((z − θ)/ε)/ε`` with the rectangle kernel ``K`` of bandwidth ``ε``;
- :class:`BatchTopKSAE` (Bussmann et al., 2024): during training the ``k × rows`` largest pre-activations of the
  whole minibatch are kept (``k`` active concepts per row on average, more for some rows, fewer for others). A
  minibatch rule cannot be applied to one row at inference, so after training one threshold ``θ`` is estimated on
  the monitoring sample (the value that keeps exactly ``k × rows`` of its pre-activations) and inference is the
  JumpReLU ``pre · H(pre − θ)``: this is how SAELens saves BatchTopK SAEs too.

A fitted SAE also carries the SAELens conventions of :mod:`interp_widgets.concepts.saelens` (``preprocessing_``):
whether the decoder bias is subtracted from the input, the input normalisation (``"none"``,
``"constant_norm_rescale"``: each row scaled to norm √d; ``"layer_norm"``: each row standardised), and whether the
row mean is removed first (activations of a TransformerLens model loaded with ``center_writing_weights``). SAEs
fitted here use none of the row-wise steps; SAEs loaded with :func:`~interp_widgets.concepts.load_sae` may. With a
row-wise step, decoding needs the row's statistics: pass ``X=`` (the activations the coefficients came from) to
``inverse_transform`` and ``decode_torch``, and ``components_`` / ``offset_`` are in the normalised space.

Example:
    >>> sae = SparseAutoencoder(64, activation="topk", k=8, max_epochs=20, batch_size=128, progress=False)
    >>> sae.fit(store).fit_info_["epochs"], sae.fit_info_["stopped_early"]
    (20, False)
    >>> {key: round(value, 3) for key, value in sae.fit_info_["history"][-1].items()}
    {'epoch': 19, 'train_loss': 0.307, 'monitor_loss': 0.298, 'monitor_fvu': 0.298, 'dead': 0, 'resampled': 0}
    >>> int((sae.transform(store) > 0).sum(1).max())  # at most k = 8 active concepts per row
    8
"""

from __future__ import annotations

import numpy as np
import torch

from interp_widgets.concepts.decompositions import ConceptModel
from interp_widgets.concepts.training import Step, TrainingConfig, train_dictionary
from interp_widgets.validation import check_choice, check_int, check_number

ACTIVATIONS = ("relu", "topk")
#: Input normalisations a fitted SAE can apply (SAELens names); ``expected_average_only_in`` is folded into the weights.
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")
_LAYER_NORM_EPS = 1e-5  # SAELens's layer_norm normalisation: (x - mean) / (std + 1e-5)
_PLAIN = {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": True}


class _JumpReLU(torch.autograd.Function):
    """``pre · H(pre − θ)``; the gradient to ``θ`` is the straight-through estimate ``−(θ/ε) K((pre − θ)/ε)``."""

    @staticmethod
    def forward(ctx, pre, threshold, bandwidth):
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return pre * (pre > threshold).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, threshold = ctx.saved_tensors
        window = ((pre - threshold).abs() < ctx.bandwidth / 2).to(grad.dtype)  # rectangle kernel K(u) = 1{|u| < 1/2}
        grad_pre = grad * (pre > threshold).to(grad.dtype)
        grad_threshold = (-(threshold / ctx.bandwidth) * window * grad).reshape(-1, threshold.shape[-1]).sum(0)
        return grad_pre, grad_threshold, None


class _Step(torch.autograd.Function):
    """``H(pre − θ)``; no gradient to ``pre``, the straight-through estimate ``−K((pre − θ)/ε)/ε`` to ``θ``."""

    @staticmethod
    def forward(ctx, pre, threshold, bandwidth):
        ctx.save_for_backward(pre, threshold)
        ctx.bandwidth = bandwidth
        return (pre > threshold).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, threshold = ctx.saved_tensors
        window = ((pre - threshold).abs() < ctx.bandwidth / 2).to(grad.dtype)
        grad_threshold = (-(1.0 / ctx.bandwidth) * window * grad).reshape(-1, threshold.shape[-1]).sum(0)
        return None, grad_threshold, None


class _TopKSelect(torch.autograd.Function):
    """The ``k`` largest pre-activations ``xn @ W_enc + b_enc`` of each row and their indices, with a sparse backward.

    The forward pass is the dense encoder followed by ``topk``, as in :meth:`_SparseAutoencoderBase._encode`. The gradient
    of the selected values reaches only ``k`` entries per row, so the backward pass gathers and scatters those
    entries (``rows × k × d`` multiply-adds) instead of multiplying by a dense ``rows × n_concepts`` gradient.
    """

    @staticmethod
    def forward(ctx, xn, W_enc, b_enc, k):
        values, indices = (xn @ W_enc + b_enc).topk(k, dim=-1)
        ctx.save_for_backward(xn, W_enc, indices)
        ctx.mark_non_differentiable(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        xn, W_enc, indices = ctx.saved_tensors
        n_rows, k = indices.shape
        n_concepts = W_enc.shape[1]
        flat, grad_flat = indices.reshape(-1), grad_values.reshape(-1)
        grad_xn = grad_W_enc = grad_b_enc = None
        if ctx.needs_input_grad[0]:  # row i gets the sum of g_ij times encoder column idx_ij
            grad_xn = torch.nn.functional.embedding_bag(
                indices, W_enc.T, mode="sum", per_sample_weights=grad_values.contiguous()
            )
        if ctx.needs_input_grad[1]:  # column idx_ij gets g_ij times row i: a sparse (n_concepts × rows) @ xn
            rows = torch.arange(n_rows, device=flat.device).repeat_interleave(k)
            sparse = torch.sparse_coo_tensor(
                torch.stack([flat, rows]), grad_flat, (n_concepts, n_rows), check_invariants=False
            )
            grad_W_enc = torch.sparse.mm(sparse, xn).T
        if ctx.needs_input_grad[2]:
            grad_b_enc = torch.zeros(n_concepts, dtype=grad_flat.dtype, device=flat.device).index_add_(
                0, flat, grad_flat
            )
        return grad_xn, grad_W_enc, grad_b_enc, None


def topk_reconstruct(
    xn: torch.Tensor, W_enc: torch.Tensor, b_enc: torch.Tensor, W_dec: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TopK SAE reconstruction ``relu(topk(xn @ W_enc + b_enc)) @ W_dec`` without a dense code matrix.

    Returns ``(reconstruction, active values, their concept indices)``. Only the encoder product is dense; the
    decoder sums the ``k`` selected rows of ``W_dec`` per input row (``embedding_bag``), and the backward pass
    touches only the selected entries. Gradients and values equal those of the dense formulation
    ``torch.zeros(...).scatter(-1, indices, relu(values)) @ W_dec`` up to float rounding.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> xn, W_enc, W_dec = torch.randn(4, 6, generator=g), torch.randn(6, 10, generator=g), torch.randn(10, 6, generator=g)
        >>> b_enc = torch.zeros(10)
        >>> x_hat, values, indices = topk_reconstruct(xn, W_enc, b_enc, W_dec, k=3)
        >>> top = (xn @ W_enc + b_enc).topk(3, dim=-1)
        >>> dense = torch.zeros(4, 10).scatter(-1, top.indices, torch.relu(top.values)) @ W_dec
        >>> x_hat.shape, indices.shape, bool(torch.allclose(x_hat, dense, atol=1e-5))
        (torch.Size([4, 6]), torch.Size([4, 3]), True)
    """
    values, indices = _TopKSelect.apply(xn, W_enc, b_enc, int(k))
    acts = torch.relu(values)
    return torch.nn.functional.embedding_bag(indices, W_dec, per_sample_weights=acts, mode="sum"), acts, indices


def jumprelu(pre: torch.Tensor, threshold: torch.Tensor, bandwidth: float = 0.05) -> torch.Tensor:
    """JumpReLU ``pre · 1[pre > threshold]`` whose threshold gradient is the straight-through estimator.

    The gradient to ``pre`` is exact (``1[pre > threshold]``); the gradient to ``threshold`` is
    ``−(threshold / bandwidth) · 1[|pre − threshold| < bandwidth / 2]``, summed over rows.

    Example:
        >>> pre = torch.tensor([[0.50, 1.00, 0.02]])
        >>> threshold = torch.tensor([0.49, 0.30, 0.30], requires_grad=True)
        >>> out = jumprelu(pre, threshold, bandwidth=0.1)
        >>> out.detach().tolist()
        [[0.5, 1.0, 0.0]]
        >>> out.sum().backward()
        >>> threshold.grad.tolist()  # only the first unit sits within bandwidth/2 of its threshold
        [-4.900000095367432, 0.0, 0.0]
    """
    return _JumpReLU.apply(pre, threshold, float(bandwidth))


def step(pre: torch.Tensor, threshold: torch.Tensor, bandwidth: float = 0.05) -> torch.Tensor:
    """The step ``1[pre > threshold]`` (the L0 count) with the straight-through threshold gradient ``−K/bandwidth``.

    Example:
        >>> threshold = torch.tensor([0.45, 2.0], requires_grad=True)
        >>> step(torch.tensor([[0.5, 1.0]]), threshold, bandwidth=0.2).sum().backward()
        >>> threshold.grad.tolist()
        [-5.0, 0.0]
    """
    return _Step.apply(pre, threshold, float(bandwidth))


class _SparseAutoencoderBase(ConceptModel):
    """Training pieces, encoding pipeline and persistence shared by every SAE (not registered itself).

    Training runs :func:`~interp_widgets.concepts.training.train_dictionary` with the settings of ``training`` (a
    :class:`~interp_widgets.concepts.TrainingConfig`); the SAE supplies the pieces of its :class:`~interp_widgets.
    concepts.training.Dictionary` protocol. Subclass API: ``__init__(n_concepts, *, <own keyword parameters>,
    training=None, **overrides)`` storing each own parameter unchanged and ``self.training =
    TrainingConfig.resolve(training, overrides, <class name>)``; ``_check_params`` with the shared checks
    (:meth:`_check_k`, :meth:`_check_jumprelu`); and optionally ``_encode(xn, w, training)`` (coefficients of
    normalised rows; the base encodes the activations ``"relu"``, ``"topk"`` and ``"jumprelu"``), ``_penalty``,
    ``_loss_offset``, ``_init_weights``, ``_after_step``, ``_finish_fit``, ``_resample_gain`` and
    ``_resample_encoder``.

    One ``activation`` name selects one behaviour for every subclass (the SAEs here and the transcoders): ``"relu"``
    (L1 penalty ``l1_coefficient``, resampled encoders × 0.2), ``"topk"`` (``k_`` active concepts per row, the sparse
    loss of :func:`topk_reconstruct`) and ``"jumprelu"`` (a ``threshold`` weight from ``threshold_init``, kept
    non-negative, the straight-through encoder of :func:`jumprelu` with ``bandwidth`` and an L0 penalty
    ``l0_coefficient``).
    """

    training: TrainingConfig | None
    activation: str = ""

    def _check_params(self) -> None:
        super()._check_params()
        if self.training is not None and not isinstance(self.training, TrainingConfig):
            raise TypeError(f"training must be a TrainingConfig or None, got {self.training!r}")

    def _check_k(self) -> None:
        """Check an integer ``k`` (None, or at least 1; at most ``n_concepts`` for the TopK activation)."""
        if self.k is not None:
            check_int("k", self.k, minimum=1)
        if self.activation == "topk" and self._resolved_k() > self.n_concepts:
            raise ValueError(f"k must be between 1 and n_concepts={self.n_concepts}, got {self.k}")

    def _check_jumprelu(self) -> None:
        """Check the JumpReLU parameters ``l0_coefficient``, ``threshold_init`` (≥ 0) and ``bandwidth`` (> 0)."""
        check_number("l0_coefficient", self.l0_coefficient, minimum=0)
        check_number("threshold_init", self.threshold_init, minimum=0)
        if not isinstance(self.bandwidth, (int, float)) or isinstance(self.bandwidth, bool) or not self.bandwidth > 0:
            raise ValueError(f"bandwidth must be a number > 0, got {self.bandwidth!r}")

    @property
    def training_config(self) -> TrainingConfig:
        """The training settings in use: ``training``, or the defaults when it is None.

        Example:
            >>> SparseAutoencoder(8, lr=3e-3).training_config.lr, SparseAutoencoder(8).training_config.max_epochs
            (0.003, 50)
        """
        return self.training or TrainingConfig()

    def set_params(self, **params) -> _SparseAutoencoderBase:
        """Set parameters; ``TrainingConfig`` field names (``lr=``, ``max_epochs=``) replace those fields of
        ``training``, as in the constructor (so ``Pipeline.set_params(sae__lr=...)`` works).

        Example:
            >>> SparseAutoencoder(8, max_epochs=5).set_params(lr=3e-3, k=2).training
            TrainingConfig(lr=0.003, max_epochs=5)
        """
        fields = {key: params.pop(key) for key in list(params) if key in TrainingConfig.field_names()}
        if fields:
            params["training"] = TrainingConfig.resolve(
                params.get("training", self.training), fields, type(self).__name__
            )
        return super().set_params(**params)

    # ------------------------------------------------------------------ subclass hooks
    def _encode(self, xn: torch.Tensor, w: dict[str, torch.Tensor], training: bool = False) -> torch.Tensor:
        """The coefficients of normalised rows under ``activation`` (see the class docstring)."""
        pre = xn @ w["W_enc"] + w["b_enc"]
        if self.activation == "relu":
            return torch.relu(pre)
        if self.activation == "jumprelu":
            if training:
                return jumprelu(pre, w["threshold"], self.bandwidth)
            return torch.relu(pre) * (pre > w["threshold"]).to(pre.dtype)  # SAELens's JumpReLU inference formula
        if self.activation == "topk":
            values, indices = pre.topk(self.k_, dim=-1)
            return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))
        raise NotImplementedError(f"{type(self).__name__} has no encoder for activation {self.activation!r}")

    def _penalty(self, xn: torch.Tensor, codes: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor | float:
        """The sparsity penalty: L1 for ReLU, L0 (straight-through :func:`step`) for JumpReLU, none otherwise."""
        if self.activation == "relu":
            return self.l1_coefficient * codes.abs().sum(-1).mean()
        if self.activation == "jumprelu" and self.l0_coefficient:
            pre = xn @ w["W_enc"] + w["b_enc"]
            return self.l0_coefficient * step(pre, w["threshold"], self.bandwidth).sum(-1).mean()
        return 0.0

    def _loss_offset(self, xn: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor | float:
        """What the prediction adds to the decoded codes (an SAE subtracted ``b_dec`` from its input: nothing)."""
        return 0.0

    def _finish_fit(self, w: dict[str, torch.Tensor], monitor_n: torch.Tensor) -> None:
        """Adjust the best weights once training has ended (BatchTopK estimates its inference threshold here)."""

    @property
    def _resample_gain(self) -> float:
        return 0.2 if self.activation == "relu" else 1.0

    #: the axis of each weight that runs over the concepts (resampling resets only those entries' Adam moments)
    _concept_axes = {"W_enc": 1, "b_enc": 0, "W_dec": 0, "threshold": 0}

    def _resample_encoder(self, inputs, residual, picks, directions, enc_norm):
        """The encoder columns (rows × inputs) of the concepts resampled to rows ``picks`` and the input point ``c``
        their bias centres on (``b_enc = −c · W_enc``; None: ``b_enc = 0``). An SAE's inputs are its targets, so
        the unit residual ``directions`` of the picked rows serve the encoder too, at ``_resample_gain`` times the
        live encoders' mean norm ``enc_norm``."""
        return directions * self._resample_gain * enc_norm, None

    def _add_threshold(self, w: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
        """Add JumpReLU's ``threshold`` weight (``threshold_init`` for every concept) to initial weights ``w``."""
        if self.activation == "jumprelu":
            w["threshold"] = torch.full((self.n_concepts,), float(self.threshold_init), device=device)
        return w

    def _resolved_k(self) -> int:
        return max(1, int(self.n_concepts) // 10) if getattr(self, "k", None) is None else int(self.k)

    # ------------------------------------------------------------------ the pieces train_dictionary uses
    def _init_weights(self, x: torch.Tensor, y: None, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Unit-norm random decoder rows, the encoder their transpose, ``b_dec`` the mean of ``x``; sets ``scale_``
        (the root mean square of ``x`` per feature around that mean)."""
        mean = x.mean(0)
        self.scale_ = float(((x - mean).pow(2).mean()).sqrt().clamp_min(1e-8))
        W_dec = torch.randn(self.n_concepts, x.shape[1], generator=generator).to(x.device)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        w = {
            "W_enc": W_dec.T.clone(),
            "b_enc": torch.zeros(self.n_concepts, device=x.device),
            "W_dec": W_dec,
            "b_dec": mean.clone(),
        }
        return self._add_threshold(w, x.device)

    def _normalise(self, x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._prepare(x, w)[0]

    def _loss(self, xn: torch.Tensor, w: dict[str, torch.Tensor], target: torch.Tensor | None = None) -> Step:
        """The training loss, how many rows each concept fired in (``(n_concepts,)`` counts) and the residual.

        TopK computes the same loss as the dense ``codes @ W_dec`` from the ``k`` active concepts of each row only.
        """
        target = xn if target is None else target
        offset = self._loss_offset(xn, w)
        if self.activation == "topk":
            x_hat, acts, indices = topk_reconstruct(xn, w["W_enc"], w["b_enc"], w["W_dec"], self.k_)
            residual = target - x_hat - offset
            active = torch.bincount(indices[acts > 0], minlength=self.n_concepts)
            return Step(residual.pow(2).mean(), active, residual)
        codes = self._encode(xn, w, training=True)
        residual = target - codes @ w["W_dec"] - offset
        loss = residual.pow(2).mean() + self._penalty(xn, codes, w)
        return Step(loss, (codes > 0).sum(0), residual)

    def _after_step(self, w: dict[str, torch.Tensor]) -> None:
        """Keep the decoder rows at unit norm (and JumpReLU's threshold non-negative) after an optimiser step."""
        w["W_dec"] /= w["W_dec"].norm(dim=1, keepdim=True).clamp_min(1e-8)
        if self.activation == "jumprelu":
            w["threshold"].clamp_(min=0.0)

    @property
    def _takes_auxk(self) -> bool:
        """Whether the auxiliary-k loss (``TrainingConfig.auxk_alpha``) applies: TopK and BatchTopK kinds."""
        return self.activation in ("topk", "batchtopk")

    def _auxk_loss(self, xn: torch.Tensor, w: dict[str, torch.Tensor], residual: torch.Tensor, dead: torch.Tensor):
        """The auxiliary-k loss of Gao et al. (2024, appendix B.1): the ``dead`` concepts' top
        ``k_aux = min(n_dead, width / 2)`` ReLU'd pre-activations of each row decode a reconstruction of the row's
        detached ``residual``; its mean squared error (the main loss's units), scaled by ``min(n_dead / k_aux, 1)``
        as EleutherAI's sparsify does.

        Example:
            >>> sae = SparseAutoencoder(8, k=2, progress=False)
            >>> g = torch.Generator().manual_seed(0)
            >>> w = {"W_enc": torch.randn(4, 8, generator=g), "b_enc": torch.zeros(8), "W_dec": torch.randn(8, 4, generator=g)}
            >>> xn, residual = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
            >>> dead = torch.tensor([1, 5])
            >>> pre = torch.relu(xn @ w["W_enc"][:, dead])  # both dead concepts: k_aux = min(2, 4 / 2) = 2
            >>> expected = ((pre @ w["W_dec"][dead] - residual) ** 2).mean()
            >>> bool(torch.allclose(sae._auxk_loss(xn, w, residual, dead), expected))
            True
        """
        width = residual.shape[-1]
        k_aux = max(1, min(len(dead), width // 2))
        pre = xn @ w["W_enc"][:, dead] + w["b_enc"][dead]
        values, positions = pre.topk(k_aux, dim=-1, sorted=False)
        decoded = torch.nn.functional.embedding_bag(
            positions, w["W_dec"][dead], per_sample_weights=torch.relu(values), mode="sum"
        )
        scale = min(len(dead) / max(width // 2, 1), 1.0)
        return scale * (decoded - residual.detach()).pow(2).mean()

    # ------------------------------------------------------------------ fitting
    def _fit(self, X) -> None:
        self.k_ = self._resolved_k()
        self.preprocessing_ = dict(_PLAIN)
        label = f"SAE {self.activation or self.name} {self.n_concepts}"
        run = train_dictionary(self, X, config=self.training_config, label=label)
        self.fit_info_["monitor"] = run.note
        with torch.no_grad():
            self._finish_fit(run.weights, self._normalise(run.monitor[0], run.weights))
        self.weights_ = {name: t.detach().cpu() for name, t in run.weights.items()}
        self.fit_info_.update(run.summary())

    @torch.no_grad()
    def _resample(
        self, w, dead: torch.Tensor, inputs: torch.Tensor, residual: torch.Tensor, generator: torch.Generator
    ) -> int:
        """Reset each dead concept to a badly reconstructed monitoring row: its decoder row to that row's residual
        direction, its encoder column from :meth:`_resample_encoder`."""
        errors = residual.pow(2).sum(1).double().cpu()
        if not bool(torch.isfinite(errors).all()) or float(errors.sum()) <= 0:
            return 0
        weights = (errors / errors.max()) ** 2  # the squared error, scaled: the square of a large error overflows
        picks = torch.multinomial(
            weights / weights.sum(),
            len(dead),
            replacement=len(dead) > len(errors),
            generator=generator,
        ).to(residual.device)
        directions = residual[picks]
        directions /= directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        alive = torch.ones(self.n_concepts, dtype=torch.bool, device=dead.device)
        alive[dead] = False
        enc_norm = w["W_enc"][:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0)
        columns, centre = self._resample_encoder(inputs, residual, picks, directions, enc_norm)
        w["W_dec"][dead] = directions
        w["W_enc"][:, dead] = columns.T
        w["b_enc"][dead] = 0.0 if centre is None else -(centre @ w["W_enc"][:, dead])
        return int(len(dead))

    # ------------------------------------------------------------------ the encoding pipeline
    @property
    def rowwise(self) -> bool:
        """Whether encoding depends on per-row statistics (row centring or a per-row normalisation).

        Example:
            >>> SparseAutoencoder(8, max_epochs=1, progress=False).fit(store).rowwise
            False
        """
        self._check_fitted()
        p = self.preprocessing_
        return bool(p["center"]) or p["normalize_activations"] != "none"

    def _prepare(self, X: torch.Tensor, w: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Normalised rows ``xn`` (what the encoder reads) and the per-row statistics that undo the normalisation."""
        p, stats = self.preprocessing_, {}
        if p["center"]:
            stats["center"] = X.mean(-1, keepdim=True)
            X = X - stats["center"]
        mode = p["normalize_activations"]
        if mode == "constant_norm_rescale":
            stats["coeff"] = X.shape[-1] ** 0.5 / X.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            X = X * stats["coeff"]
        elif mode == "layer_norm":
            stats["mu"] = X.mean(-1, keepdim=True)
            X = X - stats["mu"]
            stats["std"] = X.std(-1, keepdim=True)
            X = X / (stats["std"] + _LAYER_NORM_EPS)
        if p["apply_b_dec_to_input"]:
            X = X - w["b_dec"]
        return X / self.scale_, stats

    def _finish(self, X_hat: torch.Tensor, stats: dict[str, torch.Tensor]) -> torch.Tensor:
        """Undo the row-wise normalisation of :meth:`_prepare` on a reconstruction."""
        if "std" in stats:
            X_hat = X_hat * stats["std"] + stats["mu"]
        if "coeff" in stats:
            X_hat = X_hat / stats["coeff"]
        if "center" in stats:
            X_hat = X_hat + stats["center"]
        return X_hat

    def _stats_of(self, X, like: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.rowwise:
            return {}
        if X is None:
            p = self.preprocessing_
            steps = (["row centring (center_writing_weights)"] if p["center"] else []) + (
                [p["normalize_activations"]] if p["normalize_activations"] != "none" else []
            )
            raise ValueError(
                f"this SAE normalises each input row ({', '.join(steps)}), so decoding needs that row's "
                "statistics; pass X= (the activations the coefficients came from)"
            )
        X = torch.as_tensor(X.detach() if isinstance(X, torch.Tensor) else np.asarray(X, dtype=np.float32))
        X = X.to(like.device, like.dtype).reshape(-1, self.n_features_in_)
        with torch.no_grad():
            return self._prepare(X, {name: t.to(like.device, like.dtype) for name, t in self.weights_.items()})[1]

    # ------------------------------------------------------------------ concept API
    def _transform(self, X: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            xn, _ = self._prepare(torch.from_numpy(X), self.weights_)
            return self._encode(xn, self.weights_).numpy()

    def encode_torch(self, X: torch.Tensor) -> torch.Tensor:
        """Differentiable concept coefficients of ``X`` (rows × features) in torch.

        Example:
            >>> sae = SparseAutoencoder(64, k=4, max_epochs=2, progress=False).fit(store)
            >>> x = torch.tensor(store[:3], requires_grad=True)
            >>> codes = sae.encode_torch(x)
            >>> codes.shape, bool(np.allclose(codes.detach().numpy(), sae.transform(store[:3]), atol=1e-5))
            (torch.Size([3, 64]), True)
            >>> codes[:, 0].sum().backward()  # gradients flow back to the activations
            >>> x.grad.shape
            torch.Size([3, 32])
        """
        self._check_fitted()
        w = {name: t.to(X.device, X.dtype) for name, t in self.weights_.items()}
        return self._encode(self._prepare(X, w)[0], w)

    def inverse_transform(self, C, X=None) -> np.ndarray:
        """Reconstruct activations from coefficients; ``X`` (the activations ``C`` came from) is needed only by SAEs
        that normalise each row (see :attr:`rowwise`).

        Example:
            >>> sae = SparseAutoencoder(16, k=4, max_epochs=2, progress=False).fit(store)
            >>> C = sae.transform(store[:5])
            >>> np.allclose(sae.inverse_transform(C), C @ sae.components_ + sae.offset_, atol=1e-5)
            True
        """
        X_hat = super().inverse_transform(C)
        if not self.rowwise:
            return X_hat
        X_hat_t = torch.from_numpy(np.ascontiguousarray(X_hat))
        return self._finish(X_hat_t, self._stats_of(X, X_hat_t)).numpy()

    def decode_torch(self, C: torch.Tensor, X=None) -> torch.Tensor:
        """Differentiable decoding in torch; for a :attr:`rowwise` SAE pass ``X`` (its row statistics are constants).

        Example:
            >>> sae = SparseAutoencoder(16, k=4, max_epochs=2, progress=False).fit(store)
            >>> sae.decode_torch(torch.zeros(2, 16)).shape
            torch.Size([2, 32])
        """
        X_hat = super().decode_torch(C)
        if not self.rowwise:
            return X_hat
        return self._finish(X_hat.reshape(-1, X_hat.shape[-1]), self._stats_of(X, X_hat)).reshape(X_hat.shape)

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        W, b = self._affine_decoder()
        return C @ W + b

    def _affine_decoder(self) -> tuple[np.ndarray, np.ndarray]:
        return self.weights_["W_dec"].numpy() * self.scale_, self.weights_["b_dec"].numpy()

    def _state(self):
        arrays, extra = super()._state()
        arrays.update({f"sae.{name}": t.numpy() for name, t in self.weights_.items()})
        extra["scale"] = self.scale_
        extra["k"] = self.k_
        extra["preprocessing"] = dict(self.preprocessing_)
        return arrays, extra

    @classmethod
    def _init_params(cls, saved):
        # "training" holds the fields of the TrainingConfig (None: the defaults); files written before TrainingConfig
        # existed hold them beside the SAE's own parameters, and the constructor takes those as overrides
        params = dict(saved)
        if isinstance(params.get("training"), dict):
            params["training"] = TrainingConfig(**params["training"])
        return params

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.weights_ = {
            name[4:]: torch.from_numpy(np.array(v)) for name, v in arrays.items() if name.startswith("sae.")
        }
        self.scale_ = float(extra["scale"])
        self.k_ = extra.get("k", self._resolved_k())  # files written before k_ existed saved the resolved k
        self.preprocessing_ = {**_PLAIN, **extra.get("preprocessing", {})}


class SparseAutoencoder(_SparseAutoencoderBase):
    """A one-layer sparse autoencoder whose hidden units are the concepts (ReLU + L1, or TopK).

    Args:
        n_concepts: width of the dictionary (usually larger than the layer width).
        activation: ``"topk"`` (keep the ``k`` largest pre-activations, then ReLU) or ``"relu"`` (ReLU with an L1
            penalty of weight ``l1_coefficient`` on the coefficients).
        k: active concepts per row for TopK (default ``max(1, n_concepts // 10)``).
        l1_coefficient: L1 weight for the ReLU variant.
        training: the training settings, a :class:`~interp_widgets.concepts.TrainingConfig` (learning rate,
            minibatch size, epoch cap, early stopping, monitoring sample, dead-concept resampling, seed, progress
            bar, device); None means the defaults.
        **overrides: fields of :class:`~interp_widgets.concepts.TrainingConfig` (``lr=``, ``batch_size=``,
            ``max_epochs=``, ...), which replace those of ``training``; ``training`` then holds the result.

    Fitted attributes: ``weights_`` (``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``), ``scale_``, ``k_`` (the
    resolved ``k``), ``preprocessing_`` (see the module docstring) and those of every
    :class:`~interp_widgets.concepts.ConceptModel`.

    Example:
        >>> X = store.to_numpy()  # an array: a tenth of its rows is held out for monitoring
        >>> sae = SparseAutoencoder(64, activation="relu", l1_coefficient=3e-2, max_epochs=10, batch_size=128,
        ...                         progress=False).fit(X)
        >>> sae.fit_info_["monitor"], sae.weights_["W_enc"].shape, sae.components_.shape
        ('held-out rows', torch.Size([32, 64]), (64, 32))
        >>> round(float((sae.transform(X) > 0).sum(1).mean()), 1)  # active concepts per row (10 epochs: not yet sparse)
        28.5
        >>> ConceptModel.load(sae.save(getfixture("tmp_path") / "sae.safetensors")).k_ == sae.k_
        True
    """

    name = "sae"

    def __init__(
        self,
        n_concepts: int,
        *,
        activation: str = "topk",
        k: int | None = None,
        l1_coefficient: float = 1e-3,
        training: TrainingConfig | None = None,
        **overrides,
    ):
        super().__init__(n_concepts)
        self.activation = activation
        self.k = k
        self.l1_coefficient = l1_coefficient
        self.training = TrainingConfig.resolve(training, overrides, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        check_choice("activation", self.activation, ACTIVATIONS)
        self._check_k()
        check_number("l1_coefficient", self.l1_coefficient, minimum=0)


class JumpReLUSAE(_SparseAutoencoderBase):
    """A sparse autoencoder with the JumpReLU activation ``pre · 1[pre > θ]`` and a learned threshold per concept.

    The loss is the mean squared error plus ``l0_coefficient`` times the mean number of active concepts per row.
    Neither the L0 count nor the jump has a useful gradient with respect to ``θ``; both use the straight-through
    estimator with a rectangle kernel of width ``bandwidth`` (see :func:`jumprelu` and :func:`step`), in the
    normalised units of the encoder input (rows of unit mean squared value per feature). The threshold is kept
    non-negative after every step.

    Args:
        n_concepts: width of the dictionary.
        l0_coefficient: weight of the L0 penalty (mean active concepts per row); larger gives sparser codes.
        bandwidth: width ``ε`` of the straight-through estimator's kernel.
        threshold_init: initial threshold of every concept.
        training, **overrides: the training settings, as for :class:`SparseAutoencoder`.

    Fitted attributes: as :class:`SparseAutoencoder`, with the thresholds in ``weights_["threshold"]``.

    Example:
        >>> sae = JumpReLUSAE(64, l0_coefficient=3e-2, lr=1e-2, max_epochs=20, batch_size=128, progress=False)
        >>> sae = sae.fit(store)
        >>> sae.weights_["threshold"].shape, bool(0.5 < sae.weights_["threshold"].mean() < 1.2)  # 0.82 here
        (torch.Size([64]), True)
        >>> C = sae.transform(store)
        >>> bool(6 < (C > 0).sum(1).mean() < 11)  # mean active concepts per row: 8.5 here
        True
        >>> from interp_widgets.concepts import evaluate
        >>> bool(evaluate(sae, store)["explained_variance"] > 0.8)  # 0.86 here
        True
    """

    name = "jumprelu_sae"
    activation = "jumprelu"

    def __init__(
        self,
        n_concepts: int,
        *,
        l0_coefficient: float = 1e-2,
        bandwidth: float = 0.05,
        threshold_init: float = 0.1,
        training: TrainingConfig | None = None,
        **overrides,
    ):
        super().__init__(n_concepts)
        self.l0_coefficient = l0_coefficient
        self.bandwidth = bandwidth
        self.threshold_init = threshold_init
        self.training = TrainingConfig.resolve(training, overrides, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        self._check_jumprelu()

    def _resolved_k(self) -> None:
        return None


class BatchTopKSAE(_SparseAutoencoderBase):
    """A sparse autoencoder trained with BatchTopK: ``k`` active concepts per row on average over each minibatch.

    Training keeps the ``round(k × rows)`` largest positive pre-activations of the whole minibatch. After training,
    one inference threshold ``θ`` is estimated on the monitoring sample: the value above which exactly
    ``round(k × rows)`` of its pre-activations lie, so that inference, the JumpReLU ``pre · 1[pre > θ]``, keeps
    ``k`` concepts per row on average on that sample. ``fit_info_`` records ``threshold`` and ``monitor_l0``.

    Args:
        n_concepts: width of the dictionary.
        k: mean active concepts per row (a number > 0; default ``max(1, n_concepts // 10)``).
        training, **overrides: the training settings, as for :class:`SparseAutoencoder`.

    Fitted attributes: as :class:`SparseAutoencoder`; ``weights_["threshold"]`` holds ``θ`` for every concept.

    Example:
        >>> sae = BatchTopKSAE(64, k=8, max_epochs=15, batch_size=128, progress=False).fit(store)
        >>> sae.fit_info_["threshold"] > 0, sae.fit_info_["monitor_l0"]
        (True, 8.0)
        >>> per_row = (sae.transform(store) > 0).sum(1)  # varies from row to row, 8 on average
        >>> bool(per_row.min() < 8 < per_row.max()), round(float(per_row.mean()), 1)
        (True, 8.0)
    """

    name = "batchtopk_sae"
    activation = "batchtopk"

    def __init__(
        self,
        n_concepts: int,
        *,
        k: float | None = None,
        training: TrainingConfig | None = None,
        **overrides,
    ):
        super().__init__(n_concepts)
        self.k = k
        self.training = TrainingConfig.resolve(training, overrides, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        if self.k is not None:
            check_number("k", self.k, minimum=0)
            if not 0 < float(self.k) <= self.n_concepts:
                raise ValueError(f"k must be > 0 and at most n_concepts={self.n_concepts}, got {self.k}")

    def _resolved_k(self) -> float:
        return max(1, int(self.n_concepts) // 10) if self.k is None else float(self.k)

    def _batch_topk(self, pre: torch.Tensor) -> torch.Tensor:
        """The ``round(k · B)`` largest ReLU'd pre-activations of the batch of ``B`` rows, the others zero.

        During a data-parallel step (:class:`~interp_widgets.concepts.training.Ranks`) ``pre`` is this rank's rows
        and the selection is over the whole batch: each rank keeps its activations that reach the batch's
        ``round(k · B)``-th largest, gathered from every rank's candidates."""
        acts = torch.relu(pre).reshape(-1)
        ranks = getattr(self, "_ranks", None)
        rows = pre.numel() // pre.shape[-1] if ranks is None else ranks.rows
        keep = min(rows * pre.shape[-1], max(1, round(self.k_ * rows)))
        if ranks is not None:
            threshold = ranks.kth_largest(acts, keep)
            return torch.where(acts >= threshold, acts, torch.zeros_like(acts)).reshape(pre.shape)
        values, indices = acts.topk(keep)
        return torch.zeros_like(acts).scatter(0, indices, values).reshape(pre.shape)

    def _encode(self, xn, w, training=False):
        pre = xn @ w["W_enc"] + w["b_enc"]
        if training:
            return self._batch_topk(pre)
        return torch.relu(pre) * (pre > w["threshold"]).to(pre.dtype)

    def _finish_fit(self, w, monitor_n):
        pre = torch.relu(monitor_n @ w["W_enc"] + w["b_enc"]).reshape(-1)
        keep = min(pre.numel() - 1, max(1, round(self.k_ * len(monitor_n))))
        ranked = pre.topk(keep + 1).values
        # halfway between the keep-th and the next pre-activation: exactly `keep` lie above it (barring ties), and a
        # recomputation of the same pre-activations that rounds differently (another CPU's kernels, SAELens) cannot
        # move one across it, as it could if θ were one of them
        threshold = float((ranked[keep - 1] + ranked[keep]) / 2)
        w["threshold"] = torch.full((self.n_concepts,), threshold, device=monitor_n.device)
        codes = self._encode(monitor_n, w)
        self.fit_info_.update(threshold=threshold, monitor_l0=float((codes > 0).sum(1).float().mean()))


def matching_pursuit(x: torch.Tensor, atoms: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` greedy matching-pursuit steps of rows ``x`` over the rows of ``atoms``: ``(codes, residual)``.

    Each step correlates the residual with every atom, takes the largest correlation (signed, as Overcomplete's
    ``MpSAE``), adds it to that atom's code (an atom chosen twice accumulates) and subtracts its contribution from
    the residual; ``codes @ atoms + residual == x``. Differentiable in ``x`` and ``atoms`` (through the chosen values).

    Example:
        >>> atoms = torch.eye(3)
        >>> codes, residual = matching_pursuit(torch.tensor([[3.0, -1.0, 2.0]]), atoms, k=2)
        >>> codes.tolist(), residual.tolist()
        ([[3.0, 0.0, 2.0]], [[0.0, -1.0, 0.0]])
    """
    codes = x.new_zeros(x.shape[0], atoms.shape[0])
    residual = x
    for _ in range(int(k)):
        values, indices = (residual @ atoms.T).max(dim=-1)
        codes = codes.scatter_add(-1, indices[:, None], values[:, None])
        residual = residual - values[:, None] * atoms[indices]
    return codes, residual


class MatchingPursuitSAE(_SparseAutoencoderBase):
    """A matching-pursuit SAE (Costa et al., 2025): the encoder is ``k`` greedy matching-pursuit steps over the decoder.

    There are no encoder weights: the codes of a row are found by :func:`matching_pursuit` over the unit-norm decoder
    rows (each step takes the atom most correlated with the residual), and training backpropagates the
    reconstruction error through those steps into the decoder. This is Interpreto 0.5.2's ``MpSAEConcepts``
    (Overcomplete's ``MpSAE``: no dropout, its default) with this library's input conventions: rows are centred on
    ``b_dec`` and scaled by ``scale_`` like every SAE here, and it trains with the one loop
    (:func:`~interp_widgets.concepts.training.train_dictionary`: minibatches, early stopping, resampling of dead
    decoder rows). Given the same dictionary, :meth:`from_dictionary` encodes exactly as Interpreto's ``MpSAE``
    (checked to 1e-5 in the tests). Codes are signed when the best correlation is negative.

    Args:
        n_concepts: number of atoms.
        k: matching-pursuit steps per row (at most ``k`` active concepts; default ``max(1, n_concepts // 10)``).
        training, **overrides: the training settings, as for :class:`SparseAutoencoder`.

    Fitted attributes: ``weights_`` (``W_dec``, ``b_dec``), ``scale_``, ``k_`` and ``preprocessing_``, as for
    :class:`SparseAutoencoder`.

    Example:
        >>> mp = MatchingPursuitSAE(64, k=8, max_epochs=10, batch_size=128, progress=False).fit(store)
        >>> sorted(mp.weights_), int((mp.transform(store) != 0).sum(1).max()) <= 8
        (['W_dec', 'b_dec'], True)
        >>> from interp_widgets.concepts import evaluate
        >>> bool(evaluate(mp, store)["explained_variance"] > 0.7)
        True
    """

    name = "mp_sae"
    activation = "mp"

    def __init__(self, n_concepts: int, *, k: int | None = None, training: TrainingConfig | None = None, **overrides):
        super().__init__(n_concepts)
        self.k = k
        self.training = TrainingConfig.resolve(training, overrides, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        self._check_k()

    @classmethod
    def from_dictionary(cls, dictionary, *, k: int, bias=None) -> MatchingPursuitSAE:
        """A fitted matching-pursuit SAE from given atoms (``n_concepts × features``, e.g. Interpreto's
        ``explainer.get_dictionary()``) and an optional bias subtracted from the input (default none).

        The atoms are used as given (Overcomplete normalises them while training, not afterwards) and rows are not
        scaled (``scale_ = 1``), so the codes are those of Overcomplete's ``MpSAE.encode`` on the same rows.

        Example:
            >>> atoms = torch.nn.functional.normalize(torch.randn(16, 32, generator=torch.Generator().manual_seed(0)), dim=1)
            >>> mp = MatchingPursuitSAE.from_dictionary(atoms, k=3)
            >>> C = mp.transform(store[:4])
            >>> C.shape, np.allclose(mp.inverse_transform(C), C @ atoms.numpy(), atol=1e-6)
            ((4, 16), True)
        """
        atoms = torch.as_tensor(np.asarray(dictionary, dtype=np.float32)).clone()
        if atoms.ndim != 2:
            raise ValueError(f"dictionary must be 2-D (n_concepts × features), got shape {tuple(atoms.shape)}")
        model = cls(atoms.shape[0], k=k)
        model._check_params()
        bias_t = (
            torch.zeros(atoms.shape[1]) if bias is None else torch.as_tensor(np.asarray(bias, dtype=np.float32)).clone()
        )
        if bias_t.shape != (atoms.shape[1],):
            raise ValueError(
                f"bias must have {atoms.shape[1]} values (one per feature), got shape {tuple(bias_t.shape)}"
            )
        model.weights_ = {"W_dec": atoms, "b_dec": bias_t}
        model.scale_, model.k_, model.preprocessing_ = 1.0, model._resolved_k(), dict(_PLAIN)
        model.layer_, model.model_name_ = None, None
        model.fit_info_ = {"source": "given dictionary"}
        model._set_affine_decoder()
        model.n_features_in_ = int(atoms.shape[1])
        return model

    def _init_weights(self, x, y, generator):
        w = super()._init_weights(x, y, generator)
        return {"W_dec": w["W_dec"], "b_dec": w["b_dec"]}

    def _encode(self, xn, w, training=False):
        return matching_pursuit(xn, w["W_dec"], self.k_)[0]

    def _loss(self, xn, w, target=None):
        codes, residual = matching_pursuit(xn, w["W_dec"], self.k_)
        if target is not None:
            residual = target - codes @ w["W_dec"]
        return Step(residual.pow(2).mean(), (codes != 0).sum(0), residual)

    @torch.no_grad()
    def _resample(self, w, dead, inputs, residual, generator) -> int:
        """Reset each dead atom to the residual direction of a badly reconstructed monitoring row (no encoder)."""
        errors = residual.pow(2).sum(1)
        if float(errors.sum()) <= 0:
            return 0
        weights = errors.cpu() ** 2
        picks = torch.multinomial(
            weights / weights.sum(), len(dead), replacement=len(dead) > len(errors), generator=generator
        )
        directions = residual[picks.to(residual.device)]
        w["W_dec"][dead] = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        return len(dead)


class MatryoshkaSAE(BatchTopKSAE):
    """A BatchTopK sparse autoencoder whose nested prefixes each reconstruct the input (Bussmann et al., 2025).

    The dictionary is cut into groups by ``prefixes``: the concepts ``[0, m)`` for each prefix size ``m``, the last
    prefix being the whole dictionary. Training encodes each minibatch once with BatchTopK over the whole dictionary
    (the ``k × rows`` largest pre-activations); prefix ``m`` then reconstructs the input from its own active concepts
    only (``codes[:, :m] @ W_dec[:m]``, the global selection restricted to the prefix), and the loss is the sum of
    the prefixes' mean squared errors. This is the loss of SAELens's ``MatryoshkaBatchTopKTrainingSAE`` (its
    ``matryoshka_widths`` are the prefix sizes; it sums squared errors over features where this package averages
    them, a constant factor) and of ``dictionary_learning``. Early concepts must reconstruct alone, so they learn
    coarse, frequent directions; later ones refine them. Inference is BatchTopK's JumpReLU with one threshold
    estimated after training, so the SAE saves for SAELens as ``jumprelu`` like every BatchTopK SAE.

    The nested losses do not decide which latent lands in which group, and one fit often ends in a poor local
    minimum: on the planted hierarchy of ``tests/concepts/test_sae_matryoshka.py`` (4 parents, a first prefix of 4)
    single fits of seeds 0-34 recover 38-100 % of the parent → child pairs (median 75 %; 5 of 35 recover all): in most
    runs a first-prefix latent learns a parent + child mix and a parent falls into the second group, and those runs
    end at a higher monitoring loss. ``restarts=10`` (a :class:`TrainingConfig` field) keeps the lowest-loss of ten
    initialisations and recovered every pair on each of seeds 0-13; ``fit_info_["restart_losses"]`` shows how
    often a fit lands in the poor minima.

    Args:
        n_concepts: width of the dictionary.
        k: mean active concepts per row over the whole dictionary (default ``max(1, n_concepts // 10)``).
        prefixes: increasing prefix sizes, each in ``[1, n_concepts]``; ``n_concepts`` is added as the last one
            when missing. None means ``n_concepts // 4``, ``n_concepts // 2`` and ``n_concepts`` (those ≥ 1).
        training, **overrides: the training settings, as for :class:`SparseAutoencoder`.

    Fitted attributes: as :class:`BatchTopKSAE`, plus ``prefixes_`` (the prefix sizes, ending with ``n_concepts``)
    and ``groups_`` (the group of each concept: ``g`` for the concepts in ``[prefixes_[g-1], prefixes_[g])``).
    :meth:`hierarchy` finds the parent → children tree between groups.

    Example:
        >>> sae = MatryoshkaSAE(64, k=8, prefixes=(8, 24), max_epochs=15, batch_size=128, progress=False).fit(store)
        >>> sae.prefixes_, sae.groups_[:10].tolist(), sae.fit_info_["monitor_l0"]
        ([8, 24, 64], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1], 8.0)
        >>> fvu = [round(v, 2) for v in sae.prefix_fvu(store)]  # each prefix reconstructs alone; more is better
        >>> fvu == sorted(fvu, reverse=True), len(fvu)
        (True, 3)
        >>> ConceptModel.load(sae.save(getfixture("tmp_path") / "m.safetensors")).prefixes_
        [8, 24, 64]
    """

    name = "matryoshka_sae"

    def __init__(
        self,
        n_concepts: int,
        *,
        k: float | None = None,
        prefixes: tuple[int, ...] | None = None,
        training: TrainingConfig | None = None,
        **overrides,
    ):
        super().__init__(n_concepts, k=k, training=training, **overrides)
        self.prefixes = prefixes

    def _check_params(self) -> None:
        super()._check_params()
        if self.prefixes is not None:
            if isinstance(self.prefixes, (str, bytes)) or not hasattr(self.prefixes, "__iter__"):
                raise ValueError(f"prefixes must be a sequence of increasing sizes, got {self.prefixes!r}")
            sizes = list(self.prefixes)
            for size in sizes:
                check_int("prefixes[i]", size, minimum=1)
            if any(b <= a for a, b in zip(sizes, sizes[1:])) or (sizes and sizes[-1] > self.n_concepts):
                raise ValueError(
                    f"prefixes must be strictly increasing sizes in [1, n_concepts={self.n_concepts}], got "
                    f"{self.prefixes!r}"
                )

    def _resolved_prefixes(self) -> list[int]:
        n = int(self.n_concepts)
        sizes = [n // 4, n // 2] if self.prefixes is None else [int(size) for size in self.prefixes]
        sizes = sorted({size for size in sizes if 1 <= size < n})
        return sizes + [n]

    @property
    def groups_(self) -> np.ndarray:
        """The group of each concept: ``g`` for the concepts in ``[prefixes_[g-1], prefixes_[g])``."""
        self._check_fitted()
        return np.searchsorted(np.asarray(self.prefixes_), np.arange(self.n_concepts), side="right")

    def _loss(self, xn, w, target=None) -> Step:
        """The sum over prefixes of the mean squared error of each prefix's reconstruction from its own concepts."""
        target = xn if target is None else target
        codes = self._encode(xn, w, training=True)
        residual, loss, start = target - self._loss_offset(xn, w), 0.0, 0
        for end in self.prefixes_:
            residual = residual - codes[:, start:end] @ w["W_dec"][start:end]
            loss = loss + residual.pow(2).mean()
            start = end
        return Step(loss, (codes > 0).sum(0), residual)

    def _fit(self, X) -> None:
        self.prefixes_ = self._resolved_prefixes()
        super()._fit(X)

    def prefix_fvu(self, X) -> list[float]:
        """The fraction of variance unexplained by each prefix's reconstruction (inference codes), in order.

        Each prefix ``m`` reconstructs ``X`` from its own concepts (the inference codes with the concepts from ``m``
        on set to zero, decoded by :meth:`inverse_transform`); the last value is the whole SAE's.

        Example:
            >>> sae = MatryoshkaSAE(32, k=4, prefixes=(4,), max_epochs=3, progress=False).fit(store)
            >>> len(sae.prefix_fvu(store))
            2
        """
        X = self._check_input(X)
        C = self.transform(X)
        total = float(((X - X.mean(0)) ** 2).sum()) or 1e-12
        out = []
        for end in self.prefixes_:
            prefix = C.copy()
            prefix[:, end:] = 0
            out.append(float(((X - self.inverse_transform(prefix, X=X)) ** 2).sum()) / total)
        return out

    def hierarchy(self, X, *, min_conditional: float = 0.8, min_cosine: float = -0.1, batch_rows: int = 4096):
        """The parent → children tree of the concepts between prefix groups, and each parent's absorption rate: see
        :func:`~interp_widgets.concepts.concept_hierarchy`, called with this SAE's codes of ``X`` (an array or a
        store, encoded ``batch_rows`` rows at a time), ``components_`` and ``groups_``.

        Example:
            >>> sae = MatryoshkaSAE(32, k=4, prefixes=(4,), max_epochs=3, progress=False).fit(store)
            >>> tree = sae.hierarchy(store, min_conditional=0.5, min_cosine=0.0)
            >>> sorted(tree.parents) == sorted(set(tree.parent_of.values())) and all(p < 4 for p in tree.parents)
            True
        """
        from interp_widgets.concepts.hierarchy import concept_hierarchy

        self._check_fitted()
        check_int("batch_rows", batch_rows, minimum=1)
        X = X if hasattr(X, "__getitem__") and hasattr(X, "__len__") else self._check_input(X)

        def blocks():
            return (self.transform(X[start : start + batch_rows]) for start in range(0, len(X), batch_rows))

        return concept_hierarchy(
            blocks, self.components_, self.groups_, min_conditional=min_conditional, min_cosine=min_cosine
        )

    def _state(self):
        arrays, extra = super()._state()
        extra["prefixes"] = list(self.prefixes_)
        return arrays, extra

    @classmethod
    def _init_params(cls, saved):
        params = super()._init_params(saved)
        if isinstance(params.get("prefixes"), list):
            params["prefixes"] = tuple(params["prefixes"])
        return params

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.prefixes_ = [int(size) for size in extra.get("prefixes", self._resolved_prefixes())]
