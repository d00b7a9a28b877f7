"""When to (re)fit the tangent proxy during training or a replay (:class:`ProxySchedule`): ``early``, ``refit`` or
``fixed``.

Example:
    >>> ProxySchedule("early", rank=4, total_steps=10).fit_window
    (0, 3)
"""

from __future__ import annotations

import math

import torch

from interp_widgets.geometry._kernels.inputs import ArrayLike
from interp_widgets.geometry.moments import Moments
from interp_widgets.geometry.alignment.proxy import TangentProxy, check_rank
from interp_widgets.validation import check_fraction, check_int, check_step

__all__ = ["ProxySchedule"]

#: The share of ``total_steps`` in the ``early`` fit window when none is given.
DEFAULT_FIT_FRACTION = 0.3

#: The fit modes, and which of the schedule's optional arguments belongs to which mode.
MODE_ARGUMENTS = {"total_steps": "early", "fit_fraction": "early", "refit_every": "refit", "basis": "fixed"}


def check_mode_arguments(mode: str, label: str, **values) -> None:
    """Reject arguments that do not belong to ``mode`` (``label`` names the mode argument in the message).

    Example:
        >>> check_mode_arguments("refit", "fit", total_steps=100, refit_every=None)
        Traceback (most recent call last):
        ...
        ValueError: total_steps do(es) not apply to fit='refit'
    """
    misplaced = [name for name, value in values.items() if value is not None and MODE_ARGUMENTS[name] != mode]
    if misplaced:
        raise ValueError(f"{', '.join(misplaced)} do(es) not apply to {label}={mode!r}")


