"""Cross-layer transcoders (CLTs): a feature of layer ``l`` reads layer ``l``'s input point and writes to the MLP
output of every layer ``l' ≥ l`` (Ameisen et al. 2025, "Circuit tracing"). The prediction of layer ``l'``'s MLP output
is the sum over the features of every layer ``l ≤ l'`` of ``a_f W_dec[l][f, l' − l]``, plus ``b_dec[l']``:

    f[l] = σ(W_enc[l] x[l] + b_enc[l]),    ŷ[l'] = Σ_{l ≤ l'} f[l] W_dec[l][:, l' − l] + b_dec[l']

with σ a ReLU or a JumpReLU (``pre · 1[pre > θ]``, raw θ ≥ 0), as circuit-tracer 0.5.0's ``CrossLayerTranscoder``
computes it. Training CLTs is out of scope: :meth:`CrossLayerTranscoderSet.from_circuit_tracer` loads circuit-tracer's
CLT directory, :meth:`~CrossLayerTranscoderSet.from_weights` wraps raw tensors, :meth:`~CrossLayerTranscoderSet.save`
/ :meth:`~CrossLayerTranscoderSet.load` is our own safetensors file. A set works wherever a
:class:`~interp_widgets.circuits.TranscoderSet` does in :func:`~interp_widgets.circuits.attribution_graph`,
:func:`~interp_widgets.circuits.feature_intervention` and :func:`~interp_widgets.circuits.qk_attribution`: both give
:meth:`replacement_weights` (a layer's encoder and every decoder it writes with) and ``set[layer]`` (a layer's
:class:`~interp_widgets.concepts.Transcoder`: its encoder with the decoder to its own layer).

circuit-tracer's CLT directory (``config.yaml`` with ``model_kind: cross_layer_transcoder``, ``feature_input_hook``,
``feature_output_hook``; per layer ``i`` of ``L``: ``W_enc_{i}.safetensors`` holding ``W_enc_{i}`` (n, d), ``b_enc_{i}``
(n,), ``b_dec_{i}`` (d,) and optionally ``threshold_{i}`` (n,), and ``W_dec_{i}.safetensors`` holding ``W_dec_{i}``
(n, L − i, d)). Its loader builds a JumpReLU when ``threshold_0`` exists and a ReLU otherwise, and reads no skip term.

Example:
    >>> g = torch.Generator().manual_seed(0)
    >>> clt = CrossLayerTranscoderSet.from_weights(  # layer 1's features never fire (b_enc -1e6)
    ...     W_enc=[torch.randn(8, 32, generator=g) for _ in range(2)], b_enc=[torch.zeros(8), torch.full((8,), -1e6)],
    ...     W_dec=[torch.randn(8, 2 - i, 32, generator=g) for i in range(2)], b_dec=[torch.zeros(32)] * 2)
    >>> clt
    CrossLayerTranscoderSet(2 layers, 8 features each, relu, reads mlp_in, model unknown)
    >>> x = torch.randn(3, 32, generator=g)  # layer 0's input: its features write to layers 0 and 1
    >>> w = clt.replacement_weights(0)
    >>> bool(torch.allclose(torch.relu(x @ w["W_enc"].T) @ w["W_dec"][:, 1], clt.predict([x, x])[1], atol=1e-5))
    True
    >>> from interp_widgets.circuits import attribution_graph
    >>> graph = attribution_graph(lm, lm_tokenizer, "The cat sat on the", clt, progress=False)  # lm: 2 blocks, d = 32
    >>> graph.provenance.settings["cross_layer"], sorted(set(graph.features[:, 0].tolist()))
    (True, [0])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from interp_widgets.circuits.transcoders import _checksum, check_model_identity
from interp_widgets.concepts._io import load_bundle, save_bundle
from interp_widgets.concepts.transcoders import INPUT_POINTS, Transcoder
from interp_widgets.validation import check_choice

__all__ = ["CrossLayerTranscoderSet"]

_KIND = "interp_widgets.CrossLayerTranscoderSet"
#: circuit-tracer's feature_input_hook names of the points a CLT may read, and its feature_output_hook names of the MLP
#: output (the nnsight backend maps hook_mlp_out and mlp.hook_out to the same module output)
_INPUT_HOOKS = {"mlp.hook_in": "mlp_in", "hook_resid_mid": "resid_mid"}
_OUTPUT_HOOKS = ("hook_mlp_out", "mlp.hook_out")
_ACTIVATIONS = {"relu": "relu", "jumprelu": "jumprelu", "jump_relu": "jumprelu"}


class CrossLayerTranscoderSet:
    """A cross-layer transcoder over every layer of one model (see the module docstring).

    Holds, per layer ``l`` of ``n_layers``: ``W_enc[l]`` (n, d), ``b_enc[l]`` (n,), ``threshold[l]`` (n,) for a
    JumpReLU, ``W_dec[l]`` (n, n_layers − l, d) (column ``j`` writes to layer ``l + j``) and ``b_dec[l]`` (d,), the bias
    of layer ``l``'s prediction; all float32 on the CPU. Build one with :meth:`from_circuit_tracer`,
    :meth:`from_weights` or :meth:`load`.

    Example:
        >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)] * 2, b_enc=[torch.zeros(4)] * 2,
        ...     W_dec=[torch.ones(4, 2, 32), torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)] * 2)
        >>> clt.layers, clt[1].n_concepts, clt.replacement_weights(0)["W_dec"].shape
        ([0, 1], 4, torch.Size([4, 2, 32]))
    """

    def __init__(self, W_enc, b_enc, W_dec, b_dec, threshold=None, *, activation: str, input_point: str,
                 model_name: str | None, source: str | None = None):  # fmt: skip
        self.W_enc, self.b_enc, self.W_dec, self.b_dec = W_enc, b_enc, W_dec, b_dec
        self.threshold = threshold
        self.activation = activation
        self.input_point = input_point
        self.model_name = model_name
        self.source = source
        self.n_layers = len(W_enc)
        self.d_model = int(W_enc[0].shape[1])
        self.n_features = int(W_enc[0].shape[0])
        self._per_layer: dict[int, Transcoder] = {}

    # ------------------------------------------------------------------ building
    @classmethod
    def from_weights(cls, *, W_enc: Sequence, b_enc: Sequence, W_dec: Sequence, b_dec: Sequence,
                     threshold: Sequence | None = None, input_point: str = "mlp_in", model_name: str | None = None,
                     source: str | None = None) -> CrossLayerTranscoderSet:  # fmt: skip
        """A set from per-layer raw weights in circuit-tracer's layout (lists indexed by layer): ``W_enc[l]`` (n, d)
        with ``f = σ(W_enc x + b_enc)``, ``b_enc[l]`` (n,), ``W_dec[l]`` (n, L − l, d), ``b_dec[l]`` (d,), and a JumpReLU's
        raw ``threshold[l]`` (n,) ≥ 0 (without it, a ReLU). Numpy arrays or tensors of any float dtype; copied to
        float32 on the CPU. A wrong shape, a non-finite value or a negative threshold is refused.

        Example:
            >>> CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)] * 2, b_enc=[torch.zeros(4)] * 2,
            ...     W_dec=[torch.ones(4, 2, 32)] * 2, b_dec=[torch.zeros(32)] * 2)
            Traceback (most recent call last):
            ...
            ValueError: W_dec[1] must have shape (n, L - l, d) = (4, 1, 32) (layer 1 writes to the 1 layers from 1 on), got (4, 2, 32)
        """
        check_choice("input_point", input_point, INPUT_POINTS)
        lists = {"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec}
        if threshold is not None:
            lists["threshold"] = threshold
        n_layers = len(W_enc)
        if n_layers == 0:
            raise ValueError("a cross-layer transcoder needs at least one layer: W_enc is empty")
        for name, values in lists.items():
            if len(values) != n_layers:
                raise ValueError(f"{name} has {len(values)} layers but W_enc has {n_layers}: give one entry per layer")
        first = _tensor("W_enc[0]", W_enc[0], 2)
        n, d = first.shape
        expected = {
            "W_enc": lambda l: (n, d),
            "b_enc": lambda l: (n,),
            "W_dec": lambda l: (n, n_layers - l, d),
            "b_dec": lambda l: (d,),
            "threshold": lambda l: (n,),
        }
        meaning = {
            "W_enc": "(n, d)",
            "b_enc": "(n,)",
            "W_dec": "(n, L - l, d)",
            "b_dec": "(d,)",
            "threshold": "(n,)",
        }
        out: dict[str, list[torch.Tensor]] = {}
        for name, values in lists.items():
            out[name] = []
            for layer, value in enumerate(values):
                shape = expected[name](layer)
                tensor = _tensor(f"{name}[{layer}]", value, len(shape))
                if tuple(tensor.shape) != shape:
                    why = (
                        f" (layer {layer} writes to the {n_layers - layer} layers from {layer} on)"
                        if name == "W_dec"
                        else ""
                    )
                    raise ValueError(
                        f"{name}[{layer}] must have shape {meaning[name]} = {shape}{why}, got {tuple(tensor.shape)}"
                    )
                out[name].append(tensor)
        if "threshold" in out and any(bool((t < 0).any()) for t in out["threshold"]):
            raise ValueError(
                "threshold has negative values; JumpReLU here keeps pre > θ ≥ 0 (pass the raw θ, not log θ)"
            )
        return cls(out["W_enc"], out["b_enc"], out["W_dec"], out["b_dec"], out.get("threshold"),
                   activation="jumprelu" if "threshold" in out else "relu", input_point=input_point,
                   model_name=model_name, source=source)  # fmt: skip

    @classmethod
    def from_circuit_tracer(cls, directory: str | Path, *, model=None) -> CrossLayerTranscoderSet:
        """Load circuit-tracer's CLT directory (module docstring): ``config.yaml`` and every layer's two files.

        ``feature_input_hook`` must be ``mlp.hook_in`` (the set reads ``mlp_in``) or ``hook_resid_mid``
        (``resid_mid``), ``feature_output_hook`` ``hook_mlp_out`` or ``mlp.hook_out``. The activation is circuit-tracer's
        rule (JumpReLU with ``threshold_{i}`` files, else ReLU); a config asking for ``topk`` or another activation is
        refused (circuit-tracer's CLT has no TopK: it would load it as ReLU). With ``model``, a set for another depth or
        width (or another model's name in ``model_name``) is refused. Layers must run from 0 without gaps.

        Example:
            >>> from safetensors.torch import save_file
            >>> folder = getfixture("tmp_path") / "clt"; folder.mkdir()
            >>> _ = (folder / "config.yaml").write_text("model_kind: cross_layer_transcoder\\n"
            ...     "feature_input_hook: hook_resid_mid\\nfeature_output_hook: hook_mlp_out\\n")
            >>> for i in range(2):
            ...     save_file({f"W_enc_{i}": torch.randn(8, 32), f"b_enc_{i}": torch.zeros(8), f"b_dec_{i}": torch.zeros(32),
            ...                f"threshold_{i}": torch.full((8,), 0.1)}, str(folder / f"W_enc_{i}.safetensors"))
            ...     save_file({f"W_dec_{i}": torch.randn(8, 2 - i, 32)}, str(folder / f"W_dec_{i}.safetensors"))
            >>> CrossLayerTranscoderSet.from_circuit_tracer(folder, model=model)
            CrossLayerTranscoderSet(2 layers, 8 features each, jumprelu, reads resid_mid, model unknown)
        """
        import yaml
        from safetensors import safe_open

        directory = Path(directory)
        config_path = directory / "config.yaml"
        if not config_path.is_file():
            raise FileNotFoundError(
                f"{config_path} does not exist: a circuit-tracer CLT directory has a config.yaml beside its "
                "W_enc_{i}.safetensors and W_dec_{i}.safetensors files"
            )
        config = yaml.safe_load(config_path.read_text()) or {}
        kind = config.get("model_kind")
        if kind != "cross_layer_transcoder":
            fix = (
                " (a per-layer set: build each layer with Transcoder.from_weights and wrap them in a TranscoderSet)"
                if kind == "transcoder_set"
                else ""
            )
            raise ValueError(f"{config_path} has model_kind {kind!r}, not 'cross_layer_transcoder'{fix}")
        for key in ("feature_input_hook", "feature_output_hook"):
            if key not in config:
                raise ValueError(f"{config_path} has no {key}: circuit-tracer needs it to know where the CLT reads")
        hook_in, hook_out = config["feature_input_hook"], config["feature_output_hook"]
        if hook_in not in _INPUT_HOOKS:
            raise ValueError(
                f"feature_input_hook {hook_in!r} is not a point read here: a CLT may read {sorted(_INPUT_HOOKS)} (the "
                "MLP's input after its norm, or the stream before the norm)"
            )
        if hook_out not in _OUTPUT_HOOKS:
            raise ValueError(f"feature_output_hook {hook_out!r} is not the MLP's output ({list(_OUTPUT_HOOKS)})")
        activation = config.get("activation")
        if activation is not None and str(activation).lower() not in _ACTIVATIONS:
            raise ValueError(
                f"{config_path} asks for activation {activation!r}; a cross-layer transcoder here is a ReLU or a "
                "JumpReLU (circuit-tracer's CLT has no TopK and would load this one as a ReLU)"
            )
        layers = sorted(int(p.stem.split("_")[-1]) for p in directory.glob("W_enc_*.safetensors")
                        if p.stem.split("_")[-1].isdigit())  # fmt: skip
        if not layers:
            raise FileNotFoundError(f"{directory} has no W_enc_{{i}}.safetensors files")
        n_layers = max(layers) + 1
        missing = [f"W_enc_{i}.safetensors" for i in range(n_layers) if i not in layers]
        missing += [
            f"W_dec_{i}.safetensors" for i in range(n_layers) if not (directory / f"W_dec_{i}.safetensors").is_file()
        ]
        if missing:
            raise FileNotFoundError(
                f"{directory} lacks {missing}: a CLT of {n_layers} layers needs both files of every layer from 0"
            )
        lists: dict[str, list] = {"W_enc": [], "b_enc": [], "b_dec": [], "threshold": [], "W_dec": []}
        for i in range(n_layers):
            for stem, names in ((f"W_enc_{i}", ("W_enc", "b_enc", "b_dec", "threshold")), (f"W_dec_{i}", ("W_dec",))):
                path = directory / f"{stem}.safetensors"
                try:
                    with safe_open(str(path), framework="pt") as handle:
                        keys = set(handle.keys())
                        for name in names:
                            key = f"{name}_{i}"
                            if key in keys:
                                lists[name].append(handle.get_tensor(key))
                            elif name != "threshold":
                                raise ValueError(f"{path} has no tensor {key!r} (it has {sorted(keys)})")
                except ValueError:
                    raise
                except Exception as err:  # noqa: BLE001 - any unreadable file is reported the same way
                    raise ValueError(f"{path} is not a readable safetensors file ({err})") from None
        thresholds = lists.pop("threshold")
        if thresholds and len(thresholds) != n_layers:
            raise ValueError(f"{directory}: some layers have a threshold_{{i}} and others not; every layer or none")
        if activation is not None and _ACTIVATIONS[str(activation).lower()] == "relu" and thresholds:
            raise ValueError(
                f"{config_path} says activation relu but the files hold thresholds (circuit-tracer would build a "
                "JumpReLU): drop the thresholds or the activation line"
            )
        if activation is not None and _ACTIVATIONS[str(activation).lower()] == "jumprelu" and not thresholds:
            raise ValueError(f"{config_path} says activation jumprelu but the files hold no threshold_{{i}} tensors")
        name = config.get("model_name") or None
        out = cls.from_weights(**lists, threshold=thresholds or None, input_point=_INPUT_HOOKS[hook_in],
                               model_name=name, source=str(directory.resolve()))  # fmt: skip
        if model is not None:
            out.check_model(model)
        return out

    # ------------------------------------------------------------------ what attribution reads
    @property
    def layers(self) -> list[int]:
        """Every block index (a CLT covers them all)."""
        return list(range(self.n_layers))

    def __len__(self) -> int:
        return self.n_layers

    def __getitem__(self, layer: int) -> Transcoder:
        """Layer ``layer``'s encoder with its decoder to its own layer, as a :class:`~interp_widgets.concepts.
        Transcoder` (its features and activation rule; the writes to later layers are in :meth:`replacement_weights`)."""
        if not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < self.n_layers:
            raise KeyError(f"no layer {layer}; this cross-layer transcoder has layers 0..{self.n_layers - 1}")
        layer = int(layer)
        if layer not in self._per_layer:
            self._per_layer[layer] = Transcoder.from_weights(
                W_enc=self.W_enc[layer], b_enc=self.b_enc[layer], W_dec=self.W_dec[layer][:, 0],
                b_dec=self.b_dec[layer], threshold=None if self.threshold is None else self.threshold[layer],
                activation=self.activation, layer=f"layer:{layer}.{self.input_point}", model_name=self.model_name,
                source="cross-layer transcoder",
            )  # fmt: skip
        return self._per_layer[layer]

    def replacement_weights(self, layer: int) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s weights as the replacement model uses them: ``W_enc`` (n, d), ``b_enc``, ``threshold``
        (JumpReLU), ``W_dec`` (n, n_layers − layer, d) whose column ``j`` writes to layer ``layer + j``, and ``b_dec``
        (d,), the bias of layer ``layer``'s prediction (:meth:`TranscoderSet.replacement_weights
        <interp_widgets.circuits.TranscoderSet.replacement_weights>` gives the same keys, one column of ``W_dec``).

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)] * 2, b_enc=[torch.zeros(4)] * 2,
            ...     W_dec=[torch.ones(4, 2, 32), torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)] * 2)
            >>> sorted(clt.replacement_weights(1)), clt.replacement_weights(1)["W_dec"].shape
            (['W_dec', 'W_enc', 'b_dec', 'b_enc'], torch.Size([4, 1, 32]))
        """
        self[layer]  # the range check
        out = {"W_enc": self.W_enc[layer], "b_enc": self.b_enc[layer], "W_dec": self.W_dec[layer],
               "b_dec": self.b_dec[layer]}  # fmt: skip
        if self.threshold is not None:
            out["threshold"] = self.threshold[layer]
        return out

    def encode(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's feature activations from its inputs (``inputs[l]`` (..., d) read at layer ``l``).

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)], b_enc=[torch.full((4,), -1.0)],
            ...     W_dec=[torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)])
            >>> clt.encode([torch.full((1, 32), 0.5)])[0].tolist()
            [[15.0, 15.0, 15.0, 15.0]]
        """
        self._check_inputs(inputs)
        out = []
        for layer, x in enumerate(inputs):
            pre = x.float() @ self.W_enc[layer].T + self.b_enc[layer]
            if self.threshold is None:
                out.append(torch.relu(pre))
            else:
                out.append(torch.relu(pre) * (pre > self.threshold[layer]).to(pre.dtype))
        return out

    def predict(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's predicted MLP output from every layer's input: ``ŷ[l'] = Σ_{l ≤ l'} f[l] W_dec[l][:, l' − l]
        + b_dec[l']``.

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(1, 32)] * 2, b_enc=[torch.zeros(1)] * 2,
            ...     W_dec=[torch.ones(1, 2, 32), torch.ones(1, 1, 32)], b_dec=[torch.zeros(32)] * 2)
            >>> [round(float(y[0, 0]), 4) for y in clt.predict([torch.full((1, 32), 0.1), torch.full((1, 32), 0.2)])]
            [3.2, 9.6]
        """
        acts = self.encode(inputs)
        out = []
        for target in range(self.n_layers):
            y = self.b_dec[target].expand(*acts[target].shape[:-1], self.d_model).clone()
            for source in range(target + 1):
                y = y + acts[source] @ self.W_dec[source][:, target - source]
            out.append(y)
        return out

    def _check_inputs(self, inputs) -> None:
        if len(inputs) != self.n_layers:
            raise ValueError(f"give one input per layer: {self.n_layers}, got {len(inputs)}")
        for layer, x in enumerate(inputs):
            if x.shape[-1] != self.d_model:
                raise ValueError(f"inputs[{layer}] has width {x.shape[-1]}; this CLT reads width {self.d_model}")

    def explain(self, model, tokenizer, texts, **settings):
        """Explain every feature over ``texts`` as :meth:`TranscoderSet.explain
        <interp_widgets.circuits.TranscoderSet.explain>` does (same settings; one forward pass for all layers): top
        contexts, density, histogram, label, and the vocabulary projection of the feature's decoder to its own layer.

        Example:
            >>> g = torch.Generator().manual_seed(0)
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.randn(8, 32, generator=g)] * 2,
            ...     b_enc=[torch.zeros(8)] * 2, W_dec=[torch.randn(8, 2 - i, 32, generator=g) for i in range(2)],
            ...     b_dec=[torch.zeros(32)] * 2)
            >>> explained = clt.explain(lm, lm_tokenizer, texts[:5], n_examples=2, progress=False)
            >>> len(explained.layers), explained.layers[1].top_values.shape
            (2, (8, 2))
        """
        from interp_widgets.circuits.transcoders import TranscoderSet

        return TranscoderSet.explain(self, model, tokenizer, texts, **settings)  # reads only what both kinds have

    # ------------------------------------------------------------------ checks
    def check_model(self, model) -> None:
        """Raise a ValueError naming the fix if ``model`` is not the model (name, width, depth) this CLT was made for.

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)], b_enc=[torch.zeros(4)],
            ...     W_dec=[torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)])
            >>> clt.check_model(lm)
            Traceback (most recent call last):
            ...
            ValueError: this cross-layer transcoder was made for a model of 1 blocks; this one has 2: use it with the model it was made for
        """
        width = check_model_identity(model, self.model_name, self.n_layers, subject="this cross-layer transcoder was",
                                     them="it")  # fmt: skip
        if width != self.d_model:
            raise ValueError(
                f"this cross-layer transcoder reads and writes width {self.d_model}, but this model's layers have "
                f"width {width}: use it with the model it was made for"
            )

    def __repr__(self) -> str:
        return (
            f"CrossLayerTranscoderSet({self.n_layers} layers, {self.n_features} features each, {self.activation}, "
            f"reads {self.input_point}, model {self.model_name or 'unknown'})"
        )

    # ------------------------------------------------------------------ files
    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {}
        for layer in self.layers:
            for name, value in self.replacement_weights(layer).items():
                arrays[f"{name}_{layer}"] = value.numpy()
        return arrays

    def checksum(self) -> str:
        """A SHA-256 digest of every weight (what :meth:`save` writes and :meth:`load` verifies).

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)], b_enc=[torch.zeros(4)],
            ...     W_dec=[torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)])
            >>> len(clt.checksum())
            64
        """
        return _checksum(self._arrays())

    def save(self, path: str | Path) -> Path:
        """Write the set to one safetensors file (never pickle) with its input point, model name and a checksum.

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)], b_enc=[torch.zeros(4)],
            ...     W_dec=[torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)], threshold=[torch.full((4,), 0.5)])
            >>> again = CrossLayerTranscoderSet.load(clt.save(getfixture("tmp_path") / "clt.safetensors"))
            >>> again, again.checksum() == clt.checksum()
            (CrossLayerTranscoderSet(1 layers, 4 features each, jumprelu, reads mlp_in, model unknown), True)
        """
        arrays = self._arrays()
        meta = {"n_layers": self.n_layers, "input_point": self.input_point, "model_name": self.model_name,
                "activation": self.activation, "source": self.source, "checksum": _checksum(arrays)}  # fmt: skip
        return save_bundle(path, _KIND, arrays, meta)

    @classmethod
    def load(cls, path: str | Path, *, model=None) -> CrossLayerTranscoderSet:
        """Read a set written by :meth:`save`; a file whose weights no longer match their checksum is refused, and
        with ``model`` a set made for another model (:meth:`check_model`).

        Example:
            >>> CrossLayerTranscoderSet.load(getfixture("tmp_path") / "missing.safetensors")
            Traceback (most recent call last):
            ...
            FileNotFoundError: ...
        """
        arrays, meta = load_bundle(path, _KIND)
        if meta.get("checksum") != _checksum(arrays):
            raise ValueError(f"{path} is corrupted: its weights do not match the checksum written with them")
        n = int(meta["n_layers"])

        def layered(name):
            return [torch.from_numpy(np.asarray(arrays[f"{name}_{i}"])) for i in range(n)]

        out = cls.from_weights(W_enc=layered("W_enc"), b_enc=layered("b_enc"), W_dec=layered("W_dec"),
                               b_dec=layered("b_dec"),
                               threshold=layered("threshold") if meta["activation"] == "jumprelu" else None,
                               input_point=meta["input_point"], model_name=meta["model_name"],
                               source=meta.get("source"))  # fmt: skip
        if model is not None:
            out.check_model(model)
        return out

    def to_circuit_tracer(self, directory: str | Path, *, scan: str | None = None) -> Path:
        """Write circuit-tracer's CLT directory (module docstring) that :meth:`from_circuit_tracer` and circuit-tracer's
        ``load_transcoders_from_cache(<absolute directory>)`` read.

        Example:
            >>> clt = CrossLayerTranscoderSet.from_weights(W_enc=[torch.ones(4, 32)], b_enc=[torch.zeros(4)],
            ...     W_dec=[torch.ones(4, 1, 32)], b_dec=[torch.zeros(32)])
            >>> out = clt.to_circuit_tracer(getfixture("tmp_path") / "ct-clt")
            >>> sorted(p.name for p in out.iterdir()), CrossLayerTranscoderSet.from_circuit_tracer(out).checksum() == clt.checksum()
            (['W_dec_0.safetensors', 'W_enc_0.safetensors', 'config.yaml'], True)
        """
        from safetensors.torch import save_file

        from interp_widgets.concepts.transcoders import CIRCUIT_TRACER_HOOKS

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for layer in self.layers:
            w = self.replacement_weights(layer)
            enc = {
                f"{name}_{layer}": w[name].contiguous()
                for name in ("W_enc", "b_enc", "b_dec", "threshold")
                if name in w
            }
            save_file(enc, str(directory / f"W_enc_{layer}.safetensors"))
            save_file({f"W_dec_{layer}": w["W_dec"].contiguous()}, str(directory / f"W_dec_{layer}.safetensors"))
        config = {
            "model_kind": "cross_layer_transcoder",
            "model_name": self.model_name or "",
            "scan": scan or f"interp_widgets/{self.model_name or 'model'}/{directory.resolve().name}",
            "feature_input_hook": CIRCUIT_TRACER_HOOKS[self.input_point],
            "feature_output_hook": CIRCUIT_TRACER_HOOKS["mlp_out"],
        }
        (directory / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in config.items()))
        return directory


def _tensor(name: str, value, ndim: int) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    tensor = tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(tensor.shape)}")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} has non-finite values (NaN or inf)")
    return tensor
