"""SAELens interchange: read and write SAELens SAE folders (``cfg.json`` + ``sae_weights.safetensors``).

:func:`load_sae` reads the SAE architectures ``standard`` (ReLU), ``topk`` and ``jumprelu`` as written by SAELens 6
(``model_name``, ``hook_name`` and ``model_from_pretrained_kwargs`` under ``metadata``) and by older versions (at the
top level, with ``hook_point``, ``activation_fn_str`` and boolean ``normalize_activations``). The weights follow
SAELens's names and shapes: ``W_enc`` (d_in × d_sae), ``W_dec`` (d_sae × d_in), ``b_enc``, ``b_dec``, and
``threshold`` (or ``log_threshold``) for JumpReLU; ``k`` sits in the config. SAELens's encoder is reproduced
exactly:

1. the activations of the hook point (see below for TransformerLens processing);
2. ``normalize_activations``: ``"none"``; ``"expected_average_only_in"`` (a constant factor, folded into the
   weights as SAELens does: give it as ``norm_scaling_factor=`` or keep the ``activation_scaler.json`` of the
   training run in the folder); ``"constant_norm_rescale"`` (each row scaled to norm √d_in); ``"layer_norm"`` (each
   row standardised); ``"covariance_whitening"`` (folded from the folder's ``activation_whitening.safetensors``);
3. ``b_dec`` subtracted if ``apply_b_dec_to_input``;
4. ``x @ W_enc + b_enc`` then ReLU, TopK (``rescale_acts_by_decoder_norm`` folded into the weights) or JumpReLU.

:func:`save_sae` writes this package's SAEs in the same format (a BatchTopK SAE as ``jumprelu`` with its inference
threshold, as SAELens saves its own BatchTopK SAEs), so that SAELens's ``SAE.load_from_disk`` gives the same
encodings (``tests/saelens`` checks it against the real package).

**Matryoshka SAEs.** SAELens trains them as ``MatryoshkaBatchTopKTrainingSAE`` and saves the inference SAE as
``jumprelu``, recording ``training_architecture: "matryoshka_batchtopk"`` and ``training_architecture_details``
(with ``matryoshka_widths`` and ``k``) in ``metadata``. :func:`save_sae` writes a :class:`MatryoshkaSAE` the same
way (its ``prefixes_`` as ``matryoshka_widths``), and :func:`load_sae` reads such a folder as a
:class:`MatryoshkaSAE` whose ``prefixes_`` are those widths (the JumpReLU encoder is the same either way).

**Training form.** SAELens's trainer checkpoints a BatchTopK or Matryoshka BatchTopK SAE with ``save_model``: a
``cfg.json`` whose ``architecture`` is the training one (``"batchtopk"``, ``"matryoshka_batchtopk"`` with
``matryoshka_widths`` and a float ``k``), and weights with ``topk_threshold`` (a scalar, the running average of
the smallest kept activation) beside ``W_enc``, ``W_dec``, ``b_enc`` and ``b_dec``; the checkpoint folder also holds
``activation_scaler.json``. :func:`load_sae` converts that folder as SAELens turns a trained SAE into its inference
form (the end of ``SAETrainer.fit``, then ``save_inference_model``): an ``expected_average_only_in`` factor still
in the scaler is folded in first (``fold_activation_norm_scaling_factor``: ``W_enc × f``, ``W_dec / f``,
``b_dec / f`` and, with ``rescale_acts_by_decoder_norm``, ``topk_threshold / f``); then, with
``rescale_acts_by_decoder_norm``, the decoder norms ``n`` are folded (``W_enc × n``, ``b_enc × n``, ``W_dec / n``);
and every latent gets the JumpReLU threshold ``topk_threshold``. The result is the JumpReLU SAE (a
:class:`MatryoshkaSAE` with those widths, or a :class:`JumpReLUSAE`) whose encodings equal those of SAELens's own
inference form.

**Hook names.** ``hook_name`` is a TransformerLens hook name, mapped to a canonical layer name by
:func:`interp_widgets.layers.from_hook_name` (``blocks.8.hook_resid_post`` → ``layer:8``, before any final norm).
A config with only ``hf_hook_name`` (a module path) uses that module. Attention-head (``hook_z``,
``hook_head_index``) and MLP-neuron hooks are refused with a message.

**TransformerLens processing.** An SAE trained on a TransformerLens model sees that model's activations. Of the
processing options in ``model_from_pretrained_kwargs``, ``fold_ln``, ``center_unembed``, ``fold_value_biases`` and
``refactor_factored_attn_matrices`` leave the five hook points unchanged, and ``center_writing_weights`` makes every
write to the residual stream mean-free on LayerNorm models, so there those activations are the Hugging Face ones
minus their mean over features: :func:`load_sae` then centres each row before encoding (and adds the mean back when
decoding). On RMSNorm models TransformerLens skips the centring; post-norm models are refused. Other options are
refused unless known to leave activations alone (device, dtype…). ``tests/saelens`` checks these claims against
transformer-lens. SAELens 6 loads models *without* processing unless the kwargs ask for it; older SAEs may have been
trained with TransformerLens's default processing without saying so (SAELens's registry adds
``{"center_writing_weights": True}`` for ``gpt2-small-res-jb``): pass the same through ``cfg_overrides``.

**Checks.** With ``model=``, :func:`load_sae` checks that the model's name matches ``model_name`` (see
:func:`~interp_widgets._model_names.same_model_name`), that the hook point exists and that its width is
``d_in``; each is an error that says what was expected. Names can lie, so with ``tokenizer=`` and ``texts=`` it also
measures :func:`~interp_widgets.concepts.splice_quality` (L0, fraction of variance unexplained, next-token loss with
the SAE spliced in) and warns (:class:`SAEQualityWarning`) when the SAE reconstructs the layer badly.

Example:
    >>> sae = SparseAutoencoder(64, k=8, max_epochs=3, progress=False).fit(store)
    >>> folder = save_sae(sae, getfixture("tmp_path") / "my-sae", model_name="tiny-bert")
    >>> sorted(p.name for p in folder.iterdir())
    ['cfg.json', 'sae_weights.safetensors']
    >>> again = load_sae(folder)
    >>> again
    SparseAutoencoder(64, activation='topk', k=8, ...) [fitted on 32 features]
    >>> again.layer_, again.model_name_, bool(np.allclose(again.transform(store[:50]), sae.transform(store[:50]), atol=1e-5))
    ('layer:1', 'tiny-bert', True)
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp_widgets._files import read_safetensors
from interp_widgets._model_names import display_name, model_name_of, same_model_name
from interp_widgets.concepts.quality import check_base_model, splice_quality
from interp_widgets.concepts.sae import (
    BatchTopKSAE,
    JumpReLUSAE,
    MatryoshkaSAE,
    SparseAutoencoder,
    _SparseAutoencoderBase,
)
from interp_widgets.layers import _HOOK_NAME, from_hook_name, to_hook_name

CFG_FILENAME = "cfg.json"
WEIGHTS_FILENAME = "sae_weights.safetensors"
SCALER_FILENAME = "activation_scaler.json"
WHITENING_FILENAME = "activation_whitening.safetensors"
ARCHITECTURES = ("standard", "topk", "jumprelu")
#: SAELens training architectures whose checkpoint folders :func:`load_sae` converts to their inference form (JumpReLU).
TRAINING_ARCHITECTURES = ("batchtopk", "matryoshka_batchtopk")
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm", "covariance_whitening")
#: The SAELens config format :func:`save_sae` writes (the version its configs record in ``metadata``).
FORMAT_VERSION = "6.0.0"
#: TransformerLens ``from_pretrained`` options that leave hook_resid_*, hook_attn_out and hook_mlp_out unchanged.
TL_UNCHANGED = ("fold_ln", "center_unembed", "fold_value_biases", "refactor_factored_attn_matrices")
#: Options about where and how the model runs, not what it computes.
TL_HARMLESS = (
    "device",
    "n_devices",
    "dtype",
    "torch_dtype",
    "default_prepend_bos",
    "default_padding_side",
    "move_to_device",
    "trust_remote_code",
    "n_ctx",
    "fold_ln_eps",
    "use_attn_result",
    "use_split_qkv_input",
    "use_hook_mlp_in",
    "use_attn_in",
    "attn_implementation",
    "device_map",
    "low_cpu_mem_usage",
    "token",
    "cache_dir",
    "local_files_only",
)
_METADATA_KEYS = (
    "model_name",
    "hook_name",
    "hook_head_index",
    "model_from_pretrained_kwargs",
    "model_class_name",
    "hf_hook_name",
    "prepend_bos",
    "context_size",
    "dataset_path",
    "neuronpedia_id",
    "sae_lens_version",
    "sae_lens_training_version",
    "exclude_special_tokens",
)


class SAEQualityWarning(UserWarning):
    """A loaded SAE reconstructs its layer of the given model badly: probably the wrong model, layer or processing."""


# ---------------------------------------------------------------------- reading the config
def _fix(folder: Path) -> str:
    return (
        f"pass the folder of an SAELens SAE (with {CFG_FILENAME} and {WEIGHTS_FILENAME}, as written by "
        "SAELens's sae.save_model(path) or interp_widgets.concepts.save_sae)"
    )


def read_config(folder: str | Path, cfg_overrides: dict | None = None) -> dict[str, Any]:
    """The SAELens config of ``folder``, in one layout whatever the SAELens version that wrote it.

    Returns ``architecture``, ``d_in``, ``d_sae``, ``k`` (TopK), ``apply_b_dec_to_input``, ``normalize_activations``,
    ``rescale_acts_by_decoder_norm``, ``dtype``, ``reshape_activations`` and the metadata keys (``model_name``,
    ``hook_name``, ``model_from_pretrained_kwargs``, ``hook_head_index``, ``hf_hook_name``, …; None when absent),
    plus ``format`` (``"v6"`` or ``"pre-v6"``) and ``raw`` (the file's JSON). ``cfg_overrides`` replaces keys first
    (top-level or metadata keys alike), as SAELens's registry does.

    Example:
        >>> sae = SparseAutoencoder(16, k=4, max_epochs=1, progress=False).fit(store)
        >>> cfg = read_config(save_sae(sae, getfixture("tmp_path") / "sae"))
        >>> cfg["architecture"], cfg["d_in"], cfg["k"], cfg["hook_name"], cfg["format"]
        ('topk', 32, 4, 'blocks.1.hook_resid_post', 'v6')
    """
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"no such folder: {folder}; {_fix(folder)}")
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not an SAELens folder; {_fix(folder)}")
    path = folder / CFG_FILENAME
    if not path.is_file():
        present = sorted(p.name for p in folder.iterdir())[:10]
        raise FileNotFoundError(f"{folder} has no {CFG_FILENAME} (it holds {present or 'nothing'}); {_fix(folder)}")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); {_fix(folder)}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path} holds a JSON {type(raw).__name__}, not an SAELens config object; {_fix(folder)}")
    cfg = dict(raw)
    metadata = dict(cfg.pop("metadata", None) or {})
    version = metadata.get("sae_lens_version") or cfg.get("sae_lens_version")
    v6 = _major(version) >= 6
    for key, value in (cfg_overrides or {}).items():
        (metadata if key in _METADATA_KEYS and (v6 or key in metadata) else cfg)[key] = value
    renames = {
        "hook_point": "hook_name",
        "hook_point_head_index": "hook_head_index",
        "activation_fn_str": "activation_fn",
    }
    cfg = {renames.get(key, key): value for key, value in cfg.items()}
    out: dict[str, Any] = {key: metadata.get(key, cfg.get(key)) for key in _METADATA_KEYS}
    architecture = cfg.get("architecture") or "standard"
    activation_kwargs = cfg.get("activation_fn_kwargs") or {}
    if cfg.get("activation_fn") == "topk" and activation_kwargs.get("k") is not None:
        architecture = "topk"
        cfg["k"] = activation_kwargs["k"]
    normalize = cfg.get("normalize_activations")
    if isinstance(normalize, bool):  # SAELens < 3: a flag for the April 2024 expected-norm scaling
        normalize = "expected_average_only_in" if normalize else "none"
    for key in ("d_in", "d_sae"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise ValueError(f"{path}: {key} must be a positive integer, got {cfg.get(key)!r}; {_fix(folder)}")
    out.update(
        architecture=architecture,
        d_in=cfg["d_in"],
        d_sae=cfg["d_sae"],
        k=cfg.get("k"),
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
        normalize_activations=normalize or "none",
        rescale_acts_by_decoder_norm=bool(cfg.get("rescale_acts_by_decoder_norm", False)),
        activation_fn=cfg.get("activation_fn") or "relu",
        dtype=str(cfg.get("dtype") or "float32"),
        reshape_activations=cfg.get("reshape_activations") or "none",
        finetuning_scaling_factor=bool(cfg.get("finetuning_scaling_factor", False)),
        format="v6" if v6 else "pre-v6",
        raw=raw,
    )
    out["model_from_pretrained_kwargs"] = dict(out["model_from_pretrained_kwargs"] or {})
    return out


def _major(version) -> int:
    try:
        return int(str(version).lstrip("v").split(".")[0])
    except (TypeError, ValueError):
        return 0


def _check_supported(cfg: dict, folder: Path) -> None:
    where = folder / CFG_FILENAME
    if cfg["architecture"] not in ARCHITECTURES:
        raise ValueError(
            f"{where}: unknown or unsupported SAE architecture {cfg['architecture']!r}; load_sae reads "
            f"{', '.join(ARCHITECTURES)} (a BatchTopK SAE is saved by SAELens as jumprelu) and the training forms "
            f"{', '.join(TRAINING_ARCHITECTURES)}"
        )
    if cfg["architecture"] == "standard" and cfg["activation_fn"] != "relu":
        raise ValueError(
            f"{where}: activation_fn {cfg['activation_fn']!r} is not supported for a standard SAE; "
            "load_sae reads ReLU, TopK and JumpReLU SAEs"
        )
    if cfg["architecture"] == "topk" and (not isinstance(cfg["k"], int) or not 1 <= cfg["k"] <= cfg["d_sae"]):
        raise ValueError(f"{where}: a topk SAE needs an integer k in [1, d_sae={cfg['d_sae']}], got {cfg['k']!r}")
    if cfg["normalize_activations"] not in NORMALIZATIONS:
        raise ValueError(
            f"{where}: unknown normalize_activations {cfg['normalize_activations']!r}; SAELens "
            f"defines {', '.join(NORMALIZATIONS)}"
        )
    hook = cfg["hook_name"] or ""
    if cfg["reshape_activations"] == "hook_z" or hook.endswith("hook_z") or cfg["hook_head_index"] is not None:
        raise ValueError(
            f"{where}: attention-head SAEs (hook {hook!r}, head index {cfg['hook_head_index']}) read "
            "per-head outputs, which interp_widgets does not map; load_sae reads SAEs on "
            "hook_resid_pre / hook_resid_mid / hook_resid_post / hook_attn_out / hook_mlp_out"
        )
    if cfg["finetuning_scaling_factor"]:
        raise ValueError(
            f"{where}: finetuning_scaling_factor (a per-feature decoder scale of SAELens < 6) is not "
            "supported; load the SAE with SAELens and save it again with sae.save_model"
        )


def _layer_of(cfg: dict, folder: Path) -> str:
    hook = cfg["hook_name"]
    if hook:
        if _HOOK_NAME.fullmatch(str(hook).strip()):
            return from_hook_name(hook)
        raise ValueError(
            f"{folder / CFG_FILENAME}: hook_name {hook!r} is not a hook interp_widgets maps; "
            "load_sae reads SAEs on blocks.<i>.hook_resid_pre, hook_resid_mid, hook_resid_post, "
            "hook_attn_out and hook_mlp_out (or a config with hf_hook_name, a module path)"
        )
    if cfg["hf_hook_name"]:
        return str(cfg["hf_hook_name"])
    raise ValueError(
        f"{folder / CFG_FILENAME} names no hook point (no hook_name, hook_point or hf_hook_name); "
        "add the TransformerLens hook name the SAE was trained on with "
        "cfg_overrides={'hook_name': 'blocks.<i>.hook_resid_post'}"
    )


# ---------------------------------------------------------------------- TransformerLens processing
def _norm_kind(model) -> str:
    """``"layernorm"``, ``"rmsnorm"``, ``"postnorm"`` or ``"unknown"``: how the blocks of a Hugging Face model normalise."""
    from interp_widgets.layers import blocks

    _, found = blocks(model)
    modules = dict(found[0].named_modules())
    if "attention.output.LayerNorm" in modules or "attention.output.layer_norm" in modules:
        return "postnorm"
    if any(isinstance(m, torch.nn.LayerNorm) for m in modules.values()):
        return "layernorm"
    if any("rmsnorm" in type(m).__name__.lower() for m in modules.values()):
        return "rmsnorm"
    return "unknown"


def transformer_lens_processing(model, model_from_pretrained_kwargs: dict | None) -> bool:
    """Whether a TransformerLens model loaded with these kwargs sees this model's activations minus their row mean.

    Returns True when ``center_writing_weights`` makes TransformerLens centre the residual stream of a LayerNorm
    model (so an SAE trained there must centre its input rows), False when the kwargs leave the hook points as they
    are in ``model``. Raises a ValueError naming the option for kwargs it cannot reproduce.

    Example:
        >>> transformer_lens_processing(lm, {"center_writing_weights": True, "fold_ln": True})  # GPT-2: LayerNorm
        True
        >>> transformer_lens_processing(lm, {"fold_value_biases": True, "device": "cuda"})
        False
        >>> transformer_lens_processing(lm, {"first_n_layers": 4})
        Traceback (most recent call last):
        ...
        ValueError: the SAE was trained on a TransformerLens model loaded with first_n_layers=4, whose effect on activations interp_widgets cannot reproduce; ...
    """
    kwargs = dict(model_from_pretrained_kwargs or {})
    center = bool(kwargs.pop("center_writing_weights", False))
    for key, value in kwargs.items():
        if key in TL_UNCHANGED or key in TL_HARMLESS:
            continue
        raise ValueError(
            f"the SAE was trained on a TransformerLens model loaded with {key}={value!r}, whose effect "
            "on activations interp_widgets cannot reproduce; if you know it leaves the hook point "
            "unchanged, drop it with cfg_overrides={'model_from_pretrained_kwargs': {...}}"
        )
    if not center:
        return False
    kind = _norm_kind(model)
    if kind == "layernorm":
        return True
    if kind == "rmsnorm":
        return False  # TransformerLens centres writing weights only for LayerNorm models
    raise ValueError(
        f"the SAE was trained with center_writing_weights=True, which interp_widgets reproduces for "
        f"pre-norm LayerNorm models (as GPT-2) only; {type(model).__name__} is "
        f"{'post-norm' if kind == 'postnorm' else 'of an unknown normalisation'}"
    )


# ---------------------------------------------------------------------- loading
def _weights(folder: Path, cfg: dict) -> dict[str, torch.Tensor]:
    path = folder / WEIGHTS_FILENAME
    if not path.exists():
        raise FileNotFoundError(f"{folder} has {CFG_FILENAME} but no {WEIGHTS_FILENAME}; {_fix(folder)}")
    _, tensors = read_safetensors(path, what="SAELens SAE weights", fix=_fix(folder), framework="pt")
    tensors = {name: t.float() for name, t in tensors.items()}
    if "log_threshold" in tensors and "threshold" not in tensors:
        tensors["threshold"] = tensors.pop("log_threshold").exp()
    scaling = tensors.pop("scaling_factor", None)
    if scaling is not None and not torch.allclose(scaling, torch.ones_like(scaling)):
        raise ValueError(
            f"{path} holds a scaling_factor that is not all ones (finetuning scaling of SAELens < 6), "
            "which load_sae does not support; load it with SAELens and save it again"
        )
    d_in, d_sae = cfg["d_in"], cfg["d_sae"]
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,)}
    if cfg["architecture"] == "jumprelu":
        shapes["threshold"] = (d_sae,)
    for name, shape in shapes.items():
        if name not in tensors:
            raise ValueError(
                f"{path} has no {name!r} tensor (it holds {sorted(tensors)}); a "
                f"{cfg['architecture']} SAE needs {sorted(shapes)}"
            )
        if tuple(tensors[name].shape) != shape:
            raise ValueError(
                f"{path}: {name} has shape {tuple(tensors[name].shape)} but {CFG_FILENAME} "
                f"(d_in={d_in}, d_sae={d_sae}) implies {shape}"
            )
    return {name: tensors[name].contiguous() for name in shapes}


def _matryoshka_details(cfg: dict, folder: Path) -> tuple[list[int], float | None] | None:
    """``(matryoshka_widths, k)`` of a jumprelu folder saved from a Matryoshka BatchTopK training SAE, else None."""
    metadata = (cfg["raw"].get("metadata") if isinstance(cfg.get("raw"), dict) else None) or {}
    details = metadata.get("training_architecture_details") or {}
    if metadata.get("training_architecture") != "matryoshka_batchtopk" or not details.get("matryoshka_widths"):
        return None
    k = details.get("k")
    return _widths(details["matryoshka_widths"], cfg["d_sae"], folder), _positive(k)


def _positive(k) -> float | None:
    return float(k) if isinstance(k, (int, float)) and not isinstance(k, bool) and k > 0 else None


def _widths(widths, d_sae: int, folder: Path) -> list[int]:
    """Checked ``matryoshka_widths``, ending at ``d_sae`` (SAELens appends it when they do not)."""
    if not isinstance(widths, list) or not widths or not all(isinstance(x, int) and not isinstance(x, bool) for x in widths) or not (
        all(0 < a < b for a, b in zip(widths, widths[1:])) and 0 < widths[0] and widths[-1] <= d_sae
    ):  # fmt: skip
        raise ValueError(
            f"{folder / CFG_FILENAME}: matryoshka_widths must be increasing positive integers up to d_sae={d_sae}, "
            f"got {widths!r}"
        )
    return [int(x) for x in widths] + ([] if widths[-1] == d_sae else [d_sae])  # SAELens adds d_sae too


def _from_training_form(folder: Path, cfg: dict, norm_scaling_factor) -> tuple[dict, dict[str, torch.Tensor]]:
    """The inference form (config and weights, JumpReLU) of a BatchTopK / Matryoshka BatchTopK training checkpoint,
    converted as SAELens does at the end of training (see the module docstring). The Matryoshka widths and ``k`` go
    to ``cfg["matryoshka"]`` (None for a plain BatchTopK SAE), the training architecture to
    ``cfg["training_architecture"]``.

    Example:
        >>> import json, safetensors.torch
        >>> folder = getfixture("tmp_path") / "checkpoint"; folder.mkdir()
        >>> _ = (folder / "cfg.json").write_text(json.dumps({"architecture": "matryoshka_batchtopk", "d_in": 2, "d_sae": 3,
        ...     "k": 1.0, "matryoshka_widths": [1, 3], "rescale_acts_by_decoder_norm": True,
        ...     "metadata": {"hook_name": "blocks.0.hook_resid_post"}}))
        >>> safetensors.torch.save_file({"W_enc": torch.ones(2, 3), "W_dec": 2 * torch.ones(3, 2), "b_enc": torch.zeros(3),
        ...     "b_dec": torch.zeros(2), "topk_threshold": torch.tensor(0.5, dtype=torch.float64)}, folder / "sae_weights.safetensors")
        >>> cfg, w = _from_training_form(folder, read_config(folder), None)
        >>> cfg["architecture"], cfg["matryoshka"], w["threshold"].tolist(), round(float(w["W_dec"].norm(dim=-1)[0]), 4)
        ('jumprelu', ([1, 3], 1.0), [0.5, 0.5, 0.5], 1.0)
    """
    path, where = folder / WEIGHTS_FILENAME, folder / CFG_FILENAME
    raw = cfg["raw"]
    matryoshka = None
    if cfg["architecture"] == "matryoshka_batchtopk":
        matryoshka = (_widths(raw.get("matryoshka_widths"), cfg["d_sae"], folder), _positive(cfg["k"]))
    if _positive(cfg["k"]) is None:
        raise ValueError(f"{where}: a {cfg['architecture']} training SAE needs a positive k, got {cfg['k']!r}")
    if not path.exists():
        raise FileNotFoundError(f"{folder} has {CFG_FILENAME} but no {WEIGHTS_FILENAME}; {_fix(folder)}")
    _, tensors = read_safetensors(path, what="SAELens training SAE weights", fix=_fix(folder), framework="pt")
    if "topk_threshold" not in tensors:
        raise ValueError(
            f"{path} has no 'topk_threshold' (it holds {sorted(tensors)}): a {cfg['architecture']} training SAE "
            "saved by SAELens 6 keeps its BatchTopK threshold there, and the inference form needs it"
        )
    if tensors["topk_threshold"].numel() != 1:
        raise ValueError(
            f"{path}: topk_threshold must be one number, got shape {tuple(tensors['topk_threshold'].shape)}"
        )
    threshold = tensors["topk_threshold"].reshape(()).double()
    inference = {**cfg, "architecture": "jumprelu", "training_architecture": cfg["architecture"]}
    w = _weights(folder, {**inference, "architecture": "standard"})  # W_enc, W_dec, b_enc, b_dec, shapes checked
    rescale = cfg["rescale_acts_by_decoder_norm"]
    if cfg["normalize_activations"] == "expected_average_only_in":  # SAETrainer.fit folds the scaler first
        factor = _norm_factor(folder, norm_scaling_factor)
        w["W_enc"], w["W_dec"], w["b_dec"] = w["W_enc"] * factor, w["W_dec"] / factor, w["b_dec"] / factor
        if rescale:  # BatchTopKTrainingSAE.fold_activation_norm_scaling_factor
            threshold = threshold / factor
        inference["normalize_activations"] = "none"
    if rescale:  # TopKTrainingSAE.process_state_dict_for_saving_inference (_fold_norm_topk)
        norms = w["W_dec"].norm(dim=-1).clamp(min=1e-8)
        w["b_enc"], w["W_dec"], w["W_enc"] = (
            w["b_enc"] * norms,
            w["W_dec"] / norms[:, None],
            w["W_enc"] * norms[None, :],
        )
    # BatchTopKTrainingSAE.process_state_dict_for_saving_inference: threshold = ones_like(b_enc) * topk_threshold
    w["threshold"] = torch.ones_like(w["b_enc"]) * threshold.item()
    inference.update(rescale_acts_by_decoder_norm=False, matryoshka=matryoshka)
    return inference, w


def _norm_factor(folder: Path, norm_scaling_factor) -> float:
    if norm_scaling_factor is not None:
        value = float(norm_scaling_factor)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"norm_scaling_factor must be a positive number, got {norm_scaling_factor!r}")
        return value
    scaler = folder / SCALER_FILENAME
    if scaler.is_file():
        factor = json.loads(scaler.read_text()).get("scaling_factor")
        if factor is not None:
            return float(factor)
    raise ValueError(
        f"{folder / CFG_FILENAME} says normalize_activations='expected_average_only_in' (inputs multiplied by a "
        f"constant factor), but the folder has no {SCALER_FILENAME} giving it; pass norm_scaling_factor= (the "
        "SAE's norm_scaling_factor in SAELens's pretrained_saes.yaml, or sqrt(d_in) / the mean norm of the "
        "layer's activations: interp_widgets.concepts.norm_scaling_factor(store))"
    )


def norm_scaling_factor(store) -> float:
    """``√d / mean ‖x‖`` over a store: the factor SAELens's ``expected_average_only_in`` multiplies inputs by.

    Example:
        >>> round(norm_scaling_factor(store), 6)  # BERT's blocks end in a LayerNorm (unit weights here): norms are √d
        1.0
    """
    from interp_widgets.concepts.activations import ActivationStore

    if not isinstance(store, ActivationStore):
        raise TypeError(f"store must be an ActivationStore, got {type(store).__name__}")
    total, count = 0.0, 0
    for _, block in store.iter_chunks():
        total += float(np.linalg.norm(block.astype(np.float64), axis=1).sum())
        count += len(block)
    if not count or total <= 0:
        raise ValueError("the store is empty or all zeros; collect activations first")
    return math.sqrt(store.dim) / (total / count)


def _fold(w: dict[str, torch.Tensor], cfg: dict, folder: Path, norm_scaling_factor) -> str:
    """Fold constant normalisations into the weights, as SAELens does; returns the row-wise normalisation left."""
    if cfg["rescale_acts_by_decoder_norm"]:  # TopK on pre-activations × ‖W_dec row‖ = the same SAE with unit rows
        norms = w["W_dec"].norm(dim=-1).clamp_min(1e-8)
        w["W_dec"] = w["W_dec"] / norms[:, None]
        w["W_enc"] = w["W_enc"] * norms[None, :]
        w["b_enc"] = w["b_enc"] * norms
        if "threshold" in w:
            w["threshold"] = w["threshold"] * norms
    mode = cfg["normalize_activations"]
    if mode == "expected_average_only_in":
        factor = _norm_factor(folder, norm_scaling_factor)
        w["W_enc"], w["W_dec"], w["b_dec"] = w["W_enc"] * factor, w["W_dec"] / factor, w["b_dec"] / factor
        return "none"
    if mode == "covariance_whitening":
        path = folder / WHITENING_FILENAME
        if not path.is_file():
            raise ValueError(
                f"{folder / CFG_FILENAME} says normalize_activations='covariance_whitening' but the "
                f"folder has no {WHITENING_FILENAME} with the whitening statistics; {_fix(folder)}"
            )
        _, stats = read_safetensors(path, what="SAELens whitening statistics", framework="pt")
        mean, matrix, inverse = (stats[key].double() for key in ("mean", "matrix", "inverse_matrix"))
        W_enc = matrix @ w["W_enc"].double()
        if not cfg["apply_b_dec_to_input"]:
            w["b_enc"] = (w["b_enc"].double() - mean @ W_enc).float()
        w["W_enc"] = W_enc.float()
        w["W_dec"] = (w["W_dec"].double() @ inverse).float()
        w["b_dec"] = (w["b_dec"].double() @ inverse + mean).float()
        return "none"
    return mode


def load_sae(
    folder: str | Path,
    *,
    model=None,
    tokenizer=None,
    texts=None,
    cfg_overrides: dict | None = None,
    norm_scaling_factor: float | None = None,
    model_name: str | None = None,
    progress: bool = True,
    check_quality: bool = True,
    skip_positions: int | str = "auto",
):
    """Read an SAELens SAE folder into a :class:`SparseAutoencoder` (standard, topk) or :class:`JumpReLUSAE` (a
    :class:`MatryoshkaSAE` when the jumprelu folder was saved from a Matryoshka BatchTopK training SAE).

    Args:
        folder: a folder with ``cfg.json`` and ``sae_weights.safetensors``: an inference SAE, or the training form
            of a BatchTopK or Matryoshka BatchTopK SAE (a trainer checkpoint), converted to its inference form as
            SAELens does (see the module docstring).
        model: the Hugging Face model the SAE is for. Its name must match the config's ``model_name`` (when both
            are known), the hook point must exist and its width must be ``d_in``; a mismatch is a ValueError that
            says what was expected. Needed to apply TransformerLens's ``center_writing_weights``.
        tokenizer, texts: with ``model``, measure :func:`~interp_widgets.concepts.splice_quality` on these texts
            (stored in ``fit_info_["quality"]``) and warn with :class:`SAEQualityWarning` when it is poor.
        cfg_overrides: config keys to replace, top-level or metadata (``{"model_from_pretrained_kwargs":
            {"center_writing_weights": True}}``, ``{"hook_name": ...}``), as SAELens's registry does.
        norm_scaling_factor: the input factor of an ``expected_average_only_in`` SAE, when the folder lacks it.
        model_name: replaces the config's ``model_name`` (for a model whose name differs from the SAE's).
        progress, check_quality: progress bar of the quality check; ``check_quality=False`` skips it.
        skip_positions: passed to :func:`~interp_widgets.concepts.splice_quality`: the rows the quality check leaves
            as they are and out of L0 and FVU. The default ``"auto"`` leaves out attention-sink rows (a norm over
            10 times the text's median, like SmolLM2's first token at layer 15), which SAEs are trained without;
            ``1`` leaves out each text's first token, ``0`` nothing.

    The SAE's ``layer_`` is the canonical name of the hook point, ``model_name_`` the config's model name and
    ``fit_info_`` records the folder, the config and the quality. The model is not modified.

    Example:
        >>> sae = JumpReLUSAE(32, lr=1e-2, max_epochs=3, progress=False).fit(store)
        >>> folder = save_sae(sae, getfixture("tmp_path") / "jumprelu")
        >>> loaded = load_sae(folder, model=model)  # checks the hook point and width on the model
        >>> type(loaded).__name__, loaded.fit_info_["saelens"]["architecture"], loaded.fit_info_["saelens"]["hook_name"]
        ('JumpReLUSAE', 'jumprelu', 'blocks.1.hook_resid_post')
        >>> load_sae(folder, model=lm)  # the tiny GPT-2 is 32 wide too, but its name is unknown: only the width is checked
        JumpReLUSAE(32, ...) [fitted on 32 features]
    """
    folder = Path(folder)
    cfg = read_config(folder, cfg_overrides)
    w = None
    if cfg["architecture"] in TRAINING_ARCHITECTURES:  # a trainer checkpoint: converted to its inference form
        cfg, w = _from_training_form(folder, cfg, norm_scaling_factor)
    _check_supported(cfg, folder)
    if model_name is not None:
        cfg["model_name"] = model_name
    layer = _layer_of(cfg, folder)
    w = _weights(folder, cfg) if w is None else w
    normalize = _fold(w, cfg, folder, norm_scaling_factor)
    center = False
    if cfg["model_from_pretrained_kwargs"]:
        if model is None:
            kwargs = dict(cfg["model_from_pretrained_kwargs"])
            if kwargs.get("center_writing_weights"):
                raise ValueError(
                    f"{folder / CFG_FILENAME}: the SAE was trained on a TransformerLens model loaded "
                    "with center_writing_weights=True, which changes activations on LayerNorm models "
                    "only; pass model= so load_sae can tell and centre the inputs as TransformerLens did"
                )
            transformer_lens_processing(None, {k: v for k, v in kwargs.items() if k != "center_writing_weights"})
        else:
            center = transformer_lens_processing(model, cfg["model_from_pretrained_kwargs"])

    architecture = cfg["architecture"]
    if architecture == "standard":
        sae = SparseAutoencoder(cfg["d_sae"], activation="relu", progress=progress)
    elif architecture == "topk":
        sae = SparseAutoencoder(cfg["d_sae"], activation="topk", k=cfg["k"], progress=progress)
    else:
        sae = JumpReLUSAE(cfg["d_sae"], progress=progress)
    matryoshka = cfg.get("matryoshka") or (_matryoshka_details(cfg, folder) if architecture == "jumprelu" else None)
    if matryoshka is not None:
        widths, k = matryoshka
        sae = MatryoshkaSAE(cfg["d_sae"], k=k, prefixes=tuple(widths), progress=progress)
        sae.prefixes_ = widths
    sae.weights_ = w
    sae.scale_ = 1.0
    sae.k_ = cfg["k"] if architecture == "topk" else (matryoshka[1] if matryoshka else None)
    sae.preprocessing_ = {
        "center": center,
        "normalize_activations": normalize,
        "apply_b_dec_to_input": cfg["apply_b_dec_to_input"],
    }
    sae.layer_ = layer
    sae.model_name_ = display_name(cfg["model_name"])
    public = {key: value for key, value in cfg.items() if key != "raw"}
    sae.fit_info_ = {
        "source": "SAELens folder",
        "folder": str(folder),
        "saelens": public,
        "source_note": f" (model_name in {folder / CFG_FILENAME})",
    }
    sae._set_affine_decoder()
    sae.n_features_in_ = int(cfg["d_in"])
    if model is not None:
        check_base_model(sae, model)
        if check_quality and tokenizer is not None and texts is not None:
            _quality_on_load(sae, model, tokenizer, texts, progress=progress, skip_positions=skip_positions)
    return sae


def _quality_on_load(sae, model, tokenizer, texts, *, progress: bool, skip_positions) -> None:
    quality = splice_quality(sae, model, tokenizer, texts, progress=progress, skip_positions=skip_positions)
    sae.fit_info_["quality"] = quality.to_dict()
    problem = quality.problem()
    if problem:
        cfg = sae.fit_info_["saelens"]
        warnings.warn(
            f"{problem}; either the SAE is weak or, more likely, it was trained on another model, layer or "
            f"activation processing than this "
            f"{type(model).__name__} at {quality.layer} (its cfg.json says model {cfg.get('model_name')!r}, hook "
            f"{cfg.get('hook_name') or cfg.get('hf_hook_name')!r}, model_from_pretrained_kwargs "
            f"{cfg.get('model_from_pretrained_kwargs')})",
            SAEQualityWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------- saving
def save_sae(concept_model, folder: str | Path, *, model_name: str | None = None, hook_name: str | None = None) -> Path:
    """Write an SAE of this package as an SAELens folder that SAELens's ``SAE.load_from_disk`` reads.

    ReLU SAEs are written as ``standard``, TopK as ``topk``, JumpReLU as ``jumprelu``, and BatchTopK as ``jumprelu``
    with its inference threshold (as SAELens saves BatchTopK SAEs); a :class:`MatryoshkaSAE` too, with its prefix
    sizes as ``matryoshka_widths`` in the metadata (see the module docstring). The input scaling is folded into ``W_enc`` and
    ``W_dec``; ``model_name`` defaults to the model the SAE was fitted on and ``hook_name`` to the TransformerLens name
    of its layer. Returns the folder.

    Example:
        >>> sae = BatchTopKSAE(32, k=4, max_epochs=2, progress=False).fit(store)
        >>> folder = save_sae(sae, getfixture("tmp_path") / "batchtopk", model_name="my-model")
        >>> cfg = json.loads((folder / "cfg.json").read_text())
        >>> cfg["architecture"], cfg["metadata"]["hook_name"], cfg["metadata"]["model_name"]
        ('jumprelu', 'blocks.1.hook_resid_post', 'my-model')
        >>> np.allclose(load_sae(folder).transform(store[:20]), sae.transform(store[:20]), atol=1e-5)
        True
    """
    from safetensors.torch import save_file

    if not isinstance(concept_model, _SparseAutoencoderBase):
        raise TypeError(
            f"save_sae writes sparse autoencoders (SparseAutoencoder, JumpReLUSAE, BatchTopKSAE), not a "
            f"{type(concept_model).__name__}; save other concept models with .save(path)"
        )
    from interp_widgets.concepts.transcoders import Transcoder

    if isinstance(concept_model, Transcoder):
        raise TypeError(
            "save_sae writes sparse autoencoders; a Transcoder predicts another point than it reads, which SAELens's "
            "format cannot say: save it with .save(path), or a set with TranscoderSet.save / .to_circuit_tracer"
        )
    if "W_enc" not in getattr(concept_model, "weights_", {"W_enc": None}):
        raise TypeError(
            f"save_sae writes SAEs with an encoder matrix; a {type(concept_model).__name__} encodes by matching "
            "pursuit over its decoder, which SAELens's format cannot say: save it with .save(path)"
        )
    concept_model._check_fitted()
    if hook_name is None:
        layer = concept_model.layer_
        if layer is None:
            raise ValueError(
                "the SAE was fitted on an array, so its layer is unknown; pass hook_name= (such as "
                "'blocks.8.hook_resid_post')"
            )
        try:
            hook_name = to_hook_name(str(layer))
        except ValueError:
            raise ValueError(f"the SAE's layer {layer!r} has no TransformerLens hook name; pass hook_name=") from None
    elif not _HOOK_NAME.fullmatch(hook_name.strip()):
        raise ValueError(
            f"hook_name {hook_name!r} is not a TransformerLens hook name of a block "
            "(blocks.<i>.hook_resid_pre | hook_resid_mid | hook_resid_post | hook_attn_out | hook_mlp_out)"
        )
    w = {name: t.detach().float().cpu() for name, t in concept_model.weights_.items()}
    scale = float(concept_model.scale_)
    tensors = {
        "W_enc": (w["W_enc"] / scale).contiguous(),
        "W_dec": (w["W_dec"] * scale).contiguous(),
        "b_enc": w["b_enc"].contiguous(),
        "b_dec": w["b_dec"].contiguous(),
    }
    if isinstance(concept_model, (JumpReLUSAE, BatchTopKSAE)):
        architecture = "jumprelu"
        tensors["threshold"] = w["threshold"].contiguous()
    elif concept_model.activation == "topk":
        architecture = "topk"
    else:
        architecture = "standard"
    p = concept_model.preprocessing_
    previous = concept_model.fit_info_.get("saelens", {}) if isinstance(concept_model.fit_info_, dict) else {}
    kwargs = dict(previous.get("model_from_pretrained_kwargs") or {})
    if p["center"]:
        kwargs["center_writing_weights"] = True
    metadata = {
        key: previous[key]
        for key in ("prepend_bos", "context_size", "dataset_path", "neuronpedia_id")
        if previous.get(key) is not None
    }
    metadata.update(
        {
            "sae_lens_version": FORMAT_VERSION,
            "sae_lens_training_version": None,
            "model_name": model_name or display_name(concept_model.model_name_) or previous.get("model_name"),
            "hook_name": hook_name.strip(),
            "hook_head_index": None,
            "model_class_name": "HookedTransformer",
            "model_from_pretrained_kwargs": kwargs,
            "saved_by": "interp_widgets",
            "interp_widgets_class": type(concept_model).__name__,
        }
    )
    if isinstance(concept_model, MatryoshkaSAE):  # as SAELens records a Matryoshka training SAE's inference form
        metadata["training_architecture"] = "matryoshka_batchtopk"
        metadata["training_architecture_details"] = {
            "k": float(concept_model.k_),
            "matryoshka_widths": [int(x) for x in concept_model.prefixes_],
        }
    cfg = {
        "d_in": int(concept_model.n_features_in_),
        "d_sae": int(concept_model.n_concepts),
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": bool(p["apply_b_dec_to_input"]),
        "normalize_activations": p["normalize_activations"],
        "reshape_activations": "none",
        "metadata": metadata,
        "architecture": architecture,
    }
    if architecture == "topk":
        cfg.update(k=int(concept_model.k_), rescale_acts_by_decoder_norm=False)
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file; save_sae writes a folder (cfg.json + sae_weights.safetensors)")
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / WEIGHTS_FILENAME))
    (folder / CFG_FILENAME).write_text(json.dumps(cfg, indent=2))
    return folder


__all__ = [
    "SAEQualityWarning",
    "check_base_model",
    "load_sae",
    "norm_scaling_factor",
    "read_config",
    "save_sae",
    "transformer_lens_processing",
    "model_name_of",
    "same_model_name",
]
