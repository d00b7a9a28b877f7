"""Per-layer transcoders: sparse dictionaries that read an MLP's input and predict its output.

A :class:`Transcoder` encodes the MLP's input ``x`` into sparse features ``f = σ(W_encᵀ x̃ + b_enc)`` and predicts the
MLP's output ``ŷ = s_y (W_decᵀ f + b_dec + W_skipᵀ x̃)`` (``x̃ = x / s_x``; ``s_x`` and ``s_y`` are the root mean
squares of the input and of the centred target on the monitoring sample; the skip term is optional), trained on the
squared error to the MLP's true output with the one loop of :mod:`~interp_widgets.concepts.training` (Dunefsky,
Chlenski and Nanda 2024; the skip term of Paulo, Shabalin and Belrose 2025). Activations: ``"topk"`` (the ``k``
largest pre-activations, then ReLU), ``"jumprelu"`` (``pre · 1[pre > θ]``, an L0 penalty, the straight-through
threshold gradient of :func:`~interp_widgets.concepts.sae.jumprelu`) and ``"relu"`` (with an L1 penalty).

:class:`TranscoderSet` trains one per layer from **one** forward pass over a corpus (:meth:`TranscoderSet.fit`),
reports on held-out texts (:meth:`TranscoderSet.evaluate`, a :class:`TranscoderReport`), saves and loads its own
safetensors file, and writes circuit-tracer 0.5.0's per-layer files (:meth:`TranscoderSet.to_circuit_tracer`).

The input point is ``"mlp_in"`` (``layer:i.mlp_in``: what the MLP module receives, after the block's norm with its
gain; circuit-tracer's ``mlp.hook_in``, sparsify's ``layers.i.mlp`` input) or ``"resid_mid"`` (the stream before the
norm; circuit-tracer's ``hook_resid_mid``, absent from parallel-residual blocks). The output point is
``layer:i.mlp_out`` (circuit-tracer's ``hook_mlp_out``).

Example:
    >>> X, Y = np.random.default_rng(0).normal(size=(2, 400, 8)).astype(np.float32)
    >>> Y = np.tanh(X[:, ::-1])  # the target: a function of the input
    >>> tc = Transcoder(16, k=4, skip=True, lr=1e-2, max_epochs=20, batch_size=64, progress=False).fit(X, Y)
    >>> tc.predict(X[:3]).shape, bool(tc.fit_info_["history"][-1]["monitor_fvu"] < 0.2)
    ((3, 8), True)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from interp_widgets.concepts.sae import _SparseAutoencoderBase
from interp_widgets.concepts.training import DictionaryTrainer, TrainingConfig, train_dictionary
from interp_widgets.validation import check_choice, check_number

ACTIVATIONS = ("topk", "jumprelu", "relu")
INPUT_POINTS = ("mlp_in", "resid_mid")
#: circuit-tracer's names of the points (``feature_input_hook`` / ``feature_output_hook`` of its config.yaml)
CIRCUIT_TRACER_HOOKS = {"mlp_in": "mlp.hook_in", "resid_mid": "hook_resid_mid", "mlp_out": "hook_mlp_out"}
_NO_SHIFT = {"center": False, "normalize_activations": "none", "apply_b_dec_to_input": False}
SET_FORMAT = "interp_widgets.TranscoderSet"


class Transcoder(_SparseAutoencoderBase):
    """A sparse transcoder: features read from one point (an MLP's input) and decoded to another (its output).

    Args:
        n_concepts: number of features.
        activation: ``"topk"``, ``"jumprelu"`` or ``"relu"`` (see the module docstring).
        k: active features per row for TopK (default ``max(1, n_concepts // 10)``).
        skip: add a linear skip term ``W_skip`` from the input to the output (input and output of one width).
        l0_coefficient, bandwidth, threshold_init: JumpReLU's L0 weight, straight-through kernel width and initial
            threshold (normalised units, as :class:`~interp_widgets.concepts.JumpReLUSAE`).
        l1_coefficient: ReLU's L1 weight.
        training, **overrides: the training settings (:class:`~interp_widgets.concepts.TrainingConfig`).

    ``fit(X, Y)`` trains on row-aligned inputs ``X`` and targets ``Y`` (arrays, or two stores collected from the
    same texts); ``fit(X)`` alone predicts ``X`` itself (an SAE with a skip term; what scikit-learn's pipelines call).
    ``transform`` gives the features, ``predict`` the predicted output (skip term included); ``inverse_transform``
    and ``components_`` / ``offset_`` are the decoder alone, in the output's units.

    Fitted attributes: ``weights_`` (``W_enc`` (d_in, n), ``b_enc``, ``W_dec`` (n, d_out), ``b_dec``, ``W_skip``
    (d_in, d_out) with ``skip``, ``threshold`` for JumpReLU; normalised units), ``scale_`` (s_x),
    ``target_scale_`` (s_y), ``k_``, ``n_outputs_`` and those of every concept model.

    Example:
        >>> X = np.random.default_rng(1).normal(size=(300, 8)).astype(np.float32)
        >>> tc = Transcoder(12, activation="jumprelu", max_epochs=5, progress=False).fit(X, 2 * X)
        >>> sorted(tc.weights_), tc.transform(X[:2]).shape, tc.n_outputs_
        (['W_dec', 'W_enc', 'b_dec', 'b_enc', 'threshold'], (2, 12), 8)
    """

    name = "transcoder"

    def __init__(
        self,
        n_concepts: int,
        *,
        activation: str = "topk",
        k: int | None = None,
        skip: bool = False,
        l0_coefficient: float = 1e-2,
        bandwidth: float = 0.05,
        threshold_init: float = 0.1,
        l1_coefficient: float = 1e-3,
        training: TrainingConfig | None = None,
        **overrides,
    ):
        super().__init__(n_concepts)
        self.activation = activation
        self.k = k
        self.skip = skip
        self.l0_coefficient = l0_coefficient
        self.bandwidth = bandwidth
        self.threshold_init = threshold_init
        self.l1_coefficient = l1_coefficient
        self.training = TrainingConfig.resolve(training, overrides, type(self).__name__)

    def _check_params(self) -> None:
        super()._check_params()
        check_choice("activation", self.activation, ACTIVATIONS)
        self._check_k()
        if not isinstance(self.skip, bool):
            raise TypeError(f"skip must be True or False, got {self.skip!r}")
        self._check_jumprelu()
        check_number("l1_coefficient", self.l1_coefficient, minimum=0)

    def _resolved_k(self) -> int | None:
        return super()._resolved_k() if self.activation == "topk" else None

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None) -> Transcoder:
        """Fit on inputs ``X`` and the targets ``y`` (None: ``X`` itself); returns ``self``.

        Example:
            >>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32)
            >>> Transcoder(8, k=2, max_epochs=2, progress=False).fit(X, X[:, ::-1]).fit_info_["epochs"]
            2
        """
        self._target = y
        try:
            return super().fit(X)
        finally:
            del self._target

    def _begin(self) -> None:
        """The fitted settings every training path sets first."""
        self.k_ = self._resolved_k()
        self.preprocessing_ = dict(_NO_SHIFT)

    def _fit(self, X) -> None:
        self._begin()
        Y = X if self._target is None else self._target
        label = f"transcoder {self.activation} {self.n_concepts}"
        run = train_dictionary(self, X, Y, config=self.training_config, label=label)
        self.fit_info_["monitor"] = run.note
        self._finish_run(run)

    def _finish_run(self, run) -> None:
        self.weights_ = {name: t.detach().cpu() for name, t in run.weights.items()}
        self.n_outputs_ = int(self.weights_["W_dec"].shape[1])
        self.fit_info_.update(run.summary())

    def _init_weights(self, x, y, generator):
        y = x if y is None else y
        self.scale_ = float(x.pow(2).mean().sqrt().clamp_min(1e-8))
        mean = y.mean(0)
        self.target_scale_ = float((y - mean).pow(2).mean().sqrt().clamp_min(1e-8))
        d_in, d_out = x.shape[1], y.shape[1]
        if self.skip and d_in != d_out:
            raise ValueError(
                f"skip=True needs the input and the output to have one width, got {d_in} and {d_out}; use skip=False"
            )
        W_dec = torch.randn(self.n_concepts, d_out, generator=generator).to(x.device)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        W_enc = torch.randn(d_in, self.n_concepts, generator=generator).to(x.device)
        W_enc /= W_enc.norm(dim=0, keepdim=True)
        # the encoder starts centred: b_enc = −μ̃ W_enc, so pre-activations are (x̃ − μ̃) W_enc. An input with a large
        # mean (SmolLM2's MLP inputs: ‖μ‖ ≈ 0.59 of their RMS norm) otherwise gives the features whose direction points
        # away from it negative pre-activations on every token: they never fire and never get a gradient.
        w = {
            "W_enc": W_enc,
            "b_enc": -(x.mean(0) / self.scale_) @ W_enc,
            "W_dec": W_dec,
            "b_dec": mean / self.target_scale_,
        }
        if self.skip:
            w["W_skip"] = torch.zeros(d_in, d_out, device=x.device)
        return self._add_threshold(w, x.device)

    def _normalise_target(self, y, w):
        return y / self.target_scale_

    def _predict_n(self, xn, w, codes=None) -> torch.Tensor:
        """The normalised prediction ``W_decᵀ f + b_dec (+ W_skipᵀ x̃)``."""
        codes = self._encode(xn, w) if codes is None else codes
        out = codes @ w["W_dec"] + w["b_dec"]
        return out + xn @ w["W_skip"] if "W_skip" in w else out

    def _loss_offset(self, xn, w):
        """``b_dec`` and the skip term: what the prediction adds to the decoded features."""
        return w["b_dec"] + (xn @ w["W_skip"] if "W_skip" in w else 0.0)

    def _resample_encoder(self, inputs, residual, picks, directions, enc_norm):
        """A resampled feature reads the picked row's input about the rows' mean (the residual is in the output's
        space), centred there as the encoder starts (``b_enc = −mean · W_enc``), at ``_resample_gain`` times the
        live encoders' mean norm."""
        mean = inputs.mean(0)
        centred = inputs[picks] - mean
        return centred / centred.norm(dim=1, keepdim=True).clamp_min(1e-8) * self._resample_gain * enc_norm, mean

    # ------------------------------------------------------------------ using it
    def predict_torch(self, X: torch.Tensor) -> torch.Tensor:
        """The predicted output of inputs ``X`` (…, d_in) in torch, differentiable, in ``X``'s dtype and device.

        Example:
            >>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32)
            >>> tc = Transcoder(8, k=2, skip=True, max_epochs=2, progress=False).fit(X, X)
            >>> tc.predict_torch(torch.zeros(2, 5, 6)).shape
            torch.Size([2, 5, 6])
        """
        self._check_fitted()
        w = {name: t.to(X.device, X.dtype) for name, t in self.weights_.items()}
        flat = X.reshape(-1, X.shape[-1]) / self.scale_
        return (self._predict_n(flat, w) * self.target_scale_).reshape(*X.shape[:-1], -1)

    def predict(self, X) -> np.ndarray:
        """The predicted output (rows × d_out) of input rows ``X``, skip term included.

        Example:
            >>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32)
            >>> Transcoder(8, k=2, max_epochs=2, progress=False).fit(X, X).predict(X[:4]).shape
            (4, 6)
        """
        from interp_widgets.concepts.decompositions import _as_matrix

        with torch.no_grad():
            return self.predict_torch(torch.from_numpy(_as_matrix(X))).numpy()

    def _affine_decoder(self) -> tuple[np.ndarray, np.ndarray]:
        scale = self.target_scale_
        return self.weights_["W_dec"].numpy() * scale, self.weights_["b_dec"].numpy() * scale

    def folded(self) -> dict[str, torch.Tensor]:
        """The weights in raw units, circuit-tracer's layout: ``W_enc`` (n, d_in) with ``f = σ(W_enc x + b_enc)``,
        ``W_dec`` (n, d_out), ``b_dec``, ``W_skip`` (d_out, d_in) applied as ``x W_skipᵀ``, ``threshold`` raw.

        Example:
            >>> X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32)
            >>> tc = Transcoder(8, activation="jumprelu", skip=True, max_epochs=2, progress=False).fit(X, X)
            >>> w, x = tc.folded(), torch.from_numpy(X[:3])
            >>> pre = x @ w["W_enc"].T + w["b_enc"]
            >>> out = (pre * (pre > w["threshold"])) @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T
            >>> bool(torch.allclose(out, tc.predict_torch(x), atol=1e-5))
            True
        """
        self._check_fitted()
        w, sx, sy = self.weights_, self.scale_, self.target_scale_
        out = {
            "W_enc": (w["W_enc"] / sx).T.contiguous(),
            "b_enc": w["b_enc"].clone(),
            "W_dec": (w["W_dec"] * sy).contiguous(),
            "b_dec": w["b_dec"] * sy,
        }
        if "W_skip" in w:
            out["W_skip"] = (w["W_skip"] * (sy / sx)).T.contiguous()
        if "threshold" in w:
            out["threshold"] = w["threshold"].clone()
        return out

    @classmethod
    def from_weights(
        cls,
        *,
        W_enc,
        b_enc,
        W_dec,
        b_dec,
        W_skip=None,
        threshold=None,
        activation: str,
        k: int | None = None,
        layer: str | None = None,
        model_name: str | None = None,
        source: str | None = None,
    ) -> Transcoder:
        """A fitted transcoder built from raw weights in circuit-tracer's layout (the layout :meth:`folded` returns).

        The features are ``f = σ(W_enc x + b_enc)`` and the prediction ``ŷ = W_decᵀ f + b_dec + x W_skipᵀ``, in the
        units of the model's activations (no normalisation: ``scale_`` and ``target_scale_`` are 1), so
        ``from_weights(**tc.folded(), ...)`` predicts as ``tc`` does.

        Args:
            W_enc: (n, d_in), one row per feature (circuit-tracer's ``W_enc``, sparsify's ``encoder.weight``).
            b_enc: (n,).
            W_dec: (n, d_out), one row per feature.
            b_dec: (d_out,).
            W_skip: optional (d_out, d_in) linear skip term, applied as ``x W_skipᵀ``.
            threshold: JumpReLU's raw per-feature threshold θ (n,), ≥ 0 (not log θ); only with ``"jumprelu"``.
            activation: ``"topk"`` (the ``k`` largest pre-activations, then ReLU: the same features as sparsify's
                ReLU then top k), ``"jumprelu"`` (``pre · 1[pre > θ]``) or ``"relu"``.
            k: active features per token, needed by ``"topk"`` and only by it.
            layer, model_name: recorded as ``layer_`` (e.g. ``"layer:3.mlp_in"``) and ``model_name_``.
            source: where the weights came from, recorded in ``fit_info_["source"]``.

        Arrays may be numpy arrays or torch tensors of any float dtype and device; they are copied to float32 on the
        CPU. A shape that does not fit, a non-finite value or a negative threshold is refused.

        Example:
            >>> g = torch.Generator().manual_seed(0)
            >>> W_enc, W_dec = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
            >>> tc = Transcoder.from_weights(W_enc=W_enc, b_enc=torch.zeros(16), W_dec=W_dec, b_dec=torch.zeros(8),
            ...                              activation="topk", k=3)
            >>> x = torch.randn(5, 8, generator=g)
            >>> pre = x @ W_enc.T
            >>> top = torch.zeros_like(pre).scatter(-1, pre.topk(3).indices, pre.topk(3).values.relu())
            >>> bool(torch.allclose(tc.predict_torch(x), top @ W_dec, atol=1e-5)), tc.transform(x.numpy()).shape
            (True, (5, 16))
        """
        check_choice("activation", activation, ACTIVATIONS)
        W_enc = _weight("W_enc", W_enc, 2)
        n, d_in = W_enc.shape
        b_enc = _weight("b_enc", b_enc, 1, (n,), f"(n,) = ({n},), n being W_enc's rows")
        W_dec = _weight("W_dec", W_dec, 2)
        if W_dec.shape[0] != n:
            raise ValueError(
                f"W_dec must have one row per feature, shape (n, d_out) = ({n}, d_out) as W_enc has {n} rows, got "
                f"{tuple(W_dec.shape)}; a (d_out, n) decoder must be transposed first"
            )
        d_out = W_dec.shape[1]
        b_dec = _weight("b_dec", b_dec, 1, (d_out,), f"(d_out,) = ({d_out},)")
        weights = {"W_enc": W_enc.T.contiguous(), "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec}
        if W_skip is not None:
            weights["W_skip"] = _weight("W_skip", W_skip, 2, (d_out, d_in), f"(d_out, d_in) = ({d_out}, {d_in})")
            weights["W_skip"] = weights["W_skip"].T.contiguous()
        if activation == "jumprelu":
            if threshold is None:
                raise ValueError("activation='jumprelu' needs threshold= (the raw per-feature θ, shape (n,))")
            weights["threshold"] = _weight("threshold", threshold, 1, (n,), f"(n,) = ({n},)")
            if bool((weights["threshold"] < 0).any()):
                raise ValueError(
                    "threshold has negative values; JumpReLU here keeps pre > θ ≥ 0 (pass the raw θ, not log θ)"
                )
        elif threshold is not None:
            raise ValueError(f"threshold= belongs to activation='jumprelu', not {activation!r}; drop it")
        if activation == "topk" and k is None:
            raise ValueError("activation='topk' needs k= (the active features per token)")
        if activation != "topk" and k is not None:
            raise ValueError(f"k= belongs to activation='topk', not {activation!r}; drop it")
        tc = cls(n, activation=activation, k=k, skip=W_skip is not None)
        tc._check_params()
        tc._begin()
        tc.weights_ = weights
        tc.scale_ = tc.target_scale_ = 1.0
        tc.n_outputs_ = int(d_out)
        tc.fit_info_ = {"rows": 0, "source": source or "weights"}
        tc.layer_ = layer
        tc.model_name_ = model_name
        # the decoder is affine: read it off the weights (no pass over the identity, costly at 10⁵ features); with a
        # scale of 1, components_ shares W_dec's memory (a 73,728-feature decoder of width 576 takes 170 MB)
        tc.components_ = W_dec.numpy()
        tc.offset_ = b_dec.numpy()
        tc.n_features_in_ = int(d_in)
        return tc

    def _state(self):
        arrays, extra = super()._state()
        extra["target_scale"] = self.target_scale_
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.preprocessing_ = dict(_NO_SHIFT)
        self.target_scale_ = float(extra["target_scale"])
        self.n_outputs_ = int(self.weights_["W_dec"].shape[1])


def _weight(name: str, value, ndim: int, shape: tuple | None = None, expected: str = "") -> torch.Tensor:
    """``value`` as a float32 CPU tensor (a copy) of ``ndim`` dimensions and, if given, ``shape``."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu", torch.float32).clone()
    else:
        try:
            tensor = torch.from_numpy(np.array(value, dtype=np.float32))
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be a torch tensor or a numpy array of numbers ({err})") from None
    if tensor.ndim != ndim or (shape is not None and tuple(tensor.shape) != tuple(shape)):
        want = expected or f"{ndim}-D"
        raise ValueError(f"{name} must have shape {want}, got {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return tensor.contiguous()
