"""Sparse autoencoders in torch: ReLU with an L1 penalty, or TopK, trained by minibatches from a store.

The input is centred on the decoder bias and scaled so that a row has unit mean squared value per feature
(``scale_``); the decoder rows are kept at unit norm. Training reads shuffled minibatches from an
:class:`~interp_widgets.concepts.ActivationStore` (or an array), shows a progress bar, stops early when the loss on a
fixed monitoring sample stops improving (the best weights are kept), and resamples dead concepts: after an epoch in
which a concept never fired, its decoder row is reset to the residual direction of a badly reconstructed input
(chosen with probability proportional to the square of its reconstruction loss) and its encoder column to that
direction scaled to the mean encoder norm of live concepts (× 0.2 for ReLU; × 1 for TopK, where a unit must win one
of the k slots to fire).

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

import math

import numpy as np
import torch

from interp_widgets.concepts.decompositions import ConceptModel, _as_matrix
from interp_widgets.validation import check_choice, check_int, check_number

ACTIVATIONS = ("relu", "topk")


class SparseAutoencoder(ConceptModel):
    """A one-layer sparse autoencoder whose hidden units are the concepts.

    Args:
        n_concepts: width of the dictionary (usually larger than the layer width).
        activation: ``"topk"`` (keep the ``k`` largest pre-activations, then ReLU) or ``"relu"`` (ReLU with an L1
            penalty of weight ``l1_coefficient`` on the coefficients).
        k: active concepts per row for TopK (default ``max(1, n_concepts // 10)``).
        l1_coefficient: L1 weight for the ReLU variant.
        lr, batch_size, max_epochs: Adam learning rate, rows per step, epoch cap.
        patience, min_delta: stop after ``patience`` epochs without a relative improvement of ``min_delta`` in the
            monitoring loss; the weights with the lowest monitoring loss are kept.
        monitor_rows: size of the fixed monitoring sample (held out when fitting an array).
        resample_dead: reset concepts that did not fire during an epoch.
        seed, progress, device: random seed, progress bar, torch device for training.

    Fitted attributes: ``weights_`` (``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``), ``scale_``, ``k_`` (the
    resolved ``k``) and those of every :class:`~interp_widgets.concepts.ConceptModel`.

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

    def __init__(self, n_concepts: int, *, activation: str = "topk", k: int | None = None,
                 l1_coefficient: float = 1e-3, lr: float = 1e-3, batch_size: int = 1024, max_epochs: int = 50,
                 patience: int = 3, min_delta: float = 1e-3, monitor_rows: int = 8192, resample_dead: bool = True,
                 seed: int = 0, progress: bool = True, device: str = "cpu"):
        super().__init__(n_concepts)
        self.activation = activation
        self.k = k
        self.l1_coefficient = l1_coefficient
        self.lr = lr
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.min_delta = min_delta
        self.monitor_rows = monitor_rows
        self.resample_dead = resample_dead
        self.seed = seed
        self.progress = progress
        self.device = device

    def _check_params(self) -> None:
        super()._check_params()
        check_choice("activation", self.activation, ACTIVATIONS)
        if self.k is not None:
            check_int("k", self.k, minimum=1)
        if self.activation == "topk" and self._resolved_k() > self.n_concepts:
            raise ValueError(f"k must be between 1 and n_concepts={self.n_concepts}, got {self.k}")
        for name in ("batch_size", "max_epochs", "patience"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("monitor_rows", self.monitor_rows, minimum=0)
        check_int("seed", self.seed, minimum=0)
        for name in ("l1_coefficient", "lr", "min_delta"):
            check_number(name, getattr(self, name), minimum=0)

    def _resolved_k(self) -> int:
        return max(1, int(self.n_concepts) // 10) if self.k is None else int(self.k)

    # ------------------------------------------------------------------ the network
    def _encode(self, xn: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        pre = xn @ w["W_enc"] + w["b_enc"]
        if self.activation == "relu":
            return torch.relu(pre)
        values, indices = pre.topk(self.k_, dim=-1)
        return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))

    def _loss(self, xn: torch.Tensor, w: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        codes = self._encode(xn, w)
        residual = xn - codes @ w["W_dec"]
        mse = residual.pow(2).mean()
        loss = mse + self.l1_coefficient * codes.abs().sum(-1).mean() if self.activation == "relu" else mse
        return loss, codes, residual

    # ------------------------------------------------------------------ fitting
    def _fit(self, X) -> None:
        from tqdm.auto import tqdm

        from interp_widgets.concepts.activations import ActivationStore

        self.k_ = self._resolved_k()
        generator = torch.Generator().manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        if isinstance(X, ActivationStore):
            monitor = X.sample(self.monitor_rows, seed=self.seed)
            batches = lambda epoch: X.minibatches(self.batch_size, seed=self.seed + epoch)  # noqa: E731
            self.fit_info_["monitor"] = "random sample of the store (also trained on)"
        else:
            X = _as_matrix(X)
            order = rng.permutation(len(X))
            n_monitor = min(self.monitor_rows, len(X) // 10) if len(X) >= 20 else 0
            monitor, train = (X[order[:n_monitor]], X[order[n_monitor:]]) if n_monitor else (X, X)
            batches = lambda epoch: (  # noqa: E731
                train[idx] for idx in np.array_split(np.random.default_rng(self.seed + epoch).permutation(len(train)),
                                                      max(1, math.ceil(len(train) / self.batch_size))))
            self.fit_info_["monitor"] = "held-out rows" if n_monitor else "training rows (too few to hold out)"
        device = torch.device(self.device)
        monitor_t = torch.from_numpy(np.asarray(monitor, dtype=np.float32)).to(device)
        mean = monitor_t.mean(0)
        scale = float(((monitor_t - mean).pow(2).mean()).sqrt().clamp_min(1e-8))
        d = monitor_t.shape[1]
        W_dec = torch.randn(self.n_concepts, d, generator=generator).to(device)
        W_dec /= W_dec.norm(dim=1, keepdim=True)
        w = {"W_enc": W_dec.T.clone(), "b_enc": torch.zeros(self.n_concepts, device=device), "W_dec": W_dec,
             "b_dec": mean.clone()}
        for tensor in w.values():
            tensor.requires_grad_(True)
        self.scale_ = scale

        def normalise(x):
            return (torch.as_tensor(np.asarray(x, dtype=np.float32), device=device) - w["b_dec"]) / scale

        optimizer = torch.optim.Adam(w.values(), lr=self.lr)
        history, best, reference, best_weights, stale = [], math.inf, math.inf, None, 0
        bar = tqdm(total=self.max_epochs, desc=f"SAE {self.activation} {self.n_concepts}", unit="epoch",
                   disable=not self.progress)
        for epoch in range(self.max_epochs):
            fired = torch.zeros(self.n_concepts, dtype=torch.long, device=device)
            total, steps = 0.0, 0
            for block in batches(epoch):
                loss, codes, _ = self._loss(normalise(block), w)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                with torch.no_grad():
                    w["W_dec"] /= w["W_dec"].norm(dim=1, keepdim=True).clamp_min(1e-8)
                    fired += (codes > 0).sum(0)
                total, steps = total + float(loss.detach()), steps + 1
            with torch.no_grad():
                monitor_n = (monitor_t - w["b_dec"]) / scale
                monitor_loss, codes, residual = self._loss(monitor_n, w)
                fvu = float(residual.pow(2).sum() / (monitor_n - monitor_n.mean(0)).pow(2).sum().clamp_min(1e-12))
            dead = torch.nonzero(fired == 0).flatten()
            record = {"epoch": epoch, "train_loss": total / max(steps, 1), "monitor_loss": float(monitor_loss),
                      "monitor_fvu": fvu, "dead": int(len(dead)), "resampled": 0}
            if float(monitor_loss) < best:
                best = float(monitor_loss)
                best_weights = {name: t.detach().clone() for name, t in w.items()}
            if float(monitor_loss) < reference * (1 - self.min_delta):
                reference, stale = float(monitor_loss), 0
            else:
                stale += 1
            if self.resample_dead and len(dead) and epoch < self.max_epochs - 1 and stale < self.patience:
                record["resampled"] = self._resample(w, dead, residual, generator)
                optimizer = torch.optim.Adam(w.values(), lr=self.lr)
            history.append(record)
            bar.update(1)
            bar.set_postfix(loss=f"{float(monitor_loss):.4g}", dead=int(len(dead)))
            if stale >= self.patience:
                # finished, not failed: a bar closed short of its total turns red in notebooks
                bar.total = len(history)
                bar.set_postfix_str(f"loss={float(monitor_loss):.4g}, stopped early: no {self.min_delta:.0e} "
                                    f"relative improvement in {self.patience} epochs")
                bar.refresh()
                break
        bar.close()
        self.weights_ = {name: t.detach().cpu() for name, t in (best_weights or w).items()}
        self.fit_info_.update(history=history, epochs=len(history), best_monitor_loss=best,
                              stopped_early=len(history) < self.max_epochs)

    @torch.no_grad()
    def _resample(self, w, dead: torch.Tensor, residual: torch.Tensor, generator: torch.Generator) -> int:
        errors = residual.pow(2).sum(1)
        if float(errors.sum()) <= 0:
            return 0
        picks = torch.multinomial(errors.cpu() ** 2 / (errors.cpu() ** 2).sum(), len(dead),
                                  replacement=len(dead) > len(errors), generator=generator)
        directions = residual[picks.to(residual.device)]
        directions /= directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
        alive = torch.ones(self.n_concepts, dtype=torch.bool, device=dead.device)
        alive[dead] = False
        enc_norm = w["W_enc"][:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0)
        w["W_dec"][dead] = directions
        w["W_enc"][:, dead] = directions.T * (0.2 if self.activation == "relu" else 1.0) * enc_norm
        w["b_enc"][dead] = 0.0
        return int(len(dead))

    # ------------------------------------------------------------------ concept API
    def _transform(self, X: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            xn = (torch.from_numpy(X) - self.weights_["b_dec"]) / self.scale_
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
        return self._encode((X - w["b_dec"]) / self.scale_, w)

    def _inverse(self, C: np.ndarray) -> np.ndarray:
        return C @ (self.weights_["W_dec"].numpy() * self.scale_) + self.weights_["b_dec"].numpy()

    def _state(self):
        arrays, extra = super()._state()
        arrays.update({f"sae.{name}": t.numpy() for name, t in self.weights_.items()})
        extra["scale"] = self.scale_
        extra["k"] = self.k_
        return arrays, extra

    def _restore(self, arrays, extra):
        super()._restore(arrays, extra)
        self.weights_ = {name[4:]: torch.from_numpy(np.array(v)) for name, v in arrays.items() if name.startswith("sae.")}
        self.scale_ = float(extra["scale"])
        self.k_ = int(extra.get("k", self._resolved_k()))  # files written before k_ existed saved the resolved k
