"""Model names: which model a concept model (or an SAELens SAE) was fitted on, and whether two names mean one model.

A Hugging Face model is named by ``model.config._name_or_path``: a Hub id (``"openai-community/gpt2"``), a local
directory, or a snapshot in the Hub cache (``…/models--openai-community--gpt2/snapshots/<hash>``). SAELens configs
name the model as TransformerLens does (``"gpt2-small"``, ``"gemma-2-2b"``, ``"pythia-70m-deduped"``) or by its Hub
id. Two names are taken to mean one model when their last path parts agree once case and punctuation are dropped
(``"gemma-2-2b"`` and ``"google/gemma-2-2b"``), or through the TransformerLens aliases of SAELens's releases whose
names differ from the Hub's (``"gpt2-small"`` is ``"gpt2"``). ``pythia-70m`` and ``pythia-70m-deduped`` stay
different models, and so do ``DeepSeek-R1-Distill-Llama-8B`` and ``Llama-3.1-8B``.

A model saved in a local folder may name its Hub model in a ``source.json`` file beside its ``config.json``
(``{"hub_name": "org/name"}``): :func:`interp_widgets.demo.load_lm` records ``HuggingFaceTB/SmolLM2-135M-Instruct``
so in its cache folder, whose path is the model's ``_name_or_path``. The model's config is not edited.

This module imports nothing else from the package.

Example:
    >>> same_model_name("gpt2-small", "openai-community/gpt2"), same_model_name("gemma-2-2b", "google/gemma-2-2b")
    (True, True)
    >>> same_model_name("meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B")
    False
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# TransformerLens aliases (used as SAELens model names) whose Hub name differs in more than case and punctuation
_ALIASES = {
    "gpt2small": "gpt2",
    "gpt2xs": "distilgpt2",
    "distillgpt2": "distilgpt2",
    "mistral7b": "mistral7bv01",
    "mistral7binstruct": "mistral7binstructv01",
    "llama7b": "llama7bhf",
    "llama13b": "llama13bhf",
    "llama27b": "llama27bhf",
    "llama213b": "llama213bhf",
    "llama27bchat": "llama27bchathf",
    "llama213bchat": "llama213bchathf",
}
_CACHE_SNAPSHOT = re.compile(r"models--([^/\\]+?)--([^/\\]+)[/\\]snapshots[/\\]")


def display_name(name: str | None) -> str | None:
    """A Hub-style name for ``name`` (a Hub cache snapshot path becomes ``org/name``, a local folder the ``hub_name``
    of its ``source.json`` when it has one); None for an empty name.

    Example:
        >>> display_name("/root/.cache/huggingface/hub/models--openai-community--gpt2/snapshots/607a30d/")
        'openai-community/gpt2'
        >>> display_name(""), display_name("gpt2-small")
        (None, 'gpt2-small')
    """
    if name is None or not str(name).strip():
        return None
    name = str(name).strip()
    match = _CACHE_SNAPSHOT.search(name)
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    return _recorded_hub_name(name) or name


def _recorded_hub_name(name: str) -> str | None:
    """The ``hub_name`` of a local model folder's ``source.json``, if ``name`` is such a folder and names one."""
    try:
        source = Path(name) / "source.json"
        if not source.is_file():
            return None
        hub_name = json.loads(source.read_text(encoding="utf-8")).get("hub_name")
    except (OSError, ValueError, AttributeError):
        return None
    return hub_name.strip() if isinstance(hub_name, str) and hub_name.strip() else None


def model_name_of(model) -> str | None:
    """The name a Hugging Face ``model`` was loaded under, or None when it was built from a config.

    Example:
        >>> model_name_of(model) is None  # the tiny test model was built from a config, not loaded by name
        True
    """
    if isinstance(model, str):
        return display_name(model)
    config = getattr(model, "config", None)
    return display_name(getattr(config, "_name_or_path", None) or getattr(model, "name_or_path", None))


def _key(name: str) -> str:
    last = display_name(name).rstrip("/\\").replace("\\", "/").split("/")[-1].lower()
    key = re.sub(r"[^a-z0-9]", "", last)
    return _ALIASES.get(key, key)


def same_model_name(a: str, b: str) -> bool:
    """Whether two model names (TransformerLens alias, Hub id, local directory or cache path) name one model.

    Example:
        >>> same_model_name("pythia-70m-deduped", "EleutherAI/pythia-70m-deduped")
        True
        >>> same_model_name("pythia-70m", "EleutherAI/pythia-70m-deduped")
        False
    """
    return _key(a) == _key(b)
