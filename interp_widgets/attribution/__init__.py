"""Attribution methods: which input tokens drive a prediction.

Example:
    >>> from interp_widgets.attribution import attribute
    >>> result = attribute(model, tokenizer, "Not bad at all.", method="integrated_gradients",
    ...                    method_params={"progress": False})
    >>> result.method, result.target_labels, float(result.relative_completeness_error[0]) < 0.01
    ('integrated_gradients', ['positive'], True)
    >>> sorted(METHODS)[:4]
    ['attention_rollout', 'gradient_shap', 'gradient_weighted_attention', 'input_x_gradient']
"""

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
    "attribute",
    "faithfulness",
    "from_captum",
    "from_interpreto",
]
