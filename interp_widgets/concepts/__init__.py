"""Concepts: activations streamed from a layer, decomposed into concept directions, interpreted and scored.

Example:
    >>> from interp_widgets.concepts import collect_activations, NMFConcepts
    >>> store = collect_activations(model, tokenizer, texts, layer="layer:3")   # doctest: +SKIP
    >>> concepts = NMFConcepts(20, nonnegative="shift").fit(store)             # doctest: +SKIP
"""

from interp_widgets.concepts.activations import ActivationStore, collect_activations
from interp_widgets.concepts.decompositions import (
    CONCEPT_MODELS,
    ConceptModel,
    DictionaryLearningConcepts,
    ICAConcepts,
    IncrementalPCAConcepts,
    KMeansConcepts,
    MiniBatchDictionaryLearningConcepts,
    MiniBatchKMeansConcepts,
    MiniBatchNMFConcepts,
    NMFConcepts,
    PCAConcepts,
    SemiNMFConcepts,
    SklearnConcepts,
    SVDConcepts,
)

__all__ = [
    "CONCEPT_MODELS",
    "ActivationStore",
    "ConceptModel",
    "DictionaryLearningConcepts",
    "ICAConcepts",
    "IncrementalPCAConcepts",
    "KMeansConcepts",
    "MiniBatchDictionaryLearningConcepts",
    "MiniBatchKMeansConcepts",
    "MiniBatchNMFConcepts",
    "NMFConcepts",
    "PCAConcepts",
    "SVDConcepts",
    "SemiNMFConcepts",
    "SklearnConcepts",
    "collect_activations",
]
