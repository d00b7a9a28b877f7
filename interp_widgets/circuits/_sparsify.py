"""Reading EleutherAI sparsify transcoder folders (PyPI ``eai-sparsify``) into per-layer transcoders.

A sparsify run saves one folder per hookpoint (``SparseCoder.save_to_disk``): ``cfg.json`` (the ``SparseCoderConfig``
fields plus ``d_in``) and ``sae.safetensors`` (``encoder.weight`` (n, d_in), ``encoder.bias`` (n,), ``W_dec``
(n, d_in), ``b_dec`` (d_in,) and, with ``skip_connection``, ``W_skip`` (d_in, d_in)). With ``transcode: true`` its
forward is ``ŷ = Σᵢ aᵢ W_dec[i] + b_dec + x W_skipᵀ``, the ``aᵢ`` being the top ``k`` of ``ReLU(encoder(x))``. Our
TopK keeps the ``k`` largest pre-activations and then applies the ReLU: since the ReLU keeps the order, the two give
the same features (they differ only in which of several *equal* values is kept, which changes nothing when those
values are zeros).

The ``clt`` branch of sparsify (not released; read at commit d7f7368) adds ``normalize_io``: buffers ``in_norm`` and
``out_norm`` (shape (1,)), the encoder and the skip term read ``x̃ = x·√d / in_norm`` and the output is multiplied by
``out_norm / √d``. They fold into the raw weights exactly (``s_in = √d / in_norm``, ``s_out = out_norm / √d``):
``W_enc ← s_in·W_enc`` (``b_enc`` unchanged, so the same features fire), ``W_dec ← s_out·W_dec``,
``b_dec ← s_out·b_dec``, ``W_skip ← s_in·s_out·W_skip``. That branch also saves ``post_enc`` (added to the kept
activations after the top k; zeros unless trained) and, with ``post_encoder_scale``, ``post_enc_scale`` (which
multiplies them): a scale folds into ``W_dec``'s rows, a non-zero ``post_enc`` cannot be folded and is refused, as
are the branch's cross-layer settings (``n_targets``, ``n_sources``, ``coalesce_topk``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from interp_widgets.concepts.transcoders import Transcoder

#: a hookpoint folder of an MLP: ``layers.3.mlp`` (names relative to the base model, as sparsify's trainer writes
#: them), ``model.layers.3.mlp`` (relative to the whole model), ``h.3.mlp`` (GPT-2)…
HOOKPOINT = re.compile(r"^(?:.+\.)?(?:layers|layer|h|blocks)\.(\d+)\.mlp$")
_TENSORS = {"encoder.weight", "encoder.bias", "W_dec", "b_dec", "W_skip", "in_norm", "out_norm", "post_enc",
            "post_enc_scale"}  # fmt: skip


def hookpoint_folders(folder: str | Path) -> dict[int, Path]:
    """The hookpoint folders of a sparsify run by block index: the subfolders of ``folder`` that hold a ``cfg.json``
    (or ``folder`` itself when it holds one). A folder that is not an MLP's hookpoint, or two folders of one block,
    are refused.

    Example:
        >>> root = getfixture("tmp_path")
        >>> for name in ("layers.1.mlp", "layers.0.mlp"):
        ...     (root / name).mkdir()
        ...     _ = (root / name / "cfg.json").write_text("{}")
        >>> {layer: path.name for layer, path in hookpoint_folders(root).items()}
        {0: 'layers.0.mlp', 1: 'layers.1.mlp'}
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} is not a folder; pass the folder of a sparsify run (its subfolders are hookpoints such as "
            "model.layers.0.mlp, each with cfg.json and sae.safetensors)"
        )
    candidates = [folder] if (folder / "cfg.json").exists() else sorted(p for p in folder.iterdir() if p.is_dir())
    found: dict[int, Path] = {}
    others = []
    for path in candidates:
        if not (path / "cfg.json").exists():
            if (path / "sae.safetensors").exists():
                raise FileNotFoundError(f"{path / 'cfg.json'} is missing: a sparsify hookpoint folder needs both files")
            continue
        match = HOOKPOINT.match(path.name)
        if match is None:
            others.append(path.name)
            continue
        layer = int(match.group(1))
        if layer in found:
            raise ValueError(
                f"{folder} has two folders for block {layer} ({found[layer].name} and {path.name}); keep one"
            )
        found[layer] = path
    if others:
        raise ValueError(
            f"{folder} holds sparse coders of points that are not an MLP ({', '.join(others)}); a TranscoderSet "
            "reads MLP transcoders, whose hookpoints are named like layers.3.mlp or model.layers.3.mlp"
        )
    if not found:
        raise FileNotFoundError(
            f"{folder} has no hookpoint folders (subfolders such as model.layers.0.mlp holding cfg.json and "
            "sae.safetensors); pass the folder that sparsify's Trainer saved (save_dir/run_name)"
        )
    return dict(sorted(found.items()))


