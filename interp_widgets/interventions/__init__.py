"""Interventions: change a model's activations and see what follows (the causal compute family).

- :func:`intervene`: a context manager that edits activations at residual-stream points, sublayer outputs and
  attention heads, ``{point: edit}``, optionally at some positions only. Its hooks are removed on exit, on errors
  and on Ctrl-C; the model is never changed.
- Edits: a tensor to set, a function, :class:`Ablate` (zero, mean or resampled; whole or along a direction),
  :class:`Clamp` (a direction's component set to a value) and :class:`Add` (a scaled direction added).
- ``intervene(..., freeze=("attention", "norms", "mlp"), freeze_on=prompt)`` holds attention patterns, norm scales
  and MLP outputs at their values on a prompt (:mod:`interp_widgets.interventions.freeze`).
- :func:`reference_activations`: the activations at a point over texts, the reference of a mean or resample
  ablation; :func:`resolve_point`: the one reading of a point's name.
- :func:`activation_patching`: exact activation patching of residual points, sublayer outputs and heads between a
  clean and a corrupt prompt (or lists of pairs), denoising or noising, returning a :class:`PatchingResult`
  (:mod:`interp_widgets.interventions.patching_result`); :mod:`interp_widgets.interventions.patching_inputs` holds
  the pair preparation and metrics that attribution patching shares.

Example:
    >>> from interp_widgets.interventions import Add, intervene
    >>> ids = torch.tensor([[101, 2204, 102]])
    >>> with intervene(model, {"layer:0.attn_out": Add(torch.ones(32), 3.0)}, positions=0), torch.no_grad():
    ...     steered = model(input_ids=ids).logits
    >>> bool((steered != model(input_ids=ids).logits).any())
    True
"""

from interp_widgets.interventions.edits import ABLATION_MODES, Ablate, Add, Clamp, as_direction, reference_activations
from interp_widgets.interventions.intervene import intervene
from interp_widgets.interventions.patching import EXACT_POINTS, activation_patching
from interp_widgets.interventions.patching_inputs import METRICS, PatchingPairs, Scorer, prepare_pairs
from interp_widgets.interventions.patching_result import (
    PatchingBaseline,
    PatchingPair,
    PatchingPanel,
    PatchingResult,
    PatchingSetting,
)
from interp_widgets.interventions.points import EditPoint, resolve_point

__all__ = [
    "ABLATION_MODES",
    "Ablate",
    "Add",
    "Clamp",
    "EXACT_POINTS",
    "EditPoint",
    "METRICS",
    "PatchingBaseline",
    "PatchingPair",
    "PatchingPairs",
    "PatchingPanel",
    "PatchingResult",
    "PatchingSetting",
    "Scorer",
    "activation_patching",
    "as_direction",
    "intervene",
    "prepare_pairs",
    "reference_activations",
    "resolve_point",
]
