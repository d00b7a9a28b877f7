"""Every setting of the monitor in one place: :class:`MonitorConfig`, a frozen dataclass validated once, when it is
built (TransformerLens's ``HookedTransformerConfig`` is the model). :class:`~interp_widgets.geometry.AnisotropyMonitor`
and :func:`~interp_widgets.geometry.replay` take one, or its fields as keyword overrides.

Example:
    >>> config = MonitorConfig(rank=4, fit="refit", refit_every=10)
    >>> config.rank, config.n_controls, config.with_overrides(n_controls=5).n_controls
    (4, 20, 5)
    >>> MonitorConfig.resolve(None, {"rnak": 4})
    Traceback (most recent call last):
    ...
    TypeError: MonitorConfig has no setting 'rnak'; did you mean 'rank'?
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from interp_widgets.geometry._kernels.isoscore_terms import check_shrinkage
from interp_widgets.geometry.alignment.proxy import check_rank, dictionary_function
from interp_widgets.geometry.alignment.schedule import ProxySchedule, check_mode_arguments
from interp_widgets.validation import check_int

__all__ = ["MonitorConfig", "SETTINGS", "check_setting_names"]


@dataclass(frozen=True)
class MonitorConfig:
    """The settings of an :class:`~interp_widgets.geometry.AnisotropyMonitor` (and of
    :func:`~interp_widgets.geometry.replay`), validated when the config is built; a wrong value raises naming it and
    what would do. Frozen: :meth:`with_overrides` returns a changed copy.

    Args:
        rank: proxy rank k (``2k <= d`` at every layer, so matched-rank controls fit in the complement; checked by
            :func:`~interp_widgets.geometry.alignment.proxy.check_rank` here and against each layer's d when bound).
        every: measure every ``every``-th step (other steps cost nothing: no rows are kept).
        fit: ``"early"`` (fit once on the first ``fit_fraction`` of ``total_steps``, then freeze), ``"refit"``
            (refit every ``refit_every`` steps on the previous window) or ``"fixed"`` (``basis=``).
        total_steps: run length in steps (``fit="early"``; the Trainer and Lightning callbacks fill it in).
        fit_fraction: share of ``total_steps`` in the early window (None: the schedule's 0.3).
        refit_every: window length for ``fit="refit"``.
        basis: for ``fit="fixed"``: one ``d × k`` basis / :class:`~interp_widgets.geometry.TangentProxy` for every
            layer, or a dict ``{layer: basis}``. Any dictionary is QR-orthonormalised.
        proxy_method: ``"pca"`` (default, from streamed moments), a function ``(H, rank) -> d × k`` dictionary, or
            a scikit-learn-style estimator with ``fit`` and ``components_`` (k × d; e.g. the concept models of
            :mod:`interp_widgets.concepts`) configured with ``rank`` components; custom methods see a uniform
            reservoir of at most ``fit_tokens`` rows of the window. Dictionaries are QR-orthonormalised.
        n_controls: number of normal controls R (p-value floor ``1/(R + 1)``).
        max_tokens: at most this many token rows per layer per step (uniformly subsampled, seeded).
        gradient: ``"hidden"`` (``dL/dh`` of the layer output, default) or ``"weight"`` (weight gradient of a
            linear layer, input side).
        special_token_ids: token ids whose rows are dropped (e.g. ``tokenizer.all_special_ids``); needs
            ``input_ids`` (seen automatically when the model is called with them, or passed to ``track``). Stored
            as a sorted tuple.
        seed: seed of the subsampling generator and of the controls.
        center, zeta, coordinates: passed to :func:`~interp_widgets.geometry.gradient_alignment`.
        representation: also record :func:`~interp_widgets.geometry.representation_metrics` of ``H``
            (``effective_rank`` is the singular-value convention; ``effective_rank_eigen`` the eigenvalue one).
        spectrum_every: cadence of the representation metrics that need ``H``'s d × d Gram and eigenvalues
            (``isoscore``, ``participation_ratio``, the effective ranks, ``stable_rank``,
            ``top1_explained_variance``): the first measurement of each layer and every ``spectrum_every``-th
            after it; the rows between hold NaN for them (tables and plots skip NaN). The O(nd) metrics
            (``avg_cosine``, ``avg_cosine_centered``, ``drift_share``) and the whole gradient alignment are
            recorded at every measurement. The Gram and the eigensolve are most of a measurement's cost, and
            these metrics drift slowly (``geometry-metrics.md`` §11.1 suggests every 10–1000 steps); pass 1 to
            get them at every measurement.
        fit_tokens: reservoir size for a custom ``proxy_method``.
        max_rows: bound on stored history rows (see :class:`~interp_widgets.geometry.GeometryLog`).
        measurement_threads: torch intra-op threads of each measured step on the CPU. None (default): the
            caller's own setting, untouched. An int is set with ``torch.set_num_threads`` for the measurement and
            restored afterwards (also when it raises). **That setting is process-wide**: while a step is measured,
            every other thread of the process runs with it too. On a machine shared with other jobs, 1 can be much
            faster (every kernel ends in a barrier that waits for descheduled threads).
        x_label: what the x axis counts, ``"step"`` (training) or ``"checkpoint"`` (replay).

    Example:
        >>> MonitorConfig(fit="refit", refit_every=5, measurement_threads=1).measurement_threads
        1
        >>> MonitorConfig(fit="refit")
        Traceback (most recent call last):
        ...
        ValueError: refit_every must be an integer >= 1, got None; mode='refit' needs refit_every=, the refit window length in steps
    """

    rank: int = 16
    every: int = 1
    fit: str = "early"
    total_steps: int | None = None
    fit_fraction: float | None = None
    refit_every: int | None = None
    basis: object = field(default=None, repr=False, compare=False)  # tensors: no elementwise ==
    proxy_method: object = "pca"
    n_controls: int = 20
    max_tokens: int = 4096
    gradient: str = "hidden"
    special_token_ids: tuple[int, ...] | None = None
    seed: int = 0
    center: bool = False
    zeta: float = 0.0
    coordinates: str = "full"
    representation: bool = True
    spectrum_every: int = 10
    fit_tokens: int = 20_000
    max_rows: int = 100_000
    measurement_threads: int | None = None
    x_label: str = "step"

    def __post_init__(self) -> None:
        check_rank(self.rank)  # against each layer's d when the layers are bound
        for name, low in (
            ("every", 1),
            ("n_controls", 1),
            ("max_tokens", 2),
            ("fit_tokens", 2),
            ("spectrum_every", 1),
            ("max_rows", 2),
        ):
            check_int(name, getattr(self, name), minimum=low)
        if self.measurement_threads is not None:
            check_int("measurement_threads", self.measurement_threads, minimum=1, hint="or None: the caller's own")
        if self.gradient not in ("hidden", "weight"):
            raise ValueError(
                f"gradient must be 'hidden' (dL/dh) or 'weight' (linear weight gradient), got {self.gradient!r}"
            )
        if self.fit not in ("early", "refit", "fixed"):
            raise ValueError(f"fit must be 'early', 'refit' or 'fixed', got {self.fit!r}")
        if self.fit == "fixed" and self.basis is None:
            raise ValueError("fit='fixed' needs basis= (a d × k matrix, a TangentProxy, or {layer: basis})")
        if self.coordinates not in ("full", "complement"):
            raise ValueError(f"coordinates must be 'full' or 'complement', got {self.coordinates!r}")
        if self.x_label not in ("step", "checkpoint"):
            raise ValueError(f"x_label must be 'step' or 'checkpoint', got {self.x_label!r}")
        check_shrinkage(self.zeta, "scaled_identity", 1, torch.device("cpu"))
        check_mode_arguments(
            self.fit,
            "fit",
            total_steps=self.total_steps,
            fit_fraction=self.fit_fraction,
            refit_every=self.refit_every,
            basis=self.basis,
        )
        if self.fit == "refit" or (self.fit == "early" and self.total_steps is not None):
            self.schedule()  # the schedule's own checks of total_steps / fit_fraction / refit_every, now
        dictionary_function(self.proxy_method)  # rejects an unknown method now
        if self.special_token_ids is not None:
            ids = self.special_token_ids
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                raise TypeError(f"special_token_ids must be a list of token ids, got {type(ids).__name__}")
            object.__setattr__(self, "special_token_ids", tuple(sorted({int(i) for i in ids})))

    @classmethod
    def resolve(cls, config: MonitorConfig | None = None, overrides: Mapping | None = None) -> MonitorConfig:
        """``config`` (or the defaults) with ``overrides`` applied: how the monitor and replay take their settings.

        Example:
            >>> MonitorConfig.resolve(None, {"rank": 8}).rank, MonitorConfig.resolve(MonitorConfig(rank=4)).rank
            (8, 4)
        """
        if config is None:
            check_setting_names(overrides or {})
            return cls(**(overrides or {}))
        if not isinstance(config, cls):
            raise TypeError(f"config must be a MonitorConfig, got {type(config).__name__}")
        return config.with_overrides(**(overrides or {}))

    def with_overrides(self, **overrides) -> MonitorConfig:
        """A copy with some settings changed (validated again); unknown names raise naming the closest setting.

        Example:
            >>> MonitorConfig().with_overrides(n_control=5)
            Traceback (most recent call last):
            ...
            TypeError: MonitorConfig has no setting 'n_control'; did you mean 'n_controls'?
        """
        check_setting_names(overrides)
        return dataclasses.replace(self, **overrides) if overrides else self

    def schedule(self) -> ProxySchedule:
        """A fresh ``early`` or ``refit`` :class:`~interp_widgets.geometry.ProxySchedule` of these settings (the fast
        fit the monitor uses).

        Example:
            >>> MonitorConfig(total_steps=10).schedule().fit_window
            (0, 3)
        """
        if self.fit == "early":
            return ProxySchedule(
                "early", self.rank, total_steps=self.total_steps, fit_fraction=self.fit_fraction, fast=True
            )
        return ProxySchedule("refit", self.rank, refit_every=self.refit_every, fast=True)


#: The names of every setting, in declaration order.
SETTINGS = tuple(f.name for f in dataclasses.fields(MonitorConfig))


def check_setting_names(names: Iterable[str]) -> None:
    """Refuse a name that is not a :class:`MonitorConfig` setting, naming the closest one.

    Example:
        >>> check_setting_names(["rank", "zetta"])
        Traceback (most recent call last):
        ...
        TypeError: MonitorConfig has no setting 'zetta'; did you mean 'zeta'?
    """
    for name in names:
        if name not in SETTINGS:
            close = difflib.get_close_matches(str(name), SETTINGS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the settings are {', '.join(SETTINGS)}"
            raise TypeError(f"MonitorConfig has no setting {name!r}{hint}")