def read_hookpoint(path: Path, layer: int) -> tuple[Transcoder, dict]:
    """The transcoder saved in one sparsify hookpoint folder (normalisation folded in) and what was read.

    Example:
        >>> read_hookpoint(Path("missing.mlp"), 0)
        Traceback (most recent call last):
        ...
        FileNotFoundError: missing.mlp/cfg.json is missing: a sparsify hookpoint folder holds cfg.json and sae.safetensors (SparseCoder.save_to_disk)
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    for name in ("cfg.json", "sae.safetensors"):
        if not (path / name).is_file():
            raise FileNotFoundError(
                f"{path / name} is missing: a sparsify hookpoint folder holds cfg.json and sae.safetensors "
                "(SparseCoder.save_to_disk)"
            )
    try:
        cfg = json.loads((path / "cfg.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path / 'cfg.json'} cannot be read as JSON ({err})") from None
    if not isinstance(cfg, dict):
        raise TypeError(f"{path / 'cfg.json'} is not a sparsify SparseCoderConfig (a JSON object)")
    where = f"{path}: "
    if not cfg.get("transcode", False):
        raise ValueError(
            f"{where}cfg.json says transcode: false, so this is a sparse autoencoder (it reconstructs its input), "
            "not a transcoder (it predicts the MLP's output from its input); pass a folder trained with "
            "transcode=True (TranscoderConfig)"
        )
    activation = cfg.get("activation", "topk")
    if activation != "topk":
        raise ValueError(
            f"{where}activation {activation!r} is not supported (only sparsify's 'topk'; 'groupmax' keeps the "
            "largest value in each of k groups, which no Transcoder activation does)"
        )
    for key, off in (("n_targets", 0), ("n_sources", 0), ("coalesce_topk", "none")):
        if cfg.get(key, off) not in (off, None):
            raise ValueError(
                f"{where}{key}={cfg[key]!r}: a cross-layer transcoder of sparsify's clt branch; a TranscoderSet "
                "holds per-layer transcoders (each reads and writes one layer)"
            )
    for key in ("d_in", "k"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise ValueError(f"{where}cfg.json needs a positive integer {key!r}, got {cfg.get(key)!r}")
    d, k = cfg["d_in"], cfg["k"]
    try:
        tensors = load_file(str(path / "sae.safetensors"))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path / 'sae.safetensors'} cannot be read ({err})") from None
    unknown = sorted(set(tensors) - _TENSORS)
    if unknown:
        raise ValueError(
            f"{where}sae.safetensors holds tensors this reader does not know ({', '.join(unknown)}), so their "
            "effect on the forward pass would be lost"
        )
    missing = [name for name in ("encoder.weight", "encoder.bias", "W_dec", "b_dec") if name not in tensors]
    if cfg.get("skip_connection", False) and "W_skip" not in tensors:
        missing.append("W_skip")
    if missing:
        raise ValueError(f"{where}sae.safetensors lacks {', '.join(missing)}")
    w = {name: t.to(torch.float32) for name, t in tensors.items()}  # a scale by a number: float32 suffices
    n = w["encoder.weight"].shape[0]
    expected = cfg.get("num_latents") or d * cfg.get("expansion_factor", 32)
    shapes = {"encoder.weight": (n, d), "encoder.bias": (n,), "W_dec": (n, d), "b_dec": (d,), "W_skip": (d, d),
              "in_norm": (1,), "out_norm": (1,), "post_enc": (n,), "post_enc_scale": (n,)}  # fmt: skip
    for name in (name for name in shapes if name in w):  # in this order: encoder.weight's width first
        tensor = w[name]
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(
                f"{where}{name} has shape {tuple(tensor.shape)}; d_in={d} and {n} latents need {shapes[name]}"
            )
    if n != expected:
        raise ValueError(f"{where}cfg.json gives {expected} latents but encoder.weight has {n}")
    if k > n:
        raise ValueError(f"{where}k={k} is more than the {n} latents")
    post_enc = w.get("post_enc")
    if post_enc is not None and bool(post_enc.ne(0).any()):
        raise ValueError(
            f"{where}post_enc is not zero: sparsify's clt branch adds it to the k kept activations after the top-k "
            "choice, which no per-layer Transcoder can express (it cannot be folded into the weights)"
        )
    W_dec = w["W_dec"]
    if cfg.get("post_encoder_scale", False) or "post_enc_scale" in w:
        if "post_enc_scale" not in w:
            raise ValueError(f"{where}cfg.json says post_encoder_scale: true but sae.safetensors has no post_enc_scale")
        W_dec = W_dec * w["post_enc_scale"][:, None]  # it multiplies each kept activation: fold it into the rows
    normalise = bool(cfg.get("normalize_io", False))
    has_norms = [name for name in ("in_norm", "out_norm") if name in w]
    if (normalise and len(has_norms) < 2) or ("normalize_io" in cfg and not normalise and has_norms):
        raise ValueError(
            f"{where}cfg.json says normalize_io: {str(normalise).lower()} but sae.safetensors holds "
            f"{has_norms or 'neither in_norm nor out_norm'}; the folder is inconsistent"
        )
    s_in = s_out = 1.0
    info: dict = {"hookpoint": path.name, "k": k, "latents": n, "skip": "W_skip" in w}
    if has_norms:
        if len(has_norms) < 2:
            raise ValueError(f"{where}sae.safetensors holds {has_norms[0]} without its pair; both are needed")
        in_norm, out_norm = float(w["in_norm"][0]), float(w["out_norm"][0])
        if not (math.isfinite(in_norm) and math.isfinite(out_norm) and in_norm > 0 and out_norm > 0):
            raise ValueError(f"{where}in_norm={in_norm} and out_norm={out_norm} must be positive finite numbers")
        s_in, s_out = math.sqrt(d) / in_norm, out_norm / math.sqrt(d)
        info.update(in_norm=in_norm, out_norm=out_norm)
    folded = {
        "W_enc": s_in * w["encoder.weight"],
        "b_enc": w["encoder.bias"],
        "W_dec": s_out * W_dec,
        "b_dec": s_out * w["b_dec"],
    }
    if "W_skip" in w:
        folded["W_skip"] = (s_in * s_out) * w["W_skip"]
    tc = Transcoder.from_weights(
        **folded, activation="topk", k=k, layer=f"layer:{layer}.mlp_in", source=f"sparsify {path.name}"
    )
    tc.fit_info_.update(info)
    return tc, info
