"""The outcome of one gradient–subspace alignment measurement (:func:`~interp_widgets.geometry.gradient_alignment`),
made of the paper's quantities (``shared/reference/anisotropy-paper.md`` §3.4–3.6, §5):

* :class:`AlignmentSetting`: what was measured and how (k, d, N, centring, IsoScore* shrinkage, coordinates);
* :class:`GradientEnergy`: the gradient energy fraction in the tangent proxy against the matched-rank normal
  controls (``E_T``, ``E_N``, ratio, enrichment, the empirical p-value) and along the activation mean direction;
* :class:`AnalyticNull`: the closed-form null of ``E_N`` and the z-score of ``E_T`` against it;
* :class:`IsoScoreRemoval`: the IsoScore* removal test (``iso_G``, after removing the proxy or each control, and
  the deltas ``ΔIso``);
* :class:`AnisotropyShare`: the share of gradient anisotropy each subspace carries, ``ΔIso / (1 − iso_G)``.

Every value also reads by its flat name (``result.energy_proxy`` is ``result.energy.proxy``); see
:data:`FLAT_ATTRIBUTES`.

Example:
    >>> import torch
    >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
    >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
    >>> result = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 5))
    >>> result.setting.rank, result.energy.controls.shape, result.energy_proxy == result.energy.proxy
    (2, torch.Size([5]), True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from interp_widgets._flat import group_flat, install_flat_properties

__all__ = [
    "AlignmentResult",
    "AlignmentSetting",
    "AnalyticNull",
    "AnisotropyShare",
    "GradientEnergy",
    "IsoScoreRemoval",
]


@dataclass(frozen=True, eq=False)
class AlignmentSetting:
    """What was measured and how: the proxy rank ``k``, the dimension ``d``, the number of gradient rows ``N``
    (``n_tokens`` of the paper's logging table), and the settings of the measurement: energies of the centred
    gradient (``centered``), the IsoScore* shrinkage ``zeta`` and the ``coordinates`` of the removed clouds
    (``"full"`` or ``"complement"``).

    Example:
        >>> AlignmentSetting(rank=2, dim=8, n_rows=100, centered=False, zeta=0.0, coordinates="full").rank
        2
    """

    rank: int
    dim: int
    n_rows: int
    centered: bool
    zeta: float
    coordinates: str


@dataclass(frozen=True, eq=False)
class GradientEnergy:
    """The gradient energy fraction ``E(Q) = ‖GQ‖²/‖G‖²`` in the tangent proxy against the matched-rank normal
    controls (anisotropy-paper §3.4–3.5).

    Attributes:
        proxy: ``E_T``, the energy in the proxy.
        controls: ``E_N`` for every control, shape ``(R,)``.
        ratio: ``E_T / mean(E_N)`` (``inf`` if every control has zero energy).
        enrichment: ``E_T / (k/d)``, against a random subspace of the whole space.
        p_value: ``(1 + #{r: E_N[r] ≥ E_T})/(1 + R)``, in ``[1/(R + 1), 1]``.
        mean_direction: the energy along the activation mean (``E_mean_dir``; ``None`` without a fitted mean).

    Example:
        >>> import torch
        >>> energy = GradientEnergy(0.5, torch.tensor([0.1, 0.2]), 0.5 / 0.15, 2.0, 1 / 3, None)
        >>> energy.p_value
        0.3333333333333333
    """

    proxy: float
    controls: torch.Tensor
    ratio: float
    enrichment: float
    p_value: float
    mean_direction: float | None


@dataclass(frozen=True, eq=False)
class AnalyticNull:
    """The closed-form null of the control energies ``E_N`` for Haar-random controls in the proxy's complement
    (anisotropy-paper §3.5): their ``mean`` ``k(1 − E_T)/(d − k)`` and standard deviation ``sd``, and the z-score
    ``z = (E_T − mean)/sd`` of the proxy's energy against them.

    Example:
        >>> AnalyticNull(mean=0.1, sd=0.02, z=20.0).z
        20.0
    """

    mean: float
    sd: float
    z: float


@dataclass(frozen=True, eq=False)
class IsoScoreRemoval:
    """The IsoScore* removal test (anisotropy-paper §3.6): ``iso_G`` is IsoScore* of the gradient ``G``,
    ``minus_proxy`` of ``G`` with the proxy removed, ``minus_controls`` with each control removed (``(R,)``; ``nan``
    where the removal leaves no variance), and ``delta_proxy``, ``delta_controls`` the same minus ``iso_G``
    (``ΔIso_T``, ``ΔIso_N``).

    Example:
        >>> import torch
        >>> removal = IsoScoreRemoval(0.4, 0.7, torch.tensor([0.38]), 0.3, torch.tensor([-0.02]))
        >>> removal.delta_proxy > float(removal.delta_controls.max())
        True
    """

    iso_G: float
    minus_proxy: float
    minus_controls: torch.Tensor
    delta_proxy: float
    delta_controls: torch.Tensor


@dataclass(frozen=True, eq=False)
class AnisotropyShare:
    """The share of gradient anisotropy carried by the proxy (``proxy``, ``share_T``) and by each control
    (``controls``, ``(R,)``): the IsoScore* gain of removing it divided by the anisotropy deficit,
    ``ΔIso / (1 − iso_G)`` (anisotropy-paper §3.6).

    Example:
        >>> import torch
        >>> AnisotropyShare(proxy=0.5, controls=torch.tensor([0.01, -0.02])).proxy
        0.5
    """

    proxy: float
    controls: torch.Tensor


#: Each flat attribute of an :class:`AlignmentResult` (the names of its fields before it was made of parts) as
#: ``(part, attribute of the part)``: ``result.energy_proxy`` is ``result.energy.proxy``. The one table behind the
#: read-only properties and :meth:`AlignmentResult.from_flat`.
FLAT_ATTRIBUTES: dict[str, tuple[str, str]] = {
    **{name: ("setting", name) for name in ("rank", "dim", "n_rows", "centered", "zeta", "coordinates")},
    "energy_proxy": ("energy", "proxy"), "energy_controls": ("energy", "controls"), "ratio": ("energy", "ratio"),
    "enrichment": ("energy", "enrichment"), "p_value": ("energy", "p_value"),
    "energy_mean_direction": ("energy", "mean_direction"),
    "null_mean": ("null", "mean"), "null_sd": ("null", "sd"), "z_analytic": ("null", "z"),
    "iso_G": ("removal", "iso_G"), "iso_minus_proxy": ("removal", "minus_proxy"),
    "iso_minus_controls": ("removal", "minus_controls"), "delta_iso_proxy": ("removal", "delta_proxy"),
    "delta_iso_controls": ("removal", "delta_controls"),
    "share_proxy": ("share", "proxy"), "share_controls": ("share", "controls"),
}  # fmt: skip

#: The class of each part of an :class:`AlignmentResult`, by the result's field name.
PARTS = {
    "setting": AlignmentSetting,
    "energy": GradientEnergy,
    "null": AnalyticNull,
    "removal": IsoScoreRemoval,
    "share": AnisotropyShare,
}


@dataclass(frozen=True, eq=False)
class AlignmentResult:
    """Outcome of :func:`~interp_widgets.geometry.gradient_alignment` for one gradient cloud (one step, one layer).

    Made of five parts, each one of the paper's quantities: the ``setting`` (:class:`AlignmentSetting`: k, d, N
    and the measurement's settings), the ``energy`` (:class:`GradientEnergy`: ``E_T`` against the controls' ``E_N``,
    ratio, enrichment, p-value, the mean direction's energy), the ``null`` (:class:`AnalyticNull`: closed-form mean
    and sd of ``E_N``, z-score), the ``removal`` (:class:`IsoScoreRemoval`: IsoScore* of ``G`` and after each
    removal, ``ΔIso``) and the ``share`` (:class:`AnisotropyShare`: ``ΔIso/(1 − iso_G)``).

    The values read as flat attributes too (:data:`FLAT_ATTRIBUTES`): ``rank, dim, n_rows, energy_proxy,
    energy_controls, ratio, enrichment, null_mean, null_sd, z_analytic, p_value, energy_mean_direction, iso_G,
    iso_minus_proxy, iso_minus_controls, delta_iso_proxy, delta_iso_controls, share_proxy, share_controls, centered,
    zeta, coordinates``; :meth:`from_flat` builds a result from them.

    Example:
        >>> import torch
        >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
        >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
        >>> result = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 5))
        >>> sorted(result.to_dict())[:3]
        ['E_N', 'E_T', 'E_mean_dir']
        >>> result.rank, result.dim, result.n_rows, result.null.mean == result.null_mean
        (2, 8, 100, True)
    """

    setting: AlignmentSetting
    energy: GradientEnergy
    null: AnalyticNull
    removal: IsoScoreRemoval
    share: AnisotropyShare

    @classmethod
    def from_flat(cls, **values: Any) -> "AlignmentResult":
        """A result from its flat values, every name of :data:`FLAT_ATTRIBUTES` (the keywords the result took before
        it was made of parts).

        Example:
            >>> import torch
            >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
            >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
            >>> result = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 5))
            >>> copy = AlignmentResult.from_flat(**{name: getattr(result, name) for name in FLAT_ATTRIBUTES})
            >>> copy.to_dict() == result.to_dict()
            True
        """
        grouped = group_flat(FLAT_ATTRIBUTES, values, what="alignment result")
        missing = [name for name in FLAT_ATTRIBUTES if name not in values]
        if missing:
            raise TypeError(f"alignment result values missing: {missing}")
        return cls(**{part: PARTS[part](**grouped[part]) for part in PARTS})

    @property
    def log10_ratio(self) -> float:
        """``log10(ratio)``; 0 means the proxy captures no more energy than the controls.

        Example:
            >>> import torch
            >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
            >>> proxy = TangentProxy.from_basis(torch.eye(6)[:, :1])
            >>> G = torch.zeros(10, 6); G[:, 0] = torch.randn(10); G[:, 1:] = 0.01 * torch.randn(10, 5)
            >>> gradient_alignment(G, proxy, normal_controls(proxy, 3)).log10_ratio > 2
            True
        """
        ratio = self.energy.ratio
        return math.log10(ratio) if ratio > 0 else -math.inf

    def to_dict(self) -> dict:
        """Flat dict with the field names of the reference's logging table (anisotropy-paper §5).

        Vectors become lists. Keys: ``k, d, n_tokens, E_T, E_N, ratio, log10_ratio, enrichment, p_value,
        z_analytic, null_mean, null_sd, E_mean_dir, iso_G, iso_G_minus_T, iso_G_minus_N, dIso_T, dIso_N,
        dIso_N_mean, dIso_N_sd, share_T, share_N_mean, centered, zeta, coordinates``. ``dIso_N_sd`` uses
        ddof = 1 (``nan`` for a single control).

        Example:
            >>> import torch
            >>> from interp_widgets.geometry import TangentProxy, gradient_alignment, normal_controls
            >>> proxy = TangentProxy.from_basis(torch.eye(8)[:, :2])
            >>> row = gradient_alignment(torch.randn(100, 8), proxy, normal_controls(proxy, 4)).to_dict()
            >>> row["k"], row["d"], len(row["E_N"])
            (2, 8, 4)
        """
        setting, energy, null, removal = self.setting, self.energy, self.null, self.removal
        deltas = removal.delta_controls
        return {
            "k": setting.rank,
            "d": setting.dim,
            "n_tokens": setting.n_rows,
            "E_T": energy.proxy,
            "E_N": energy.controls.tolist(),
            "ratio": energy.ratio,
            "log10_ratio": self.log10_ratio,
            "enrichment": energy.enrichment,
            "p_value": energy.p_value,
            "z_analytic": null.z,
            "null_mean": null.mean,
            "null_sd": null.sd,
            "E_mean_dir": energy.mean_direction,
            "iso_G": removal.iso_G,
            "iso_G_minus_T": removal.minus_proxy,
            "iso_G_minus_N": removal.minus_controls.tolist(),
            "dIso_T": removal.delta_proxy,
            "dIso_N": deltas.tolist(),
            "dIso_N_mean": float(deltas.mean()),
            "dIso_N_sd": float(deltas.std()) if deltas.numel() > 1 else math.nan,
            "share_T": self.share.proxy,
            "share_N_mean": float(self.share.controls.mean()),
            "centered": setting.centered,
            "zeta": setting.zeta,
            "coordinates": setting.coordinates,
        }


install_flat_properties(AlignmentResult, FLAT_ATTRIBUTES)
