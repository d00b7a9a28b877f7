"""Anisotropy metrics and gradient–subspace alignment on point clouds of activations and gradients.

Grouped by owner:

* the metric leaves: ``metrics`` gathers the per-step geometry metrics, which live by family in ``cosine``,
  ``isotropy`` (IsoScore, IsoScore*), ``spectral`` (spectral dimension) and ``subspaces`` (subspace comparison);
  ``frequency`` relates them to token frequency; ``moments`` streams the moments they share;
* ``alignment/``: the tangent-proxy measurement of arXiv 2604.08764: ``proxy`` (:class:`TangentProxy`),
  ``schedule`` (:class:`ProxySchedule`), ``controls`` (:func:`normal_controls`) and ``measure``
  (:func:`gradient_alignment`);
* ``monitor/``: :class:`AnisotropyMonitor` (``anisotropy_monitor``) runs it live during training, with every setting
  in :class:`MonitorConfig` (``config``); ``replay`` runs it over saved checkpoints, ``trainer`` wires it into the
  Hugging Face Trainer and ``lightning`` into PyTorch Lightning (:class:`LightningMonitorCallback`);
* ``log/``: :class:`GeometryLog` (``geometry_log``) stores the results; ``trackers`` sends them to TensorBoard,
  Weights & Biases and MLflow (:class:`TensorBoardTracker`, :class:`WandbTracker`, :class:`MLflowTracker`);
* ``_kernels/``: the internal kernels, by concern.

Example:
    >>> import torch
    >>> from interp_widgets.geometry import representation_metrics
    >>> sorted(representation_metrics(torch.randn(64, 8)))[:3]
    ['avg_cosine', 'avg_cosine_centered', 'dim']
"""

from interp_widgets.geometry.alignment.measure import gradient_alignment
from interp_widgets.geometry.alignment.result import AlignmentResult
from interp_widgets.geometry.alignment.controls import normal_controls
from interp_widgets.geometry.cosine import (
    SelfSimilarity,
    average_cosine,
    average_cosine_cross_sequence,
    cosine_contributions,
    drift_share,
    self_similarity,
)
from interp_widgets.geometry.frequency import FrequencyAnalysis, frequency_analysis, frequency_by_layer, frequency_chart
from interp_widgets.geometry.log.geometry_log import LAYER_METRICS, GeometryLog
from interp_widgets.geometry.isotropy import isoscore, isoscore_star, participation_ratio
from interp_widgets.geometry.metrics import representation_metrics
from interp_widgets.geometry.moments import Moments
from interp_widgets.geometry.monitor.anisotropy_monitor import AnisotropyMonitor
from interp_widgets.geometry.monitor.config import MonitorConfig
from interp_widgets.geometry.alignment.proxy import TangentProxy
from interp_widgets.geometry.monitor.replay import probe_batches, replay
from interp_widgets.geometry.alignment.schedule import ProxySchedule
from interp_widgets.geometry.spectral import (
    effective_rank_eigen,
    effective_rank_singular,
    explained_variance_ratio,
    partition_isotropy,
    stable_rank,
)
from interp_widgets.geometry.subspaces import linear_cka, orthonormalize, principal_angles, projection_energy
from interp_widgets.geometry.trackers import DEFAULT_METRICS, MLflowTracker, TensorBoardTracker, Tracker, WandbTracker


def __getattr__(name):
    if name == "MonitorCallback":  # imported lazily: it needs transformers' Trainer machinery
        from interp_widgets.geometry.monitor.trainer import MonitorCallback

        return MonitorCallback
    if name == "LightningMonitorCallback":  # imported lazily: it needs the optional lightning package
        from interp_widgets.geometry.monitor.lightning import LightningMonitorCallback

        return LightningMonitorCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AlignmentResult",
    "AnisotropyMonitor",
    "DEFAULT_METRICS",
    "FrequencyAnalysis",
    "GeometryLog",
    "LAYER_METRICS",
    "LightningMonitorCallback",
    "MLflowTracker",
    "MonitorCallback",
    "MonitorConfig",
    "Moments",
    "ProxySchedule",
    "SelfSimilarity",
    "TangentProxy",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "average_cosine",
    "average_cosine_cross_sequence",
    "cosine_contributions",
    "drift_share",
    "effective_rank_eigen",
    "effective_rank_singular",
    "explained_variance_ratio",
    "frequency_analysis",
    "frequency_by_layer",
    "frequency_chart",
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