class ProxySchedule:
    """When to (re)fit the tangent proxy during training: ``early``, ``refit`` or ``fixed``.

    * ``"early"`` (the paper's protocol): pool the activations of steps ``0 … ceil(fit_fraction·total_steps) − 1``
      (moments only, so memory is O(d²) whatever the window length), fit PCA once at the first observed step
      past the window, then freeze.
    * ``"refit"``: windows ``[w·refit_every, (w + 1)·refit_every)``; at the first observed step of a new
      window the proxy is refitted on the previous window's activations (kept if that window saw none).
    * ``"fixed"``: a user-supplied basis, available from the start; activations are ignored.

    ``observe(step, H)`` returns True when the proxy changed; ``version`` counts fits (redraw the controls
    whenever it changes). ``fit_now()`` fits at once when no later step will come (``fit_fraction=1``, end of
    a replay). ``phase(step)`` is ``"early"`` for steps in the first fit window (in-sample, or before
    any proxy exists) and ``"late"`` after it.

    Args:
        mode: ``"early"``, ``"refit"`` or ``"fixed"``.
        rank: proxy rank k (early/refit; inferred from ``basis`` for fixed).
        total_steps: length of the run in steps (early only; count checkpoints when replaying).
        fit_fraction: share of ``total_steps`` in the fit window, in ``(0, 1]`` (early only; None =
            :data:`DEFAULT_FIT_FRACTION`, 0.3).
        refit_every: window length in steps (refit only).
        basis: ``d × k`` basis or :class:`TangentProxy` (fixed only).
        fast: fit with ``TangentProxy.from_moments(..., fast=True)`` (float32 eigensolve refined in float64, with
            a bounded subspace angle; the live monitor's setting). Default False: the exact float64 ``eigh``.

    Example:
        >>> import torch
        >>> schedule = ProxySchedule("early", rank=2, total_steps=10)
        >>> [schedule.observe(step, torch.randn(64, 8)) for step in range(5)]
        [False, False, False, True, False]
        >>> schedule.basis.shape, schedule.phase(2), schedule.phase(3), schedule.version
        (torch.Size([8, 2]), 'early', 'late', 1)
    """

    def __init__(
        self,
        mode: str = "early",
        rank: int | None = None,
        *,
        total_steps: int | None = None,
        fit_fraction: float | None = None,
        refit_every: int | None = None,
        basis: TangentProxy | ArrayLike | None = None,
        fast: bool = False,
    ) -> None:
        if mode not in ("early", "refit", "fixed"):
            raise ValueError(f"mode must be 'early', 'refit' or 'fixed', got {mode!r}")
        check_mode_arguments(
            mode, "mode", total_steps=total_steps, fit_fraction=fit_fraction, refit_every=refit_every, basis=basis
        )
        self.mode = mode
        self.fast = bool(fast)
        self._proxy: TangentProxy | None = None
        self._pending: Moments | None = None
        self._window = 0
        self._last_step = -1
        self.version = 0
        if mode == "fixed":
            if basis is None:
                raise ValueError("mode='fixed' needs basis= (a d × k matrix or a TangentProxy)")
            self._proxy = basis if isinstance(basis, TangentProxy) else TangentProxy.from_basis(basis)
            if rank is not None and rank != self._proxy.rank:
                raise ValueError(f"rank={rank} does not match the supplied basis of rank {self._proxy.rank}")
            self.rank = self._proxy.rank
            self.version = 1
            return
        self.rank = check_rank(rank)
        if mode == "early":
            fit_fraction = DEFAULT_FIT_FRACTION if fit_fraction is None else fit_fraction
            check_int(
                "total_steps", total_steps, minimum=1, hint="mode='early' needs total_steps=, the run length in steps"
            )
            check_fraction("fit_fraction", fit_fraction)
            # round() guards against 0.3 * 10 = 3.0000000000000004 adding a step
            self._window_length = max(1, math.ceil(round(fit_fraction * total_steps, 9)))
        else:
            check_int(
                "refit_every",
                refit_every,
                minimum=1,
                hint="mode='refit' needs refit_every=, the refit window length in steps",
            )
            self._window_length = refit_every

    @property
    def proxy(self) -> TangentProxy | None:
        """The current :class:`TangentProxy`, or None before the first fit.

        Example:
            >>> ProxySchedule("refit", rank=2, refit_every=5).proxy is None
            True
        """
        return self._proxy

    @property
    def basis(self) -> torch.Tensor | None:
        """The current orthonormal ``d × k`` basis, or None before the first fit.

        Example:
            >>> import torch
            >>> ProxySchedule("fixed", basis=torch.eye(4)[:, :1]).basis.shape
            torch.Size([4, 1])
        """
        return None if self._proxy is None else self._proxy.basis

    @property
    def fit_window(self) -> tuple[int, int] | None:
        """Steps ``[start, stop)`` whose activations are pooled for a fit: the early window, or the current
        refit window; None for ``fixed``.

        Example:
            >>> ProxySchedule("early", rank=4, total_steps=1000).fit_window
            (0, 300)
        """
        if self.mode == "fixed":
            return None
        if self.mode == "early":
            return (0, self._window_length)
        start = self._window * self._window_length
        return (start, start + self._window_length)

    def phase(self, step: int) -> str:
        """``"early"`` inside the first fit window, ``"late"`` after it (always ``"late"`` for ``fixed``).

        Example:
            >>> ProxySchedule("refit", rank=2, refit_every=100).phase(99)
            'early'
        """
        if self.mode == "fixed":
            return "late"
        return "early" if step < self._window_length else "late"

    def needs_activations(self, step: int) -> bool:
        """Whether :meth:`observe` at ``step`` would use the activations (callers may skip capturing them).

        Example:
            >>> s = ProxySchedule("early", rank=2, total_steps=10)
            >>> s.needs_activations(2), s.needs_activations(3)
            (True, False)
        """
        if self.mode == "fixed":
            return False
        return self.mode == "refit" or step < self._window_length

    def observe(self, step: int, H: ArrayLike | Moments) -> bool:
        """Feed the activations (n × d, or their :class:`Moments`) seen at ``step``; True if the proxy changed.

        Steps must not decrease; several observations of one step (micro-batches) are pooled.

        Example:
            >>> import torch
            >>> s = ProxySchedule("refit", rank=1, refit_every=2)
            >>> [s.observe(step, torch.randn(16, 4)) for step in range(5)], s.version
            ([False, False, True, False, True], 2)
        """
        step = check_step(step)
        if step < self._last_step:
            raise ValueError(f"steps must not decrease: got step {step} after step {self._last_step}")
        self._last_step = step
        if self.mode == "fixed":
            return False
        changed = False
        window = step // self._window_length if self.mode == "refit" else min(step // self._window_length, 1)
        if window > self._window:
            changed = self._fit_pending()
            self._window = window
        if self.needs_activations(step):
            moments = H if isinstance(H, Moments) else Moments.from_rows(H, "H")
            self._pending = moments if self._pending is None else self._pending.merge(moments)
        return changed

    def fit_now(self) -> bool:
        """Fit on the activations pooled so far instead of waiting for the first step past the window.

        Needed when no later step will come, e.g. ``fit_fraction=1.0`` or the end of a replay. In ``early`` mode
        this closes the window (the proxy is then frozen); a second call, or a call in ``fixed`` mode, does
        nothing and returns False.

        Example:
            >>> import torch
            >>> s = ProxySchedule("early", rank=2, total_steps=3, fit_fraction=1.0)
            >>> [s.observe(step, torch.randn(32, 6)) for step in range(3)], s.fit_now(), s.fit_now()
            ([False, False, False], True, False)
        """
        if self.mode == "fixed" or (self.mode == "early" and self._window > 0):
            return False
        changed = self._fit_pending()
        if self.mode == "early":
            self._window = 1
            self._window_length = min(self._window_length, self._last_step + 1)
        return changed

    def _fit_pending(self) -> bool:
        if self._pending is None:
            if self.mode == "early":
                raise ValueError("the early fit window saw no activations; observe steps inside fit_window")
            return False
        if self._pending.count - 1 < self.rank:
            raise ValueError(
                f"the fit window pooled {self._pending.count} activation rows, too few for a rank-{self.rank} "
                f"PCA; pass more tokens per step or lower the rank"
            )
        self._proxy = TangentProxy.from_moments(self._pending, self.rank, fast=self.fast)
        self._pending = None
        self.version += 1
        return True
