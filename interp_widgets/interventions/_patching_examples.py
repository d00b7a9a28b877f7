"""A small hand-made :class:`~interp_widgets.interventions.patching_result.PatchingResult` for the examples and
tests of the patching view (no model runs).

Example:
    >>> tiny_patching_result().points
    ['resid_pre']
"""

from __future__ import annotations

import numpy as np

from interp_widgets.interventions.patching_result import (
    PatchingBaseline,
    PatchingPair,
    PatchingPanel,
    PatchingResult,
    PatchingSetting,
)
from interp_widgets.text_units import joined_layout

__all__ = ["tiny_patching_result"]


def tiny_patching_result(method: str = "exact", direction: str = "denoise", tokens: list[str] | None = None):
    """A small hand-made ``PatchingResult`` (2 layers × 3 positions of ``resid_pre``), for examples and tests.

    Example:
        >>> tiny_patching_result(method="attribution").panels[0].top_ids is None
        True
    """
    tokens = tokens or ["The", " Eiffel", " Tower"]
    values = np.array([[[0.0, 0.25, 1.0]], [[0.5, 0.75, 1.0]]], np.float32)
    exact = method == "exact"
    top_ids = np.zeros((2, 1, 3, 5), np.int64) + np.array([11, 12, 13, 14, 15]) if exact else None
    top_probs = np.tile(np.array([0.5, 0.2, 0.1, 0.05, 0.01], np.float32), (2, 1, 3, 1)) if exact else None
    panel = PatchingPanel("resid_pre", [0, 1], ["stream"], list(tokens), values=values, raw=2 * values,
                          spread=np.zeros_like(values), top_ids=top_ids, top_probs=top_probs,
                          vocab_ids=np.array([11, 12, 13, 14, 15]) if exact else None,
                          top_tokens=[" Paris", " Rome", "<b>", "\n", " the"] if exact else [])  # fmt: skip
    pair = PatchingPair(joined_layout(tokens), ["The", " Colosse", "um"], [" Paris"], np.array([11]), [" Rome"],
                        np.array([12]))  # fmt: skip
    return PatchingResult(pair=pair, setting=PatchingSetting("logit_diff", direction, method, "each", "tiny"),
                          baseline=PatchingBaseline(np.array([2.0]), np.array([0.0])), panels=(panel,))  # fmt: skip
