"""The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens").

One affine translator per layer, ``h -> h + A h + b``, initialised at the identity (``A = 0``, ``b = 0``), trained so
that decoding the translated state with the model's own final norm and head (:class:`~interp_widgets.lens.LensHead`)
minimises KL(final ‖ lens) to the model's output distribution. The parametrisation is the one of the ``tuned-lens``
package (``TunedLens.transform_hidden``: ``h + translator(h)``); ``tests/lens/test_lens.py`` checks that the same weights
give the same KL as that package on the same hidden states. The last block's output needs no translator (its lens is
the model's output) and keeps the identity.

Training caches the residual streams of 30–50k tokens in float16, then runs Adam on random batches of cached
positions; each step decodes every layer's batch through the full unembedding, which dominates the cost.

Example:
    >>> lens = TunedLens.for_model(lm)
    >>> lens
    TunedLens(GPT2LMHeadModel, 1 translators over 2 layers, d=32, identity)
    >>> _ = lens.fit(lm, lm_tokenizer, texts * 4, tokens=200, seq_len=32, steps=3, batch_size=16, progress=False)
    >>> lens.history["kl"].shape
    (3,)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from interp_widgets import layers as _layers
from interp_widgets._files import output_path, read_safetensors
from interp_widgets.lens.head import LensHead, model_name, unembedding_hash
from interp_widgets.validation import check_int, check_number

__all__ = ["TunedLens", "collect_residuals", "lens_kl"]

_FORMAT = "interp_widgets.TunedLens"
#: Tokens per forward pass when residual streams are read (whole windows of ``seq_len``, at least one).
_PASS_TOKENS = 2048


def _pack(tokenizer, texts: Sequence[str], tokens: int, seq_len: int) -> torch.Tensor:
    """Tokenize texts into one stream (separated by EOS when the tokenizer has one) cut into ``seq_len`` windows."""
    if isinstance(texts, str):
        texts = [texts]
    sep = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    stream: list[int] = []
    for text in texts:
        stream += list(tokenizer(text, add_special_tokens=False)["input_ids"]) + sep
        if len(stream) >= tokens:
            break
    stream = stream[:tokens]
    n = len(stream) // seq_len
    if n == 0:
        raise ValueError(
            f"the texts give {len(stream)} tokens, fewer than one window of seq_len={seq_len}; pass more "
            "text or a smaller seq_len"
        )
    return torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)


def collect_residuals(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    names: Sequence[str],
    *,
    tokens: int,
    seq_len: int = 256,
    dtype=torch.float16,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """The residual stream at each of ``names`` over the first ``tokens`` tokens of ``texts`` (packed into windows
    of ``seq_len``), as ``{name: (n_tokens, d)}`` tensors in ``dtype`` (float16 by default, half the memory).

    Example:
        >>> acts = collect_residuals(lm, lm_tokenizer, texts * 4, ["layer:0"], tokens=64, seq_len=16, progress=False)
        >>> acts["layer:0"].shape, acts["layer:0"].dtype
        (torch.Size([64, 32]), torch.float16)
    """
    out: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for batch in _residual_batches(model, tokenizer, texts, names, tokens=tokens, seq_len=seq_len, progress=progress):
        for name in names:
            out[name].append(batch[name].to("cpu", dtype))
    return {name: torch.cat(parts) for name, parts in out.items()}


def _residual_batches(model, tokenizer, texts, names, *, tokens: int, seq_len: int, progress: bool):
    """Yield, per forward pass over packed windows, ``{name: (rows, d)}`` residual streams on the device (and in the
    dtype) each layer ran in; the rows of successive batches follow the token order of :func:`collect_residuals`."""
    from tqdm.auto import tqdm

    from interp_widgets.adapter import ModelAdapter

    adapter = ModelAdapter(model, tokenizer)
    seq_len = min(check_int("seq_len", seq_len, minimum=1), adapter.context_limit[0])
    windows = _pack(tokenizer, texts, check_int("tokens", tokens, minimum=1), seq_len)
    device = adapter.device  # the embedding's device (a dispatched model's first one)
    batch = max(1, _PASS_TOKENS // windows.shape[1])
    with _layers.evaluation(model), torch.no_grad():
        for start in tqdm(range(0, len(windows), batch), desc="residual streams", disable=not progress, leave=False):
            ids = windows[start : start + batch].to(device)
            with _layers.capture(model, list(names)) as acts:
                model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids))
            yield {name: acts[name][0].reshape(-1, acts[name][0].shape[-1]) for name in names}


class TunedLens:
    """Affine translators ``h -> h + h Aᵀ + b`` for the residual-stream points ``layers`` of one model.

    Build one with :meth:`for_model` (identity translators), train it with :meth:`fit`, and pass it to
    :func:`~interp_widgets.lens.logit_lens` as ``tuned=``. It records the model's name, number of layers, width
    ``d`` and a hash of its unembedding, and refuses another model (:meth:`check_model`).

    Example:
        >>> lens = TunedLens.for_model(lm)
        >>> lens.layers, lens.weights.shape
        (['layer:0'], (1, 32, 32))
    """

    def __init__(
        self,
        layers: Sequence[str],
        weights,
        biases,
        *,
        model_name: str,
        n_layers: int,
        d_model: int,
        unembed_hash: str = "",
        history: dict | None = None,
    ):
        self.layers = list(layers)
        self.weights = np.asarray(weights, dtype=np.float32)
        self.biases = np.asarray(biases, dtype=np.float32)
        if self.weights.shape != (len(self.layers), d_model, d_model) or self.biases.shape != (
            len(self.layers),
            d_model,
        ):
            raise ValueError(
                f"weights must be ({len(self.layers)}, {d_model}, {d_model}) and biases "
                f"({len(self.layers)}, {d_model}); got {self.weights.shape} and {self.biases.shape}"
            )
        self.model_name, self.n_layers, self.d_model = str(model_name), int(n_layers), int(d_model)
        self.unembed_hash = str(unembed_hash)
        self.history = history or {}
        self._torch: dict = {}

    @classmethod
    def for_model(cls, model: nn.Module, layers: Sequence | None = None) -> "TunedLens":
        """Identity translators for every block output but the last (or for the given residual-stream points).

        Example:
            >>> TunedLens.for_model(lm, layers=["layer:0.resid_mid", 0]).layers
            ['layer:0.resid_mid', 'layer:0']
        """
        from interp_widgets.lens.logit_lens import residual_points

        head = LensHead(model)
        n_blocks = len(_layers.blocks(model)[1])
        names = residual_points(model, layers)
        if layers is None:
            names = [n for n in names if n != f"layer:{n_blocks - 1}"]
        d = head.d_model
        return cls(
            names,
            np.zeros((len(names), d, d), np.float32),
            np.zeros((len(names), d), np.float32),
            model_name=model_name(model),
            n_layers=n_blocks,
            d_model=d,
            unembed_hash=unembedding_hash(model),
        )

    def describe(self) -> str:
        """One line: the model, the translators and how they were trained.

        Example:
            >>> TunedLens.for_model(lm).describe()
            'GPT2LMHeadModel, 1 translators over 2 layers, d=32, identity'
        """
        trained = (
            f"trained on {self.history.get('tokens')} tokens, {len(self.history['kl'])} steps"
            if "kl" in self.history
            else "identity"
        )
        return f"{self.model_name}, {len(self.layers)} translators over {self.n_layers} layers, d={self.d_model}, {trained}"

    def __repr__(self) -> str:
        return f"TunedLens({self.describe()})"

    def check_model(self, model: nn.Module) -> None:
        """Raise a ValueError if this lens was made for another model (name, layer count, width or unembedding).

        Example:
            >>> TunedLens.for_model(lm).check_model(masked_lm)
            Traceback (most recent call last):
            ...
            ValueError: this tuned lens was made for GPT2LMHeadModel (2 layers, d=32), not for BertForMaskedLM (2 layers, d=32): its name differs. A lens only fits the model it was trained on; fit one for this model with TunedLens.for_model(model).fit(model, tokenizer, texts).
        """
        head = LensHead(model)
        n_blocks = len(_layers.blocks(model)[1])
        name = model_name(model)
        problems = [
            what
            for what, ok in (
                ("its name", name == self.model_name),
                ("its layer count", n_blocks == self.n_layers),
                ("its width d", head.d_model == self.d_model),
            )
            if not ok
        ]
        if not problems and self.unembed_hash and unembedding_hash(model) != self.unembed_hash:
            problems.append("its unembedding weights")
        if problems:
            raise ValueError(
                f"this tuned lens was made for {self.model_name} ({self.n_layers} layers, d={self.d_model}), not for "
                f"{name} ({n_blocks} layers, d={head.d_model}): {' and '.join(problems)} differ"
                f"{'s' if len(problems) == 1 else ''}. A lens only fits the model it was trained on; fit one for this "
                "model with TunedLens.for_model(model).fit(model, tokenizer, texts)."
            )

    # ------------------------------------------------------------------ applying
    def _params(self, device, dtype):
        key = (str(device), dtype)
        if key not in self._torch:
            self._torch = {
                key: (
                    torch.as_tensor(self.weights, device=device, dtype=dtype),
                    torch.as_tensor(self.biases, device=device, dtype=dtype),
                )
            }
        return self._torch[key]

    def translate(self, layer: str, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden + hidden Aᵀ + b`` with the translator of ``layer``; the last block's output is left as it is.

        Example:
            >>> lens = TunedLens.for_model(lm)
            >>> h = torch.randn(3, 32)
            >>> bool(torch.equal(lens.translate("layer:0", h), h)), bool(torch.equal(lens.translate("layer:1", h), h))
            (True, True)
        """
        if layer == f"layer:{self.n_layers - 1}" and layer not in self.layers:
            return hidden
        if layer not in self.layers:
            raise ValueError(f"this tuned lens has no translator for {layer!r}; it has {self.layers}")
        W, b = self._params(hidden.device, hidden.dtype)
        i = self.layers.index(layer)
        return hidden + hidden @ W[i].T + b[i]

    # ------------------------------------------------------------------ training
    def fit(
        self,
        model: nn.Module,
        tokenizer,
        texts: Sequence[str],
        *,
        tokens: int = 40_000,
        seq_len: int = 256,
        steps: int = 300,
        batch_size: int = 128,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        seed: int = 0,
        progress: bool = True,
    ) -> "TunedLens":
        """Train the translators on the first ``tokens`` tokens of ``texts`` to minimise KL(final ‖ lens).

        The residual streams are cached once in float16 (:func:`collect_residuals`); each of ``steps`` Adam steps
        draws ``batch_size`` random cached positions and decodes every layer's translated states through the model's
        head against the model's output distribution there. Only the translators get gradients (the model's
        parameters are never touched). ``history`` records the mean KL over layers at each step, ``tokens`` and
        ``seconds``.

        Example:
            >>> lens = TunedLens.for_model(lm).fit(lm, lm_tokenizer, texts * 4, tokens=256, seq_len=32, steps=20,
            ...                                    batch_size=32, lr=1e-2, progress=False)
            >>> bool(lens.history["kl"][-5:].mean() < lens.history["kl"][:5].mean())
            True
        """
        from tqdm.auto import tqdm

        self.check_model(model)
        steps = check_int("steps", steps, minimum=1)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        lr = check_number("lr", lr, minimum=0.0)
        start_time = time.perf_counter()
        last = f"layer:{self.n_layers - 1}"
        head = LensHead(model)
        cache = collect_residuals(
            model,
            tokenizer,
            texts,
            list(dict.fromkeys(self.layers + [last])),
            tokens=tokens,
            seq_len=seq_len,
            progress=progress,
        )
        n_tokens = cache[last].shape[0]
        device = next(model.parameters()).device
        W = torch.tensor(self.weights, device=device, requires_grad=True)
        b = torch.tensor(self.biases, device=device, requires_grad=True)
        opt = torch.optim.AdamW([W, b], lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / max(1, steps // 10)) * max(0.0, 1 - s / steps)
        )
        generator = torch.Generator().manual_seed(int(seed))
        losses = np.zeros(steps)
        with _layers.evaluation(model):
            for step in tqdm(range(steps), desc="tuned lens", disable=not progress):
                idx = torch.randint(0, n_tokens, (batch_size,), generator=generator)
                with torch.no_grad():
                    final_logp = head(cache[last][idx].to(device, torch.float32)).float().log_softmax(-1)
                    p = final_logp.exp()
                opt.zero_grad(set_to_none=False)
                total = 0.0
                for i, name in enumerate(self.layers):
                    h = cache[name][idx].to(device, torch.float32)
                    logq = head(h + h @ W[i].T + b[i]).float().log_softmax(-1)
                    kl = (p * (final_logp - logq)).sum(-1).mean() / len(self.layers)
                    kl.backward(inputs=[W, b])
                    total += float(kl.detach())
                opt.step()
                sched.step()
                losses[step] = total
        self.weights = W.detach().cpu().numpy().astype(np.float32)
        self.biases = b.detach().cpu().numpy().astype(np.float32)
        self._torch = {}
        self.history = {
            "kl": losses,
            "tokens": int(n_tokens),
            "steps": steps,
            "batch_size": batch_size,
            "lr": lr,
            "seconds": time.perf_counter() - start_time,
        }
        return self

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the translators to one ``.safetensors`` file whose header records the model's name, layer count,
        width and unembedding hash.

        Example:
            >>> path = TunedLens.for_model(lm).save(getfixture("tmp_path") / "lens.safetensors")
            >>> TunedLens.load(path, model=lm).layers
            ['layer:0']
        """
        from safetensors.numpy import save_file

        path = output_path(path)
        history = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.history.items()}
        meta = {
            "format": _FORMAT,
            "version": 1,
            "layers": self.layers,
            "model_name": self.model_name,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "unembed_hash": self.unembed_hash,
            "history": history,
        }
        save_file(
            {"weights": np.ascontiguousarray(self.weights), "biases": np.ascontiguousarray(self.biases)},
            str(path),
            metadata={
                "interp_widgets": json.dumps(meta),
                "model_name": self.model_name,
                "n_layers": str(self.n_layers),
                "d_model": str(self.d_model),
            },
        )
        return path

    @classmethod
    def load(cls, path: str | Path, model: nn.Module | None = None) -> "TunedLens":
        """Read a lens written by :meth:`save`; with ``model``, refuse it unless it was made for that model.

        Example:
            >>> path = TunedLens.for_model(lm).save(getfixture("tmp_path") / "lens.safetensors")
            >>> TunedLens.load(path, model=masked_lm)
            Traceback (most recent call last):
            ...
            ValueError: this tuned lens was made for GPT2LMHeadModel (2 layers, d=32), not for BertForMaskedLM (2 layers, d=32): its name differs. A lens only fits the model it was trained on; fit one for this model with TunedLens.for_model(model).fit(model, tokenizer, texts).
        """
        fix = "pass the path of a file written by TunedLens.save(path)"
        metadata, arrays = read_safetensors(path, what="a saved TunedLens", fix=fix)
        meta = json.loads(metadata.get("interp_widgets", "{}"))
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{path} holds {meta.get('format') or 'no interp_widgets object'}, not a TunedLens; {fix}")
        history = {k: (np.asarray(v) if k == "kl" else v) for k, v in meta.get("history", {}).items()}
        lens = cls(
            meta["layers"],
            arrays["weights"],
            arrays["biases"],
            model_name=meta["model_name"],
            n_layers=meta["n_layers"],
            d_model=meta["d_model"],
            unembed_hash=meta.get("unembed_hash", ""),
            history=history,
        )
        if model is not None:
            lens.check_model(model)
        return lens


def lens_kl(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    tuned: TunedLens | None = None,
    tokens: int = 20_000,
    seq_len: int = 256,
    batch_tokens: int = 256,
    progress: bool = True,
) -> dict:
    """Mean KL(final ‖ lens) per block output over the first ``tokens`` tokens of ``texts``, for the logit lens and
    (with ``tuned``) the tuned lens: ``{"layers": [...], "logit": array, "tuned": array, "tokens": n}``.

    The residual streams are decoded where the model produced them, ``batch_tokens`` positions at a time, and only
    one number per layer and slice comes back to the CPU (no cache of every layer's stream is built).

    Example:
        >>> out = lens_kl(lm, lm_tokenizer, texts * 4, tokens=64, seq_len=16, progress=False)
        >>> out["layers"], bool(out["logit"][-1] < 1e-5)
        (['layer:0', 'layer:1'], True)
    """
    from tqdm.auto import tqdm

    head = LensHead(model)
    n_blocks = len(_layers.blocks(model)[1])
    names = [f"layer:{i}" for i in range(n_blocks)]
    if tuned is not None:
        tuned.check_model(model)
    lenses = ["logit"] + (["tuned"] if tuned is not None else [])
    sums = {lens: np.zeros(n_blocks) for lens in lenses}
    batch_tokens = check_int("batch_tokens", batch_tokens, minimum=1)
    last = names[-1]
    n = 0

    def add(block: dict[str, torch.Tensor]) -> None:
        # one slice of batch_tokens positions, reduced to one KL sum per layer on the device it was produced on
        final_logp = head(block[last]).float().log_softmax(-1)
        p = final_logp.exp()
        for lens in lenses:
            for i, name in enumerate(names):
                h = block[name]  # the model's dtype, as logit_lens decodes it
                if lens == "tuned":
                    h = tuned.translate(name, h)
                logq = head(h).float().log_softmax(-1)
                sums[lens][i] += float((p * (final_logp - logq)).sum(-1).clamp_min(0).sum())

    # The residual streams stay on the model's devices: each forward batch's rows join a carry of fewer than
    # batch_tokens rows and are decoded in slices of batch_tokens as they arrive, the same slices (and sums) as
    # decoding the whole cache, which never exists on the CPU.
    carry: dict[str, torch.Tensor] | None = None
    with _layers.evaluation(model), torch.no_grad():
        bar = tqdm(desc="lens KL", disable=not progress, leave=False)
        try:
            for batch in _residual_batches(
                model, tokenizer, texts, names, tokens=tokens, seq_len=seq_len, progress=progress
            ):
                carry = batch if carry is None else {name: torch.cat([carry[name], batch[name]]) for name in names}
                rows = carry[last].shape[0]
                full = rows - rows % batch_tokens
                for start in range(0, full, batch_tokens):
                    add({name: carry[name][start : start + batch_tokens] for name in names})
                    bar.update(1)
                n += full
                carry = {name: carry[name][full:] for name in names}
            if carry is not None and carry[last].shape[0]:
                n += carry[last].shape[0]
                add(carry)
                bar.update(1)
        finally:
            bar.close()
    return {"layers": names, "tokens": int(n), **{lens: sums[lens] / n for lens in lenses}}
