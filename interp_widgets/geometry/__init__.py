"""Anisotropy metrics and gradient–subspace alignment on point clouds of activations and gradients.

``metrics`` holds the per-step geometry kernels (cosine family, IsoScore/IsoScore*, spectral dimension,
subspace comparison); ``alignment`` holds the tangent-proxy measurement of arXiv 2604.08764; ``monitor`` runs it
live during training (:class:`AnisotropyMonitor`), ``replay`` over saved checkpoints, ``trainer`` wires it into the
Hugging Face Trainer; ``history`` stores the results (:class:`GeometryLog`).

Example:
    >>> import torch
    >>> from interp_widgets.geometry import representation_metrics
    >>> sorted(representation_metrics(torch.randn(64, 8)))[:3]
    ['avg_cosine', 'avg_cosine_centered', 'dim']
"""

from .alignment import (
    AlignmentResult,
    Moments,
    ProxySchedule,
    TangentProxy,
    gradient_alignment,
    normal_controls,
)
from .frequency import FrequencyAnalysis, frequency_analysis
from .history import LAYER_METRICS, GeometryLog
from .metrics import (
    SelfSimilarity,
    average_cosine,
    average_cosine_cross_sequence,
    cosine_contributions,
    drift_share,
    effective_rank_eigen,
    effective_rank_singular,
    explained_variance_ratio,
    isoscore,
    isoscore_star,
    linear_cka,
    orthonormalize,
    participation_ratio,
    partition_isotropy,
    principal_angles,
    projection_energy,
    representation_metrics,
    self_similarity,
    stable_rank,
)
from .monitor import AnisotropyMonitor, GeometryMonitor
from .replay import probe_batches, replay


def __getattr__(name):
    if name == "MonitorCallback":  # imported lazily: it needs transformers' Trainer machinery
        from .trainer import MonitorCallback

        return MonitorCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AlignmentResult",
    "AnisotropyMonitor",
    "FrequencyAnalysis",
    "GeometryLog",
    "GeometryMonitor",
    "LAYER_METRICS",
    "MonitorCallback",
    "Moments",
    "ProxySchedule",
    "SelfSimilarity",
    "TangentProxy",
    "average_cosine",
    "average_cosine_cross_sequence",
    "cosine_contributions",
    "drift_share",
    "effective_rank_eigen",
    "effective_rank_singular",
    "explained_variance_ratio",
    "frequency_analysis",
    "gradient_alignment",
    "isoscore",
    "isoscore_star",
    "linear_cka",
    "normal_controls",
    "orthonormalize",
    "participation_ratio",
    "partition_isotropy",
    "principal_angles",
    "probe_batches",
    "projection_energy",
    "replay",
    "representation_metrics",
    "self_similarity",
    "stable_rank",
]
