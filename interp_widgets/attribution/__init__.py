"""Attribution methods: which input tokens drive a prediction.

Every method registers itself by name in :data:`METHODS`; :func:`list_methods` lists them with their properties. A
new method subclasses one of the public engines, :class:`GradientMethod`, :class:`PerturbationMethod` or
:class:`AttentionMethod` (or :class:`Attributor` itself), whose docstrings describe the hooks to override; what the
hooks receive (:class:`~interp_widgets.attribution.base.ExplainedInput`,
:func:`~interp_widgets.attribution.base.evaluate_rows`, ...) is exported by :mod:`interp_widgets.attribution.base`.

Example:
    >>> from interp_widgets.attribution import attribute
    >>> result = attribute(model, tokenizer, "Not bad at all.", method="integrated_gradients",
    ...                    method_params={"progress": False})
    >>> result.method, result.target_labels, float(result.relative_completeness_error[0]) < 0.01
    ('integrated_gradients', ['positive'], True)
    >>> sorted(METHODS)[:4]
    ['attention_rollout', 'gradient_shap', 'gradient_weighted_attention', 'input_x_gradient']

The agreement statistics between methods (:func:`spearman`, :func:`top_k_overlap`, :func:`agreement_table`) are
defined once in :mod:`interp_widgets.agreement`, which the comparison view also uses, and exported here.
:func:`attribute_corpus` explains a whole corpus in resumable shards on disk, across ``torch.distributed`` ranks
(:mod:`interp_widgets.attribution.corpus`); :func:`load_corpus` reads such a run back.
"""

from interp_widgets.agreement import agreement_table, spearman, top_k_overlap
from interp_widgets.attribution.api import MethodInfo, attribute, list_methods
from interp_widgets.attribution.attention import (
    AttentionMethod,
    AttentionRollout,
    GradientWeightedAttention,
    RawAttention,
)
from interp_widgets.attribution.base import METHODS, Attributor
from interp_widgets.attribution.corpus import CorpusAttribution, attribute_corpus, load_corpus
from interp_widgets.attribution.faithfulness import FaithfulnessResult, faithfulness
from interp_widgets.attribution.gradient import (
    GradientMethod,
    GradientShap,
    InputXGradient,
    IntegratedGradients,
    Saliency,
    SmoothGrad,
    SquareGrad,
    VarGrad,
)
from interp_widgets.attribution.patterns import AttentionPatterns, attention_patterns, record_attention
from interp_widgets.attribution.perturbation import (
    KernelShap,
    Lime,
    Occlusion,
    PerturbationMethod,
    Sobol,
    jansen_total_indices,
    sobol_design,
)
from interp_widgets.attribution.interop import from_captum, from_interpreto
from interp_widgets.attribution.result import AttributionCollection, AttributionResult, Contrast, Generation, MethodRun

__all__ = [
    "METHODS",
    "AttentionMethod",
    "AttentionPatterns",
    "AttentionRollout",
    "AttributionCollection",
    "AttributionResult",
    "Attributor",
    "Contrast",
    "CorpusAttribution",
    "FaithfulnessResult",
    "Generation",
    "GradientMethod",
    "GradientShap",
    "GradientWeightedAttention",
    "InputXGradient",
    "IntegratedGradients",
    "KernelShap",
    "Lime",
    "MethodInfo",
    "MethodRun",
    "Occlusion",
    "PerturbationMethod",
    "RawAttention",
    "Saliency",
    "SmoothGrad",
    "Sobol",
    "SquareGrad",
    "VarGrad",
    "agreement_table",
    "attention_patterns",
    "attribute",
    "attribute_corpus",
    "faithfulness",
    "from_captum",
    "from_interpreto",
    "jansen_total_indices",
    "list_methods",
    "load_corpus",
    "record_attention",
    "sobol_design",
    "spearman",
    "top_k_overlap",
]
