"""Concepts: activations streamed from a layer, decomposed into concept directions, interpreted and scored.

Example:
    >>> from interp_widgets.concepts import collect_activations, NMFConcepts, text_concepts
    >>> store = collect_activations(model, tokenizer, texts, layer="layer:1", progress=False)
    >>> concepts = NMFConcepts(8, nonnegative="shift", estimator_params={"random_state": 0}).fit(store)
    >>> concepts.transform(store[:3]).shape
    (3, 8)
    >>> [(c, round(v, 2)) for c, v in text_concepts(concepts, model, tokenizer, "Not bad at all.").active_concepts(1, top=2)]
    [(6, 0.42), (7, 0.23)]
"""

from interp_widgets.concepts.activations import ActivationStore, collect_activations
from interp_widgets.concepts.decompositions import (
    CONCEPT_MODELS,
    ConceptModel,
    ConvexNMFConcepts,
    DictionaryLearningConcepts,
    ICAConcepts,
    IncrementalPCAConcepts,
    KMeansConcepts,
    MiniBatchDictionaryLearningConcepts,
    MiniBatchKMeansConcepts,
    MiniBatchNMFConcepts,
    NeuronsAsConcepts,
    NMFConcepts,
    PCAConcepts,
    SemiNMFConcepts,
    SklearnConcepts,
    SparsePCAConcepts,
    SVDConcepts,
)
from interp_widgets.concepts.cockatiel import (
    ClassConcepts,
    CockatielResult,
    ConceptOcclusion,
    cockatiel,
    sobol_concept_importance,
)
from interp_widgets.concepts.importance import (
    ConceptImportance,
    TextConcepts,
    concept_importance,
    mean_concept_importance,
    text_concepts,
)
from interp_widgets.concepts.inputs import (
    ConceptInputAttributions,
    InputsToConceptsForSequenceClassification,
    concept_attribution,
    gradient_support,
)
from interp_widgets.concepts.interpret import (
    ActivationStats,
    ConceptInterpretation,
    ConceptLabels,
    InterpretationRun,
    TopExamples,
    TopTexts,
    VocabularyProjection,
    interpret_concepts,
    label_from_tokens,
    vocabulary_projection,
)
from interp_widgets.concepts.chat import ChatLM
from interp_widgets.concepts.label_scores import LMScorer, score_labels
from interp_widgets.concepts.consim import (
    ConSimExamples,
    ConSimResult,
    consim,
    consim_prompt,
    select_examples,
)
from interp_widgets.concepts.labels import (
    LMLabeler,
    TokenLabeler,
    compare_labelers,
    context_windows,
    label_auroc,
)
from interp_widgets.concepts.metrics import (
    dead_concepts,
    evaluate,
    explained_variance,
    l0_sparsity,
    matched_cosine,
    relative_reconstruction_error,
    stability,
)
from interp_widgets.concepts.centroid_probes import CentroidProbe, LinearRegressionProbe
from interp_widgets.concepts.probes import DirectionConcepts, LinearProbe, ProbeSweep, probe_layers
from interp_widgets.concepts.quality import SpliceQuality, splice_quality
from interp_widgets.concepts.hierarchy import ConceptHierarchy, concept_hierarchy
from interp_widgets.concepts.sae import (
    BatchTopKSAE,
    JumpReLUSAE,
    MatchingPursuitSAE,
    MatryoshkaSAE,
    SparseAutoencoder,
)
from interp_widgets.concepts.saelens import (
    SAEQualityWarning,
    check_base_model,
    load_sae,
    norm_scaling_factor,
    save_sae,
    transformer_lens_processing,
)
from interp_widgets.concepts.training import TrainingConfig
from interp_widgets.concepts.transcoders import Transcoder

__all__ = [
    "ActivationStore",
    "BatchTopKSAE",
    "CONCEPT_MODELS",
    "ClassConcepts",
    "CockatielResult",
    "ConceptOcclusion",
    "ConceptImportance",
    "ConceptInputAttributions",
    "ConceptInterpretation",
    "ConceptLabels",
    "ActivationStats",
    "InterpretationRun",
    "TopExamples",
    "TopTexts",
    "VocabularyProjection",
    "ConceptModel",
    "ConvexNMFConcepts",
    "NeuronsAsConcepts",
    "SparsePCAConcepts",
    "MatchingPursuitSAE",
    "ConceptHierarchy",
    "DirectionConcepts",
    "CentroidProbe",
    "LinearProbe",
    "LinearRegressionProbe",
    "LMLabeler",
    "LMScorer",
    "ChatLM",
    "ConSimExamples",
    "ConSimResult",
    "consim",
    "consim_prompt",
    "select_examples",
    "TokenLabeler",
    "compare_labelers",
    "context_windows",
    "label_auroc",
    "score_labels",
    "ProbeSweep",
    "probe_layers",
    "DictionaryLearningConcepts",
    "ICAConcepts",
    "InputsToConceptsForSequenceClassification",
    "IncrementalPCAConcepts",
    "JumpReLUSAE",
    "MatryoshkaSAE",
    "KMeansConcepts",
    "MiniBatchDictionaryLearningConcepts",
    "MiniBatchKMeansConcepts",
    "MiniBatchNMFConcepts",
    "NMFConcepts",
    "PCAConcepts",
    "SVDConcepts",
    "SAEQualityWarning",
    "SemiNMFConcepts",
    "SklearnConcepts",
    "SparseAutoencoder",
    "Transcoder",
    "SpliceQuality",
    "TextConcepts",
    "TrainingConfig",
    "check_base_model",
    "cockatiel",
    "collect_activations",
    "concept_attribution",
    "concept_hierarchy",
    "concept_importance",
    "dead_concepts",
    "evaluate",
    "explained_variance",
    "gradient_support",
    "interpret_concepts",
    "l0_sparsity",
    "load_sae",
    "label_from_tokens",
    "matched_cosine",
    "mean_concept_importance",
    "norm_scaling_factor",
    "relative_reconstruction_error",
    "save_sae",
    "sobol_concept_importance",
    "splice_quality",
    "stability",
    "text_concepts",
    "transformer_lens_processing",
    "vocabulary_projection",
]
