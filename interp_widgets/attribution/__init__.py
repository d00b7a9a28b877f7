"""Attribution methods: which input tokens drive a prediction.

Example:
    >>> from interp_widgets.attribution import attribute
    >>> result = attribute(model, tokenizer, "Not bad at all.", method="integrated_gradients")  # doctest: +SKIP

The agreement statistics between methods (:func:`spearman`, :func:`top_k_overlap`, :func:`agreement_table`) are
defined once in :mod:`interp_widgets.agreement`, which the comparison view also uses, and exported here.
"""

from interp_widgets.agreement import agreement_table, spearman, top_k_overlap
from interp_widgets.attribution.api import METHODS, attribute
from interp_widgets.attribution.attention import AttentionRollout, GradientWeightedAttention, RawAttention
from interp_widgets.attribution.base import Attributor
from interp_widgets.attribution.faithfulness import FaithfulnessResult, faithfulness
from interp_widgets.attribution.gradient import (
    GradientShap,
    InputXGradient,
    IntegratedGradients,
    Saliency,
    SmoothGrad,
    SquareGrad,
    VarGrad,
)
from interp_widgets.attribution.perturbation import KernelShap, Lime, Occlusion, Sobol
from interp_widgets.attribution.interop import from_captum, from_interpreto
from interp_widgets.attribution.result import AttributionCollection, AttributionResult

__all__ = [
    "METHODS",
    "AttentionRollout",
    "AttributionCollection",
    "AttributionResult",
    "Attributor",
    "FaithfulnessResult",
    "GradientShap",
    "GradientWeightedAttention",
    "InputXGradient",
    "IntegratedGradients",
    "KernelShap",
    "Lime",
    "Occlusion",
    "RawAttention",
    "Saliency",
    "SmoothGrad",
    "Sobol",
    "SquareGrad",
    "VarGrad",
    "agreement_table",
    "attribute",
    "faithfulness",
    "from_captum",
    "from_interpreto",
    "spearman",
    "top_k_overlap",
]
